# Proposed first call of session 42 (nvidia-h200-x2), on branch next/s42 (main + relaxed p2p credits with the barrier
# fix + group launch order by comm key), lib=eb489e37 at its creation. Check out next/s42 in /work/main before the run.
# GPU 0: p2p cases single 2 (full), 3; quick suite single 2 (has coll_multi_comm's new group-order part); torch at 2.
# GPU 1: p2p cases single 4, 8; quick suite single 4. Then 2 GPUs: p2p multi 2; coll_multi_comm + coll_groups multi 2;
# yali-perf sendrecv -G 20 and eager; dropinperf sendrecv/alltoallv. Expect about 8-9 minutes.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/v; V=/tmp/o/v
( export CUDA_VISIBLE_DEVICES=0
  TAIL=2 bash scratch/call.sh cases23 120 STAGES=p2p P2P_SINGLE="2 3" "P2P_MULTI= " "P2P_ARGS= " P2P_TIMEOUT=55
  TAIL=2 bash scratch/call.sh quick2 170 STAGES=quick QUICK_RANKS=2
  TAIL=3 bash scratch/call.sh dropin2 120 STAGES=dropin DROPIN_NP=2 DROPIN_TIMEOUT=100 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAIL=2 bash scratch/call.sh cases48 120 STAGES=p2p P2P_SINGLE="4 8" "P2P_MULTI= " P2P_TIMEOUT=55
  TAIL=2 bash scratch/call.sh quick4 180 STAGES=quick QUICK_RANKS=4 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"; cat /tmp/gpu0.txt /tmp/gpu1.txt | grep -v "^$" | grep -v "^===="
TAIL=2 bash scratch/call.sh multi2 40 STAGES=p2p "P2P_SINGLE= " P2P_MULTI=2 P2P_TIMEOUT=35
for c in coll_multi_comm coll_groups; do timeout 90 build/tests/yali-gpu-tests --ranks 2 --mode multi --filter $c > $V/multi_$c.log 2>&1; echo "$c multi 2 (2 GPUs) rc=$? $(tail -1 $V/multi_$c.log)"; done
# Session 41's call f: after stages that timed out, the GPUs stayed busy for a while (its perf runs came out 2.5x
# slow for both libraries). Before timing anything, wait (at most 60 s) until no process holds a GPU context.
for i in $(seq 60); do [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && break; sleep 1; done
echo "GPUs idle after ${i} s: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null | paste -s)"
P="timeout 40 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -d float"
$P -b 8 -e 64M -f 4 -n 20 -w 5 -G 20 > $V/graph.txt 2>&1; echo "graph rc=$?"
$P -b 8 -e 1G -f 4 -n 20 -w 5 > $V/eager.txt 2>&1; echo "eager rc=$?"
[ $SECONDS -lt 440 ] && TAIL=2 bash scratch/call.sh dp $((580-SECONDS)) STAGES=dropinperf DROPINPERF_TESTS="sendrecv alltoallv" DROPINPERF_REPS=1 DROPINPERF_ARGS="-b 8 -e 256M -f 4 -n 20 -w 5"
# Session 41's guess: NCCL's graphs are faster than its eager calls from 8 MB because it registers the captured
# buffers (NCCL_GRAPH_REGISTER, on by default). Plain NCCL, -G 20, with it on and off:
nl=$(python3 -c "import nvidia.nccl,os; print(os.path.join(nvidia.nccl.__path__[0],'lib'))" 2>/dev/null)
for gr in 1 0; do timeout 40 mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH="$nl:${LD_LIBRARY_PATH:-}" -x NCCL_NVLS_ENABLE=0 \
  -x NCCL_GRAPH_REGISTER=$gr /tmp/nccl-tests/nccl-tests-2.19.6/build/sendrecv_perf -g 1 -c 1 -b 2M -e 32M -f 4 -n 20 -w 5 -G 20 \
  > $V/nccl_graph_register$gr.log 2>&1; echo "NCCL_GRAPH_REGISTER=$gr rc=$?"; grep -E "^ +[0-9]+ " $V/nccl_graph_register$gr.log | awk '{print $1, $6}' | paste -s; done
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .
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
