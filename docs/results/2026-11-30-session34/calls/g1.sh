# call 1 (session 34): docs/wip/handover + docs/wip/initall-nonblocking applied on main 5398b8a (branch next/s34).
# GPU 0: torch device_id + non-blocking at 2 and 4 ranks, then the GPU suite (quick, single) at 2 and 4;
# GPU 1 (port 29600): device_id blocking at 2, then non-blocking (no device_id) at 2;
# then both GPUs: ncclCommInitAll blocking/non-blocking + nccl-tests np2 through the shim.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=6 bash scratch/call.sh nbdev 230 STAGES=dropin DROPIN_NP="2 4" DROPIN_DEVICE_ID=1 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=100 > /tmp/a.txt 2>&1; echo "nbdev done t=$SECONDS" >> /tmp/a.txt
 CUDA_VISIBLE_DEVICES=0 TAIL=8 bash scratch/call.sh q 220 STAGES=quick QUICK_RANKS="2 4" "QUICK_MULTI_RANKS= " > /tmp/q.txt 2>&1; echo "q done t=$SECONDS" >> /tmp/q.txt) &
(export PET_MASTER_PORT=29600; CUDA_VISIBLE_DEVICES=1 TAIL=6 bash scratch/call.sh dev2 110 STAGES=dropin DROPIN_NP=2 DROPIN_DEVICE_ID=1 DROPIN_TIMEOUT=100 > /tmp/b.txt 2>&1; echo "dev2 done t=$SECONDS" >> /tmp/b.txt
 CUDA_VISIBLE_DEVICES=1 TAIL=6 bash scratch/call.sh nb2 110 STAGES=dropin DROPIN_NP=2 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=100 > /tmp/c.txt 2>&1; echo "nb2 done t=$SECONDS" >> /tmp/c.txt) &
wait; echo "arms done t=$SECONDS s"
TAIL=20 bash scratch/call.sh initall 150 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_INIT_ALL=1 NCCLABI_RANK_LOCAL=0 > /tmp/d.txt 2>&1; echo "initall done t=$SECONDS" >> /tmp/d.txt
grep -h "dropin np\|ncclabi \|gpu suite\|call \|done t=" /tmp/a.txt /tmp/q.txt /tmp/b.txt /tmp/c.txt /tmp/d.txt | grep -v '^##\|^  \[' ; echo "t=$SECONDS s"
for f in /tmp/o/nbdev/logs/dropin_yali*.log; do echo "== $f"; grep "yali-nccl" "$f" | grep -v "class)\|forwarding to\|YALI from\|finalized\|destroyed" | sed 's/0x[0-9a-f]*/P/; s/pid [0-9]*/pid N/' | sort | uniq -c | sort -rn | head -8; done
grep -h "background\|InitAll" /tmp/o/initall/logs/ncclabi_init_all_blocking*.log | sed 's/0x[0-9a-f]*/P/; s/pid [0-9]*/pid N/' | sort | uniq -c | head -12
