# call 4 (session 32): nccl-tests -G 1 -d all -o all at np2 and np8's send/recv binaries (GPU 0), np3 (GPU 1); drop-in at 4 if time
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=4 bash scratch/call.sh build 300 STAGES=build
A="-d all -o all -b 64 -e 4M -f 256 -n 1 -w 1 -G 1"
(CUDA_VISIBLE_DEVICES=0 TAIL=14 bash scratch/call.sh g2 200 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_ARGS="$A" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=60 > /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=14 bash scratch/call.sh g8c 150 STAGES=ncclabi NCCLABI_NP=8 NCCLABI_ARGS="$A" NCCLABI_TESTS="sendrecv hypercube alltoallv" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=90 > /tmp/c.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=14 bash scratch/call.sh g3 330 STAGES=ncclabi NCCLABI_NP=3 NCCLABI_ARGS="$A" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=80 > /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi np\|call " /tmp/a.txt /tmp/c.txt /tmp/b.txt | grep -v '^##' ; echo "t=$SECONDS s"
