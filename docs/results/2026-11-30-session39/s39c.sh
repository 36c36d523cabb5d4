# call c (session 39, 2 H200s): yaliSend/yaliRecv speed against ring count and slot size (yali-perf -C sendrecv,
# one process per GPU, YALI only; NCCL once).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
mkdir -p $OUT/v
run() { local name=$1; shift
  env "$@" timeout 100 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -b 64K -e 1G -f 4 -d float -n 20 -w 5 \
    ${IMPL:---impl yali} -J $OUT/v/$name.json > $OUT/v/$name.txt 2>&1; echo "$name rc=$?"; }
IMPL=" " run nccl_base
run c8s64 YALI_P2P_CHANNELS=8 YALI_P2P_SLOT_BYTES=65536
run c16s64 YALI_P2P_CHANNELS=16 YALI_P2P_SLOT_BYTES=65536
run c8s256 YALI_P2P_CHANNELS=8 YALI_P2P_SLOT_BYTES=262144
run c16s128 YALI_P2P_CHANNELS=16 YALI_P2P_SLOT_BYTES=131072
run c16s256 YALI_P2P_CHANNELS=16 YALI_P2P_SLOT_BYTES=262144
run c8s512 YALI_P2P_CHANNELS=8 YALI_P2P_SLOT_BYTES=524288
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
