# call 3 (session 34): g2 again after fixing the test (its AllReduce group ended on another thread than it began):
# both GPUs: tests/gpu/ncclabi_handover_faults.py, mode ranks twice (timing decides where the stop lands), mode threads.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
for n in ho3a ho3b; do TAIL=20 bash scratch/call.sh $n 260 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 | grep -v '^##\|^$\|summary'; echo "$n done t=$SECONDS"; done
for f in /tmp/o/ho3a/logs/ncclabi_handover_faults_ranks.log /tmp/o/ho3a/logs/ncclabi_handover_faults_threads.log; do echo "== $f"; grep "yali-nccl" "$f" | grep -v "class)\|forwarding to\|YALI from\|finalized\|destroyed" | sed 's/0x[0-9a-f]*/P/g; s/pid [0-9]*/pid N/' | sort | uniq -c | sort -rn | head -16; grep -i "error\|Traceback\|signal" "$f" | grep -v yali-nccl | head -8; done
