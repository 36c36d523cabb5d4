# call h (session 39, 1 H200, the last device seconds): nccl-tests' send/recv binaries through libyali-nccl with every
# data type (-d all), ranks sharing the GPU: sendrecv, alltoallv, hypercube at 2; alltoallv at 4; sendrecv at 8.
# Then the p2p cases single 2 if time remains.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_TESTS_DEVICE=0
TAIL=2 bash scratch/call.sh build 120 STAGES=build; echo "built t=$SECONDS s"
TAIL=4 bash scratch/call.sh abi2 75 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_TESTS="sendrecv alltoallv hypercube" NCCLABI_ARGS="-d all" \
   NCCLABI_TIMEOUT=25 NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0; echo "t=$SECONDS s"
TAIL=2 bash scratch/call.sh abi4 30 STAGES=ncclabi NCCLABI_NP=4 NCCLABI_TESTS="alltoallv" NCCLABI_ARGS="-d all" NCCLABI_TIMEOUT=28 \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0; echo "t=$SECONDS s"
TAIL=2 bash scratch/call.sh abi8 30 STAGES=ncclabi NCCLABI_NP=8 NCCLABI_TESTS="sendrecv" NCCLABI_ARGS="-d all" NCCLABI_TIMEOUT=28 \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0; echo "t=$SECONDS s"
[ $SECONDS -lt 185 ] && TAIL=2 bash scratch/call.sh cases 25 STAGES=p2p P2P_SINGLE=2 "P2P_MULTI= " P2P_TIMEOUT=20
for f in /tmp/o/*/stdout.txt; do grep -h "^## " $f; done | cut -c1-300
echo "t=$SECONDS s"
