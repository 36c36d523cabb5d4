#!/usr/bin/env bash
# Placement sensitivity of the issue-17 A/B: base (scratch/base-shared-src) and this tree, graph timing,
# ranks sharing GPU 0, with YALI_STAGING_BYTES moving the copy-in region and the window's size.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/placement; mkdir -p $L
t0=$(date +%s)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF > $L/cmake.log 2>&1 &&
  cmake --build build -j 16 --target yali-perf > $L/build.log 2>&1; echo "new build rc=$? $(( $(date +%s) - t0 )) s"
cmake -S scratch/base-shared-src -B build-base-shared -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF > $L/cmake_base.log 2>&1 &&
  cmake --build build-base-shared -j 16 --target yali-perf > $L/build_base.log 2>&1; echo "base build rc=$? $(( $(date +%s) - t0 )) s"
for rep in 1 2; do
  for st in 4194304 4259840 4325376 4456448; do
    for w in base new; do
      p=build/bench/yali-perf; [ $w = base ] && p=build-base-shared/bench/yali-perf
      YALI_STAGING_BYTES=$st YALI_NO_MPIRUN=1 YALI_ALLOW_SHARED_GPU=1 timeout 60 $p -g 2 -b 4K -e 4M -f 4 -d bfloat16 \
        -n 5000 -w 100 --inplace 0 --impl yali -G 10 > $L/${w}_st${st}_r$rep.txt 2>&1
      echo "$w staging=$st r$rep: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' $L/${w}_st${st}_r$rep.txt)"
    done
  done
done
echo "total $(( $(date +%s) - t0 )) s"
