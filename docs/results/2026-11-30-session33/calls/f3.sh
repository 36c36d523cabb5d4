# call 3 (session 33): the drop-in's speed against NCCL over NVLink, 2 H200s, one rank per GPU (dropinperf),
# eager and graphs (-G 20), 2 repetitions alternating; then NCCL's device API (-D 1, -D 2, -R 2) under the preload
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
(TAIL=4 bash scratch/call.sh build 300 STAGES=build) &
(mpi_inc=$(mpicc --showme:incdirs | tr ' ' ':'); CPATH=$mpi_inc bash scratch/third_party/build-nccl-tests.sh /tmp/nccl-tests > /tmp/ntb.log 2>&1; echo "nccl-tests build rc=$?") &
wait; echo "built t=$SECONDS s"
TAIL=60 bash scratch/call.sh dp 470 STAGES=dropinperf DROPINPERF_DEVICE="1 2" > /tmp/a.txt 2>&1
grep "dropinperf\|call " /tmp/a.txt | grep -v '^##' | grep -v "plain: rc=0, rows: 1[0-9], #wrong rows: 0$"
grep -v "^| ---" /tmp/o/dp/logs/dropinperf_table.md
echo "t=$SECONDS s"
