# call 6 (session 33): a non-blocking parent's splits on YALI, the reworked hand-over (after two reviews): GPU 0: torch device_id + non-blocking at 2 and 4;
# GPU 1 (port 29600): device_id blocking at 2 (regression), then nccl-tests through the shim at 2 ranks (11 binaries)
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=6 bash scratch/call.sh nbdev 230 STAGES=dropin DROPIN_NP="2 4" DROPIN_DEVICE_ID=1 DROPIN_NONBLOCKING=1 DROPIN_TIMEOUT=100 > /tmp/a.txt 2>&1; echo "nbdev done t=$SECONDS" >> /tmp/a.txt) &
(export PET_MASTER_PORT=29600; CUDA_VISIBLE_DEVICES=1 TAIL=6 bash scratch/call.sh dev2 110 STAGES=dropin DROPIN_NP=2 DROPIN_DEVICE_ID=1 DROPIN_TIMEOUT=100 > /tmp/b.txt 2>&1; echo "dev2 done t=$SECONDS" >> /tmp/b.txt
 CUDA_VISIBLE_DEVICES=1 TAIL=16 bash scratch/call.sh abi2 120 STAGES=ncclabi NCCLABI_NP=2 NCCLABI_RANK_LOCAL=0 > /tmp/c.txt 2>&1; echo "abi2 done t=$SECONDS" >> /tmp/c.txt) &
wait; grep -h "dropin np\|ncclabi np\|call \|done t=" /tmp/a.txt /tmp/b.txt /tmp/c.txt | grep -v '^##' ; echo "t=$SECONDS s"
for f in /tmp/o/nbdev/logs/dropin_yali*.log; do echo "== $f"; grep "yali-nccl" "$f" | grep -v "class)\|forwarding to\|YALI from\|finalized\|destroyed" | sed 's/0x[0-9a-f]*/P/; s/pid [0-9]*/pid N/' | sort | uniq -c | sort -rn | head -8; done
