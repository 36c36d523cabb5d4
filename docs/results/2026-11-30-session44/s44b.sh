# Proposed second call of session 44 (nvidia-h200-x2), on branch next/s44-nccl-mem (yali-perf's NCCL on
# its own ncclMemAlloc buffers in every -R mode, as nccl-tests): check out the branch, copy this to
# scratch/, run with scratch/ carried. One process per GPU, 2 GPUs: speed. Expect NCCL's sendrecv in
# graphs at 8 MB near nccl-tests' 36.8 us with NCCL_GRAPH_REGISTER=1 and near 52 with =0 (Session 42),
# where on main both were 47.6-48.1 (Session 43); and see whether NCCL's AllReduce, AllGather and
# Broadcast in graphs move between the two settings (NCCL registers their buffers at capture on its
# Simple protocol). Then eager -R 0 and -R 1 (ncclCommRegister now on memory it takes), 0 wrong.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/bench/yali-perf ] || { TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"; }
mkdir -p /tmp/o/yp; C=allreduce,allgather,broadcast,sendrecv
for gr in 1 0; do NCCL_GRAPH_REGISTER=$gr timeout 150 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C $C \
  -d float -b 256K -e 64M -f 4 -n 20 -w 5 -G 20 -J /tmp/o/yp/graph_reg$gr.json > /tmp/o/yp/graph_reg$gr.txt 2>&1; echo "graphs NCCL_GRAPH_REGISTER=$gr rc=$?"; done
# The same with NCCL on YALI's cudaMalloc buffers, as main ran it (its 8 MB send/recv: 47.6 us):
timeout 150 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C $C --nccl-memory shared \
  -d float -b 256K -e 64M -f 4 -n 20 -w 5 -G 20 -J /tmp/o/yp/graph_shared.json > /tmp/o/yp/graph_shared.txt 2>&1; echo "graphs --nccl-memory shared rc=$?"
# -C alltoallv (NCCL's grouped send/recv, now on its own memory too), graphs, register 1 and 0:
for gr in 1 0; do NCCL_GRAPH_REGISTER=$gr timeout 150 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C alltoallv \
  --dist uniform --tokens 1K,4K -n 20 -w 5 -G 20 > /tmp/o/yp/a2av_graph_reg$gr.txt 2>&1; echo "alltoallv graphs NCCL_GRAPH_REGISTER=$gr rc=$?"
  grep -v '^#' /tmp/o/yp/a2av_graph_reg$gr.txt | tail -4; done
for r in 0 1; do timeout 150 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C $C -d float -b 256K -e 64M -f 4 \
  -n 20 -w 5 -R $r -J /tmp/o/yp/eager_R$r.json > /tmp/o/yp/eager_R$r.txt 2>&1; echo "eager -R $r rc=$?"; done
# The rows (impl, bytes, count, type, op, time us, algbw, busbw, #wrong, ...) under each block's header:
for f in /tmp/o/yp/*.txt; do echo "== $(basename $f): $(grep -m1 '^# memory' $f | cut -c1-70)"
  grep -E '^ *(yali|nccl) |^# (allreduce|allgather|broadcast|sendrecv)' $f | awk '{print $1, $2, $6, $9}'; done
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o yp; echo "t=$SECONDS s"
