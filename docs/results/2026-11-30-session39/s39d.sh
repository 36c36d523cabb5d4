# call d (session 39, 2 H200s): the two-team lanes, per-place credits, adaptive chunks, new defaults (16 rings of
# 4 x 128 KB, at most 64 / (2 (n - 1)) rings). Build; GPU 0: p2p cases single 2 3 4 8; GPU 1: quick suite single 2,
# p2p multi 3. Then both GPUs: p2p multi 2 (NVLink), yali-perf sendrecv + alltoall YALI vs NCCL, variants.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
(export CUDA_VISIBLE_DEVICES=0
 TAIL=8 bash scratch/call.sh p2p0 200 STAGES=p2p P2P_SINGLE="2 3 4 8" "P2P_MULTI= " P2P_TIMEOUT=90 > /tmp/a0.txt 2>&1
 echo "gpu0 done t=$SECONDS" >> /tmp/a0.txt) &
(export CUDA_VISIBLE_DEVICES=1
 TAIL=4 bash scratch/call.sh q2 150 STAGES=quick QUICK_RANKS=2 "QUICK_MULTI_RANKS= " QUICK_TIMEOUT=140 > /tmp/a1.txt 2>&1
 TAIL=4 bash scratch/call.sh p2p1 100 STAGES=p2p "P2P_SINGLE= " P2P_MULTI=3 P2P_TIMEOUT=90 >> /tmp/a1.txt 2>&1
 echo "gpu1 done t=$SECONDS" >> /tmp/a1.txt) &
wait; echo "arms done t=$SECONDS s"
grep -h "## \|call \|done t=" /tmp/a0.txt /tmp/a1.txt | cut -c1-200
mkdir -p $OUT/v; B=build/tests/yali-gpu-tests
timeout 100 $B --ranks 2 --mode multi --filter p2p_ > $OUT/v/p2p_multi_2gpu.log 2>&1; echo "p2p multi 2 GPUs rc=$? $(tail -1 $OUT/v/p2p_multi_2gpu.log)"
run() { local name=$1; shift
  env "$@" timeout 100 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 1K -e 1G -f 4 -d float -n 20 -w 5 \
    ${IMPL:---impl yali} -J $OUT/v/$name.json > $OUT/v/$name.txt 2>&1; echo "$name rc=$?"; }
IMPL=" " run default
run c16s256 YALI_P2P_SLOT_BYTES=262144
run c16s512 YALI_P2P_SLOT_BYTES=524288
run c8s128 YALI_P2P_CHANNELS=8
IMPL=" " timeout 60 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 1K -e 16M -f 4 -d float -n 20 -w 5 -G 20 \
  -J $OUT/v/graph.json > $OUT/v/graph.txt 2>&1; echo "graph rc=$?"
python3 - "$OUT/v" <<'PY'
import json,sys,os,glob
d=sys.argv[1]; rows={}
for f in sorted(glob.glob(d+'/*.json')):
    n=os.path.basename(f)[:-5]
    try: js=json.load(open(f))
    except Exception as e: print(n,'bad json',e); continue
    for r in js.get('results',[]):
        if r.get('placement')!='out-of-place' or r.get('collective')!='sendrecv': continue
        rows.setdefault(r['bytes'],{})[n+('' if r['impl']=='yali' else '_'+r['impl'])]=(r.get('time_us'),r.get('wrong'))
names=sorted({k for v in rows.values() for k in v})
print('size', *names)
for s in sorted(rows): print(s, *[('%.1f/%s'%rows[s][k] if k in rows[s] and rows[s][k][0] else '-') for k in names])
PY
echo "t=$SECONDS s"
