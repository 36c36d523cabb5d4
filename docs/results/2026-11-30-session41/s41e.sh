# call e (session 41, nvidia-h200-x2): experiment branch exp/llnofence (NOT for landing): YALI_EXP_P2P=1 makes the LL
# receiver credit with a plain volatile store and skip zeroing the packets. How much of the small-send time is the fence?
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=2 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"
mkdir -p /tmp/o/x; V=/tmp/o/x
P="timeout 40 bash scripts/launch_ranks.sh 2 build/bench/yali-perf -g 1 -C sendrecv -d float"
for r in 1 2; do for e in 0 1; do
  YALI_EXP_P2P=$e $P -b 8 -e 256K -f 4 -n 40 -w 5 -G 20 > $V/g_e${e}_r$r.txt 2>&1; echo "g e=$e r=$r rc=$?"
done; done
for e in 0 1; do YALI_EXP_P2P=$e $P -b 8 -e 256K -f 4 -n 40 -w 5 > $V/e_e${e}.txt 2>&1; echo "e e=$e rc=$?"; done
tar czf $OUT/x.tgz -C /tmp/o x
python3 - <<'PY'
import glob,os
for f in sorted(glob.glob('/tmp/o/x/*.txt')):
    d={}
    for l in open(f):
        m=l.split()
        if len(m)>12 and m[0] in('yali','nccl') and m[1].isdigit():
            d.setdefault(int(m[1]),{})[m[0]]=m[5]
            if m[8]!='0': print('WRONG', f, l.strip())
    print(os.path.basename(f)[:-4], ' '.join(f"{k}:{v.get('yali','-')}/{v.get('nccl','-')}" for k,v in sorted(d.items())))
PY
echo "t=$SECONDS s"
