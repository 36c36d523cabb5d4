#!/usr/bin/env bash
# make bench: YALI vs NCCL AllReduce on every visible GPU, 4 KB to 1 GB, fp32 and bf16, first with
# one process driving all GPUs, then one process per GPU. Usage: bench.sh BUILD_DIR [extra yali-perf args]
set -uo pipefail
build=${1:-build}; shift || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
perf=$build/bench/yali-perf
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpus:-0}" -lt 2 ]; then
  echo "SKIP: make bench needs 2 or more GPUs (found ${ngpus:-0})"
  exit 0
fi
[ "$ngpus" -gt 8 ] && ngpus=8
rc=0
echo "== one process, $ngpus GPUs"
"$perf" -g "$ngpus" -b 4K -e 1G -f 4 -d float,bfloat16 -n 20 -w 5 "$@" || rc=1
echo "== one process per GPU, $ngpus processes"
bash "$(dirname "$0")/launch_ranks.sh" "$ngpus" "$perf" -g 1 -b 4K -e 1G -f 4 -d float,bfloat16 -n 20 -w 5 "$@" || rc=1
exit $rc
