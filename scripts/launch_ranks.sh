#!/usr/bin/env bash
# Runs one copy of a program per GPU, the way a launcher would: under mpirun when it exists,
# otherwise as N background processes with RANK/WORLD_SIZE/LOCAL_RANK set (yali-perf and the
# tests accept either). Usage: launch_ranks.sh N program [args...]
set -uo pipefail
n=$1; shift
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if command -v mpirun >/dev/null 2>&1 && [ -z "${YALI_NO_MPIRUN:-}" ]; then
  exec mpirun --allow-run-as-root --oversubscribe -np "$n" \
    -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
    -x LD_LIBRARY_PATH -x PATH "$@"
fi
export YALI_PERF_JOBID="launch-$$-$RANDOM"
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
