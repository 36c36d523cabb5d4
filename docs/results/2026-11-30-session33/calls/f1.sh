# call 1 (session 33): the non-blocking wip (land/nonblocking = main 932ad56 + docs/wip/nonblocking):
# GPU 0: torch drop-in non-blocking at 2 and 4, then ncclabi (np 2 3, nodes 2x2, hier + set-up faults)
# GPU 1: GPU suite --quick single 2 and 4, blocking drop-in np 2, non-blocking np 2 with the register hook
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?"; tail -2 /tmp/ntb.log) &
wait; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=40 bash scratch/call.sh nb 200 STAGES=dropin DROPIN_NP="2 4" DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=90 > /tmp/a.txt 2>&1; echo "nb done t=$SECONDS" >> /tmp/a.txt
 CUDA_VISIBLE_DEVICES=0 TAIL=40 bash scratch/call.sh abi 260 STAGES=ncclabi NCCLABI_NP="2 3" NCCLABI_NODES=2 NCCLABI_NODES_NP=4 NCCLABI_HIER_FAULTS=1 NCCLABI_SETUP_FAULTS=1 > /tmp/c.txt 2>&1; echo "abi done t=$SECONDS" >> /tmp/c.txt) &
(CUDA_VISIBLE_DEVICES=1 TAIL=8 bash scratch/call.sh q 200 STAGES=quick QUICK_RANKS="2 4" "QUICK_MULTI_RANKS= " > /tmp/q.txt 2>&1; echo "q done t=$SECONDS" >> /tmp/q.txt
 CUDA_VISIBLE_DEVICES=1 TAIL=6 bash scratch/call.sh d2 100 STAGES=dropin DROPIN_NP=2 DROPIN_TIMEOUT=90 > /tmp/b.txt 2>&1; echo "d2 done t=$SECONDS" >> /tmp/b.txt
 CUDA_VISIBLE_DEVICES=1 TAIL=6 TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 bash scratch/call.sh nbh 100 STAGES=dropin DROPIN_NP=2 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=90 > /tmp/d.txt 2>&1; echo "nbh done t=$SECONDS" >> /tmp/d.txt) &
wait; grep -h "dropin np\|gpu suite\|ncclabi \|call \|done t=" /tmp/a.txt /tmp/c.txt /tmp/q.txt /tmp/b.txt /tmp/d.txt | grep -v '^##\|^  \[' ; echo "t=$SECONDS s"
