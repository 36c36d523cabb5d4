# call 6: host cost per eager call, s31 vs base f690fab (scratch/hc/hostcost.cu against each tree's libyali)
set -u; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for n in s31:. base:scratch/base-shared-src; do t=${n%%:*}; s=${n#*:}; inc=$s/include; [ -f build-ab-$t/src/libyali.so ] || (cmake -S $s -B build-ab-$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF >/dev/null && cmake --build build-ab-$t -j 15 --target yali > /tmp/b_$t.log 2>&1; echo "$t build rc=$?"; tail -2 /tmp/b_$t.log) &
done; wait
for t in s31 base; do inc=include; [ $t = base ] && inc=scratch/base-shared-src/include; nvcc -O2 -std=c++17 -arch=sm_90 -I$inc scratch/hc/hostcost.cu -Lbuild-ab-$t/src -lyali -lcuda -o /tmp/hc_$t && echo "hc_$t built"; done
for B in 10; do for t in s31 base; do echo "=== $t batch $B"; LD_LIBRARY_PATH=$PWD/build-ab-$t/src timeout 60 /tmp/hc_$t 1 $B 2>&1 | grep -v "^\[yali"; done; done
echo "t=$SECONDS s"
