# Session 44 call g (x2): the GPU suite --quick at 2 (GPU 0) and 4 (GPU 1) ranks sharing a GPU on the
# final library (selector.cc's comment changed after call f).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=3 bash scratch/call.sh build 100 STAGES=build; echo "built t=$SECONDS s"
rm -f /tmp/[ab].txt
(CUDA_VISIBLE_DEVICES=0 TAIL=6 QUICK_TIMEOUT=120 bash scratch/call.sh q2 125 STAGES=quick QUICK_RANKS=2 "QUICK_MULTI_RANKS= " >> /tmp/a.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 TAIL=6 QUICK_TIMEOUT=125 bash scratch/call.sh q4 130 STAGES=quick QUICK_RANKS=4 "QUICK_MULTI_RANKS= " >> /tmp/b.txt 2>&1) &
wait; grep -h "gpu suite\|call " /tmp/a.txt /tmp/b.txt | grep -v "^##" | cut -c1-200
rm -f $OUT/*.tgz; tar czf $OUT/all.tgz -C /tmp/o .; echo "t=$SECONDS s"
