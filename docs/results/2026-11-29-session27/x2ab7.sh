#!/usr/bin/env bash
# Session 27: is main's gap against the base f690fab (same harness, x2ab6) the exit's block barrier?
# main = this tree; nobar = this tree built with -DYALI_AB_NO_EXIT_BARRIER (timing only: unsafe);
# base = f690fab's library and yali-perf. AllReduce bf16, one process per GPU, G0 and G5, two rounds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/x2ab7; mkdir -p $L; t0=$(date +%s)
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF "${@:3}" > $L/cmake_$2.log 2>&1 &&
        cmake --build $2 -j 8 --target yali-perf > $L/build_$2.log 2>&1; echo "$2 build rc=$? $(( $(date +%s) - t0 )) s"; }
cfg scratch/base-shared-src build-base-shared & cfg . build-nobar -DCMAKE_CUDA_FLAGS=-DYALI_AB_NO_EXIT_BARRIER &
cfg . build
wait
run() { local n=$1 p=$2 g=$3
  YALI_NO_MPIRUN=1 timeout 60 bash scripts/launch_ranks.sh 2 $p -g 1 -b 4K -e 4M -f 4 -d bfloat16 -n 2000 -w 50 \
      --inplace 0 --impl yali -G $g > $L/${n}_G${g}_r$rep.txt 2>&1
  echo "$n G$g r$rep rc=$?: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' $L/${n}_G${g}_r$rep.txt)"; }
for rep in 1 2; do for g in 0 5; do
  run base build-base-shared/bench/yali-perf $g
  run main build/bench/yali-perf $g
  run nobar build-nobar/bench/yali-perf $g
done; done
echo "total $(( $(date +%s) - t0 )) s"
tar czf $OUT/x2ab7.tar.gz -C $OUT x2ab7 && rm -rf $L
