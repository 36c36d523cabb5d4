# call 7: where an eager call's host time goes: libyali with cycle probes per phase (scratch/probe-src), one thread driving 2 GPUs, ungrouped
set -u; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cmake -S scratch/probe-src -B build-probe -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null && cmake --build build-probe --target yali -j 30 > /tmp/bp.log 2>&1; echo "probe build rc=$? after $SECONDS s"; tail -1 /tmp/bp.log
nvcc -O2 -std=c++17 -arch=sm_90 -Iinclude scratch/hc/hostcost.cu -Lbuild-probe/src -lyali -lcuda -o /tmp/hc_probe && echo built
for r in 1 2 3; do echo "=== process $r"; HC_UNGROUPED=1 LD_LIBRARY_PATH=$PWD/build-probe/src timeout 60 /tmp/hc_probe 2 10 2>&1 | grep -v "^\[yali\|^cuda\|^cuPointer\|^kernel with a  320\|1536"; done
echo "t=$SECONDS s"
