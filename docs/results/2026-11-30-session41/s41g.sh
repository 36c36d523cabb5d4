# call g (session 41, nvidia-h200-x2, 202 s of budget left): branch next/p2p-relaxed-credit a94fdda (e6f2b20 + the
# team barrier restored after the LL reads), NOT main. p2p cases single 2/3 (GPU 0) and 4/8 (GPU 1), multi 2, then
# yali-perf sendrecv -G 20.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 100 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/g; V=/tmp/o/g
( export CUDA_VISIBLE_DEVICES=0; TAIL=2 bash scratch/call.sh c23 40 STAGES=p2p P2P_SINGLE="2 3" "P2P_MULTI= " P2P_TIMEOUT=19 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1; TAIL=2 bash scratch/call.sh c48 40 STAGES=p2p P2P_SINGLE="4 8" "P2P_MULTI= " P2P_TIMEOUT=19 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"
TAIL=2 bash scratch/call.sh m2 20 STAGES=p2p "P2P_SINGLE= " P2P_MULTI=2 P2P_TIMEOUT=17
timeout 15 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -d float -b 8 -e 16M -f 8 -n 20 -w 5 -G 20 > $V/graph.txt 2>&1; echo "graph rc=$?"
for f in /tmp/o/*/stdout.txt; do grep -h "^## " $f; done | cut -c1-120
grep -E '^ +(yali|nccl) ' $V/graph.txt | awk '{print $1, $2, $6, $9}' | paste - - | head -9
tar czf $OUT/g.tgz -C /tmp/o g c23 c48 m2 2>/dev/null
echo "t=$SECONDS s"
