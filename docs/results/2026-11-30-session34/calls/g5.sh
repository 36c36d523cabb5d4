# call 5 (session 34): the hand-over faults again: the peer of a rank that stops its parent at once may stay in progress (as NCCL alone: mode plain, new);
# both GPUs: tests/gpu/ncclabi_handover_faults.py, modes ranks, threads, plain. Tree: main c9e97c2 + the new test.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
TAIL=45 bash scratch/call.sh ho5 420 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 | grep -v '^##\|^$\|summary'; echo "ho5 done t=$SECONDS"
for f in /tmp/o/ho5/logs/ncclabi_handover_faults_*.log; do echo "== $f"; grep "yali-nccl" "$f" | grep -v "class)\|forwarding to\|YALI from\|finalized\|destroyed" | sed 's/0x[0-9a-f]*/P/g; s/pid [0-9]*/pid N/' | sort | uniq -c | sort -rn | head -16; grep -i "error\|Traceback\|signal" "$f" | grep -v yali-nccl | head -8; done
