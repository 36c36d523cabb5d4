#!/usr/bin/env bash
# Issue 17's before/after with one GPU per rank (x2, NVLink): base f690fab (harness patch) vs this
# tree, YALI only, bf16 sum, graph timing, 1 MB and 4 MB (and 4 KB, 64 MB), one process per GPU.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/x2ab; mkdir -p $L; t0=$(date +%s)
nvidia-smi -L > $L/gpus.txt 2>&1; nvidia-smi topo -m >> $L/gpus.txt 2>&1
( cmake -S ${X2_BASE:-scratch/base-shared-src} -B ${X2_BASE_BUILD:-build-base-shared} -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF > $L/cmake_base.log 2>&1 &&
  cmake --build ${X2_BASE_BUILD:-build-base-shared} -j 16 --target yali-perf > $L/build_base.log 2>&1; echo "base build rc=$? $(( $(date +%s) - t0 )) s" ) &
{ [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > $L/cmake.log 2>&1; } &&
  cmake --build build -j 16 --target yali-perf > $L/build.log 2>&1; echo "new build rc=$? $(( $(date +%s) - t0 )) s"
wait
for rep in 1 2; do
  for w in base new; do
    p=build/bench/yali-perf; [ $w = base ] && p=${X2_BASE_BUILD:-build-base-shared}/bench/yali-perf
    YALI_NO_MPIRUN=1 timeout 40 bash scripts/launch_ranks.sh 2 $p -g 1 -b 4K -e 64M -f 4 -d bfloat16 -n 2000 -w 50 \
      --inplace 0 --impl yali -G 5 > $L/${w}_r$rep.txt 2>&1
    echo "$w r$rep rc=$?: $(awk '$1=="yali"{printf "%s=%s(%s) ", $2, $6, $14}' $L/${w}_r$rep.txt)"
  done
done
echo "total $(( $(date +%s) - t0 )) s"
