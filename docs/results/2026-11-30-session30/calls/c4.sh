set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=3 bash scratch/call.sh build 200 STAGES=build
P=build/bench/yali-perf; A="-g 1 -C reduce -R 1 -b 4M -e 1G -f 4 -d bfloat16 --inplace 0 -n 20 -w 5"
B="sm=9 nranks=2 ll_max=524288 ll_threads=512 ll_ctas=32 twoshot_threads=512 twoshot_ctas=64 twoshot_min_slot=8192 twoshot_max_slot=131072 twoshot_push_min=1 oneshot_pull_max=4194304 frugal_teams=2 twoshot_direct_min=16777216"
echo "$B frugal_min=67108864 frugal_ctas=64" > /tmp/t64.txt; echo "$B frugal_min=1099511627776 frugal_ctas=32" > /tmp/tnof.txt
run() { n=$1; shift; env "$@" timeout 100 bash scripts/launch_ranks.sh 2 $P $A --impl ${IMPL:-yali} > $OUT/r_$n.txt 2>&1; echo "$n rc=$?: $(awk '$1=="yali"||$1=="nccl"{printf "%s %s|%s|%s|%s; ", $1, $2, $5, $6, $7}' $OUT/r_$n.txt)"; }
run def X=1; IMPL=nccl run nccl X=1; run c64 YALI_TUNING_FILE=/tmp/t64.txt; run c64s8 YALI_TUNING_FILE=/tmp/t64.txt YALI_STAGING_BYTES=8388608; run nofrugal YALI_TUNING_FILE=/tmp/tnof.txt; run nof_s8 YALI_TUNING_FILE=/tmp/tnof.txt YALI_STAGING_BYTES=8388608; run def2 X=1
grep -m3 -i "algo\|reduce_staged" $OUT/r_c64s8.txt | head -3
TAIL=12 bash scratch/call.sh p1 300 STAGES=pytests PYTEST_TIMEOUT=280
TAIL=5 QUICK_TIMEOUT=140 bash scratch/call.sh q4 150 STAGES=quick QUICK_RANKS=4 "QUICK_MULTI_RANKS= "
