# call c (session 38): more trust checks of 2675da1's library. GPU 0: the trust stage: trust cases single 2 and
# multi 2 and 3 (one process per rank, sharing GPU 0), then yali-kill-test at 3 ranks, victim 1, every collective.
# GPU 1: the quick suite in multi mode at 2 ranks, then the ncclabi stage's checks that call a did not run: the
# rank-local refusals, the two-stream group, and the hierarchical faults at 2x4 and 4x2.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=8 bash scratch/call.sh trust 330 STAGES=trust TRUST_SINGLE_RANKS=2 "TRUST_MULTI_RANKS=2 3" \
   KILL_RANKS=3 KILL_VICTIMS=1 KILL_COLLS=all > /tmp/t.txt 2>&1; echo "trust done t=$SECONDS" >> /tmp/t.txt) &
(export CUDA_VISIBLE_DEVICES=1
 TAIL=8 bash scratch/call.sh qm 150 STAGES=quick "QUICK_RANKS= " QUICK_MULTI_RANKS=2 > /tmp/qm.txt 2>&1; echo "qm done t=$SECONDS" >> /tmp/qm.txt
 TAIL=20 bash scratch/call.sh abi2 200 STAGES=ncclabi NCCLABI_TESTS=all_reduce NCCLABI_HIER_FAULTS=1 \
   "NCCLABI_HIER_FAULTS_LAYOUTS=2x4 4x2" > /tmp/abi2.txt 2>&1; echo "abi2 done t=$SECONDS" >> /tmp/abi2.txt) &
wait; echo "arms done t=$SECONDS s"
grep -h "trust cases\|kill test\|gpu suite\|call \|done t=" /tmp/t.txt /tmp/qm.txt | grep -v '^##' | cut -c1-200
grep -h "ncclabi\|call \|done t=" /tmp/abi2.txt | grep -v '^##\|^  \[' | cut -c1-300 | tail -12
echo "t=$SECONDS s"
