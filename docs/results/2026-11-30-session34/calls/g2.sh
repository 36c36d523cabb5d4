# call 2 (session 34): aborts and revokes of a non-blocking parent during its child's hand-over on the real NCCL
# (tests/gpu/ncclabi_handover_faults.py, new). Tree: main c9e97c2 + the new test and its gpu_check option.
# GPU 0: mode ranks (2 ranks sharing it); GPU 1 (port 29600): blocking torch drop-in at 4 ranks (regression);
# then both GPUs: mode ranks again and mode threads (one process, 2 GPUs).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TAIL=4 bash scratch/call.sh build 300 STAGES=build; echo "built t=$SECONDS s"
(CUDA_VISIBLE_DEVICES=0 TAIL=20 bash scratch/call.sh ho0 260 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 > /tmp/a.txt 2>&1; echo "ho0 done t=$SECONDS" >> /tmp/a.txt) &
(export PET_MASTER_PORT=29600; CUDA_VISIBLE_DEVICES=1 TAIL=6 bash scratch/call.sh d4 150 STAGES=dropin DROPIN_NP=4 DROPIN_TIMEOUT=120 > /tmp/b.txt 2>&1; echo "d4 done t=$SECONDS" >> /tmp/b.txt) &
wait; echo "arms done t=$SECONDS s"
TAIL=20 bash scratch/call.sh ho2 260 STAGES=ncclabi "NCCLABI_NP= " NCCLABI_RANK_LOCAL=0 NCCLABI_HANDOVER_FAULTS=1 > /tmp/c.txt 2>&1; echo "ho2 done t=$SECONDS" >> /tmp/c.txt
cat /tmp/a.txt; grep -h "dropin np\|call \|done t=" /tmp/b.txt | grep -v '^##'; cat /tmp/c.txt; echo "t=$SECONDS s"
for f in /tmp/o/ho0/logs/ncclabi_handover_faults_ranks.log /tmp/o/ho2/logs/ncclabi_handover_faults_threads.log; do echo "== $f"; grep "yali-nccl" "$f" | grep -v "class)\|forwarding to\|YALI from\|finalized\|destroyed" | sed 's/0x[0-9a-f]*/P/g; s/pid [0-9]*/pid N/' | sort | uniq -c | sort -rn | head -14; grep -i "error\|Traceback" "$f" | grep -v yali-nccl | head -8; done
