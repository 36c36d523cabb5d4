#!/usr/bin/env bash
# Localize the small-size gap at x2: base f690fab, main, next/all, next/all with YALI_GRAPH_MIXING=0; graph and eager.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/x2ab2; mkdir -p $L; t0=$(date +%s)
cmake -S scratch/base-main -B build-basemain -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF > $L/cmake_main.log 2>&1 &&
  cmake --build build-basemain -j 32 --target yali-perf > $L/build_main.log 2>&1; echo "main build rc=$? $(( $(date +%s) - t0 )) s"
run() { # name binary env G
  local n=$1 p=$2 e=$3 g=$4
  env $e YALI_NO_MPIRUN=1 timeout 40 bash scripts/launch_ranks.sh 2 $p -g 1 -b 4K -e 4M -f 4 -d bfloat16 -n 2000 -w 50 \
      --inplace 0 --impl yali -G $g > $L/${n}_G${g}_r$rep.txt 2>&1
  echo "$n G$g r$rep rc=$?: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' $L/${n}_G${g}_r$rep.txt)"
}
for g in 5 0; do for rep in 1 2; do
  run base build-base-shared/bench/yali-perf X=1 $g
  run main build-basemain/bench/yali-perf X=1 $g
  run new build/bench/yali-perf X=1 $g
  run newnomix build/bench/yali-perf YALI_GRAPH_MIXING=0 $g
done; done
echo "total $(( $(date +%s) - t0 )) s"
