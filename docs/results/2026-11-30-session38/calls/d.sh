# call d (session 38): the ncclabi tests that now share tests/gpu/ncclabi_mpi.py (rank-local refusals, the two-stream group).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=20 bash scratch/call.sh abi3 400 STAGES=build,ncclabi NCCLABI_TESTS=all_reduce
