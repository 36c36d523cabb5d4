# call f (session 39, 1 H200; x2 not lent): libyali-nccl runs ncclSend/ncclRecv on YALI (routeSendRecv), every rank
# sharing the GPU. Build; nccl-tests through the shim: sendrecv, alltoallv, hypercube, alltoall at 2 ranks, sendrecv
# and alltoallv at 4, 3, 8, sendrecv -G 5 at 2; torch unchanged under yali-run at 2 and 4 ranks (DDP, FSDP2,
# TP/compile, all_to_all_single with splits, a graph); the p2p and a2av cases single 2 (the shared test helpers).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_TESTS_DEVICE=0
TAIL=2 bash scratch/call.sh build 200 STAGES=build; echo "built t=$SECONDS s"
TAIL=6 bash scratch/call.sh abi2 150 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_TESTS="sendrecv alltoallv hypercube alltoall" \
   NCCLABI_TIMEOUT=60 NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0; echo "t=$SECONDS s"
TAIL=4 bash scratch/call.sh dropin 200 STAGES=dropin DROPIN_NP="2 4" DROPIN_TIMEOUT=90; echo "t=$SECONDS s"
TAIL=6 bash scratch/call.sh abi48 130 STAGES=ncclabi NCCLABI_NP="4 3 8" NCCLABI_TESTS="sendrecv alltoallv" NCCLABI_TIMEOUT=40 \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0; echo "t=$SECONDS s"
TAIL=2 bash scratch/call.sh abig 40 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_TESTS="sendrecv" NCCLABI_ARGS="-G 5" NCCLABI_TIMEOUT=35 \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0; echo "t=$SECONDS s"
TAIL=3 bash scratch/call.sh cases 60 STAGES=p2p,a2av P2P_SINGLE=2 "P2P_MULTI= " A2AV_SINGLE=2 "A2AV_MULTI= " P2P_TIMEOUT=50
echo "t=$SECONDS s"
for f in /tmp/o/*/stdout.txt; do grep -h "^## " $f; done | cut -c1-330
