# call 5 (session 36): libyali's own group stream join (next/s36c) on main f30f6fc. GPU 0: the GPU suite quick,
# single, 2 and 4 ranks sharing it (with the new case group_streams); GPU 1: group_streams alone, single and
# multi at 2 ranks, with the join and without it (YALI_TEST_NO_GROUP_JOIN=1: must FAIL), then the shim's
# group-on-two-streams check again.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 200 STAGES=build; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=8 bash scratch/call.sh q 215 STAGES=quick QUICK_RANKS="2 4" "QUICK_MULTI_RANKS= " > /tmp/q.txt 2>&1; echo "q done t=$SECONDS" >> /tmp/q.txt) &
(export CUDA_VISIBLE_DEVICES=1; mkdir -p /tmp/o/gs; T=build/tests/yali-gpu-tests
 for mode in single multi; do for nj in 0 1; do
   YALI_TEST_NO_GROUP_JOIN=$nj timeout 60 $T --share-gpus --ranks 2 --mode $mode --quick --filter group_streams > /tmp/o/gs/${mode}_nojoin$nj.log 2>&1
   echo "group_streams $mode 2 ranks, YALI_TEST_NO_GROUP_JOIN=$nj: rc=$? $(tail -1 /tmp/o/gs/${mode}_nojoin$nj.log)"
 done; done > /tmp/gs.txt 2>&1
 TAIL=6 bash scratch/call.sh abi 90 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 > /tmp/c.txt 2>&1; echo "abi done t=$SECONDS" >> /tmp/c.txt) &
wait; echo "arms done t=$SECONDS s"
cat /tmp/gs.txt; grep -h "gpu suite\|group on two\|call \|done t=" /tmp/q.txt /tmp/c.txt | grep -v '^##' | cut -c1-200
grep -h "FAIL\|order [12]" /tmp/o/gs/*_nojoin1.log | head -6
tar czf $OUT/gs.tgz -C /tmp/o gs; echo "t=$SECONDS s"
