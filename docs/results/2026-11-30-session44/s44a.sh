# Proposed first call of session 44 (nvidia-h200-x2), on main as session 43 left it: what issue 20's
# acceptance still lacks on this tree, the 8-rank simulated nodes (2 x 4 and 4 x 2: nccl-tests -m 1
# and -m 4, hierarchical faults), and the torch drop-in at 2 and 4 side by side (the free-port fix
# of gpu_check.sh: both must AGREE). Copy to scratch/, run with scratch/ carried. About 6 minutes.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || { TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"; }
TAIL=2 bash scratch/call.sh ntb 120 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0
rm -f /tmp/[ab].txt; N="NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0"
(CUDA_VISIBLE_DEVICES=0 TAIL=12 bash scratch/call.sh n24 200 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_NODES=2 NCCLABI_NODES_NP=8 \
   "NCCLABI_NODES_AGG=1 4" NCCLABI_HIER_FAULTS=1 NCCLABI_HIER_FAULTS_LAYOUTS=2x4 $N >> /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=4 bash scratch/call.sh d2 150 STAGES=dropin DROPIN_NP=2 >> /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=12 bash scratch/call.sh n42 200 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_NODES=4 NCCLABI_NODES_NP=8 \
   "NCCLABI_NODES_AGG=1 4" NCCLABI_HIER_FAULTS=1 NCCLABI_HIER_FAULTS_LAYOUTS=4x2 $N >> /tmp/b.txt 2>&1
 CUDA_VISIBLE_DEVICES=1 TAIL=4 bash scratch/call.sh d4 180 STAGES=dropin DROPIN_NP=4 >> /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi \|dropin np\|call " /tmp/a.txt /tmp/b.txt | grep -v "^##" | cut -c1-300
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
