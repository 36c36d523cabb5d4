# call b (session 38): the 1 GB gap of ReduceScatter and AlltoAll on 2 GPUs. Build (incremental when warm); YALI's
# slot size and block count varied by tuning file (scratch/tune) and YALI_STAGING_BYTES / YALI_MAX_CTAS, 256 MB and
# 1 GB, fp32, plain, one process per GPU; NCCL in the base run; then one-pass ncu counters of rank 0's kernel
# (YALI's exchange kernels and NCCL's) at 1 GB.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=3 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
B=build/bench/yali-perf; L=/tmp/o/perf; mkdir -p $L
C="-C reducescatter,alltoall,allgather -b 256M -e 1G -f 4 -d float -n 20 -w 5 --inplace 0"
run() { local name=$1; shift; timeout 100 env "$@" > $L/$name.txt 2>&1; echo "$name rc=$? t=$SECONDS"; }
run base bash scripts/launch_ranks.sh 2 $B -g 1 $C -R 0 -J $L/base.json
T=$PWD/scratch/tune
run s64k YALI_TUNING_FILE=$T/slot64k.txt bash scripts/launch_ranks.sh 2 $B -g 1 $C --impl yali
run s256k YALI_TUNING_FILE=$T/slot256k.txt YALI_STAGING_BYTES=8388608 bash scripts/launch_ranks.sh 2 $B -g 1 $C --impl yali
run s512k YALI_TUNING_FILE=$T/slot512k.txt YALI_STAGING_BYTES=16777216 bash scripts/launch_ranks.sh 2 $B -g 1 $C --impl yali
run c64 YALI_MAX_CTAS=64 YALI_STAGING_BYTES=8388608 bash scripts/launch_ranks.sh 2 $B -g 1 $C --impl yali
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
prof() { local name=$1 coll=$2 impl=$3 kern=$4
  ( export YALI_TIMEOUT_MS=20000 YALI_PERF_JOBID="ncu-$$-$name"
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 timeout 90 ncu --clock-control none -k regex:"$kern" \
      --launch-skip 4 --launch-count 1 --metrics $M $B -g 1 -C $coll -b 1G -e 1G -d float -n 10 -w 3 -c 0 --impl $impl > $L/ncu_$name.txt 2>&1 &
    RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 timeout 90 $B -g 1 -C $coll -b 1G -e 1G -d float -n 10 -w 3 -c 0 --impl $impl > $L/ncu_${name}_peer.txt 2>&1
    wait )
  echo "ncu $name: $(grep -E '__|Kernel|ncclDev' $L/ncu_$name.txt | grep -v '==' | awk '{print $1"="$(NF-1)$(NF)}' | tr '\n' ' ' | cut -c1-300) t=$SECONDS"; }
prof rs_yali reducescatter yali exchange
prof a2a_yali alltoall yali exchange
prof ag_yali allgather yali exchange
prof rs_nccl reducescatter nccl ncclDev
prof a2a_nccl alltoall nccl ncclDev
tar czf $OUT/perf.tgz -C /tmp/o perf
for f in base s64k s256k s512k c64; do echo "== $f"; grep -E "^# [a-z]+ \(|^ +(yali|nccl) +(268435456|1073741824) " $L/$f.txt | cut -c1-60,98-125,150-195; done
echo "t=$SECONDS s"
