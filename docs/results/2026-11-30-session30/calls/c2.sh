set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T=build/tests/yali-gpu-tests
[ -x $T ] || TAIL=4 bash scratch/call.sh build 200 STAGES=build
TAIL=8 bash scratch/call.sh q2 300 STAGES=quick "QUICK_RANKS= " QUICK_MULTI_RANKS="2 3"
TAIL=8 bash scratch/call.sh m2 200 STAGES=sanitize SANITIZE_RANKS=2 SANITIZE_TIMEOUT=180
for f in "3 coll_algos" "4 coll_algos" "3 trust_epoch_wrap" "3 a2av_" "4 a2av_"; do set -- $f
  timeout 120 $T --share-gpus --ranks $1 --mode single --quick --filter $2 > $OUT/f_$1_$2.log 2>&1; echo "filter $2 single $1 rc=$? $(grep -ciE ' passed|PASS' $OUT/f_$1_$2.log) pass-lines; $(tail -1 $OUT/f_$1_$2.log)"; done
TAIL=5 bash scratch/call.sh k0 100 STAGES=trust "TRUST_SINGLE_RANKS= " "TRUST_MULTI_RANKS= " KILL_RANKS=3 KILL_VICTIMS=0 KILL_COLLS=allreduce
