# call 4 (session 33): torch drop-in with device_id (eager comm, subgroups by ncclCommSplit): GPU 0 blocking at 2 and 4;
# GPU 1 (port 29600): device_id + non-blocking at 2, then non-blocking at 4 with the tensor-register allocator hook
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=6 bash scratch/call.sh dev 230 STAGES=dropin DROPIN_NP="2 4" DROPIN_DEVICE_ID=1 DROPIN_TIMEOUT=100 > /tmp/a.txt 2>&1; echo "dev done t=$SECONDS" >> /tmp/a.txt) &
(export PET_MASTER_PORT=29600; CUDA_VISIBLE_DEVICES=1 TAIL=6 bash scratch/call.sh devnb 110 STAGES=dropin DROPIN_NP=2 DROPIN_DEVICE_ID=1 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=100 > /tmp/b.txt 2>&1; echo "devnb done t=$SECONDS" >> /tmp/b.txt
 CUDA_VISIBLE_DEVICES=1 TAIL=6 TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 bash scratch/call.sh nbh4 110 STAGES=dropin DROPIN_NP=4 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=100 > /tmp/c.txt 2>&1; echo "nbh4 done t=$SECONDS" >> /tmp/c.txt) &
wait; grep -h "dropin np\|call \|done t=" /tmp/a.txt /tmp/b.txt /tmp/c.txt | grep -v '^##' ; echo "t=$SECONDS s"
for f in /tmp/o/dev/logs/dropin_yali*_dev.log /tmp/o/devnb/logs/dropin_yali*.log; do echo "== $f"; grep "yali-nccl" "$f" | grep -v "class)\|forwarding to\|YALI from" | sort | uniq -c | sort -rn | head -8; done
