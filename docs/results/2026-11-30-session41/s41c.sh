# call c (session 41, nvidia-h200-x2): main 1482dfa (32 rings per pair at 2 ranks, YALI_P2P_LL_BYTES auto), lib in sentinel.
# GPU 0: p2p cases single 2 (full), quick suite single 2. GPU 1: p2p cases single 3, 4, 8; quick suite single 4.
# Then both GPUs: p2p cases multi 2; yali-perf sendrecv eager 8 B-1 GB and -G 20 8 B-64 MB; slot 256 KB and LL 128 KB
# for comparison; dropinperf sendrecv and alltoallv (nccl-tests through libyali-nccl against plain NCCL).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/v; V=/tmp/o/v
( export CUDA_VISIBLE_DEVICES=0
  TAIL=2 bash scratch/call.sh cases2 100 STAGES=p2p P2P_SINGLE=2 "P2P_MULTI= " "P2P_ARGS= " P2P_TIMEOUT=90
  TAIL=2 bash scratch/call.sh quick2 170 STAGES=quick QUICK_RANKS=2 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAIL=2 bash scratch/call.sh cases348 150 STAGES=p2p P2P_SINGLE="3 4 8" "P2P_MULTI= " P2P_TIMEOUT=55
  TAIL=2 bash scratch/call.sh quick4 180 STAGES=quick QUICK_RANKS=4 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"; cat /tmp/gpu0.txt /tmp/gpu1.txt | grep -v "^$" | grep -v "^===="
TAIL=2 bash scratch/call.sh multi2 40 STAGES=p2p "P2P_SINGLE= " P2P_MULTI=2 P2P_TIMEOUT=35
P="timeout 40 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -d float"
$P -b 8 -e 1G -f 4 -n 20 -w 5 > $V/eager.txt 2>&1; echo "eager rc=$?"
$P -b 8 -e 64M -f 4 -n 20 -w 5 -G 20 > $V/graph.txt 2>&1; echo "graph rc=$?"
YALI_P2P_SLOT_BYTES=262144 $P -b 1M -e 1G -f 4 -n 10 -w 3 > $V/slot256k.txt 2>&1; echo "slot256k rc=$?"
YALI_P2P_LL_BYTES=131072 $P -b 32K -e 1M -f 2 -n 20 -w 5 -G 20 > $V/ll128k_graph.txt 2>&1; echo "ll128k rc=$?"
echo "perf t=$SECONDS"
[ $SECONDS -lt 430 ] && TAIL=2 bash scratch/call.sh dp $((575-SECONDS)) STAGES=dropinperf DROPINPERF_TESTS="sendrecv alltoallv" DROPINPERF_REPS=1 DROPINPERF_ARGS="-b 8 -e 256M -f 4 -n 20 -w 5"
tar czf $OUT/v.tgz -C /tmp/o v
for f in /tmp/o/*/stdout.txt; do grep -h "^## " $f; done | cut -c1-200
python3 - <<'PY'
import glob,os
for f in sorted(glob.glob('/tmp/o/v/*.txt')):
    d={}
    for l in open(f):
        m=l.split()
        if len(m)>12 and m[0] in('yali','nccl') and m[1].isdigit():
            d.setdefault(int(m[1]),{})[m[0]]=m[5]
            if m[8]!='0': print('WRONG', f, l.strip())
    print(os.path.basename(f)[:-4], ' '.join(f"{k}:{v.get('yali','-')}/{v.get('nccl','-')}" for k,v in sorted(d.items())))
PY
echo "t=$SECONDS s"
