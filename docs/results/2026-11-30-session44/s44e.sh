# Session 44 call e (x2, one process per GPU): the exchanges' LL thresholds at 2 GPUs (first estimates,
# never measured: selector.cc). Every exchange collective 256 KB-8 MB, default against every *_ll_max
# raised to 4 MB (LL up to 4 MB pieces), eager and graphs; NCCL in the default runs.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/bench/yali-perf ] || { TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"; }
mkdir -p /tmp/o/ll; C=allgather,broadcast,reducescatter,reduce,gather,scatter,alltoall
LL="YALI_ALLGATHER_LL_MAX_BYTES=4194304 YALI_BROADCAST_LL_MAX_BYTES=4194304 YALI_REDUCESCATTER_LL_MAX_BYTES=4194304 YALI_REDUCE_LL_MAX_BYTES=4194304 YALI_GATHER_LL_MAX_BYTES=4194304 YALI_SCATTER_LL_MAX_BYTES=4194304 YALI_ALLTOALL_LL_MAX_BYTES=4194304"
A="-g 1 -C $C -d float -b 256K -e 8M -f 2 -n 20 -w 5"
for mode in eager graph; do G=; [ $mode = graph ] && G="-G 20"
  timeout 120 bash scripts/launch_ranks.sh 2 build/bench/yali-perf $A $G -J /tmp/o/ll/${mode}_default.json > /tmp/o/ll/${mode}_default.txt 2>&1; echo "$mode default rc=$?"
  env $LL timeout 120 bash scripts/launch_ranks.sh 2 build/bench/yali-perf $A $G --impl yali -J /tmp/o/ll/${mode}_ll.json > /tmp/o/ll/${mode}_ll.txt 2>&1; echo "$mode ll rc=$?"
done
python3 - <<'PY'
import json
t={}
for mode in ['eager','graph']:
  for v in ['default','ll']:
    try: d=json.load(open(f'/tmp/o/ll/{mode}_{v}.json'))
    except Exception as e: print(mode,v,'no json',e); continue
    for r in d['results']:
      if r['placement']!='out-of-place': continue
      t[(mode,v,r['collective'],r['bytes'],r['impl'])]=(r['time_us'],r.get('algo'),r['wrong'])
cols=sorted({k[2] for k in t}); sizes=sorted({k[3] for k in t})
for mode in ['eager','graph']:
  print(f'== {mode}: bytes  yali-default(algo)  yali-LL  nccl')
  for c in cols:
    for b in sizes:
      a=t.get((mode,'default',c,b,'yali')); l=t.get((mode,'ll',c,b,'yali')); n=t.get((mode,'default',c,b,'nccl'))
      if a and l and n: print(f'{c:14s} {b:8d} {a[0]:8.2f} {a[1]:18s} {l[0]:8.2f} {l[1]:16s} {n[0]:8.2f} wrong {a[2]+l[2]+n[2]}')
PY
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o ll; echo "t=$SECONDS s"
