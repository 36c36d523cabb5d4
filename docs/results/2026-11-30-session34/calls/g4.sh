# call 4 (session 34): the hand-over faults with two stop points (at once, 0.5 s after the split);
# both GPUs: tests/gpu/ncclabi_handover_faults.py, mode ranks (GPU 0) then mode threads (both). Tree: main c9e97c2 + the new test.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
TAIL=30 bash scratch/call.sh ho4 300 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 | grep -v '^##\|^$\|summary'; echo "ho4 done t=$SECONDS"
for f in /tmp/o/ho4/logs/ncclabi_handover_faults_ranks.log /tmp/o/ho4/logs/ncclabi_handover_faults_threads.log; do echo "== $f"; grep "yali-nccl" "$f" | grep -v "class)\|forwarding to\|YALI from\|finalized\|destroyed" | sed 's/0x[0-9a-f]*/P/g; s/pid [0-9]*/pid N/' | sort | uniq -c | sort -rn | head -16; grep -i "error\|Traceback\|signal" "$f" | grep -v yali-nccl | head -8; done
