# Proposed acceptance run for issue 20, call a of 4 (nvidia-h200-x2; ranks share a GPU: correctness,
# not speed). Session 32's matrix (PERF.md "Session 32") again on the final tree, now that
# ncclSend/ncclRecv run on YALI (sessions 39-42). Copy to scratch/ and run `bash scratch/next_s43a.sh`
# with scratch/ carried. GPU 0: nccl-tests -d all -o all eager at 2 and 3 ranks, every binary.
# GPU 1: torch unchanged under yali-run at 2 and 4 ranks, then nccl-tests -d all -o all eager at 4.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
A="-d all -o all -b 64 -e 4M -f 256 -n 2 -w 1"
(CUDA_VISIBLE_DEVICES=0 TAIL=30 bash scratch/call.sh e23 $((570-SECONDS)) STAGES=ncclabi NCCLABI_NP="2 3" NCCLABI_ARGS="$A" \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0 NCCLABI_TIMEOUT=60 > /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=4 bash scratch/call.sh d24 250 STAGES=dropin "DROPIN_NP=2 4" > /tmp/b.txt 2>&1
 CUDA_VISIBLE_DEVICES=1 TAIL=16 bash scratch/call.sh e4 $((570-SECONDS)) STAGES=ncclabi NCCLABI_NP=4 NCCLABI_ARGS="$A" \
   NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0 NCCLABI_TIMEOUT=100 > /tmp/c.txt 2>&1) &
wait; grep -h "ncclabi np\|dropin np\|call " /tmp/a.txt /tmp/b.txt /tmp/c.txt | grep -v '^##'
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
