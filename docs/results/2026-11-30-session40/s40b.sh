# call b (session 40, nvidia-h200-x2, warm after call a; same tree): nccl-tests' send/recv binaries -G 1 -d all at 8
# ranks on GPU 0 (ranks sharing it), then the drop-in's speed for them, one rank per GPU (dropinperf).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_TESTS_DEVICE=0
S="-b 64 -e 4M -f 256"
TAIL=4 CUDA_VISIBLE_DEVICES=0 bash scratch/call.sh g8 170 STAGES=ncclabi NCCLABI_NP=8 NCCLABI_TESTS="sendrecv alltoallv hypercube" \
  NCCLABI_ARGS="-d all $S -n 1 -w 1 -G 1" NCCLABI_TIMEOUT=55 NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0; echo "g8 t=$SECONDS s"
unset NCCL_TESTS_DEVICE
TAIL=40 bash scratch/call.sh dp $((585-SECONDS)) STAGES=dropinperf DROPINPERF_TESTS="sendrecv alltoallv hypercube" \
  DROPINPERF_ARGS="-b 8 -e 1G -f 4 -n 20 -w 5"; echo "dp t=$SECONDS s"
