# call d (session 41, nvidia-h200-x2): main 1482dfa again (same lib as call c). GPU 0: torch under yali-run at 2 ranks
# (DDP, FSDP2, TP/compile, all_to_all_single, graph step). GPU 1: nccl-tests' send/recv binaries through libyali-nccl at
# 4 ranks, -d all, -G 1. Then 2 GPUs: yali-perf sendrecv eager 32 KB-1 MB three times (call c's 128 KB outlier), graphs
# 32 KB-1 MB with the LL bound at its default (256 KB at 2 ranks) and at 128 KB.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/v; V=/tmp/o/v
( export CUDA_VISIBLE_DEVICES=0
  TAIL=3 bash scratch/call.sh dropin2 150 STAGES=dropin DROPIN_NP=2 DROPIN_TIMEOUT=100 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1 NCCL_TESTS_DEVICE=0
  TAIL=3 bash scratch/call.sh g4 150 STAGES=ncclabi NCCLABI_NP=4 NCCLABI_TESTS="sendrecv alltoallv hypercube" NCCLABI_ARGS="-d all -b 64 -e 4M -f 256 -n 1 -w 1 -G 1" NCCLABI_TIMEOUT=40 NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"; cat /tmp/gpu0.txt /tmp/gpu1.txt | grep -v "^$" | grep -v "^===="
P="timeout 40 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -d float"
for r in 1 2 3; do $P -b 32K -e 1M -f 2 -n 20 -w 5 > $V/eager$r.txt 2>&1; echo "eager$r rc=$?"; done
$P -b 32K -e 1M -f 2 -n 20 -w 5 -G 20 > $V/graph_auto.txt 2>&1; echo "graph auto rc=$?"
YALI_P2P_LL_BYTES=131072 $P -b 32K -e 1M -f 2 -n 20 -w 5 -G 20 > $V/graph_ll128k.txt 2>&1; echo "graph ll128k rc=$?"
$P -b 32K -e 1M -f 2 -n 20 -w 5 -G 20 > $V/graph_auto2.txt 2>&1; echo "graph auto2 rc=$?"
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
    print(os.path.basename(f)[:-4], ' '.join(f"{k//1024}K:{v.get('yali','-')}/{v.get('nccl','-')}" for k,v in sorted(d.items())))
PY
echo "t=$SECONDS s"
