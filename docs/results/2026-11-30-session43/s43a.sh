# Proposed first call of session 43 (nvidia-h200-x2), before the acceptance calls next_s43a-d.sh:
# branch next/s43-p2p-last (main + a hierarchical comm's grouped point-to-point calls after its other
# deferred calls). Check out the branch in /work/main, copy this to scratch/, run it with scratch/
# carried. GPU 1: the shim on simulated nodes (group order, with the new p2p variants and their
# call-order control; nccl-tests -m 1 and -m 4; the hierarchical faults 2x2); GPU 0: the torch drop-in
# at 2 ranks and nccl-tests sendrecv/alltoallv at 2 (a comm of one node: unchanged, YALI's).
# If all pass (16 ok in each shim and plain line, fewer in the call-order controls), fast-forward main.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
TAIL=2 bash scratch/call.sh ntb 120 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0
(CUDA_VISIBLE_DEVICES=0 TAIL=4 bash scratch/call.sh d2 150 STAGES=dropin DROPIN_NP=2 > /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=6 bash scratch/call.sh p2 120 STAGES=ncclabi NCCLABI_NP=2 "NCCLABI_TESTS=sendrecv alltoallv" \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0 > /tmp/b.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=30 bash scratch/call.sh abi $((470-SECONDS)) STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_NODES=2 \
   NCCLABI_NODES_NP=4 "NCCLABI_NODES_AGG=1 4" NCCLABI_HIER_FAULTS=1 NCCLABI_GROUP_ORDER=1 NCCLABI_RANK_LOCAL=0 \
   NCCLABI_GROUP_STREAMS=0 > /tmp/c.txt 2>&1) &
wait; grep -h "^## \|call " /tmp/a.txt /tmp/b.txt /tmp/c.txt | grep -v '^##   ' | cut -c1-330
# One thread driving both GPUs per process, 2 processes = 2 simulated nodes (the leg-wise path, whose
# rounds the branch now numbers per comm family), as Session 30's call c3: nccl-tests -g 2, -m 1 and 4.
W=/tmp/w_g2.sh; printf '#!/bin/sh\nr=$OMPI_COMM_WORLD_RANK\nexport NCCL_HOSTID=yali-rank-$r NCCL_TESTS_DEVICE=0 YALI_NODE_ID=node$r\nexec "$@"\n' > $W; chmod +x $W
L=$(python3 -c "import nvidia.nccl,os; print(os.path.join(nvidia.nccl.__path__[0],'lib'))")
for m in 1 4; do for t in all_reduce all_gather reduce_scatter; do lg=/tmp/o/g2_m${m}_$t.log
timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD=$PWD/build/src/nccl_abi/libyali-nccl.so -x LD_LIBRARY_PATH=$L:${LD_LIBRARY_PATH:-} -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY=$PWD/build/src/libyali.so -x NCCL_NVLS_ENABLE=0 $W /tmp/nccl-tests/nccl-tests-2.19.6/build/${t}_perf -b 8 -e 4M -f 8 -g 2 -m $m -c 1 -n 5 -w 2 > $lg 2>&1
echo "g2 -m $m $t rc=$? hier calls: $(grep -c '\[hierarchical:' $lg) flat NCCL: $(grep -c 'class): NCCL' $lg) $(grep -m1 'Out of bounds' $lg)"; done; done
# Session 42's question: yali-perf's NCCL send/recv in graphs took 47.6 us at 8 MB where nccl-tests'
# took 36.8 with the same NCCL (its graph registration; 52.3 with NCCL_GRAPH_REGISTER=0). Does the
# registration take effect in yali-perf's capture? If NCCL's time does not move between these two
# runs, it does not, and yali-perf's graph baseline for send/recv is not NCCL at its best.
for gr in 1 0; do NCCL_GRAPH_REGISTER=$gr timeout 40 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv \
  -d float -b 2M -e 32M -f 4 -n 20 -w 5 -G 20 > /tmp/o/yp_graph_register$gr.txt 2>&1
  echo "yali-perf NCCL_GRAPH_REGISTER=$gr: $(awk '$1=="nccl" && $2 ~ /^[0-9]+$/ {printf "%s:%s ", $2, $6}' /tmp/o/yp_graph_register$gr.txt)"; done
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
