#!/usr/bin/env bash
# AllReduce time per call of several source trees, each built with its own yali-perf and timed by
# it, the trees taken in turn within every round so that drift hits them alike (the A/Bs of
# docs/PERF.md, Sessions 25-27). One process per GPU (launch_ranks.sh), YALI only.
#
#   OUT=dir bash scripts/ab_trees.sh NAME=SRC[:CUDA_FLAGS] ...
#     NAME=SRC          the tree at SRC ("." for this one), built in build-ab-NAME (yali-perf only)
#     NAME=SRC:FLAGS    the same with -DCMAKE_CUDA_FLAGS=FLAGS (commas for spaces): a measurement
#                       build such as -DYALI_AB_EAGER_COUNT_NO_FENCE
#   AB_MODES="0 5"      yali-perf -G values, in this order (0: eager calls; N: graphs of -n calls
#                       launched N times); AB_REPS_<mode> rounds of that mode (AB_REPS by default)
#   AB_REPS=2  AB_NP=2  AB_JOBS=6 (build jobs per tree; the trees build at once)
#   AB_ARGS="-b 4K -e 4M -f 4 -d bfloat16 -n 2000 -w 50 --inplace 0"
# Prints "NAME G<mode> r<round> rc=..: <bytes>=<us> ..." per run, then the total time; the logs go
# to $OUT/ab_trees.tar.gz. A tree older than yali-perf's -G flag cannot take part.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${OUT:?set OUT to a folder for the logs}"
[ $# -ge 1 ] || { sed -n 2,16p "$0"; exit 2; }
L=$OUT/ab_trees; mkdir -p "$L"; t0=$(date +%s)
names=()
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; src=${rest%%:*}; flags=; [ "$src" != "$rest" ] && flags=${rest#*:}
  names+=("$name")
  (cmake -S "$src" -B "build-ab-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF \
         -DYALI_BUILD_EXAMPLES=OFF ${flags:+"-DCMAKE_CUDA_FLAGS=${flags//,/ }"} > "$L/cmake_$name.log" 2>&1 &&
   cmake --build "build-ab-$name" -j "${AB_JOBS:-6}" --target yali-perf > "$L/build_$name.log" 2>&1
   echo "$name ($src${flags:+, $flags}) build rc=$? after $(( $(date +%s) - t0 )) s") &
done
wait
for g in ${AB_MODES:-0 5}; do
  reps_var=AB_REPS_$g
  for rep in $(seq 1 "${!reps_var:-${AB_REPS:-2}}"); do
    for name in "${names[@]}"; do
      log=$L/${name}_G${g}_r$rep.txt
      # shellcheck disable=SC2086  # AB_ARGS is a list of flags
      YALI_NO_MPIRUN=1 timeout 120 bash scripts/launch_ranks.sh "${AB_NP:-2}" "build-ab-$name/bench/yali-perf" -g 1 \
        ${AB_ARGS:--b 4K -e 4M -f 4 -d bfloat16 -n 2000 -w 50 --inplace 0} --impl yali -G "$g" > "$log" 2>&1
      echo "$name G$g r$rep rc=$?: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' "$log")"
    done
  done
done
echo "total $(( $(date +%s) - t0 )) s"
tar czf "$OUT/ab_trees.tar.gz" -C "$OUT" ab_trees && rm -rf "$L"
