# call 2 (session 33): non-blocking torch drop-in at 4 ranks (plain reference blocking: NCCL alone fails all_to_all_single non-blocking)
# GPU 0: np 4; GPU 1: np 4 with TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=6 bash scratch/call.sh nb4 110 STAGES=dropin DROPIN_NP=4 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=100 > /tmp/a.txt 2>&1; echo "nb4 done t=$SECONDS" >> /tmp/a.txt) &
(CUDA_VISIBLE_DEVICES=1 TAIL=6 TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 bash scratch/call.sh nbh4 110 STAGES=dropin DROPIN_NP=4 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=100 > /tmp/b.txt 2>&1; echo "nbh4 done t=$SECONDS" >> /tmp/b.txt) &
wait; grep -h "dropin np\|call \|done t=" /tmp/a.txt /tmp/b.txt | grep -v '^##' ; echo "t=$SECONDS s"
