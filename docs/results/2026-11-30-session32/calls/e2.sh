# call 2 (session 32): nccl-tests np8 -d all -o all eager, binaries split over the two GPUs
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=4 bash scratch/call.sh build 300 STAGES=build
A="-d all -o all -b 64 -e 4M -f 256 -n 2 -w 1"
(CUDA_VISIBLE_DEVICES=0 TAIL=14 bash scratch/call.sh n8a 560 STAGES=ncclabi NCCLABI_NP=8 NCCLABI_ARGS="$A" NCCLABI_TESTS="all_reduce reduce gather scatter sendrecv alltoallv" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=240 > /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=14 bash scratch/call.sh n8b 560 STAGES=ncclabi NCCLABI_NP=8 NCCLABI_ARGS="$A" NCCLABI_TESTS="reduce_scatter all_gather broadcast alltoall hypercube" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=240 > /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi np\|call " /tmp/a.txt /tmp/b.txt | grep -v '^##' ; echo "t=$SECONDS s"
