# call 3 (session 32): nccl-tests -G 1 (CUDA graphs) -d all -o all at np4 (GPU 0, then np8 non-reducing) and np8 reducing (GPU 1)
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=4 bash scratch/call.sh build 300 STAGES=build
A="-d all -o all -b 64 -e 4M -f 256 -n 1 -w 1 -G 1"
B="-d all -o all -b 64 -e 4M -f 65536 -n 1 -w 1 -G 1"
(CUDA_VISIBLE_DEVICES=0 TAIL=14 bash scratch/call.sh g4 330 STAGES=ncclabi NCCLABI_NP=4 NCCLABI_ARGS="$A" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=100 > /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=14 bash scratch/call.sh g8b 200 STAGES=ncclabi NCCLABI_NP=8 NCCLABI_ARGS="$B" NCCLABI_TESTS="all_gather broadcast gather scatter alltoall" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=60 > /tmp/c.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=14 bash scratch/call.sh g8a 520 STAGES=ncclabi NCCLABI_NP=8 NCCLABI_ARGS="$B" NCCLABI_TESTS="all_reduce reduce_scatter reduce" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=165 > /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi np\|call " /tmp/a.txt /tmp/c.txt /tmp/b.txt | grep -v '^##' ; echo "t=$SECONDS s"
