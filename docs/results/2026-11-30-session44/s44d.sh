# Session 44 call d (x2): the path 1943a73 rewrote (a group's hierarchical calls on several devices of
# one thread): nccl-tests -g 2 per process, 2 processes = 2 simulated nodes, -m 1 and -m 4; then
# nccl-tests at 3 ranks sharing a GPU, eager (GPU 0) and -G 1 (GPU 1), every binary, -d all -o all.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x build/tests/yali-gpu-tests ] || { TAIL=3 bash scratch/call.sh build 150 STAGES=build; echo "built t=$SECONDS s"; }
TAIL=2 bash scratch/call.sh ntb 120 STAGES=ncclabi "NCCLABI_TESTS= " NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0
mkdir -p /tmp/o/g2
W=/tmp/w_g2.sh; printf '#!/bin/sh\nr=$OMPI_COMM_WORLD_RANK\nexport NCCL_HOSTID=yali-rank-$r NCCL_TESTS_DEVICE=0 YALI_NODE_ID=node$r\nexec "$@"\n' > $W; chmod +x $W
L=$(python3 -c "import nvidia.nccl,os; print(os.path.join(nvidia.nccl.__path__[0],'lib'))")
for m in 1 4; do for t in all_reduce all_gather reduce_scatter; do lg=/tmp/o/g2/g2_m${m}_$t.log
timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD=$PWD/build/src/nccl_abi/libyali-nccl.so -x LD_LIBRARY_PATH=$L:${LD_LIBRARY_PATH:-} -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY=$PWD/build/src/libyali.so -x NCCL_NVLS_ENABLE=0 $W /tmp/nccl-tests/nccl-tests-2.19.6/build/${t}_perf -b 8 -e 4M -f 8 -g 2 -m $m -c 1 -n 5 -w 2 > $lg 2>&1
echo "g2 -m $m $t rc=$? hier calls: $(grep -c '\[hierarchical:' $lg) flat NCCL: $(grep -c 'class): NCCL' $lg) $(grep -m1 'Out of bounds' $lg)"; done; done | tee /tmp/o/g2/summary.txt
rm -f /tmp/[ab].txt
E="-d all -o all -b 64 -e 4M -f 256 -n 2 -w 1"; G="-d all -o all -b 64 -e 4M -f 256 -n 1 -w 1 -G 1"
N="NCCLABI_RANK_LOCAL=0 NCCLABI_GROUP_STREAMS=0"
(CUDA_VISIBLE_DEVICES=0 TAIL=14 bash scratch/call.sh e3 $((560-SECONDS)) STAGES=ncclabi NCCLABI_NP=3 NCCLABI_ARGS="$E" $N NCCLABI_TIMEOUT=60 >> /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=14 bash scratch/call.sh g3 $((560-SECONDS)) STAGES=ncclabi NCCLABI_NP=3 NCCLABI_ARGS="$G" $N NCCLABI_TIMEOUT=100 >> /tmp/b.txt 2>&1) &
wait; grep -h "ncclabi \|call " /tmp/a.txt /tmp/b.txt | grep -v "^##" | cut -c1-200
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
