# call 3: the drop-in (main + the five docs/wip sets): ncclabi with set-up faults, -g 2 per process, dropin np2; kill test alltoallv at 3 on GPU 1 beside it
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || TAIL=4 bash scratch/call.sh build 200 STAGES=build
(CUDA_VISIBLE_DEVICES=1 TAIL=30 bash scratch/call.sh k3v 100 STAGES=trust "TRUST_SINGLE_RANKS= " "TRUST_MULTI_RANKS= " KILL_RANKS=3 KILL_COLLS=alltoallv KILL_RANK0_COLLS= KILL_TIMEOUT=90 > /tmp/o/k3v.out 2>&1) &
TAIL=45 bash scratch/call.sh n1 400 STAGES=ncclabi NCCLABI_NP="2 3" NCCLABI_NODES=2 NCCLABI_NODES_NP=4 NCCLABI_NODES_AGG="1 4" NCCLABI_HIER_FAULTS=1 NCCLABI_SETUP_FAULTS=1
wait; cat /tmp/o/k3v.out
# one thread driving 2 GPUs per process, 2 processes = 2 simulated nodes (hier-legs)
W=/tmp/w_g2.sh; printf '#!/bin/sh\nr=$OMPI_COMM_WORLD_RANK\nexport NCCL_HOSTID=yali-rank-$r NCCL_TESTS_DEVICE=0 YALI_NODE_ID=node$r\nexec "$@"\n' > $W; chmod +x $W
L=$(python3 -c "import nvidia.nccl,os; print(os.path.join(nvidia.nccl.__path__[0],'lib'))")
for m in 1 4; do for t in all_reduce all_gather reduce_scatter; do mkdir -p /tmp/o/g2; lg=/tmp/o/g2/g2_m${m}_$t.log
timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD=$PWD/build/src/nccl_abi/libyali-nccl.so -x LD_LIBRARY_PATH=$L:${LD_LIBRARY_PATH:-} -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY=$PWD/build/src/libyali.so -x NCCL_NVLS_ENABLE=0 $W /tmp/nccl-tests/nccl-tests-2.19.6/build/${t}_perf -b 8 -e 4M -f 8 -g 2 -m $m -c 1 -n 5 -w 2 > $lg 2>&1
echo "g2 -m $m $t rc=$? wrong>0 lines: $(awk '$1 ~ /^[0-9]+$/ && NF >= 13 { if (($9 != "N/A" && $9 != 0) || ($NF != "N/A" && $NF != 0)) bad++ } END { print bad + 0 }' $lg) hier calls: $(grep -c '\[hierarchical:' $lg) flat NCCL: $(grep -c 'class): NCCL' $lg) $(grep -m1 'Out of bounds' $lg)"; done; done
tar czf $OUT/g2.tgz -C /tmp/o g2
TAIL=8 bash scratch/call.sh d1 150 STAGES=dropin DROPIN_NP=2
echo "t=$SECONDS s"
