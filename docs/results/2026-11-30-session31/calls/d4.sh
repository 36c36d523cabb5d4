# call 4: nccl-tests through the drop-in (np 2, 3; simulated nodes -m 1/-m 4), -g 2 per process; then eager A/B 4K-256K
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=4 bash scratch/call.sh build 200 STAGES=build
rm -rf /tmp/nccl-tests
TAIL=36 bash scratch/call.sh n2 300 NCCL_TESTS_SRC=scratch/nt STAGES=ncclabi NCCLABI_NP="2 3" NCCLABI_NODES=2 NCCLABI_NODES_NP=4 NCCLABI_NODES_AGG="1 4" NCCLABI_RANK_LOCAL=0
grep -m2 "mpi.h found\|MPI include" /tmp/o/n2/logs/ncclabi_build.log 2>/dev/null || (cd /tmp/o/n2 && tar xzf logs.tar.gz 2>/dev/null; grep -rm2 "mpi.h found\|MPI include" /tmp/o/n2/)
W=/tmp/w_g2.sh; printf '#!/bin/sh\nr=$OMPI_COMM_WORLD_RANK\nexport NCCL_HOSTID=yali-rank-$r NCCL_TESTS_DEVICE=0 YALI_NODE_ID=node$r\nexec "$@"\n' > $W; chmod +x $W
L=$(python3 -c "import nvidia.nccl,os; print(os.path.join(nvidia.nccl.__path__[0],'lib'))")
for m in 1 4; do for t in all_reduce all_gather reduce_scatter; do mkdir -p /tmp/o/g2; lg=/tmp/o/g2/g2_m${m}_$t.log
timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD=$PWD/build/src/nccl_abi/libyali-nccl.so -x LD_LIBRARY_PATH=$L:${LD_LIBRARY_PATH:-} -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY=$PWD/build/src/libyali.so -x NCCL_NVLS_ENABLE=0 $W /tmp/nccl-tests/nccl-tests-2.19.6/build/${t}_perf -b 8 -e 4M -f 8 -g 2 -m $m -c 1 -n 5 -w 2 > $lg 2>&1
echo "g2 -m $m $t rc=$? wrong>0 lines: $(awk '$1 ~ /^[0-9]+$/ && NF >= 13 { if (($9 != "N/A" && $9 != 0) || ($NF != "N/A" && $NF != 0)) bad++ } END { print bad + 0 }' $lg) hier calls: $(grep -c '\[hierarchical:' $lg) flat NCCL: $(grep -c 'class): NCCL' $lg) $(grep -m1 'Out of bounds' $lg)"; done; done
tar czf $OUT/g2.tgz -C /tmp/o g2
d=/tmp/o/ab2; mkdir -p $d
OUT=$d AB_MODES="0" AB_REPS=3 AB_JOBS=14 AB_ARGS="-b 4K -e 256K -f 4 -d bfloat16 -n 2000 -w 50 --inplace 0" timeout 200 bash scripts/ab_trees.sh s31=. base=scratch/base-shared-src > $d/stdout.txt 2>&1; echo "ab rc=$?"; cat $d/stdout.txt; cp $d/ab_trees.tar.gz $OUT/ab2.tar.gz 2>/dev/null
echo "t=$SECONDS s"
