# call 3 (session 36): issue 21's 2-GPU table on the landed tree (next/s36b 58e1faf): every collective, YALI and
# NCCL 2.28.9 from the same runs, one process per GPU, fp32 and bf16, 4 KB to 1 GB x4: eager plain (-R 0) and
# NCCL at its best (-R 2 -x 2 and -R 2), graphs plain; then the best table.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
TAIL=12 bash scratch/call.sh every 470 STAGES=everycoll PERF_NP=2 "EVERY_REG=0 2 2:2" EVERY_MODES=eager EVERY_A2AV=0
echo "eager done t=$SECONDS s"
left=$((575 - SECONDS)); [ $left -gt 60 ] && TAIL=6 bash scratch/call.sh everyg $left STAGES=everycoll PERF_NP=2 EVERY_REG=0 EVERY_MODES=graph EVERY_A2AV=0
echo "t=$SECONDS s"
