# call a (session 38): the watched failure word (bca91be and later). Build; GPU 0: the GPU suite quick, single,
# 2 and 4 ranks sharing it (trust_watched_word among the cases); GPU 1: quick at 3 ranks, then the ncclabi stage:
# nccl-tests all_reduce through the shim (2 ranks), 4 ranks as 2 simulated nodes of 2 (hierarchical, the status
# words watched), and the hierarchical faults (ncclabi_hier_faults.py, 2x2).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=8 bash scratch/call.sh q 280 STAGES=quick QUICK_RANKS="2 4" "QUICK_MULTI_RANKS= " > /tmp/q.txt 2>&1; echo "q done t=$SECONDS" >> /tmp/q.txt) &
(export CUDA_VISIBLE_DEVICES=1
 TAIL=8 bash scratch/call.sh q3 150 STAGES=quick QUICK_RANKS=3 "QUICK_MULTI_RANKS= " > /tmp/q3.txt 2>&1; echo "q3 done t=$SECONDS" >> /tmp/q3.txt
 TAIL=20 bash scratch/call.sh abi 230 STAGES=ncclabi NCCLABI_TESTS=all_reduce NCCLABI_NODES=2 NCCLABI_NODES_NP=4 \
   NCCLABI_HIER_FAULTS=1 NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0 > /tmp/abi.txt 2>&1; echo "abi done t=$SECONDS" >> /tmp/abi.txt) &
wait; echo "arms done t=$SECONDS s"
grep -h "gpu suite\|call \|done t=" /tmp/q.txt /tmp/q3.txt | grep -v '^##' | cut -c1-200
grep -h "ncclabi\|hier\|call \|done t=\|FAIL\|PASS" /tmp/abi.txt | grep -v '^##' | cut -c1-260 | tail -22
echo "t=$SECONDS s"
