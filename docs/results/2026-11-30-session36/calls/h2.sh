# call 2 (session 36): next/s36b (the group stream join, 6e174fa) + next/ubsan (the helper's enum fixes), on main 11760f4.
# GPU 0: ncclabi np2 (nccl-tests through the shim, rank-local refusals, the group on two streams in 3 modes),
#        then the GPU suite quick at 2 and 4 ranks;
# GPU 1 (port 29600): torch drop-in blocking at 2 ranks, then simulated nodes 2x2 (-m 1 and -m 4) with the
#        hierarchical faults.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=30 bash scratch/call.sh abi 170 STAGES=ncclabi NCCLABI_NP=2 > /tmp/a.txt 2>&1; echo "abi done t=$SECONDS" >> /tmp/a.txt
 CUDA_VISIBLE_DEVICES=0 TAIL=8 bash scratch/call.sh q 200 STAGES=quick QUICK_RANKS="2 4" "QUICK_MULTI_RANKS= " > /tmp/q.txt 2>&1; echo "q done t=$SECONDS" >> /tmp/q.txt) &
(export PET_MASTER_PORT=29600; CUDA_VISIBLE_DEVICES=1 TAIL=6 bash scratch/call.sh dev2 110 STAGES=dropin DROPIN_NP=2 DROPIN_TIMEOUT=100 > /tmp/b.txt 2>&1; echo "dev2 done t=$SECONDS" >> /tmp/b.txt
 CUDA_VISIBLE_DEVICES=1 TAIL=30 bash scratch/call.sh nodes 200 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0 NCCLABI_NODES=2 NCCLABI_NODES_NP=4 "NCCLABI_NODES_AGG=1 4" NCCLABI_HIER_FAULTS=1 > /tmp/c.txt 2>&1; echo "nodes done t=$SECONDS" >> /tmp/c.txt) &
wait; echo "arms done t=$SECONDS s"
grep -h "dropin np\|ncclabi \|hier\|gpu suite\|call \|done t=" /tmp/a.txt /tmp/q.txt /tmp/b.txt /tmp/c.txt | grep -v '^##\|^  \[' | cut -c1-240; echo "t=$SECONDS s"
grep -h "round\|testing" /tmp/o/abi/logs/ncclabi_group_streams_*.log | sed 's/pid [0-9]*/pid N/' | sort | uniq -c | head -20
