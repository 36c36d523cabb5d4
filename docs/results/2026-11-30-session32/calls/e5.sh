# call 5 (session 32): GPU 0: torch drop-in at 4 ranks, hierarchical faults 2x4 and 4x2; GPU 1: nccl-tests eager -d all -o all at np2 and np3
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=4 bash scratch/call.sh build 300 STAGES=build
A="-d all -o all -b 64 -e 4M -f 256 -n 2 -w 1"
(CUDA_VISIBLE_DEVICES=0 TAIL=6 bash scratch/call.sh d4 170 STAGES=dropin DROPIN_NP=4 > /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=6 bash scratch/call.sh hf 130 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_HIER_FAULTS=1 NCCLABI_HIER_FAULTS_LAYOUTS="2x4 4x2" > /tmp/c.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=14 bash scratch/call.sh e23 300 STAGES=ncclabi NCCLABI_NP="2 3" NCCLABI_ARGS="$A" NCCLABI_TESTS="all_reduce all_gather reduce_scatter broadcast reduce gather scatter alltoall" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=60 > /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi \|dropin np\|call " /tmp/a.txt /tmp/c.txt /tmp/b.txt | grep -v '^##' ; echo "t=$SECONDS s"
