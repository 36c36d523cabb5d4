# call 4 (session 36): issue 21's 2-GPU half, the rest that fits: graphs with each library at its best
# (-R 2, -R 2 -x 2) and the MoE AlltoAllv (uniform and zipf, 128/1K/4K tokens), on main 50a60fa.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
TAIL=12 bash scratch/call.sh everyg2 $((560 - SECONDS)) STAGES=everycoll PERF_NP=2 "EVERY_REG=2 2:2" EVERY_MODES=graph EVERY_A2AV=1
echo "t=$SECONDS s"
