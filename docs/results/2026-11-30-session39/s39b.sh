# call b (session 39, 2 H200s): yaliSend/yaliRecv after the group-end fix. Build; GPU 0: the p2p cases single
# 2 3 4 8 (ranks sharing it), then the quick suite single 2; GPU 1: the quick suite single 4, then the p2p cases
# multi 3 (sharing). Then both GPUs, one process each: the p2p cases multi 2 (NVLink), yali-perf sendrecv
# YALI vs NCCL, eager and graphs.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
(export CUDA_VISIBLE_DEVICES=0
 TAIL=8 bash scratch/call.sh p2p0 260 STAGES=p2p P2P_SINGLE="2 3 4 8" "P2P_MULTI= " P2P_TIMEOUT=100 > /tmp/a0.txt 2>&1
 TAIL=4 bash scratch/call.sh q2 150 STAGES=quick QUICK_RANKS=2 "QUICK_MULTI_RANKS= " QUICK_TIMEOUT=140 >> /tmp/a0.txt 2>&1
 echo "gpu0 done t=$SECONDS" >> /tmp/a0.txt) &
(export CUDA_VISIBLE_DEVICES=1
 TAIL=4 bash scratch/call.sh q4 200 STAGES=quick QUICK_RANKS=4 "QUICK_MULTI_RANKS= " QUICK_TIMEOUT=190 > /tmp/a1.txt 2>&1
 TAIL=4 bash scratch/call.sh p2p1 150 STAGES=p2p "P2P_SINGLE= " P2P_MULTI=3 P2P_TIMEOUT=140 >> /tmp/a1.txt 2>&1
 echo "gpu1 done t=$SECONDS" >> /tmp/a1.txt) &
wait; echo "arms done t=$SECONDS s"
grep -h "## \|call \|done t=" /tmp/a0.txt /tmp/a1.txt | cut -c1-200
mkdir -p $OUT/two; B=build/tests/yali-gpu-tests
timeout 120 $B --ranks 2 --mode multi --filter p2p_ > $OUT/two/p2p_multi_2gpu.log 2>&1; echo "p2p multi 2 GPUs rc=$? $(tail -1 $OUT/two/p2p_multi_2gpu.log)"
timeout 200 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv,alltoall -b 1K -e 1G -f 4 -d float -n 20 -w 5 \
  -J $OUT/two/sendrecv.json > $OUT/two/sendrecv.txt 2>&1; echo "perf rc=$?"
timeout 120 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 1K -e 16M -f 4 -d float -n 20 -w 5 -G 20 \
  -J $OUT/two/sendrecv_graph.json > $OUT/two/sendrecv_graph.txt 2>&1; echo "perf graph rc=$?"
grep -v "^#" $OUT/two/sendrecv.txt | tail -32 | cut -c1-160
grep -v "^#" $OUT/two/sendrecv_graph.txt | tail -10 | cut -c1-160
echo "t=$SECONDS s"
