# call 2: pytest in full (GPU 0) beside memcheck at 4 then the kill test over every collective at 3 (GPU 1)
set -u; bash scratch/sent.sh; t0=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=3 bash scratch/call.sh build 200 STAGES=build
(CUDA_VISIBLE_DEVICES=0 TAIL=14 bash scratch/call.sh p1 500 STAGES=pytests PYTEST_TIMEOUT=440 > /tmp/o/p1.out 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=4 bash scratch/call.sh m4 300 STAGES=sanitize SANITIZE_RANKS=4 SANITIZE_TIMEOUT=290 > /tmp/o/m4.out 2>&1
 CUDA_VISIBLE_DEVICES=1 TAIL=70 bash scratch/call.sh k3 250 STAGES=trust "TRUST_SINGLE_RANKS= " "TRUST_MULTI_RANKS= " KILL_RANKS=3 KILL_COLLS=all "KILL_RANK0_COLLS= " KILL_TIMEOUT=240 >> /tmp/o/m4.out 2>&1) &
wait; cat /tmp/o/p1.out /tmp/o/m4.out; echo "t=$(( $(date +%s) - t0 )) s"
