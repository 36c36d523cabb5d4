# call a (session 40, nvidia-h200-x2): the p2p kernel after walkLane's move and the 960-call cap.
# GPU 0: p2p cases single 2, 3, 4, 8 (ranks sharing it), then the quick suite single 2.
# GPU 1: nccl-tests' send/recv binaries through libyali-nccl, -d all, every rank on it: -G 1 at 2 (builds nccl-tests),
#        eager at 3, 4, 8 where session 39 left them, then -G 1 at 3, 4, 8. Last: the p2p cases multi 2 on both GPUs.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_TESTS_DEVICE=0
S="-b 64 -e 4M -f 256"
A="NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0"
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
( export CUDA_VISIBLE_DEVICES=0
  TAIL=6 bash scratch/call.sh cases 200 STAGES=p2p P2P_SINGLE="2 3 4 8" "P2P_MULTI= " P2P_TIMEOUT=90; echo "cases t=$SECONDS s"
  TAIL=3 bash scratch/call.sh quick2 $((560-SECONDS)) STAGES=quick QUICK_RANKS=2; echo "quick t=$SECONDS s" ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAIL=3 bash scratch/call.sh g2 120 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_TESTS="sendrecv alltoallv hypercube" NCCLABI_ARGS="-d all $S -n 1 -w 1 -G 1" NCCLABI_TIMEOUT=40 $A; echo "g2 t=$SECONDS s"
  TAIL=2 bash scratch/call.sh e3 60 STAGES=ncclabi NCCLABI_NP=3 NCCLABI_TESTS="sendrecv alltoallv" NCCLABI_ARGS="-d all $S -n 2 -w 1" NCCLABI_TIMEOUT=28 $A; echo "e3 t=$SECONDS s"
  TAIL=2 bash scratch/call.sh e4 60 STAGES=ncclabi NCCLABI_NP=4 NCCLABI_TESTS="sendrecv hypercube" NCCLABI_ARGS="-d all $S -n 2 -w 1" NCCLABI_TIMEOUT=28 $A; echo "e4 t=$SECONDS s"
  TAIL=3 bash scratch/call.sh e8 130 STAGES=ncclabi NCCLABI_NP=8 NCCLABI_TESTS="sendrecv alltoallv hypercube" NCCLABI_ARGS="-d all $S -n 2 -w 1" NCCLABI_TIMEOUT=42 $A; echo "e8 t=$SECONDS s"
  TAIL=3 bash scratch/call.sh g34 $((530-SECONDS)) STAGES=ncclabi NCCLABI_NP="3 4" NCCLABI_TESTS="sendrecv alltoallv hypercube" NCCLABI_ARGS="-d all $S -n 1 -w 1 -G 1" NCCLABI_TIMEOUT=40 $A; echo "g34 t=$SECONDS s" ) > /tmp/gpu1.txt 2>&1 &
wait
cat /tmp/gpu0.txt /tmp/gpu1.txt
[ $SECONDS -lt 540 ] && TAIL=3 bash scratch/call.sh multi2 $((590-SECONDS)) STAGES=p2p "P2P_SINGLE= " P2P_MULTI=2 P2P_TIMEOUT=40
for f in /tmp/o/*/stdout.txt; do grep -h "^## " $f; done | cut -c1-300
echo "t=$SECONDS s"
