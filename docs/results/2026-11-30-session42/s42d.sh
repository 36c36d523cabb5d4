# Session 42 call d (nvidia-h200-x2), branch next/s42-order (main 3f096c5 + the shim's group order by
# comm key, a524351+; libyali unchanged since call c). GPU 0: the whole GPU suite WITHOUT --quick
# (never run whole before), single 2, ranks sharing the GPU, bounded. GPU 1: the shim on simulated
# nodes: nccl-tests all_reduce/all_gather/reduce_scatter 4 ranks as 2x2 with -m 1 and -m 4 (grouped
# hierarchical calls), the hierarchical faults 2x2, the new group-order test (shim, plain, control).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/full; F=/tmp/o/full
( CUDA_VISIBLE_DEVICES=0 timeout -k 5 $((540-SECONDS)) build/tests/yali-gpu-tests --share-gpus --ranks 2 --mode single > $F/full_single_2.log 2>&1; echo "full single 2 rc=$?" ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAIL=30 bash scratch/call.sh abi $((520-SECONDS)) STAGES=ncclabi NCCLABI_TESTS=all_reduce NCCLABI_NP=2 NCCLABI_NODES=2 \
    NCCLABI_NODES_NP=4 "NCCLABI_NODES_AGG=1 4" NCCLABI_HIER_FAULTS=1 NCCLABI_GROUP_ORDER=1 NCCLABI_RANK_LOCAL=0 \
    NCCLABI_GROUP_STREAMS=0 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"
grep -h "^## \|call abi" /tmp/gpu1.txt | cut -c1-330
cat /tmp/gpu0.txt
f=$F/full_single_2.log; echo "== full single 2: $(grep -c '^PASS' $f) PASS, $(grep -c '^FAIL' $f) FAIL, $(grep -c '^SKIP' $f) SKIP"
grep -E "^FAIL|^SKIP" $f | cut -c1-200 | head -20; tail -2 $f
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .
echo "t=$SECONDS s"
