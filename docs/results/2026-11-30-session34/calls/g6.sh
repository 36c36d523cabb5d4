# call 6 (session 34): the hand-over faults in the form to land (stops 0.5 s after the split: ranks and threads),
# NCCL alone for cases 3 and 4 at once (mode plain), then the shim with the stops at once, cases 2-4, three times
# (how often g5's crash, rank 0 after case 3 at once, comes back). Tree: main c9e97c2 + the new test.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
TAIL=40 bash scratch/call.sh ho6 200 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 NCCLABI_HANDOVER_PLAIN=1 | grep -v '^##\|^$\|summary'; echo "ho6 done t=$SECONDS"
for r in 1 2 3; do TAIL=20 bash scratch/call.sh ho6once$r 80 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 NCCLABI_HANDOVER_POINTS=0 "NCCLABI_HANDOVER_CASES=2 3 4" | grep "hand-over faults\|case [0-9]" | grep -v '^##'; echo "ho6once$r done t=$SECONDS"; done
for f in /tmp/o/ho6*/logs/ncclabi_handover_faults_*.log; do echo "== $f $(grep -c 'Process received signal' $f) signals"; grep -A3 "Signal:" "$f" | head -4; done
