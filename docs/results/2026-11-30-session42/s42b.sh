# Session 42 call b (nvidia-h200-x2), main = next/s42 (lib=0764e1a2): does a deeper pipeline per team
# (smaller chunks) help point-to-point at 2-32 MB, where a call of 8 MB gives each team one 128 KB chunk?
# YALI_P2P_SLOT_BYTES caps the chunk; swept 16K..128K, yali-perf sendrecv graphs and eager, 2 GPUs.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/v; V=/tmp/o/v
P="timeout 60 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -d float -b 256K -e 128M -f 2 -n 20 -w 5"
for s in 131072 65536 32768 16384; do
  YALI_P2P_SLOT_BYTES=$s $P -G 20 > $V/graph_slot$s.txt 2>&1; echo "graph slot $s rc=$?"
  YALI_P2P_SLOT_BYTES=$s $P > $V/eager_slot$s.txt 2>&1; echo "eager slot $s rc=$?"
done
for ll in 524288 1048576; do
  YALI_P2P_LL_BYTES=$ll timeout 60 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -d float -b 128K -e 1M -f 2 -n 20 -w 5 -G 20 > $V/graph_ll$ll.txt 2>&1; echo "graph ll $ll rc=$?"
done
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .
python3 - <<'PY'
import glob,os
for f in sorted(glob.glob('/tmp/o/v/*.txt')):
    d={}
    for l in open(f):
        m=l.split()
        if len(m)>12 and m[0] in('yali','nccl') and m[1].isdigit():
            d.setdefault(int(m[1]),{})[m[0]]=m[5]
            if m[8]!='0': print('WRONG', f, l.strip())
    print(os.path.basename(f)[:-4], ' '.join(f"{k>>10}K:{v.get('yali','-')}/{v.get('nccl','-')}" for k,v in sorted(d.items())))
PY
echo "t=$SECONDS s"
