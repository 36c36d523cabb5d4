# call e (session 40, nvidia-h200-x2): the final library (relaxed poll of ready; LL route; leaf record), lib in sentinel.
# GPU 0: quick suite single 4, p2p cases single 3. GPU 1: nccl-tests' 8 collective binaries through the shim -G 5 at 2
# ranks (captured calls of every collective after the record change), then the torch drop-in at 4.
# Then both GPUs: quick suite multi 2; yali-perf sendrecv eager and -G 20 (YALI vs NCCL).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/v; V=/tmp/o/v
( export CUDA_VISIBLE_DEVICES=0
  TAIL=3 bash scratch/call.sh quick4 170 STAGES=quick QUICK_RANKS=4
  TAIL=3 bash scratch/call.sh p2p3 60 STAGES=p2p P2P_SINGLE=3 "P2P_MULTI= " P2P_TIMEOUT=50 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1 NCCL_TESTS_DEVICE=0
  TAIL=9 bash scratch/call.sh abig 130 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_TESTS="all_reduce all_gather reduce_scatter broadcast reduce gather scatter alltoall" \
    NCCLABI_ARGS="-G 5" NCCLABI_TIMEOUT=30 NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0
  TAIL=3 bash scratch/call.sh dropin4 120 STAGES=dropin DROPIN_NP=4 DROPIN_TIMEOUT=100 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"; cat /tmp/gpu0.txt /tmp/gpu1.txt | grep -v "^$" | grep -v "^===="
TAIL=3 bash scratch/call.sh multi2 $((540-SECONDS)) STAGES=quick "QUICK_RANKS= " QUICK_MULTI_RANKS=2; echo "multi t=$SECONDS s"
if [ $SECONDS -lt 560 ]; then
timeout 25 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 8 -e 4M -f 8 -d float -n 20 -w 5 -G 20 > $V/graph.txt 2>&1; echo "perf graph rc=$?"
grep -E "^ +(yali|nccl) " $V/graph.txt | awk '{print $1, $2, $6}' | paste - - | head -8
timeout 25 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 8 -e 4M -f 8 -d float -n 20 -w 5 > $V/eager.txt 2>&1; echo "perf eager rc=$?"
grep -E "^ +(yali|nccl) " $V/eager.txt | awk '{print $1, $2, $6}' | paste - - | head -8
fi
tar czf $OUT/v.tgz -C /tmp/o v
echo "t=$SECONDS s"
