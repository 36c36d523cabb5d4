# Session 44 call f (x2): the 2-rank exchange LL threshold at 512 KB (selector.cc): yali-perf with the
# new default, one process per GPU, eager and graphs (which algorithm runs at each size; NCCL beside);
# then the GPU suite --quick at 2 (GPU 0) and 4 (GPU 1) ranks sharing a GPU.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/ll2; C=allgather,broadcast,reducescatter,reduce,gather,scatter,alltoall
A="-g 1 -C $C -d float -b 256K -e 8M -f 2 -n 20 -w 5"
for mode in eager graph; do G=; [ $mode = graph ] && G="-G 20"
  timeout 120 bash scripts/launch_ranks.sh 2 build/bench/yali-perf $A $G -J /tmp/o/ll2/${mode}_new.json > /tmp/o/ll2/${mode}_new.txt 2>&1; echo "$mode new default rc=$?"
done
python3 - <<'PY'
import json
for mode in ['eager','graph']:
  d=json.load(open(f'/tmp/o/ll2/{mode}_new.json')); t={}
  for r in d['results']:
    if r['placement']=='out-of-place': t[(r['collective'],r['bytes'],r['impl'])]=r
  print(f'== {mode}: collective bytes yali(algo) nccl wrong')
  for (c,b,i),r in sorted(t.items()):
    if i!='yali' or b>2097152: continue
    n=t[(c,b,'nccl')]; print(f"{c:14s} {b:8d} {r['time_us']:7.2f} {r['algo']:20s} {n['time_us']:7.2f} {r['wrong']+n['wrong']}")
PY
rm -f /tmp/[ab].txt
(CUDA_VISIBLE_DEVICES=0 TAIL=6 QUICK_TIMEOUT=170 bash scratch/call.sh q2 180 STAGES=quick QUICK_RANKS=2 "QUICK_MULTI_RANKS= " >> /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=6 QUICK_TIMEOUT=200 bash scratch/call.sh q4 210 STAGES=quick QUICK_RANKS=4 "QUICK_MULTI_RANKS= " >> /tmp/b.txt 2>&1) &
wait; grep -h "gpu suite\|call " /tmp/a.txt /tmp/b.txt | grep -v "^##" | cut -c1-200
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
