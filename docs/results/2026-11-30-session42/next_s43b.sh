# Proposed acceptance run for issue 20, call b of 4 (nvidia-h200-x2; ranks share a GPU): nccl-tests
# -d all -o all in CUDA graphs (-G 1) at 2 and 3 ranks (GPU 0) and 4 ranks (GPU 1), every binary.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=3 bash scratch/call.sh build 150 STAGES=build
# nccl-tests built once here (kept if already there), not by both arms at once:
TAIL=2 bash scratch/call.sh ntb 120 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0
A="-d all -o all -b 64 -e 4M -f 256 -n 1 -w 1 -G 1"
(CUDA_VISIBLE_DEVICES=0 TAIL=30 bash scratch/call.sh g23 $((570-SECONDS)) STAGES=ncclabi NCCLABI_NP="2 3" NCCLABI_ARGS="$A" \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0 NCCLABI_TIMEOUT=80 > /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=16 bash scratch/call.sh g4 $((570-SECONDS)) STAGES=ncclabi NCCLABI_NP=4 NCCLABI_ARGS="$A" \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0 NCCLABI_TIMEOUT=100 > /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi np\|call " /tmp/a.txt /tmp/b.txt | grep -v '^##'
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
