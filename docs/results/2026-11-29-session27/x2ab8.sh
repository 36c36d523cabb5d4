#!/usr/bin/env bash
# Session 27: next/exitgraph (graph launches leave without the exit's block barrier) against main
# (scratch/main-src = git archive main), each with its own yali-perf (the same harness: bench/ is
# unchanged). AllReduce bf16, one process per GPU; G5 two rounds, G0 one round (eager keeps the barrier).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/x2ab8; mkdir -p $L; t0=$(date +%s)
( cmake -S scratch/main-src -B build-main -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF > $L/cmake_main.log 2>&1 &&
  cmake --build build-main -j 6 --target yali-perf > $L/build_main.log 2>&1; echo "build-main rc=$? $(( $(date +%s) - t0 )) s" ) &
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > $L/cmake.log 2>&1 && cmake --build build -j 12 > $L/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - t0 )) s"
wait
run() { local n=$1 p=$2 g=$3
  YALI_NO_MPIRUN=1 timeout 60 bash scripts/launch_ranks.sh 2 $p -g 1 -b 4K -e 4M -f 4 -d bfloat16 -n 2000 -w 50 \
      --inplace 0 --impl yali -G $g > $L/${n}_G${g}_r$rep.txt 2>&1
  echo "$n G$g r$rep rc=$?: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' $L/${n}_G${g}_r$rep.txt)"; }
for rep in 1 2; do for g in 5 0; do
  [ $g = 0 ] && [ $rep = 2 ] && continue
  run main build-main/bench/yali-perf $g
  run exitgraph build/bench/yali-perf $g
done; done
echo "total $(( $(date +%s) - t0 )) s"
tar czf $OUT/x2ab8.tar.gz -C $OUT x2ab8 && rm -rf $L
