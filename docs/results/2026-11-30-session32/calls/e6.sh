# call 6 (session 32): simulated nodes at 8 ranks, 2x4 (GPU 0) and 4x2 (GPU 1): hierarchical AllReduce/AllGather/ReduceScatter
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=3 bash scratch/call.sh build 120 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait
(CUDA_VISIBLE_DEVICES=0 TAIL=9 bash scratch/call.sh n24 100 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_NODES=2 NCCLABI_NODES_NP=8 > /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=9 bash scratch/call.sh n42 100 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_NODES=4 NCCLABI_NODES_NP=8 > /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi nodes\|call " /tmp/a.txt /tmp/b.txt | grep -v '^##'; echo "t=$SECONDS s"
