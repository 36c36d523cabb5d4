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
(CUDA_VISIBLE_DEVICES=1 TAIL=30 bash scratch/call.sh abi $((560-SECONDS)) STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_NODES=2 \
   NCCLABI_NODES_NP=4 "NCCLABI_NODES_AGG=1 4" NCCLABI_HIER_FAULTS=1 NCCLABI_GROUP_ORDER=1 NCCLABI_RANK_LOCAL=0 \
   NCCLABI_GROUP_STREAMS=0 > /tmp/c.txt 2>&1) &
wait; grep -h "^## \|call " /tmp/a.txt /tmp/b.txt /tmp/c.txt | grep -v '^##   ' | cut -c1-330
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
