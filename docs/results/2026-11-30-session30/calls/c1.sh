# call 1: build; A/B eager-red-count (s30=this tree) vs main vs base; quick single 2; trust 2; kill 3
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=6 bash scratch/call.sh build 200 STAGES=build
d=/tmp/o/ab; mkdir -p $d
OUT=$d AB_MODES="0 5" AB_REPS_0=3 AB_REPS_5=1 AB_JOBS=10 timeout 260 bash scripts/ab_trees.sh s30=. main=scratch/main-src base=scratch/base-shared-src > $d/stdout.txt 2>&1; echo "ab rc=$?"; cat $d/stdout.txt; cp $d/ab_trees.tar.gz $OUT/ 2>/dev/null
TAIL=12 bash scratch/call.sh q1 200 STAGES=quick QUICK_RANKS=2 "QUICK_MULTI_RANKS= "
TAIL=14 bash scratch/call.sh t1 150 STAGES=trust TRUST_SINGLE_RANKS=2 TRUST_MULTI_RANKS=2 KILL_RANKS=3 KILL_VICTIMS=1 KILL_COLLS=allreduce "KILL_RANK0_COLLS= "
