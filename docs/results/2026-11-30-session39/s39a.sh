# call a (session 39): yaliSend/yaliRecv first run. Build (libyali and the GPU suite only: bench/ is being edited);
# the p2p cases single 2 3 4 8 and multi 2 (ranks sharing one GPU); then the quick suite at 2 ranks (the
# refactored admission and exit of every kernel).
set -u; bash scratch/sent.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NH=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
mkdir -p $OUT/b; (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCL_HOME="$NH" > $OUT/b/cmake.log 2>&1 &&
  cmake --build build -j 16 --target yali-gpu-tests > $OUT/b/build.log 2>&1); echo "build rc=$? t=$SECONDS s"; tail -5 $OUT/b/build.log
TAIL=12 bash scratch/call.sh p2p 330 STAGES=p2p P2P_SINGLE="2 3 4 8" P2P_MULTI=2 P2P_TIMEOUT=120
echo "p2p t=$SECONDS s"
TAIL=6 bash scratch/call.sh q 150 STAGES=quick QUICK_RANKS=2 "QUICK_MULTI_RANKS= " QUICK_TIMEOUT=140
echo "t=$SECONDS s"
