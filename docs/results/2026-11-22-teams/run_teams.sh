#!/usr/bin/env bash
# Experiment driver (not committed): teams per block in two-shot; release drains; ncu stall reasons.
set -uo pipefail
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 YALI_TIMEOUT_MS=10000
T=$OUT/tuning; mkdir -p $T
line() { echo "sm=9 nranks=$1 ll_max=$2 ll_threads=512 ll_ctas=32 twoshot_threads=512 twoshot_ctas=$3 twoshot_min_slot=$4 twoshot_max_slot=$5 twoshot_teams=$6"; }
{ line 2 524288 64 8192 131072 2; line 4 262144 64 8192 131072 2; } > $T/teams2.txt
OUT=$OUT/c STAGES=build,extrabuilds,variants EXTRA_BUILDS="build-nf:-DYALI_EXP_RELAXED_SIGNAL" VARIANT_SIZES="-b 64M -e 1G -f 4" \
  VARIANTS="base:YALI_PDL=1 t2:YALI_TUNING_FILE=$T/teams2.txt t2s8:YALI_TUNING_FILE=$T/teams2.txt,YALI_STAGING_BYTES=8388608 nf:PERF_BUILD=build-nf nft2:PERF_BUILD=build-nf,YALI_TUNING_FILE=$T/teams2.txt" \
  scripts/gpu_check.sh > $OUT/c.txt 2>&1
tail -22 $OUT/c.txt
which ncu; ncu --version | tail -1
OUT=$OUT/d STAGES=ncu NCU_METRICS=group:smsp__pcsamp_warp_stall_reasons NCU_CASES="stall1G:1G:YALI_ALGO=twoshot_push" scripts/gpu_check.sh > $OUT/d.txt 2>&1
tail -5 $OUT/d.txt; tar -xzf $OUT/d/logs.tar.gz -C $OUT/d 2>/dev/null; grep -v "^ *$" $OUT/d/logs/ncu_stall1G.txt | tail -60
tar -czf $OUT/all.tar.gz -C $OUT c d tuning 2>/dev/null
rm -rf $OUT/c $OUT/d
