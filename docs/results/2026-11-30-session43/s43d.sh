# Session 43 acceptance call 3 of 3 (x2; ranks share a GPU): eager at 2 and 3 and torch at 2 (GPU 0); graphs at 4, torch at 4 (GPU 1)
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || { TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"; }
TAIL=2 bash scratch/call.sh ntb 120 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0
rm -f /tmp/[ab].txt
E="-d all -o all -b 64 -e 4M -f 256 -n 2 -w 1"; G="-d all -o all -b 64 -e 4M -f 256 -n 1 -w 1 -G 1"
E8="-d all -o all -b 64 -e 4M -f 65536 -n 2 -w 1"; G8="-d all -o all -b 64 -e 4M -f 65536 -n 1 -w 1 -G 1"
N="NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0"
(CUDA_VISIBLE_DEVICES=0 TAIL=30 bash scratch/call.sh e23 300 STAGES=ncclabi NCCLABI_NP="2 3" NCCLABI_ARGS="$E" $N NCCLABI_TIMEOUT=60 >> /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=4 bash scratch/call.sh d2 120 STAGES=dropin DROPIN_NP=2 >> /tmp/a.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 TAIL=4 bash scratch/call.sh g8s $((455-SECONDS)) STAGES=ncclabi NCCLABI_NP=8 NCCLABI_ARGS="$G8" NCCLABI_TESTS=sendrecv $N NCCLABI_TIMEOUT=$((445-SECONDS)) >> /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=16 bash scratch/call.sh g4 260 STAGES=ncclabi NCCLABI_NP=4 NCCLABI_ARGS="$G" $N NCCLABI_TIMEOUT=100 >> /tmp/b.txt 2>&1
 CUDA_VISIBLE_DEVICES=1 TAIL=4 bash scratch/call.sh d4 $((460-SECONDS)) STAGES=dropin DROPIN_NP=4 >> /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi np\|dropin np\|call \|passed\|failed" /tmp/a.txt /tmp/b.txt | grep -v "^##" | cut -c1-260
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
