# call g (session 39, 1 H200): the final tree's library (launchKernel for every kernel). Build; the GPU suite
# --quick single 2 and 4 (ranks sharing the GPU); the p2p cases single 3.
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NH=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
mkdir -p $OUT/b; (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCL_HOME="$NH" > $OUT/b/cmake.log 2>&1 &&
  cmake --build build -j 16 --target yali-gpu-tests > $OUT/b/build.log 2>&1); echo "build rc=$? t=$SECONDS s"
TAIL=3 bash scratch/call.sh q 330 STAGES=quick,p2p QUICK_RANKS="2 4" "QUICK_MULTI_RANKS= " QUICK_TIMEOUT=130 P2P_SINGLE=3 "P2P_MULTI= " P2P_TIMEOUT=40
grep -h "^## " /tmp/o/q/stdout.txt | cut -c1-200
echo "t=$SECONDS s"
