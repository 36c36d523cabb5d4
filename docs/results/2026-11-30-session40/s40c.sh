# call c (session 40, nvidia-h200-x2): point-to-point's LL route for small calls (lib=8d9ab14a).
# GPU 0: p2p cases single 2 (full), 3, 4, 8 (quick), quick suite single 2. GPU 1: nccl-tests' send/recv binaries through
# the shim, -d all, at 2 and 4 eager, 3 -G 1; quick suite single 4. Then: p2p multi 2 on 2 GPUs; yali-perf sendrecv
# YALI vs NCCL eager and -G 20; dropinperf sendrecv/alltoallv/hypercube (1 rep); hypercube -G 20 with YALI_GRAPH_MIXING=0.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S="-b 64 -e 4M -f 256"; A="NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0"
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
( export CUDA_VISIBLE_DEVICES=0
  TAIL=3 bash scratch/call.sh cases2 100 STAGES=p2p P2P_SINGLE=2 "P2P_MULTI= " "P2P_ARGS= " P2P_TIMEOUT=90
  TAIL=5 bash scratch/call.sh cases 130 STAGES=p2p P2P_SINGLE="3 4 8" "P2P_MULTI= " P2P_TIMEOUT=60
  TAIL=3 bash scratch/call.sh quick2 150 STAGES=quick QUICK_RANKS=2 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1 NCCL_TESTS_DEVICE=0
  TAIL=3 bash scratch/call.sh abi 110 STAGES=ncclabi NCCLABI_NP="2 4" NCCLABI_TESTS="sendrecv alltoallv hypercube" NCCLABI_ARGS="-d all $S -n 2 -w 1" NCCLABI_TIMEOUT=30 $A
  TAIL=3 bash scratch/call.sh abig 40 STAGES=ncclabi NCCLABI_NP=3 NCCLABI_TESTS="sendrecv alltoallv" NCCLABI_ARGS="-d all $S -n 1 -w 1 -G 1" NCCLABI_TIMEOUT=18 $A
  TAIL=3 bash scratch/call.sh quick4 170 STAGES=quick QUICK_RANKS=4 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"
TAIL=2 bash scratch/call.sh multi2 40 STAGES=p2p "P2P_SINGLE= " P2P_MULTI=2 P2P_TIMEOUT=35
mkdir -p /tmp/o/v; V=/tmp/o/v
timeout 60 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 8 -e 1G -f 4 -d float -n 20 -w 5 -J $V/eager.json > $V/eager.txt 2>&1; echo "perf eager rc=$? t=$SECONDS"
timeout 60 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 8 -e 16M -f 4 -d float -n 20 -w 5 -G 20 -J $V/graph.json > $V/graph.txt 2>&1; echo "perf graph rc=$? t=$SECONDS"
TAIL=2 bash scratch/call.sh dp 150 STAGES=dropinperf DROPINPERF_TESTS="sendrecv alltoallv hypercube" DROPINPERF_REPS=1 DROPINPERF_ARGS="-b 8 -e 1G -f 4 -n 20 -w 5"
nl=$(python3 -c "import nvidia.nccl,os; print(os.path.join(nvidia.nccl.__path__[0],'lib'))" 2>/dev/null)
for gm in 1 0; do timeout 40 mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH="$nl:${LD_LIBRARY_PATH:-}" -x NCCL_NVLS_ENABLE=0 -x LD_PRELOAD=$PWD/build/src/nccl_abi/libyali-nccl.so \
  -x YALI_LIBRARY=$PWD/build/src/libyali.so -x YALI_GRAPH_MIXING=$gm /tmp/nccl-tests/nccl-tests-2.19.6/build/hypercube_perf -g 1 -c 1 -b 8 -e 64K -f 8 -n 20 -w 5 -G 20 > $V/hyper_gm$gm.txt 2>&1; echo "hypercube -G 20 YALI_GRAPH_MIXING=$gm rc=$?"; done
tar czf $OUT/v.tgz -C /tmp/o v
cat /tmp/gpu0.txt /tmp/gpu1.txt | grep -v "^$" | tail -30
for f in /tmp/o/*/stdout.txt; do grep -h "^## " $f; done | grep -v "dropinperf eager\|dropinperf graph" | cut -c1-250
grep -E '^ *[0-9]' $V/eager.txt | head -30; grep -E '^ *[0-9]' $V/graph.txt | head -20
grep -h "^ *[0-9]" $V/hyper_gm*.txt | awk '{print FILENAME? $0 : $0}' | head -12
echo "t=$SECONDS s"
