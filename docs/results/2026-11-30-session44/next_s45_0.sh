# Proposed for the next session with nvidia-h200-x2 (copy to scratch/, run with scratch/ carried;
# scratch/third_party is not needed). Session 44 measured the exchanges' LL threshold at 2 GPUs by
# hand (512 KB per piece); the rest of the 2-GPU table (the exchanges' *_direct_min, 1 MB, never
# measured; AllReduce's keys, last tuned on 2026-11-22 in one process) has not been checked against
# --tune run as users run YALI, one process per GPU. This runs --tune so (every collective), prints
# its line, then times the built-in table against the tuned one in the same call, every collective,
# eager and graphs, 256 KB-64 MB: change the built-in n = 2 row only where the tuned one wins in both.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/bench/yali-perf ] || { TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"; }
mkdir -p /tmp/o/tune
timeout 360 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 --tune --tune-out /tmp/o/tune/tuning_n2.txt \
  -J /tmp/o/tune/tune_n2.json > /tmp/o/tune/tune_n2.log 2>&1; echo "tune rc=$? t=$SECONDS s"
grep -v '^#' /tmp/o/tune/tuning_n2.txt | tr ' ' '\n' | grep -E 'll_max|direct_min|slot|ctas|pull_max' | tr '\n' ' '; echo
A="-g 1 -C allreduce,reducescatter,allgather,broadcast,reduce,gather,scatter,alltoall -d float -b 256K -e 64M -f 4 -n 20 -w 5 --impl yali"
for mode in eager graph; do G=; [ $mode = graph ] && G="-G 20"
  timeout 100 bash scripts/launch_ranks.sh 2 build/bench/yali-perf $A $G -J /tmp/o/tune/${mode}_builtin.json > /tmp/o/tune/${mode}_builtin.txt 2>&1; echo "$mode built-in rc=$?"
  [ -s /tmp/o/tune/tuning_n2.txt ] && YALI_TUNING_FILE=/tmp/o/tune/tuning_n2.txt timeout 100 bash scripts/launch_ranks.sh 2 build/bench/yali-perf $A $G \
    -J /tmp/o/tune/${mode}_tuned.json > /tmp/o/tune/${mode}_tuned.txt 2>&1; echo "$mode tuned rc=$?"
done
python3 - <<'PY'
import json, os
for mode in ['eager', 'graph']:
    t = {}
    for v in ['builtin', 'tuned']:
        f = f'/tmp/o/tune/{mode}_{v}.json'
        if not os.path.exists(f): continue
        for r in json.load(open(f))['results']:
            if r['placement'] == 'out-of-place': t[(v, r['collective'], r['bytes'])] = r
    print(f'== {mode}: collective bytes built-in(algo) tuned(algo) tuned/built-in wrong')
    for (v, c, b), r in sorted(t.items()):
        if v != 'builtin' or ('tuned', c, b) not in t: continue
        u = t[('tuned', c, b)]
        print(f"{c:14s} {b:9d} {r['time_us']:8.2f} {r['algo']:22s} {u['time_us']:8.2f} {u['algo']:22s} {u['time_us']/r['time_us']:.2f} {r['wrong']+u['wrong']}")
PY
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o tune; echo "t=$SECONDS s"
