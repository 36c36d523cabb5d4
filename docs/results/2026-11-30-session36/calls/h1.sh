# call 1 (session 36): the three docs/wip changes applied on main 21b0c1f (branch next/s36, 7cf071a).
# GPU 0: torch device_id + non-blocking at 2 and 4 ranks, then the GPU suite (quick, single) at 2 and 4;
# GPU 1 (port 29600): device_id blocking at 2, the hand-over faults (default form), then the stops at once
# (cases 2 4) three times; then both GPUs: ncclCommInitAll blocking/non-blocking/in a group + nccl-tests np2.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=6 bash scratch/call.sh nbdev 200 STAGES=dropin DROPIN_NP="2 4" DROPIN_DEVICE_ID=1 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=100 > /tmp/a.txt 2>&1; echo "nbdev done t=$SECONDS" >> /tmp/a.txt
 CUDA_VISIBLE_DEVICES=0 TAIL=8 bash scratch/call.sh q 200 STAGES=quick QUICK_RANKS="2 4" "QUICK_MULTI_RANKS= " > /tmp/q.txt 2>&1; echo "q done t=$SECONDS" >> /tmp/q.txt) &
(export PET_MASTER_PORT=29600; CUDA_VISIBLE_DEVICES=1 TAIL=6 bash scratch/call.sh dev2 100 STAGES=dropin DROPIN_NP=2 DROPIN_DEVICE_ID=1 DROPIN_TIMEOUT=90 > /tmp/b.txt 2>&1; echo "dev2 done t=$SECONDS" >> /tmp/b.txt
 CUDA_VISIBLE_DEVICES=1 TAIL=20 bash scratch/call.sh ho 110 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 > /tmp/c.txt 2>&1; echo "ho done t=$SECONDS" >> /tmp/c.txt
 for r in 1 2 3; do CUDA_VISIBLE_DEVICES=1 TAIL=20 bash scratch/call.sh ho0_$r 45 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 NCCLABI_HANDOVER_POINTS=0 "NCCLABI_HANDOVER_CASES=2 4" >> /tmp/c.txt 2>&1; echo "ho0_$r done t=$SECONDS" >> /tmp/c.txt; done) &
wait; echo "arms done t=$SECONDS s"
TAIL=20 bash scratch/call.sh initall 120 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_INIT_ALL=1 NCCLABI_RANK_LOCAL=0 > /tmp/d.txt 2>&1; echo "initall done t=$SECONDS" >> /tmp/d.txt
grep -h "dropin np\|ncclabi \|hand-over\|gpu suite\|call \|done t=" /tmp/a.txt /tmp/q.txt /tmp/b.txt /tmp/c.txt /tmp/d.txt | grep -v '^##\|^  \[' | cut -c1-260; echo "t=$SECONDS s"
grep -h "mixed\|init of the child failed" /tmp/o/ho0_*/logs/ncclabi_handover_faults_*.log | sed 's/0x[0-9a-f]*/P/; s/pid [0-9]*/pid N/' | sort | uniq -c | head -12
for f in /tmp/o/ho*/logs/ncclabi_handover_faults_*.log; do n=$(grep -c 'Process received signal\|corrupted\|double free' $f); [ "$n" != 0 ] && echo "== $f $n signals"; done
grep -h "background\|InitAll\|handed over" /tmp/o/initall/logs/ncclabi_init_all_*.log | sed 's/0x[0-9a-f]*/P/; s/pid [0-9]*/pid N/' | sort | uniq -c | head -16
