# call d (session 37): next/s37 = main + docs/wip/group-join-alloc + the interleaved exchanges. GPU 0: GPU suite quick,
# single, 2 and 4 ranks sharing it. GPU 1: group_streams (wip check, with and without the join), then quick at 3 ranks.
# Then both GPUs, one process per GPU: the data-moving collectives and ReduceScatter 16 MB..1 GB, YALI and NCCL.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=8 bash scratch/call.sh q 230 STAGES=quick QUICK_RANKS="2 4" "QUICK_MULTI_RANKS= " > /tmp/q.txt 2>&1; echo "q done t=$SECONDS" >> /tmp/q.txt) &
(export CUDA_VISIBLE_DEVICES=1; mkdir -p /tmp/o/gs; T=build/tests/yali-gpu-tests
 for mode in single multi; do for nj in 0 1; do
   YALI_TEST_NO_GROUP_JOIN=$nj timeout 60 $T --share-gpus --ranks 2 --mode $mode --quick --filter group_streams > /tmp/o/gs/${mode}_nojoin$nj.log 2>&1
   echo "group_streams $mode 2 ranks, YALI_TEST_NO_GROUP_JOIN=$nj: rc=$? $(tail -1 /tmp/o/gs/${mode}_nojoin$nj.log)"
 done; done > /tmp/gs.txt 2>&1
 TAIL=8 bash scratch/call.sh q3 170 STAGES=quick QUICK_RANKS=3 "QUICK_MULTI_RANKS= " > /tmp/q3.txt 2>&1; echo "q3 done t=$SECONDS" >> /tmp/q3.txt) &
wait; echo "arms done t=$SECONDS s"
cat /tmp/gs.txt; grep -h "gpu suite\|call \|done t=" /tmp/q.txt /tmp/q3.txt | grep -v '^##' | cut -c1-200
B=build/bench/yali-perf; L=/tmp/o/perf; mkdir -p $L
C="-C allgather,broadcast,reducescatter,alltoall,scatter,gather,reduce -b 256K -e 1G -f 4 -d float -n 20 -w 5"
run() { local name=$1; shift; timeout 150 env "$@" > $L/$name.txt 2>&1; echo "$name rc=$? t=$SECONDS"; }
left=$((560 - SECONDS)); [ $left -gt 80 ] && run r0 bash scripts/launch_ranks.sh 2 $B -g 1 $C --inplace 2 -R 0 -J $L/r0.json
left=$((560 - SECONDS)); [ $left -gt 40 ] && run r1 bash scripts/launch_ranks.sh 2 $B -g 1 $C --inplace 0 -R 1 --impl yali -J $L/r1.json
left=$((560 - SECONDS)); [ $left -gt 40 ] && run b0 bash scripts/launch_ranks.sh 2 $B -g 1 ${C/-d float/-d bfloat16} --inplace 0 -R 0 -J $L/b0.json
left=$((560 - SECONDS)); [ $left -gt 40 ] && run g0 bash scripts/launch_ranks.sh 2 $B -g 1 $C --inplace 0 -R 0 -G 20 -J $L/g0.json
tar czf $OUT/perf.tgz -C /tmp/o perf gs
for f in r0 r1 b0 g0; do echo "== $f"; grep -E "^# [a-z]+ \(|^ +(yali|nccl) +(1048576|16777216|268435456|1073741824) " $L/$f.txt | cut -c1-60,98-125,150-195; done
echo "t=$SECONDS s"
