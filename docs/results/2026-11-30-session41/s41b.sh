# call b (session 41, nvidia-h200-x2): YALI_P2P_LL_BYTES (LL route up to a set size, 4 KB chunks) and up to 32 rings
# per pair (uncommitted tree, lib in sentinel). Correctness first (ranks sharing one GPU each arm), then sweeps on 2 GPUs.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/v; V=/tmp/o/v
( export CUDA_VISIBLE_DEVICES=0
  TAIL=2 bash scratch/call.sh cases2 100 STAGES=p2p P2P_SINGLE=2 "P2P_MULTI= " "P2P_ARGS= " P2P_TIMEOUT=90
  TAIL=2 bash scratch/call.sh ll2 60 STAGES=p2p P2P_SINGLE=2 "P2P_MULTI= " P2P_TIMEOUT=50 YALI_P2P_LL_BYTES=1048576 ) > /tmp/gpu0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAIL=2 bash scratch/call.sh ll48 120 STAGES=p2p P2P_SINGLE="4 8" "P2P_MULTI= " P2P_TIMEOUT=55 YALI_P2P_LL_BYTES=262144 ) > /tmp/gpu1.txt 2>&1 &
wait; echo "arms t=$SECONDS s"; cat /tmp/gpu0.txt /tmp/gpu1.txt | grep -v "^$" | grep -v "^===="
TAIL=2 bash scratch/call.sh multi32 40 STAGES=p2p "P2P_SINGLE= " P2P_MULTI=2 P2P_TIMEOUT=35 YALI_P2P_CHANNELS=32 YALI_P2P_LL_BYTES=262144
P="timeout 40 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -d float"
for ll in 65536 262144 1048576; do
  YALI_P2P_LL_BYTES=$ll $P -b 4K -e 1M -f 2 -n 20 -w 5 -G 20 > $V/llg_$ll.txt 2>&1; echo "llg $ll rc=$?"
  YALI_P2P_LL_BYTES=$ll $P -b 4K -e 1M -f 2 -n 20 -w 5 > $V/lle_$ll.txt 2>&1; echo "lle $ll rc=$?"
done; echo "ll t=$SECONDS"
for ch in 16 32; do for sl in 131072 524288; do
  YALI_P2P_CHANNELS=$ch YALI_P2P_SLOT_BYTES=$sl $P -b 1M -e 1G -f 4 -n 10 -w 3 > $V/bw_${ch}_$sl.txt 2>&1; echo "bw $ch $sl rc=$?"
  [ $sl = 131072 ] && { YALI_P2P_CHANNELS=$ch YALI_P2P_SLOT_BYTES=$sl $P -b 1M -e 64M -f 4 -n 20 -w 5 -G 20 > $V/bwg_${ch}_$sl.txt 2>&1; echo "bwg $ch $sl rc=$?"; }
done; done; echo "bw t=$SECONDS"
tar czf $OUT/v.tgz -C /tmp/o v
for f in /tmp/o/*/stdout.txt; do grep -h "^## " $f; done | cut -c1-200
python3 - <<'PY'
import glob,re,os
def rows(f):
    d={}
    for l in open(f):
        m=l.split()
        if len(m)>12 and m[0] in('yali','nccl') and m[1].isdigit():
            d.setdefault(int(m[1]),{})[m[0]]=m[5]
            if m[8]!='0' or m[12]!='0': print('WRONG', f, l.strip())
    return d
for f in sorted(glob.glob('/tmp/o/v/*.txt')):
    d=rows(f); n=os.path.basename(f)[:-4]
    print(n, ' '.join(f"{k//1024}K:{v.get('yali','-')}/{v.get('nccl','-')}" for k,v in sorted(d.items())))
PY
echo "t=$SECONDS s"
