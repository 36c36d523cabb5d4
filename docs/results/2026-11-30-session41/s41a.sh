# call a (session 41, nvidia-h200-x2): p2p kernel with allowNextGrid (PDL) and the LL route through ll_packets.cuh
# (main 3f22b6e). GPU 0: p2p cases single 2 (full), 3; quick suite single 2. GPU 1: p2p cases single 4, 8; quick single 4.
# Then both GPUs: p2p cases multi 2; yali-perf sendrecv eager and -G 20 (YALI vs NCCL); dropinperf sendrecv graph.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/v; V=/tmp/o/v
( export CUDA_VISIBLE_DEVICES=0
  TAIL=3 bash scratch/call.sh cases2 100 STAGES=p2p P2P_SINGLE=2 "P2P_MULTI= " "P2P_ARGS= " P2P_TIMEOUT=90
  TAIL=3 bash scratch/call.sh cases3 60 STAGES=p2p P2P_SINGLE=3 "P2P_MULTI= " P2P_TIMEOUT=50
  TAIL=3 bash scratch/call.sh quick2 170 STAGES=quick QUICK_RANKS=2 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAIL=5 bash scratch/call.sh cases48 120 STAGES=p2p P2P_SINGLE="4 8" "P2P_MULTI= " P2P_TIMEOUT=55
  TAIL=3 bash scratch/call.sh quick4 180 STAGES=quick QUICK_RANKS=4 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"; cat /tmp/gpu0.txt /tmp/gpu1.txt | grep -v "^$" | grep -v "^===="
TAIL=2 bash scratch/call.sh multi2 40 STAGES=p2p "P2P_SINGLE= " P2P_MULTI=2 P2P_TIMEOUT=35
timeout 30 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 8 -e 4M -f 8 -d float -n 20 -w 5 -G 20 > $V/graph.txt 2>&1; echo "perf graph rc=$? t=$SECONDS"
timeout 30 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 8 -e 4M -f 8 -d float -n 20 -w 5 > $V/eager.txt 2>&1; echo "perf eager rc=$? t=$SECONDS"
[ $SECONDS -lt 480 ] && TAIL=2 bash scratch/call.sh dp $((575-SECONDS)) STAGES=dropinperf DROPINPERF_TESTS="sendrecv" DROPINPERF_REPS=1 DROPINPERF_MODES=graph DROPINPERF_ARGS="-b 8 -e 16M -f 8 -n 20 -w 5"
tar czf $OUT/v.tgz -C /tmp/o v
for f in /tmp/o/*/stdout.txt; do grep -h "^## " $f; done | cut -c1-250
grep -E '^ +(yali|nccl) ' $V/graph.txt | awk '{print "G", $1, $2, $6}' | paste - - | head -8
grep -E '^ +(yali|nccl) ' $V/eager.txt | awk '{print "E", $1, $2, $6}' | paste - - | head -8
echo "t=$SECONDS s"
