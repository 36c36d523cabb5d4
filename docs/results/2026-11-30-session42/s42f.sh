# Session 42 call f (nvidia-h200-x2), branch next/s42-order (same tree as calls d, e): the whole GPU
# suite without --quick in multi mode (a process per rank), 2 ranks, each on its own GPU, bounded.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/full; F=/tmp/o/full
timeout -k 5 $((225-SECONDS)) build/tests/yali-gpu-tests --ranks 2 --mode multi > $F/full_multi_2.log 2>&1; echo "full multi 2 rc=$?"
f=$F/full_multi_2.log; echo "== full multi 2: $(grep -c '^PASS' $f) PASS, $(grep -c '^FAIL' $f) FAIL, $(grep -c '^SKIP' $f) SKIP"
grep -E "^FAIL|^SKIP" $f | cut -c1-200 | head -20; tail -2 $f
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .
echo "t=$SECONDS s"
