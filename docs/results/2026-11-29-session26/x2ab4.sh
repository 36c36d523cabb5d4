#!/usr/bin/env bash
# Session 26's A/B (one GPU per rank, x2): next/cand (next/all + eagerdev + leafrec) against main and
# the base f690fab, eager (G0) and graph (G5); nomix = cand with YALI_GRAPH_MIXING=0 (no cross-context order).
# Trees: base (scratch/base-shared-src, build-base-shared), main (scratch/base-main, build-basemain),
# this tree (build; built here if absent).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/x2ab4; mkdir -p $L; t0=$(date +%s)
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF "${@:3}" > $L/cmake_$2.log 2>&1 &&
        cmake --build $2 -j 10 --target yali-perf > $L/build_$2.log 2>&1; echo "$2 build rc=$? $(( $(date +%s) - t0 )) s"; }
cfg scratch/base-shared-src build-base-shared & cfg scratch/base-main build-basemain &
{ [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > $L/cmake.log 2>&1; } && cmake --build build -j 12 --target yali-perf > $L/build.log 2>&1; echo "build rc=$?"
wait
run() { local n=$1 p=$2 e=$3 g=$4
  env $e YALI_NO_MPIRUN=1 timeout 60 bash scripts/launch_ranks.sh 2 $p -g 1 -b 4K -e 4M -f 4 -d bfloat16 -n 2000 -w 50 \
      --inplace 0 --impl yali -G $g > $L/${n}_G${g}_r$rep.txt 2>&1
  echo "$n G$g r$rep rc=$?: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' $L/${n}_G${g}_r$rep.txt)"; }
for rep in 1 2; do
  for g in 0 5; do
    run base build-base-shared/bench/yali-perf X=1 $g
    run main build-basemain/bench/yali-perf X=1 $g
    run cand build/bench/yali-perf X=1 $g
    [ $g = 5 ] && run nomix build/bench/yali-perf YALI_GRAPH_MIXING=0 $g
  done
done
echo "total $(( $(date +%s) - t0 )) s"
