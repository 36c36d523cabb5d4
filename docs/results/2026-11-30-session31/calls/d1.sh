# call 1: build; issue 17 A/B to 64 MB (alone); then quick 3 (GPU 0) beside quick 8 (GPU 1), then collperf
set -u; bash scratch/sent.sh; t0=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 200 STAGES=build
d=/tmp/o/ab; mkdir -p $d
OUT=$d AB_MODES="0 5" AB_REPS=2 AB_JOBS=14 AB_ARGS="-b 4K -e 64M -f 4 -d bfloat16 -n 500 -w 20 --inplace 0" timeout 220 bash scripts/ab_trees.sh s31=. base=scratch/base-shared-src > $d/stdout.txt 2>&1; echo "ab rc=$?"; cat $d/stdout.txt; cp $d/ab_trees.tar.gz $OUT/ 2>/dev/null
echo "t=$(( $(date +%s) - t0 )) s"
(CUDA_VISIBLE_DEVICES=0 TAIL=4 bash scratch/call.sh q3 170 STAGES=quick QUICK_RANKS=3 "QUICK_MULTI_RANKS= " QUICK_TIMEOUT=160 > /tmp/o/q3.out 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=4 bash scratch/call.sh cpA 130 STAGES=collperf COLL_NP="2 3 4 8" >> /tmp/o/q3.out 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=4 bash scratch/call.sh q8 200 STAGES=quick QUICK_RANKS=8 "QUICK_MULTI_RANKS= " QUICK_TIMEOUT=190 > /tmp/o/q8.out 2>&1) &
wait; cat /tmp/o/q3.out /tmp/o/q8.out; echo "t=$(( $(date +%s) - t0 )) s"
