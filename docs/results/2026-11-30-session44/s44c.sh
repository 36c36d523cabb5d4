# Session 44 call c (x2; ranks share a GPU): the GPU suite --quick at 2 (GPU 0) and 4 (GPU 1) ranks, the
# group-order check (4 ranks as 2 simulated nodes), nccl-tests eager at 2 ranks and -G 1 at 4, every binary
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || { TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"; }
TAIL=2 bash scratch/call.sh ntb 120 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0
rm -f /tmp/[ab].txt
E="-d all -o all -b 64 -e 4M -f 256 -n 2 -w 1"; G="-d all -o all -b 64 -e 4M -f 256 -n 1 -w 1 -G 1"
N="NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0"
(CUDA_VISIBLE_DEVICES=0 TAIL=6 QUICK_TIMEOUT=170 bash scratch/call.sh q2 180 STAGES=quick QUICK_RANKS=2 "QUICK_MULTI_RANKS= " >> /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=12 bash scratch/call.sh go 200 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_GROUP_ORDER=1 NCCLABI_GROUP_ORDER_CONTROL_TIMEOUT=30 $N >> /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=14 bash scratch/call.sh e2 $((560-SECONDS)) STAGES=ncclabi NCCLABI_NP=2 NCCLABI_ARGS="$E" $N NCCLABI_TIMEOUT=60 >> /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=6 QUICK_TIMEOUT=200 bash scratch/call.sh q4 210 STAGES=quick QUICK_RANKS=4 "QUICK_MULTI_RANKS= " >> /tmp/b.txt 2>&1
 CUDA_VISIBLE_DEVICES=1 TAIL=14 bash scratch/call.sh g4 $((560-SECONDS)) STAGES=ncclabi NCCLABI_NP=4 NCCLABI_ARGS="$G" $N NCCLABI_TIMEOUT=100 >> /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi \|gpu suite\|call \|passed\|failed" /tmp/a.txt /tmp/b.txt | grep -v "^##" | cut -c1-230
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
