#!/usr/bin/env bash
# Session 26's queued A/B: the library alone against the base f690fab, under ONE harness (the base's
# yali-perf): base = f690fab's library and yali-perf (scratch/base-shared-src, build-base-shared);
# libmain = this tree's library under f690fab's bench/ (scratch/mainlib-oldbench: git archive main
# with bench/ replaced by f690fab's; builds, checked 2026-11-29); main = this tree with its own
# yali-perf (build). AllReduce bf16, one process per GPU, eager (G0) and graph (G5), two rounds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/x2ab6; mkdir -p $L; t0=$(date +%s)
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF "${@:3}" > $L/cmake_$2.log 2>&1 &&
        cmake --build $2 -j 10 --target yali-perf > $L/build_$2.log 2>&1; echo "$2 build rc=$? $(( $(date +%s) - t0 )) s"; }
cfg scratch/base-shared-src build-base-shared & cfg scratch/mainlib-oldbench build-libmain &
{ [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > $L/cmake.log 2>&1; } && cmake --build build -j 12 --target yali-perf > $L/build.log 2>&1; echo "build rc=$?"
wait
run() { local n=$1 p=$2 e=$3 g=$4
  env $e YALI_NO_MPIRUN=1 timeout 60 bash scripts/launch_ranks.sh 2 $p -g 1 -b 4K -e 4M -f 4 -d bfloat16 -n 2000 -w 50 \
      --inplace 0 --impl yali -G $g > $L/${n}_G${g}_r$rep.txt 2>&1
  echo "$n G$g r$rep rc=$?: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' $L/${n}_G${g}_r$rep.txt)"; }
for rep in 1 2; do
  for g in 0 5; do
    run base build-base-shared/bench/yali-perf X=1 $g
    run libmain build-libmain/bench/yali-perf X=1 $g
    run main build/bench/yali-perf X=1 $g
  done
done
# placement A/B of main's library under the base harness: staging and LL buffer moved by 4 KB (not 64 KB multiples)
for rep in 1 2; do for g in 0 5; do
  run libmain_stg build-libmain/bench/yali-perf YALI_STAGING_BYTES=4198400 $g
  run libmain_ll build-libmain/bench/yali-perf YALI_LL_BUFFER_BYTES=1052672 $g
done; done
echo "total $(( $(date +%s) - t0 )) s"
