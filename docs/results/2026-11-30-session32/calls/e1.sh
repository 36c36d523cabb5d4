# call 1 (session 32): build; GPU 0: drop-in checks of setup-late + group-refusal; GPU 1: quick 2, nccl-tests np4 -d all -o all
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?"; tail -2 /tmp/ntb.log) &
wait; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=45 bash scratch/call.sh a 400 STAGES=ncclabi,dropin NCCLABI_NP="2 3" NCCLABI_NODES=2 NCCLABI_NODES_NP=4 NCCLABI_NODES_AGG="1 4" NCCLABI_HIER_FAULTS=1 NCCLABI_SETUP_FAULTS=1 DROPIN_NP=2 > /tmp/a.txt 2>&1; echo "a done t=$SECONDS" >> /tmp/a.txt) &
(CUDA_VISIBLE_DEVICES=1 TAIL=8 bash scratch/call.sh q 150 STAGES=quick QUICK_RANKS=2 "QUICK_MULTI_RANKS= " > /tmp/q.txt 2>&1; echo "q done t=$SECONDS" >> /tmp/q.txt
 CUDA_VISIBLE_DEVICES=1 TAIL=16 bash scratch/call.sh n4 ${N4_SECS:-330} STAGES=ncclabi NCCLABI_NP=4 NCCLABI_ARGS="-d all -o all -b 64 -e 4M -f 256 -n 2 -w 1" NCCLABI_RANK_LOCAL=0 NCCLABI_TIMEOUT=100 > /tmp/b.txt 2>&1; echo "n4 done t=$SECONDS" >> /tmp/b.txt) &
wait; cat /tmp/a.txt; echo ====; cat /tmp/q.txt; echo ====; cat /tmp/b.txt; echo "t=$SECONDS s"
