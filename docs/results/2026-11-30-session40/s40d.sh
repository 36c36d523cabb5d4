# call d (session 40, nvidia-h200-x2): the capture's serial record as a leaf (lib=1ef98abd), on top of the LL route.
# GPU 0: quick suite single 2. GPU 1: trust_streams_order single 2, then the torch drop-in at 2 (graph-captured step).
# Then: trust_streams_order multi 2 on 2 GPUs; hypercube -G 20 through the shim with the order on and off; yali-perf
# allreduce and sendrecv -G 20 (back to back: no regression); dropinperf hypercube/sendrecv graph.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
B=build/tests/yali-gpu-tests; mkdir -p /tmp/o/v; V=/tmp/o/v
( export CUDA_VISIBLE_DEVICES=0
  TAIL=3 bash scratch/call.sh quick2 170 STAGES=quick QUICK_RANKS=2 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  timeout 100 $B --share-gpus --ranks 2 --mode single --filter trust_streams_order > $V/tso_single2.log 2>&1; echo "trust_streams_order single 2 (1 GPU) rc=$? $(tail -1 $V/tso_single2.log)"
  TAIL=3 bash scratch/call.sh dropin 150 STAGES=dropin DROPIN_NP=2 DROPIN_TIMEOUT=70 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"; cat /tmp/gpu0.txt /tmp/gpu1.txt | grep -v "^$" | grep -v "^====" 
timeout 100 $B --ranks 2 --mode multi --filter trust_streams_order > $V/tso_multi2.log 2>&1; echo "trust_streams_order multi 2 (2 GPUs) rc=$? $(tail -1 $V/tso_multi2.log)"
grep -h "FAIL\|expected 3" $V/tso_*.log | head -5
TAIL=2 bash scratch/call.sh dp 120 STAGES=dropinperf DROPINPERF_TESTS="hypercube sendrecv" DROPINPERF_REPS=1 DROPINPERF_MODES=graph DROPINPERF_ARGS="-b 8 -e 16M -f 4 -n 20 -w 5"
nl=$(python3 -c "import nvidia.nccl,os; print(os.path.join(nvidia.nccl.__path__[0],'lib'))" 2>/dev/null)
for gm in 1 0; do timeout 40 mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH="$nl:${LD_LIBRARY_PATH:-}" -x NCCL_NVLS_ENABLE=0 -x LD_PRELOAD=$PWD/build/src/nccl_abi/libyali-nccl.so \
  -x YALI_LIBRARY=$PWD/build/src/libyali.so -x YALI_GRAPH_MIXING=$gm /tmp/nccl-tests/nccl-tests-2.19.6/build/hypercube_perf -g 1 -c 1 -b 8 -e 64K -f 8 -n 20 -w 5 -G 20 > $V/hyper_gm$gm.txt 2>&1; echo "hypercube -G 20 YALI_GRAPH_MIXING=$gm rc=$?"; grep -E "^ +[0-9]+ " $V/hyper_gm$gm.txt | head -4; done
timeout 60 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C allreduce,sendrecv -b 8 -e 4M -f 8 -d float -n 20 -w 5 -G 20 -J $V/graph.json > $V/graph.txt 2>&1; echo "perf graph rc=$? t=$SECONDS"
tail -30 $V/graph.txt
tar czf $OUT/v.tgz -C /tmp/o v
echo "t=$SECONDS s"
