#!/usr/bin/env bash
# One call on a GPU machine: build, run the GPU suite, then a quick YALI-vs-NCCL table.
# Logs and JSON go under $OUT (packed into logs.tar.gz); the short table is printed last.
#
#   STAGES=build,extrabuilds,tests,p2p,algotests,shared,sanitize,trust,soak,fuzz,pytests,perf,mpiperf,copyengine,emax,
#          graphperf,tune,algocmp,variants,ncu,backends,sweep,symm,dropin,dropinperf,ncclabi   (default: build,tests,perf)
#   (every stage that runs the GPU suite passes --share-gpus: ranks share GPUs where GPUs are fewer)
#   SHARED_RANKS="2 4 8"  SHARED_ALGOS="oneshot_ll ..."   shared: the suite with ranks sharing the
#                                            GPUs (--share-gpus, single mode), once with the
#                                            automatic choice per world size, then per forced
#                                            algorithm at SHARED_ALGO_RANKS (default "2 4")
#   SANITIZE_RANKS="2 4"  SANITIZE_ARGS="--quick"    sanitize: the suite under compute-sanitizer
#   SANITIZE_ALGOS="twoshot ..."             memcheck, single mode in one process (--share-gpus
#                                            where GPUs are few), after a planted-bug canary; then
#                                            at 2 ranks once per forced algorithm
#   TRUST_FILTER=trust_  TRUST_SINGLE_RANKS="2 3 4"   trust: the trust cases (cases_trust.cc),
#   TRUST_MULTI_RANKS="2 3"                  single and multi mode; then yali-kill-test: every
#   KILL_RANKS=3 (0: none)  KILL_VICTIMS=1   algorithm of KILL_COLLS, eager and graph (copy-engine
#   KILL_COLLS=all  KILL_RANK0_COLLS=allreduce   ones eager only), each of KILL_VICTIMS killed in
#                                            turn; then rank 0 killed, KILL_RANK0_COLLS'
#                                            algorithms (empty: not run)
#   SOAK_RANKS=2  SOAK_MODES="single multi"  soak: the soak cases (--filter soak); SOAK_MULTI_ARGS=--quick
#                                            shortens multi mode (processes sharing a GPU take turns)
#   FUZZ_RUNS=8  FUZZ_SEED=1                 fuzz: seeded random settings (buffer sizes, blocks,
#   FUZZ_PLAIN_RUNS=16  FUZZ_RUN_TIMEOUT=150 YALI_ALGO from every collective's algorithms or one
#                                            per collective, every algorithm's threshold, sometimes
#                                            a random tuning file with the exchanges' keys), one
#                                            line each: FUZZ_RUNS under compute-sanitizer memcheck
#                                            (in one process, --quick, 2 or 3 ranks), then
#                                            FUZZ_PLAIN_RUNS without it (2 to 4 ranks, single mode,
#                                            or multi where copy engines may run); each a collective
#                                            mix (coll_* or counts_* cases), coll_registered or
#                                            registered_small where the algorithm needs registered
#                                            buffers
#   ALGOS="oneshot_ll twoshot ..."  ALGO_RANKS="2 4"   algotests: which forced algorithms, world sizes
#   VARIANTS="name:VAR=v,VAR=v ..."  VARIANT_NP="2 4"   variants: yali-perf (YALI only) once per
#   VARIANT_SIZES="-b 256K -e 1G -f 4"                  settings list, one process per GPU; the
#                                                       table compares them (NCCL once, as "nccl");
#                                                       PERF_BUILD=dir in a list runs dir's yali-perf
#   EXTRA_BUILDS="dir:-DFLAG=v,-DFLAG2=v ..."           extrabuilds: yali-perf once more per entry,
#                                                       built in dir with those CUDA flags (A/B runs)
#   NCU_CASES="name:SIZE:VAR=v,VAR=v ..."               ncu: one-pass hardware counters of one
#                                                       AllReduce kernel on rank 0 of 2 processes
#   PERF_SIZES="-b 4K -e 1G -f 4"            PERF_DTYPES=float,bfloat16   PERF_ITERS="-n 20 -w 5"
#   PERF_EXTRA="..."                         extra yali-perf flags (e.g. -G 20)
#   PERF_NP="2 4 8"                          world sizes for perf, mpiperf, graphperf (if GPUs allow)
#   PERF_SHARE=1                             perf: world sizes above the GPU count too, ranks
#                                            sharing GPUs (YALI only; kernel-level costs)
#   AB_BASE=base-src  AB_NP="2 4"  AB_REPS=2   abperf: kernel-level cost per call before (the tree in
#   AB_ARGS="-b 4K -e 64M -f 4 ..."           AB_BASE, built in build-base) and after (this tree),
#                                            ranks sharing GPUs (YALI only), eager and graph, run
#                                            alternately; scripts/ab_table.py prints the table.
#   AB_BASE_BUILD=build-base                 the base's build folder (one per base tree)
#   AB_LAUNCH=single (or multi)              one process driving N GPUs (-g N), or one process
#                                            per rank (launch_ranks.sh N ... -g 1): host cost per
#                                            call adds up in the first, runs side by side in the second
#   EMAX_NP="2 3"  EMAX_NCCL_NP=2            emax: yali-perf -C all -e max, one process (YALI; with
#   EMAX_NCCL_COLLS=allgather                NCCL where ranks have GPUs of their own), then one
#                                            process per rank with NCCL too (EMAX_NCCL_NP; slow
#                                            where processes share a GPU)
#   COLL_NP="2 4"  COLL_ARGS="-C all -d all ..."   collperf: yali-perf over every collective and
#                                            type, ranks sharing GPUs: #wrong must be 0
#   QUICK_RANKS="2 4"  QUICK_MULTI_RANKS=""  quick: the whole suite --quick, single mode (and multi
#                                            mode at QUICK_MULTI_RANKS), ranks sharing GPUs
#   P2P_SINGLE="2 3 4 8"  P2P_MULTI="2"     p2p: the point-to-point cases (--filter p2p_; P2P_ARGS=--quick)
#   A2AV_SINGLE="2 3 4 8"  A2AV_MULTI="2"   a2av: the AlltoAllv cases (--filter a2av_ --quick)
#   A2AV_ARGS=--quick                        (A2AV_ARGS= : the full cases)
#   PYTEST_TIMEOUT=420  PYTEST_ARGS=tests/python  pytests: pip install, then pytest (-rs: skip reasons)
#   DROPIN_NP="2 4"                          dropin: examples/05_dropin/check_torch.py, plain NCCL
#   DROPIN_TIMEOUT=120 DROPIN_YALI_TIMEOUT_MS=20000  then under yali-run, compared
#   DROPIN_NONBLOCKING=1 (default 0)         dropin with torch's non-blocking comms under yali-run (the plain
#   DROPIN_NONBLOCKING_PLAIN=1               reference stays blocking unless DROPIN_NONBLOCKING_PLAIN=1)
#   DROPIN_DEVICE_ID=1 (default 0)           dropin with device_id (eager comm, subgroups by split)
#   CE_MULTI="2 3"  CE_SINGLE=2  CE_NP="2 3"   copyengine: the coll_copy_engine case in multi mode (one
#                                            process per rank; single mode with ranks sharing a GPU
#                                            checks only that *_ce is off there), then yali-perf with
#                                            every *_ce forced, one process per rank (-R 1): #wrong
#                                            and the algorithms that ran
#   MOE_NP="2 4"                             moe: examples/04_moe/moe.py under graph capture, then
#                                            yali-perf -C alltoallv (every distribution): #wrong
#   DROPINPERF_NP=<GPUs>  DROPINPERF_TESTS="all_reduce all_gather reduce_scatter broadcast alltoall"
#   DROPINPERF_MODES="eager graph" DROPINPERF_REPS=2   dropinperf: nccl-tests one rank per GPU, plain
#   DROPINPERF_ARGS="-b 8 -e 128M -f 4 -n 20 -w 5"     NCCL and through libyali-nccl alternately
#   DROPINPERF_GRAPH_ITERS=20 (graph: -G)    (scripts/dropin_table.py: time per call, both busBW);
#   DROPINPERF_DEVICE="1 2" (default none)   also nccl-tests -D <impl> -R 2 (NCCL's device API) under
#                                            the preload, all_reduce and alltoall: #wrong
#   NCCLABI_NP=2  NCCLABI_TESTS="all_reduce ..."  ncclabi: nccl-tests (built from NCCL_TESTS_SRC, default
#                                            ../shared/third_party or scratch/third_party) under
#                                            mpirun with LD_PRELOAD=libyali-nccl.so, -c 1, ranks on
#                                            GPU 0 with their own NCCL_HOSTID; #wrong and which
#                                            library ran (YALI_NCCL_DEBUG). Default: every binary of
#                                            nccl-tests 2.19.6: all_reduce all_gather reduce_scatter
#                                            broadcast reduce gather scatter alltoall (YALI's, where it
#                                            takes the call), sendrecv hypercube alltoallv (send/recv
#                                            in groups: NCCL's, run for #wrong through the shim)
#   NCCLABI_ARGS="-d all -o all"  (or -G 5)  more nccl-tests flags; NCCLABI_NP may list world sizes
#   NCCLABI_RANK_LOCAL=1 (_NP=2)             ncclabi, also: tests/gpu/ncclabi_rank_local.py (a refusal one
#                                            rank alone has: pinned host memory, a bad overlap), 0 skips
#   NCCLABI_GROUP_ORDER=1 (default 0)        ncclabi, also: tests/gpu/ncclabi_group_order.py (4 ranks as 2
#                                            simulated nodes: one group's calls on three comms in
#                                            rank-dependent orders; shim, plain NCCL, and the call-order control)
#   NCCLABI_GROUP_STREAMS=1 (_NP=2)          ncclabi, also: tests/gpu/ncclabi_group_streams.py (a group on two
#                                            streams: YALI's AllReduce on one, NCCL's send/recv on the
#                                            other), through the shim, on NCCL alone, and through the
#                                            shim without its join (must go WRONG); 0 skips
#   NCCLABI_NODES=2 NCCLABI_NODES_NP=4       ncclabi, also: simulated nodes (YALI_NODE_ID=node<r/(NP/NODES)>),
#                                            all_reduce/all_gather/reduce_scatter on the
#                                            hierarchical path; #wrong and its debug lines
#   NCCLABI_NODES_AGG="1 4"                  the same with nccl-tests -m each value (>1: that many calls
#                                            per ncclGroupStart/End: grouped hierarchical calls)
#   NCCLABI_INIT_ALL=1 (default 0; _NDEV=2)  ncclabi, also: tests/gpu/ncclabi_init_all.py, ncclCommInitAll
#                                            blocking, non-blocking, non-blocking in a group (2 GPUs or
#                                            more), exact AllReduce on the clique and on its split children
#   NCCLABI_HANDOVER_FAULTS=1 (default 0)    ncclabi, also: tests/gpu/ncclabi_handover_faults.py, aborts and
#                                            revokes of a non-blocking parent while its split child is handed
#                                            over: 2 ranks on GPU 0, then (2 GPUs or more) one process
#                                            driving 2 GPUs; ok and FAIL lines per case
#   NCCLABI_HIER_FAULTS=1 (default 0)        ncclabi, also: tests/gpu/ncclabi_hier_faults.py, errors and
#   NCCLABI_HIER_FAULTS_LAYOUTS="2x2"        aborts on the hierarchical path, K simulated nodes of L
#                                            ranks per KxL entry ("2x2 2x4 4x2") on GPU 0,
#                                            YALI_TIMEOUT_MS=3000 (a rank that never makes a call,
#                                            every rank aborting; a rank late by 1.5 x the timeout:
#                                            ncclRemoteError everywhere), one ok/FAIL line per case
#                                            and rank
#   NCCLABI_SETUP_FAULTS=1 (default 0)       ncclabi, also: tests/gpu/ncclabi_setup_faults.py, 2 ranks on GPU 0,
#   NCCLABI_SETUP_FAULTS_ROUNDS="records id agreement"   rank 1 late for one set-up round by 3 s
#                                            (YALI_NCCL_TEST_SETUP_DELAY) with YALI_TIMEOUT_MS=2000: every
#                                            creating call returns, the ranks agree, abort returns; one
#                                            ok/FAIL line per round and rank
#   EVERY_SIZES="-b 4K -e 1G -f 4"  EVERY_REG="0 1 2 2:2"  EVERY_TOKENS=128,1K,4K   everycoll:
#                                            issue 21's table: every collective, YALI and NCCL, one
#                                            process per GPU at PERF_NP (GPUs only, never shared),
#                                            eager and -G 20, per EVERY_REG entry R[:X] (-R R, and
#                                            NCCL's CTA policy -x X: 2:2 is NCCL on symmetric
#                                            windows with its zero-CTA copy-engine collectives);
#                                            EVERY_MODES="eager graph"; then -C alltoallv
#                                            (EVERY_A2AV=0 skips it); perf_tables.py --best makes
#                                            the table (on 4 H200s, 2026-11-28: an eager run of
#                                            every collective and both dtypes took ~30 s, a -G 20
#                                            run ~3 min; split PERF_NP, EVERY_REG and EVERY_MODES
#                                            over calls of 10 min)
#   CTEST_REGEX="host|gpu_single_4"          which ctest tests to run (default: all but gpu_all,
#                                            which only adds something on more than 4 GPUs)
#   CTEST_EXCLUDE='^gpu_(trust|soak|kill)_'  left to their own stages (trust, soak)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/yali-gpu-check}
mkdir -p "$OUT/logs"
LOG=$OUT/logs
STAGES=${STAGES:-build,tests,perf}
PERF_SIZES=${PERF_SIZES:--b 4K -e 1G -f 4}
PERF_DTYPES=${PERF_DTYPES:-float,bfloat16}
PERF_ITERS=${PERF_ITERS:--n 20 -w 5}
PERF_EXTRA=${PERF_EXTRA:-}
BUILD=${BUILD:-build}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# YALI_ALGO lists that force one family for every collective (a list names one algorithm per
# collective); an algorithm list in ALGOS/SHARED_ALGOS/SANITIZE_ALGOS is written label=list, and a
# family by its name alone (ll, staged, direct, rooted: a caller's "$ALL_LL" would reach us unexpanded).
ALL_LL=oneshot_ll,reducescatter_ll,allgather_ll,broadcast_ll,reduce_ll,gather_ll,scatter_ll,alltoall_ll
ALL_STAGED=twoshot_push,reducescatter_staged,allgather_staged,broadcast_staged,reduce_staged,gather_staged,scatter_staged,alltoall_staged
ALL_DIRECT=twoshot_direct,allgather_direct,broadcast_direct,scatter_direct,alltoall_direct,reducescatter_pull,reduce_pull
# The rooted collectives on two-shot's pipeline (off by default until measured), with AllReduce's
# twoshot_push, whose protocol they share.
ALL_ROOTED=twoshot_push,broadcast_twoshot,reduce_twoshot
label_of() { echo "${1%%=*}"; }
algo_of() {
  case "$1" in
    *=*) echo "${1#*=}" ;;
    *) local family="ALL_${1^^}"; echo "${!family:-$1}" ;;
  esac
}
has() { [[ ",$STAGES," == *",$1,"* ]]; }
# The torch venv's NCCL library folder (empty if none), for LD_LIBRARY_PATH.
nccl_lib_dir() { python3 -c "import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], 'lib'))" 2>/dev/null; }
# A wrapper for mpirun that gives each rank its own NCCL_HOSTID (NCCL then lets ranks share a GPU)
# and puts nccl-tests on GPU 0 (NCCL_TESTS_DEVICE); with an argument L, also simulated nodes of L
# ranks (YALI_NODE_ID=node<rank / L>). Prints its path.
mpi_hostid_wrapper() {
  local file=/tmp/hostid_mpi${1:+_nodes$1}.sh node=
  [ -n "${1:-}" ] && node=" YALI_NODE_ID=node\$((r / $1))"
  printf '#!/bin/sh\nr=$OMPI_COMM_WORLD_RANK\nexport NCCL_HOSTID=yali-rank-$r NCCL_TESTS_DEVICE=0%s\nexec "$@"\n' "$node" > "$file"
  chmod +x "$file"
  echo "$file"
}
# An nccl-tests log's result rows (LOG), or with "wrong" those whose out-of-place or in-place #wrong
# is neither 0 nor N/A. Counted from the line's end (#wrong is the 5th field from it, and the last):
# a row of hypercube_perf has no redop field, 12 fields where the others have 13, and a count by
# field number skipped its rows (Session 32).
nccl_tests_rows() {
  awk -v wrong="${2:-}" '$1 ~ /^[0-9]+$/ && NF >= 12 && $NF ~ /^([0-9]+|N\/A)$/ {
      w = $(NF - 4); if (wrong == "" || (w != "N/A" && w != 0) || ($NF != "N/A" && $NF != 0)) n++ }
    END { print n + 0 }' "$1"
}
# A settings list "VAR=v,VAR2=a,b" as words: a comma splits only before the next NAME=, so a value
# may itself be a list (YALI_ALGO=broadcast_twoshot,reduce_twoshot).
settings_words() { sed -E 's/,([A-Za-z_][A-Za-z0-9_]*=)/ \1/g' <<< "$1"; }
summary=()
# Logs are re-packed after every stage so that a run cut off by its time limit still returns them.
# Each line ends with the seconds since the previous one (what that step took), for planning calls.
note() {
  local now; now=$(date +%s)
  summary+=("$1 [$((now - t_last)) s]"); echo "## $1 [$((now - t_last)) s]"; t_last=$now
  tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs
}
t0=$(date +%s)
t_last=$t0
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
{ nvidia-smi; nvidia-smi topo -m; nvcc --version; } > "$LOG/machine.txt" 2>&1
# HEAD as this copy's git metadata says it; the device tool copies the working tree's files, and its
# .git may be older than them (seen 2026-11-25): name the tested commit from the caller's side too.
git rev-parse HEAD > "$LOG/commit.txt" 2>/dev/null || true

if has build; then
  # The NCCL baseline: the torch venv's NCCL (nvidia.nccl, the newest on our machines: 2.28.9) ahead
  # of the system's (2.28.3 on nvidia-h200-x4, 2026-11-28), which the build would find first.
  # NCCL_HOME set by the caller wins.
  if [ -z "${NCCL_HOME:-}" ]; then
    NCCL_HOME=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  fi
  if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${NCCL_HOME:+-DNCCL_HOME="$NCCL_HOME"} > "$LOG/cmake.log" 2>&1 &&
     cmake --build "$BUILD" -j "$(nproc)" > "$LOG/build.log" 2>&1; then
    note "build: ok ($(( $(date +%s) - t0 )) s)"
  else
    note "build: FAILED"; tail -40 "$LOG/cmake.log" "$LOG/build.log"
    tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs; exit 1
  fi
fi

if has extrabuilds; then
  for b in ${EXTRA_BUILDS:-}; do
    dir=${b%%:*}; flags=${b#*:}
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_FLAGS=${flags//,/ }" > "$LOG/cmake_$dir.log" 2>&1 &&
      cmake --build "$dir" -j "$(nproc)" --target yali-perf > "$LOG/build_$dir.log" 2>&1
    note "extra build $dir ($flags): rc=$?"
  done
fi

if has tests; then
  default_regex='.'
  [ "$ngpus" -le 4 ] && default_regex='^(host|perf|gpu_single|gpu_multi|gpu_mpi)'
  ctest --test-dir "$BUILD" --output-on-failure --timeout "${CTEST_TIMEOUT:-600}" \
    -R "${CTEST_REGEX:-$default_regex}" -E "${CTEST_EXCLUDE:-^gpu_(trust|soak|kill)_}" > "$LOG/ctest.log" 2>&1
  rc=$?
  note "ctest: rc=$rc $(grep -E 'tests passed|tests failed' "$LOG/ctest.log" | tail -1)"
  grep -E '^ *[0-9]+/[0-9]+ Test' "$LOG/ctest.log" | sed 's/^/   /'
  # Each test's NOTE line (ranks sharing GPUs) is in ctest's log of the run, not in its output.
  cp "$BUILD/Testing/Temporary/LastTest.log" "$LOG/ctest_last.log" 2>/dev/null &&
    grep -c '^NOTE: .*ranks share GPUs' "$LOG/ctest_last.log" | sed 's/^/   tests with ranks sharing GPUs (correctness only): /'
  [ $rc -ne 0 ] && grep -E 'FAIL|SKIP' "$LOG/ctest.log" | head -40
fi

if has algotests; then
  # The GPU suite once more with each algorithm forced, so that every dtype x op x count runs
  # through every kernel (auto selection sends each size to one algorithm only).
  for n in ${ALGO_RANKS:-2 4}; do
    [ "$n" -gt "$ngpus" ] && continue
    for spec in ${ALGOS:-oneshot_ll oneshot_pull twoshot twoshot_push ll=$ALL_LL staged=$ALL_STAGED rooted=$ALL_ROOTED}; do
      label=$(label_of "$spec"); algo=$(algo_of "$spec")
      YALI_ALGO=$algo "$BUILD/tests/yali-gpu-tests" --ranks "$n" --mode multi > "$LOG/algotest_${label}_$n.log" 2>&1
      note "gpu suite YALI_ALGO=$label multi $n: rc=$? $(tail -1 "$LOG/algotest_${label}_$n.log")"
    done
  done
fi

if has shared; then
  # Correctness where GPUs are few: ranks share GPUs in one process (YALI_ALLOW_SHARED_GPU). Checks
  # the algorithms' logic (layouts, flags, epochs, offsets, graphs); not NVLink's ordering or speed.
  for n in ${SHARED_RANKS:-2 4 8}; do
    "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode single > "$LOG/shared_auto_$n.log" 2>&1
    note "gpu suite --share-gpus single $n: rc=$? $(tail -1 "$LOG/shared_auto_$n.log")"
  done
  for n in ${SHARED_ALGO_RANKS:-2 4}; do
    for spec in ${SHARED_ALGOS:-oneshot_ll oneshot_pull twoshot twoshot_push ll=$ALL_LL staged=$ALL_STAGED direct=$ALL_DIRECT rooted=$ALL_ROOTED}; do
      label=$(label_of "$spec"); algo=$(algo_of "$spec")
      YALI_ALGO=$algo "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode single ${SHARED_ARGS:-} \
        > "$LOG/shared_${label}_$n.log" 2>&1
      note "gpu suite --share-gpus YALI_ALGO=$label single $n: rc=$? $(tail -1 "$LOG/shared_${label}_$n.log")"
    done
  done
fi

if has quick; then
  for n in ${QUICK_RANKS:-2 4}; do
    timeout ${QUICK_TIMEOUT:-300} "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode single --quick \
      > "$LOG/quick_single_$n.log" 2>&1
    note "gpu suite --quick --share-gpus single $n: rc=$? $(tail -1 "$LOG/quick_single_$n.log")"
  done
  for n in ${QUICK_MULTI_RANKS:-}; do
    timeout ${QUICK_TIMEOUT:-300} "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode multi --quick \
      > "$LOG/quick_multi_$n.log" 2>&1
    note "gpu suite --quick --share-gpus multi $n: rc=$? $(tail -1 "$LOG/quick_multi_$n.log")"
  done
fi

if has p2p; then
  for spec in $(for n in ${P2P_SINGLE:-2 3 4 8}; do echo "single:$n"; done) \
              $(for n in ${P2P_MULTI:-2}; do echo "multi:$n"; done); do
    mode=${spec%%:*}; n=${spec#*:}
    timeout ${P2P_TIMEOUT:-200} "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode "$mode" ${P2P_ARGS-} \
      --filter p2p_ > "$LOG/p2p_${mode}_$n.log" 2>&1
    note "p2p cases $mode $n ${P2P_ARGS-}: rc=$? $(tail -1 "$LOG/p2p_${mode}_$n.log")"
  done
fi

if has a2av; then
  for spec in $(for n in ${A2AV_SINGLE:-2 3 4 8}; do echo "single:$n"; done) \
              $(for n in ${A2AV_MULTI:-2}; do echo "multi:$n"; done); do
    mode=${spec%%:*}; n=${spec#*:}
    timeout 200 "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode "$mode" ${A2AV_ARGS---quick} \
      --filter a2av_ > "$LOG/a2av_${mode}_$n.log" 2>&1
    note "a2av cases $mode $n ${A2AV_ARGS---quick}: rc=$? $(tail -1 "$LOG/a2av_${mode}_$n.log")"
  done
fi

# A fresh machine keeps no build from an earlier call (seen 2026-11-25): say so instead of running
# yali-run without its library.
need_build() {
  [ -e "$BUILD/src/libyali.so" ] && return 0
  note "$1: skipped, no build in $BUILD (a fresh machine keeps none: add build to STAGES)"; return 1
}

if has dropin && need_build dropin; then
  # Issue 20: an unchanged torch program (DDP, FSDP2, compiled functional collectives, all_to_all,
  # a graph-captured all_reduce) on NCCL, then under yali-run, compared (examples/05_dropin).
  printf '#!/bin/sh\nexport NCCL_HOSTID=yali-rank-$LOCAL_RANK\nexec "$@"\n' > /tmp/hostid_torch.sh
  chmod +x /tmp/hostid_torch.sh
  # DROPIN_NONBLOCKING=1: torch makes non-blocking communicators (TORCH_NCCL_USE_COMM_NONBLOCKING=1)
  # in the yali-run run, which libyali-nccl sets up in the background once NCCL made them
  # (NCCL_ABI.md, "Non-blocking communicators"): the YALI lines should then be as many as in a
  # blocking run. The plain reference stays blocking: torch 2.11 on NCCL 2.28.9 alone stops in
  # all_to_all_single with non-blocking comms ("NCCL Error 7: NCCL operation in progress", ncclAlltoAll
  # answering ncclInProgress; Session 33, 2 and 4 ranks). DROPIN_NONBLOCKING_PLAIN=1 makes it
  # non-blocking too, to see that again.
  nb=; [ "${DROPIN_NONBLOCKING:-0}" = 1 ] && nb=_nb
  # DROPIN_DEVICE_ID=1: both runs pass device_id (check_torch.py --device-id): an eager comm, and
  # subgroups made by ncclCommSplit of it, checked too.
  devid=; devflag=; [ "${DROPIN_DEVICE_ID:-0}" = 1 ] && devid=_dev devflag=--device-id
  for np in ${DROPIN_NP:-2 4}; do
    tag=$np$nb$devid
    # Bounded: YALI's waits end after DROPIN_YALI_TIMEOUT_MS, each run after DROPIN_TIMEOUT s (a
    # hang of either library costs minutes otherwise: seen 2026-11-25); NCCL_DEBUG=WARN and the
    # script's per-section lines show where a run stopped.
    # A free port for each torchrun, not torchrun's default 29500: two checks side by side on one
    # machine (one per GPU) otherwise meet there, and the later one's store fails with EADDRINUSE
    # (Session 43, call 3: the 2-rank plain run, while the 4-rank one ran on the other GPU).
    # The package's own helper (python/yali/_launch.py; PYTHONPATH below makes it importable).
    free_port() { python3 -c 'from yali._launch import free_port; print(free_port())'; }
    ( export YALI_ALLOW_SHARED_GPU=1 NCCL_NVLS_ENABLE=0 YALI_NCCL_DEBUG=1 PYTHONPATH=$PWD/python \
        YALI_LIBRARY=$PWD/$BUILD/src/libyali.so YALI_TIMEOUT_MS=${DROPIN_YALI_TIMEOUT_MS:-20000} NCCL_DEBUG=WARN
      cd examples/05_dropin
      [ -n "$nb" ] && [ "${DROPIN_NONBLOCKING_PLAIN:-0}" = 1 ] && export TORCH_NCCL_USE_COMM_NONBLOCKING=1
      timeout ${DROPIN_TIMEOUT:-120} torchrun --nproc-per-node "$np" --master-port "$(free_port)" --no-python /tmp/hostid_torch.sh python3 check_torch.py $devflag \
        --out "$LOG/dropin_plain$tag.json" > "$LOG/dropin_plain$tag.log" 2>&1 || echo "plain run rc=$?"
      [ -n "$nb" ] && export TORCH_NCCL_USE_COMM_NONBLOCKING=1
      timeout ${DROPIN_TIMEOUT:-120} python3 -m yali.run torchrun --nproc-per-node "$np" --master-port "$(free_port)" --no-python /tmp/hostid_torch.sh \
        python3 check_torch.py $devflag --out "$LOG/dropin_yali$tag.json" > "$LOG/dropin_yali$tag.log" 2>&1 || echo "yali-run rc=$?"
      python3 check_torch.py --compare "$LOG/dropin_plain$tag.json" "$LOG/dropin_yali$tag.json" 2>&1
      echo "YALI lines: $(grep -c ': YALI' "$LOG/dropin_yali$tag.log"), NCCL lines: $(grep -c ': NCCL' "$LOG/dropin_yali$tag.log"), set up in the background: $(grep -c 'non-blocking\|in the background' "$LOG/dropin_yali$tag.log"), comms on YALI: $(grep -c 'ranks on device .*: YALI for its collectives' "$LOG/dropin_yali$tag.log"), comms NCCL only: $(grep -c 'communicator .*NCCL only' "$LOG/dropin_yali$tag.log")"
    ) > "$LOG/dropin_$tag.txt" 2>&1
    note "dropin np=$np${nb:+ non-blocking}${devid:+ device_id}: $(tail -2 "$LOG/dropin_$tag.txt" | tr '\n' ' ') | plain reached: $(grep -o 'rank 0\] [a-zA-Z_ 2-]* done' "$LOG/dropin_plain$tag.log" | tail -1), yali-run reached: $(grep -o 'rank 0\] [a-zA-Z_ 2-]* done' "$LOG/dropin_yali$tag.log" | tail -1)"
  done
fi

if has copyengine && need_build copyengine; then
  for spec in $(for n in ${CE_MULTI:-2 3}; do echo "multi:$n"; done) $(for n in ${CE_SINGLE:-2}; do echo "single:$n"; done); do
    mode=${spec%%:*}; n=${spec#*:}
    timeout 300 "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode "$mode" --filter coll_copy_engine \
      > "$LOG/ce_${mode}_$n.log" 2>&1
    note "coll_copy_engine $mode $n: rc=$? $(tail -1 "$LOG/ce_${mode}_$n.log")"
  done
  for n in ${CE_NP:-2 3}; do
    YALI_NO_MPIRUN=1 YALI_ALLOW_SHARED_GPU=1 YALI_ALGO=allgather_ce,broadcast_ce,gather_ce,scatter_ce,alltoall_ce \
      timeout 300 bash scripts/launch_ranks.sh "$n" "$BUILD/bench/yali-perf" -g 1 -C allgather,broadcast,gather,scatter,alltoall \
      -d all -b 1K -e 16M -f 16 -n 5 -w 2 -R 1 --impl yali -J "$LOG/ce_perf_np$n.json" > "$LOG/ce_perf_np$n.txt" 2>&1
    note "yali-perf *_ce forced np=$n: rc=$? $(python3 -c "
import json, sys, collections
r = json.load(open(sys.argv[1]))['results']
print('results', len(r), 'wrong', sum(x.get('wrong', 0) for x in r), dict(collections.Counter(x.get('algo') for x in r)))" "$LOG/ce_perf_np$n.json" 2>&1 | tail -1)"
  done
fi

if has moe; then
  # Issue 19's end-to-end checks: the MoE example under graph capture against its float64 reference
  # (and torch's NCCL), then yali-perf -C alltoallv's #wrong; ranks share the GPU (times: none).
  for n in ${MOE_NP:-2 4}; do
    YALI_LIBRARY=$BUILD/src/libyali.so PYTHONPATH=python timeout 240 python3 examples/04_moe/moe.py --nproc "$n" \
      --steps 5 > "$LOG/moe_$n.log" 2>&1
    note "moe.py --nproc $n: rc=$? $(tail -1 "$LOG/moe_$n.log")"
    YALI_ALLOW_SHARED_GPU=1 timeout 240 "$BUILD/bench/yali-perf" -g "$n" -C alltoallv --impl yali --dist all \
      --tokens 256,1K,4K -n 5 -w 2 -J "$LOG/a2av_perf_g$n.json" > "$LOG/a2av_perf_g$n.txt" 2>&1
    note "yali-perf -C alltoallv -g $n: rc=$? $(python3 -c 'import json,sys; L=json.load(open(sys.argv[1]))["alltoallv"]["lines"]; C=[c for l in L for c in l["columns"].values() if c["status"]=="measured"]; print(len(C),"measured, #wrong",sum(c["wrong"] for c in C))' "$LOG/a2av_perf_g$n.json" 2>&1 | tail -1)"
  done
fi

# nccl-tests 2.19.6 built into /tmp/nccl-tests from NCCL_TESTS_SRC (default ../shared/third_party or
# scratch/third_party) for STAGE (its name in the notes); fails where the source or the shim is missing.
nccl_tests_ready() {
  local src=${NCCL_TESTS_SRC:-} d mpi_inc
  for d in ../shared/third_party scratch/third_party; do [ -z "$src" ] && [ -f "$d/build-nccl-tests.sh" ] && src=$d; done
  if [ -z "$src" ] || [ ! -f "$BUILD/src/nccl_abi/libyali-nccl.so" ]; then
    note "$1: skipped (nccl-tests source: '${src:-none}', shim: $BUILD/src/nccl_abi/libyali-nccl.so)"; return 1
  fi
  # The build script takes the first mpi.h a search of / finds; on some images that is a Fortran
  # module folder's (gfortran-mod-*/openmpi/mpi.h, Session 31), whose folder the compiler is then
  # given. Open MPI's own include folder, from mpicc, goes in CPATH behind it.
  # A build already in /tmp/nccl-tests (an earlier stage or a parallel check on the same machine,
  # which may be running its binaries now) is kept: rebuilding would replace them under it.
  mpi_inc=$(mpicc --showme:incdirs 2>/dev/null | tr ' ' ':')
  if [ -x /tmp/nccl-tests/nccl-tests-2.19.6/build/alltoallv_perf ]; then
    note "$1: nccl-tests already built in /tmp/nccl-tests, kept"
  else
    CPATH="${mpi_inc}${CPATH:+:$CPATH}" bash "$src/build-nccl-tests.sh" /tmp/nccl-tests > "$LOG/nccl_tests_build.log" 2>&1
    note "$1: nccl-tests build rc=$?"
  fi
}

if has ncclabi; then
  # nccl-tests through libyali-nccl.so, every rank on GPU 0 (its own NCCL_HOSTID: NCCL then lets two
  # ranks share a GPU). Correctness (#wrong) and routing; the times are processes taking turns.
  shim=$BUILD/src/nccl_abi/libyali-nccl.so
  nccl_lib=$(nccl_lib_dir)
  if nccl_tests_ready ncclabi; then
    wrapper=$(mpi_hostid_wrapper)
    # NCCLABI_NP: one or more world sizes; NCCLABI_ARGS: more nccl-tests flags (-d all -o all, -G 5).
    tag=$(echo "${NCCLABI_ARGS:-}" | tr -cd 'a-zA-Z0-9')
    # The default list is every binary nccl-tests 2.19.6 builds (its src/Makefile, BIN_FILES_LIST).
    # gather and scatter call ncclGather/ncclScatter when built against NCCL 2.28 or newer (before,
    # send/recv in a group); sendrecv, hypercube (power-of-2 world sizes only: it prints "skipping"
    # otherwise) and alltoallv are ncclSend/ncclRecv in groups, which libyali-nccl runs on YALI
    # (yaliSend/yaliRecv) on a communicator of one node.
    for np in ${NCCLABI_NP:-2}; do
      for t in ${NCCLABI_TESTS:-all_reduce all_gather reduce_scatter broadcast reduce gather scatter alltoall sendrecv hypercube alltoallv}; do
        # Which library should have run the test's calls, printed beside the counts. The counts are
        # the debug log's routing lines ("... (2^k class): YALI" or ": NCCL (why)"), one per
        # (function, size class, library) per rank; the communicator's own line is not counted (the
        # counts of docs/PERF.md's session 13 still include it, one line per rank).
        case $t in
          sendrecv|hypercube|alltoallv) expect="YALI (ncclSend/ncclRecv: yaliSend/yaliRecv), 0 NCCL lines" ;;
          alltoall) expect="YALI; in-place calls staged by the shim (YALI has no in-place AlltoAll), 0 NCCL lines" ;;
          *) expect="YALI; NCCL lines give the reason YALI refused" ;;
        esac
        lg="$LOG/ncclabi_np${np}${tag:+_$tag}_$t.log"
        timeout ${NCCLABI_TIMEOUT:-120} mpirun --allow-run-as-root --oversubscribe -np "$np" \
          -x LD_PRELOAD="$PWD/$shim" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" -x YALI_ALLOW_SHARED_GPU=1 \
          -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x NCCL_NVLS_ENABLE=0 \
          "$wrapper" /tmp/nccl-tests/nccl-tests-2.19.6/build/${t}_perf -b 8 -e 4M -f 8 -g 1 -c 1 -n 5 -w 2 \
          ${NCCLABI_ARGS:-} > "$lg" 2>&1
        rc=$?
        note "ncclabi np=$np ${NCCLABI_ARGS:-} $t: rc=$rc, $(grep -m1 'Out of bounds' "$lg"), rows: $(nccl_tests_rows "$lg"), lines with #wrong > 0: $(nccl_tests_rows "$lg" wrong), YALI lines: $(grep -c 'class): YALI' "$lg"), NCCL lines: $(grep -c 'class): NCCL' "$lg") (expected: $expect)"
      done
    done
    # Simulated nodes (NCCLABI_NODES >= 2): rank r is on node r / (NP / NODES) through YALI_NODE_ID,
    # so the communicator spans nodes and takes the hierarchical path (YALI inside each node, NCCL
    # across) for AllReduce, AllGather, ReduceScatter. NP must be a multiple of NODES.
    nodes=${NCCLABI_NODES:-}
    if [ -n "$nodes" ] && [ "$nodes" -ge 2 ]; then
      np=${NCCLABI_NODES_NP:-4}
      nodes_wrapper=$(mpi_hostid_wrapper $((np / nodes)))
      for agg in ${NCCLABI_NODES_AGG:-1}; do
      for t in all_reduce all_gather reduce_scatter; do
        lg="$LOG/ncclabi_nodes${nodes}_np${np}_m${agg}_$t.log"
        timeout 180 mpirun --allow-run-as-root --oversubscribe -np "$np" \
          -x LD_PRELOAD="$PWD/$shim" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" -x YALI_ALLOW_SHARED_GPU=1 \
          -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x NCCL_NVLS_ENABLE=0 \
          "$nodes_wrapper" /tmp/nccl-tests/nccl-tests-2.19.6/build/${t}_perf -b 8 -e 4M -f 8 -g 1 -m "$agg" -c 1 \
          -n 5 -w 2 > "$lg" 2>&1
        rc=$?
        note "ncclabi nodes=$nodes np=$np -m $agg $t: rc=$rc, $(grep -m1 'Out of bounds' "$lg"), hierarchical comms: $(grep -c 'hierarchical (YALI in the node' "$lg"), hierarchical calls: $(grep -c '\[hierarchical:' "$lg"), flat NCCL lines: $(grep -c 'class): NCCL' "$lg")"
        while IFS= read -r line; do note "  $line"; done < <(grep -m2 -E 'hierarchical \(YALI in the node|\[hierarchical:' "$lg")
      done
      done
    fi
  fi
  # A refusal one rank alone has (pinned host memory, an overlap out of NCCL's in-place layout):
  # tests/gpu/ncclabi_rank_local.py, through the shim by ctypes; every rank must get NCCL's answer.
  if [ -f "$shim" ] && [ "${NCCLABI_RANK_LOCAL:-1}" != 0 ]; then
    wrapper=$(mpi_hostid_wrapper)
    lg="$LOG/ncclabi_rank_local.log"
    timeout 150 mpirun --allow-run-as-root --oversubscribe -np "${NCCLABI_RANK_LOCAL_NP:-2}" \
      -x LD_PRELOAD="$PWD/$shim" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" -x YALI_ALLOW_SHARED_GPU=1 \
      -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x NCCL_NVLS_ENABLE=0 -x YALI_TIMEOUT_MS=10000 \
      "$wrapper" python3 tests/gpu/ncclabi_rank_local.py > "$lg" 2>&1
    note "ncclabi rank-local refusals: rc=$? $(grep -c '\] .*: ok' "$lg") ok, $(grep -c 'WRONG' "$lg") WRONG, $(grep -c 'staged through' "$lg") staged (9 expected), $(grep -c 'class): YALI' "$lg") YALI lines, $(grep -c 'class): NCCL' "$lg") NCCL lines (0 expected)"
  fi
  # A group whose calls use two streams (tests/gpu/ncclabi_group_streams.py): through the shim (every
  # round ok, the AllReduce on YALI), on NCCL alone (the reference: ok), and through the shim with its
  # join turned off (YALI_NCCL_TEST_NO_STREAM_JOIN=1: the check must fail there, or it proves nothing).
  if [ -f "$shim" ] && [ "${NCCLABI_GROUP_STREAMS:-1}" != 0 ]; then
    wrapper=$(mpi_hostid_wrapper)
    for how in shim plain nojoin; do
      lg="$LOG/ncclabi_group_streams_$how.log"
      preload="$PWD/$shim" nojoin=0
      [ "$how" = plain ] && preload="$nccl_lib/libnccl.so.2"
      [ "$how" = nojoin ] && nojoin=1
      timeout 120 mpirun --allow-run-as-root --oversubscribe -np "${NCCLABI_GROUP_STREAMS_NP:-2}" \
        -x LD_PRELOAD="$preload" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" -x YALI_ALLOW_SHARED_GPU=1 \
        -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x NCCL_NVLS_ENABLE=0 \
        -x YALI_NCCL_TEST_NO_STREAM_JOIN=$nojoin "$wrapper" python3 tests/gpu/ncclabi_group_streams.py > "$lg" 2>&1
      note "ncclabi group on two streams ($how): rc=$? $(grep -c ': ok' "$lg") ok, $(grep -c 'WRONG' "$lg") WRONG ($([ "$how" = nojoin ] && echo 'WRONG expected' || echo '0 expected')), $(grep -c 'ncclAllReduce.*class): YALI' "$lg") YALI AllReduce lines"
    done
  fi
  # ncclCommInitAll through the shim (NCCLABI_INIT_ALL=1, 2 GPUs or more: NCCL refuses two ranks of one
  # GPU in one process): tests/gpu/ncclabi_init_all.py, blocking then non-blocking (NCCL_COMM_BLOCKING),
  # an exact AllReduce per device; the log says whether YALI ran and, non-blocking, the background set-up.
  # Each run also splits every comm of the clique and checks the children (written once their parent
  # says ncclSuccess, an exact AllReduce): 2 x NDEV ok lines. "group": the call inside a group.
  if [ -f "$shim" ] && [ "${NCCLABI_INIT_ALL:-0}" = 1 ]; then
    for run in "1 alone" "0 alone" "0 group"; do
      read -r blocking how <<< "$run"
      lg="$LOG/ncclabi_init_all_blocking${blocking}_$how.log"
      NCCL_COMM_BLOCKING=$blocking LD_PRELOAD="$PWD/$shim" LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" \
        YALI_NCCL_DEBUG=1 YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" NCCL_NVLS_ENABLE=0 \
        timeout 150 python3 tests/gpu/ncclabi_init_all.py "${NCCLABI_INIT_ALL_NDEV:-2}" "$how" > "$lg" 2>&1
      note "ncclabi ncclCommInitAll, NCCL_COMM_BLOCKING=$blocking, $how: rc=$? $(grep -c ': ok' "$lg") ok ($((2 * ${NCCLABI_INIT_ALL_NDEV:-2})) expected), $(grep -c 'WRONG' "$lg") WRONG, $(grep -c 'AllReduce .*: YALI' "$lg") YALI AllReduce lines, $(grep -c 'set up in the background' "$lg") background set-ups, $(grep -c 'handed over once NCCL wrote it' "$lg") children handed over, $(grep -m1 'skipped' "$lg")"
    done
  fi
  # Errors and aborts on the hierarchical path (NCCLABI_HIER_FAULTS=1): tests/gpu/ncclabi_hier_faults.py
  # (its docstring lists what each case checks), per layout KxL (K simulated nodes of L), through the shim
  # by ctypes: one ok/FAIL line per case (3) and rank. Each of its waits has a limit of its own; the
  # `timeout` is for what has none (init, MPI).
  if [ -f "$shim" ] && [ "${NCCLABI_HIER_FAULTS:-0}" = 1 ]; then
    for layout in ${NCCLABI_HIER_FAULTS_LAYOUTS:-2x2}; do
      k=${layout%x*} l=${layout#*x} np=$(( ${layout%x*} * ${layout#*x} ))
      nodes_wrapper=$(mpi_hostid_wrapper "$l")
      lg="$LOG/ncclabi_hier_faults_${layout}.log"
      timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$np" \
        -x LD_PRELOAD="$PWD/$shim" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" -x YALI_ALLOW_SHARED_GPU=1 \
        -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x NCCL_NVLS_ENABLE=0 -x YALI_TIMEOUT_MS=3000 \
        "$nodes_wrapper" python3 tests/gpu/ncclabi_hier_faults.py > "$lg" 2>&1
      rc=$?
      note "ncclabi hierarchical faults ($np ranks as $k nodes x $l): rc=$rc (0 expected), $(grep -c '\] case [0-9].*: ok' "$lg") ok ($((3 * np)) expected), $(grep -c '\] case [0-9].*: FAIL' "$lg") FAIL, hierarchical comms: $(grep -c 'hierarchical (YALI in the node' "$lg") ($((4 * np)) expected), hierarchical call lines: $(grep -c '\[hierarchical:' "$lg") ($np expected: one per rank and size class)"
      grep -E '\] case [0-9].*: FAIL' "$lg" | head -12 | sed 's/^/   /'
    done
  fi
  # Aborts and revokes of a non-blocking parent during its split child's hand-over
  # (NCCLABI_HANDOVER_FAULTS=1): tests/gpu/ncclabi_handover_faults.py, its docstring says what each case
  # checks. Mode "ranks": 2 ranks on GPU 0; mode "threads": one process, both GPUs. In both, rank 1 is
  # 2 s late for each set-up's first round (the testing hook), so that the stops land inside the hand-over.
  if [ -f "$shim" ] && [ "${NCCLABI_HANDOVER_FAULTS:-0}" = 1 ]; then
    wrapper=$(mpi_hostid_wrapper)
    # NCCLABI_HANDOVER_POINTS: when the stops come after the split (default "0.5": inside the set-up's
    # rounds; "0", at once, inside NCCL's own making of the child: see the test's docstring);
    # NCCLABI_HANDOVER_CASES: which cases (default all). Mode "plain" (NCCLABI_HANDOVER_PLAIN=1): the
    # same calls on NCCL alone (its own library preloaded), cases NCCLABI_HANDOVER_PLAIN_CASES (default
    # "3 4": case 2 at once crashed NCCL 2.28.9 itself, Session 34) at once, printed, not judged.
    for mode in ranks threads $([ "${NCCLABI_HANDOVER_PLAIN:-0}" = 1 ] && echo plain); do
      lg="$LOG/ncclabi_handover_faults_$mode.log"
      points=${NCCLABI_HANDOVER_POINTS:-0.5} cases=${NCCLABI_HANDOVER_CASES:-1 2 3 4 5 6 7}
      np=2 delay="1:records:2000" preload="$PWD/$shim" arg=$mode plain=0
      [ "$mode" = threads ] && np=1
      [ "$mode" = plain ] && { preload="$nccl_lib/libnccl.so.2" arg=ranks plain=1 points=0 cases=${NCCLABI_HANDOVER_PLAIN_CASES:-3 4}; }
      # ok lines expected: 2 ranks x (cases 1 and 5, and 2-4 once per stop point); threads: case 6 per point, 7
      n=$(echo $points | wc -w) expect=0
      for k in $cases; do case "$mode:$k" in ranks:1|ranks:5) expect=$((expect + 2));; ranks:[234]) expect=$((expect + 2 * n));;
        threads:6) expect=$((expect + n));; threads:7) expect=$((expect + 1));; esac; done
      timeout 240 mpirun --allow-run-as-root --oversubscribe -np $np \
        -x LD_PRELOAD="$preload" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" -x YALI_ALLOW_SHARED_GPU=1 \
        -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x NCCL_NVLS_ENABLE=0 -x YALI_TIMEOUT_MS=3000 \
        -x NCCL_COMM_BLOCKING=0 -x YALI_NCCL_TEST_SETUP_DELAY="$delay" -x HANDOVER_PLAIN_NCCL=$plain \
        -x HANDOVER_STOP_POINTS="$points" -x HANDOVER_CASES="$cases" \
        "$([ "$mode" = threads ] && echo env || echo "$wrapper")" python3 tests/gpu/ncclabi_handover_faults.py "$arg" \
        > "$lg" 2>&1
      note "ncclabi hand-over faults ($mode): rc=$? (0 expected), $(grep -cE '\] case [0-9].*: ok' "$lg") ok ($expect expected), $(grep -cE '\] case [0-9].*: FAIL' "$lg") FAIL, $(grep -cE '\] case [0-9].*: observed' "$lg") observed $(grep -m1 -o 'skipped.*' "$lg")"
      grep -E '\] case [0-9]' "$lg" | sed 's/^/   /'
    done
  fi
  # A peer late for a set-up round (NCCLABI_SETUP_FAULTS=1): tests/gpu/ncclabi_setup_faults.py, once
  # per round, rank 1 sleeping 3 s before it (the testing hook YALI_NCCL_TEST_SETUP_DELAY) against a
  # YALI_TIMEOUT_MS of 2 s; its docstring says what each run checks.
  if [ -f "$shim" ] && [ "${NCCLABI_SETUP_FAULTS:-0}" = 1 ]; then
    wrapper=$(mpi_hostid_wrapper)
    for round in ${NCCLABI_SETUP_FAULTS_ROUNDS:-records id agreement}; do
      lg="$LOG/ncclabi_setup_faults_$round.log"
      # Late for the records round, the peer's set-up leaves it out (both ranks an error); late for
      # the id round or the agreement by less than twice the timeout, both end ncclSuccess.
      expect=success; [ "$round" = records ] && expect=error
      timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 \
        -x LD_PRELOAD="$PWD/$shim" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" -x YALI_ALLOW_SHARED_GPU=1 \
        -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x NCCL_NVLS_ENABLE=0 -x YALI_TIMEOUT_MS=2000 \
        -x YALI_NCCL_TEST_SETUP_DELAY="1:$round:3000" "$wrapper" python3 tests/gpu/ncclabi_setup_faults.py "$round" "$expect" \
        > "$lg" 2>&1
      note "ncclabi set-up faults, rank 1 late for the $round round: rc=$? (0 expected), $(grep -cE '\] round .*: ok' "$lg") ok, $(grep -cE '\] round .*: FAIL' "$lg") FAIL (2 ok expected)"
      grep -E '\] round .*: (ok|FAIL)' "$lg" | sed 's/^/   /'
    done
  fi
  # A group whose calls on comms spanning simulated nodes every rank makes in its own order
  # (tests/gpu/ncclabi_group_order.py; NCCLABI_GROUP_ORDER=1, 4 ranks as 2 nodes of 2), and (_p2p) one
  # whose send/recv on a hierarchical comm ranks place on either side of its AllReduce: through the
  # shim (every round ok), on NCCL alone (the reference: ok), and through the shim with its deferred
  # calls in call order (YALI_NCCL_TEST_CALL_ORDER=1: the check must fail there, or it proves nothing;
  # it ends at its `timeout`, NCCL's cross steps waiting for ever, so it runs last and short).
  if [ -f "$shim" ] && [ "${NCCLABI_GROUP_ORDER:-0}" = 1 ]; then
    nodes_wrapper=$(mpi_hostid_wrapper 2)
    for how in shim plain shim_p2p plain_p2p callorder callorder_p2p; do
      lg="$LOG/ncclabi_group_order_$how.log"
      preload="$PWD/$shim" callorder=0 limit=150 mode=${how#*_}
      [ "$mode" = "$how" ] && mode=
      case $how in plain*) preload="$nccl_lib/libnccl.so.2" ;; esac
      case $how in callorder*) callorder=1 limit=${NCCLABI_GROUP_ORDER_CONTROL_TIMEOUT:-45} ;; esac
      timeout -k 5 "$limit" mpirun --allow-run-as-root --oversubscribe -np 4 \
        -x LD_PRELOAD="$preload" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" -x YALI_ALLOW_SHARED_GPU=1 \
        -x YALI_NCCL_DEBUG=1 -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x NCCL_NVLS_ENABLE=0 \
        -x YALI_TIMEOUT_MS=10000 -x YALI_NCCL_TEST_CALL_ORDER=$callorder "$nodes_wrapper" \
        python3 tests/gpu/ncclabi_group_order.py 4 $mode > "$lg" 2>&1
      note "ncclabi group order across comms ($how): rc=$? $(grep -c ': ok' "$lg") ok of 16, $(grep -c 'WRONG' "$lg") WRONG ($(case $how in callorder*) echo 'fewer than 16 ok expected' ;; *) echo '16 ok expected' ;; esac)), $(grep -c 'hierarchical: YALI in the node' "$lg") hierarchical routing lines"
    done
  fi
fi

if has dropinperf; then
  # The drop-in's own speed against NCCL's over NVLink (issue 20): nccl-tests with one rank per GPU
  # (no sharing: needs DROPINPERF_NP GPUs), on plain NCCL and under libyali-nccl, alternately per
  # test and repetition so that drift hits both; scripts/dropin_table.py prints the table. Then,
  # with DROPINPERF_DEVICE, NCCL's device API through the preload (nccl-tests -D, -R 2: NCCL's
  # kernels on NCCL's device comm and windows; implementations 1 and 2 are load/store over NVLink,
  # never multimem): #wrong only.
  np=${DROPINPERF_NP:-$ngpus}
  shim=$BUILD/src/nccl_abi/libyali-nccl.so
  nccl_lib=$(nccl_lib_dir)
  if [ "$np" -lt 2 ] || [ "$np" -gt "$ngpus" ]; then
    note "dropinperf: skipped ($np ranks, $ngpus GPUs: one rank per GPU, 2 at least)"
  elif nccl_tests_ready dropinperf; then
    bin=/tmp/nccl-tests/nccl-tests-2.19.6/build
    # run LOG PRELOAD(0|1) BINARY ARGS...: one nccl-tests run, bounded; NCCL_NVLS_ENABLE=0 for both.
    dropin_run() {
      local lg=$1 pre=$2; shift 2
      local with=(); [ "$pre" = 1 ] && with=(-x LD_PRELOAD="$PWD/$shim" -x YALI_LIBRARY="$PWD/$BUILD/src/libyali.so" -x YALI_NCCL_DEBUG=1)
      timeout ${DROPINPERF_TIMEOUT:-120} mpirun --allow-run-as-root -np "$np" -x LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}" \
        -x NCCL_NVLS_ENABLE=0 "${with[@]}" "$@" > "$lg" 2>&1
    }
    for mode in ${DROPINPERF_MODES:-eager graph}; do
      extra=; [ "$mode" = graph ] && extra="-G ${DROPINPERF_GRAPH_ITERS:-20}"
      for rep in $(seq 1 "${DROPINPERF_REPS:-2}"); do
        for t in ${DROPINPERF_TESTS:-all_reduce all_gather reduce_scatter broadcast alltoall}; do
          for lib in plain yali; do
            lg="$LOG/dropinperf_${lib}_${mode}_${t}_r$rep.log"
            dropin_run "$lg" "$([ $lib = yali ] && echo 1 || echo 0)" "$bin/${t}_perf" -g 1 -c 1 \
              ${DROPINPERF_ARGS:--b 8 -e 128M -f 4 -n 20 -w 5} $extra
            note "dropinperf $mode $t r$rep $lib: rc=$?, rows: $(nccl_tests_rows "$lg"), #wrong rows: $(nccl_tests_rows "$lg" wrong)$([ $lib = yali ] && echo ", YALI lines: $(grep -c 'class): YALI' "$lg"), NCCL lines: $(grep -c 'class): NCCL' "$lg")")"
          done
        done
      done
    done
    python3 scripts/dropin_table.py "$LOG" > "$LOG/dropinperf_table.md" 2>&1
    note "dropinperf: table in dropinperf_table.md ($(tail -1 "$LOG/dropinperf_table.md"))"
    for impl in ${DROPINPERF_DEVICE:-}; do
      for t in all_reduce alltoall; do
        lg="$LOG/dropinperf_device${impl}_$t.log"
        dropin_run "$lg" 1 "$bin/${t}_perf" -g 1 -c 1 -b 8 -e 64M -f 8 -n 5 -w 2 -R 2 -D "$impl"
        note "dropinperf device API -D $impl -R 2 $t under the preload: rc=$?, $(grep -m1 'Out of bounds' "$lg"), rows: $(nccl_tests_rows "$lg"), #wrong rows: $(nccl_tests_rows "$lg" wrong)"
      done
    done
  fi
fi

if has sanitize; then
  # compute-sanitizer memcheck: out-of-bounds and misaligned device accesses, which the suite's guard
  # bytes see only when a write lands next to a buffer. --in-process: the sanitizer follows one
  # process (forked children went unchecked, 2026-11-22); kernels run 10-100x slower, hence the
  # longer deadlines.
  # First the canary: a planted out-of-bounds write that memcheck must report.
  nvcc -o "$BUILD/sanitizer_canary" tests/gpu/sanitizer_canary.cu > "$LOG/sanitize_canary.log" 2>&1 &&
    compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/sanitizer_canary" >> "$LOG/sanitize_canary.log" 2>&1
  rc=$?
  note "memcheck canary (planted write past the end): rc=$rc, $( [ $rc -eq 9 ] && echo reported || echo NOT REPORTED)"
  for n in ${SANITIZE_RANKS:-2 4}; do
    YALI_TESTS_UNDER_TOOL=compute-sanitizer timeout ${SANITIZE_TIMEOUT:-540} compute-sanitizer --tool memcheck \
      --error-exitcode 9 "$BUILD/tests/yali-gpu-tests" --in-process --share-gpus --ranks "$n" --deadline-scale 5 \
      ${SANITIZE_ARGS:---quick} > "$LOG/sanitize_$n.log" 2>&1
    note "memcheck single $n: rc=$? $(grep -c '========= Invalid\|========= Program hit' "$LOG/sanitize_$n.log") errors; $(grep -E 'passed, .* failed' "$LOG/sanitize_$n.log" | tail -1)"
  done
  for spec in ${SANITIZE_ALGOS:-}; do  # every size through one kernel (label=list: one family), at 2 ranks
    label=$(label_of "$spec"); algo=$(algo_of "$spec")
    YALI_TESTS_UNDER_TOOL=compute-sanitizer YALI_ALGO=$algo timeout ${SANITIZE_TIMEOUT:-540} compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$BUILD/tests/yali-gpu-tests" --in-process --share-gpus --ranks 2 --deadline-scale 5 \
      ${SANITIZE_ARGS:---quick} > "$LOG/sanitize_$label.log" 2>&1
    note "memcheck YALI_ALGO=$label single 2: rc=$? $(grep -c '========= Invalid\|========= Program hit' "$LOG/sanitize_$label.log") errors; $(grep -E 'passed, .* failed' "$LOG/sanitize_$label.log" | tail -1)"
  done
fi

if has trust; then
  # The trust cases (tests/gpu/cases_trust.cc) at 2, 3 and 4 ranks in one process and at 2 and 3 in
  # one process per rank, ranks sharing GPUs where GPUs are few; then the kill test: one rank
  # SIGKILLed mid-collective, every algorithm of every collective, eager and graph
  # (tests/gpu/kill_test.cc).
  tf=${TRUST_FILTER:-trust_}
  for n in ${TRUST_SINGLE_RANKS:-2 3 4}; do
    "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode single --filter "$tf" > "$LOG/trust_single_$n.log" 2>&1
    note "trust cases single $n: rc=$? $(tail -1 "$LOG/trust_single_$n.log")"
  done
  for n in ${TRUST_MULTI_RANKS:-2 3}; do
    "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode multi --filter "$tf" > "$LOG/trust_multi_$n.log" 2>&1
    note "trust cases multi $n: rc=$? $(tail -1 "$LOG/trust_multi_$n.log")"
  done
  kr=${KILL_RANKS:-3}  # 0: no kill test
  # The test bounds each of its runs itself (about 80 s at most; 4 to 5 s when it passes on one
  # H100). By default: every collective's algorithms with rank 1 killed (57 runs, about 4 min), then
  # AllReduce's with rank 0 (the bootstrap's host) killed (10 runs); both victims for every
  # collective would take about 8 min (KILL_VICTIMS=1,0 KILL_RANK0_COLLS=).
  if [ "$kr" != 0 ]; then
    timeout ${KILL_TIMEOUT:-1500} "$BUILD/tests/yali-kill-test" --ranks "$kr" --victim "${KILL_VICTIMS:-1}" \
      --coll "${KILL_COLLS:-all}" --mode both > "$LOG/kill_$kr.log" 2>&1
    note "kill test $kr ranks, victim ${KILL_VICTIMS:-1}, ${KILL_COLLS:-all}: rc=$? $(grep -E 'runs passed' "$LOG/kill_$kr.log")"
    grep -E '^(PASS|FAIL) ' "$LOG/kill_$kr.log" | cut -c1-220 | sed 's/^/   /'
  fi
  r0=${KILL_RANK0_COLLS-allreduce}
  if [ "$kr" != 0 ] && [ -n "$r0" ]; then
    timeout ${KILL_TIMEOUT:-1500} "$BUILD/tests/yali-kill-test" --ranks "$kr" --victim 0 --coll "$r0" --mode both \
      > "$LOG/kill_${kr}_rank0.log" 2>&1
    note "kill test $kr ranks, victim 0, $r0: rc=$? $(grep -E 'runs passed' "$LOG/kill_${kr}_rank0.log")"
    grep -E '^(PASS|FAIL) ' "$LOG/kill_${kr}_rank0.log" | cut -c1-220 | sed 's/^/   /'
  fi
fi

if has soak; then
  # The soak cases (long runs of calls, and of comm life cycles), ranks sharing GPUs where needed.
  for mode in ${SOAK_MODES:-single multi}; do
    n=${SOAK_RANKS:-2}
    args=; [ "$mode" = multi ] && args=${SOAK_MULTI_ARGS:-}
    "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" --mode "$mode" --filter soak $args > "$LOG/soak_${mode}_$n.log" 2>&1
    note "soak $mode $n: rc=$? $(tail -1 "$LOG/soak_${mode}_$n.log")"
  done
fi

if has fuzz; then
  # Settings fuzz: seeded random YALI_* combinations, each on one line with its result. Drawn per
  # run: odd buffer sizes (staging, LL, pull), block caps, YALI_ALGO (auto, one algorithm of any
  # collective, or a list naming one per collective), the thresholds of every bounded algorithm
  # of every collective (YALI_<NAME>_MAX_BYTES / _MIN_BYTES: -2 table, -1 always, 0 never, bytes;
  # each set or not), and sometimes a random valid tuning file for this GPU (the nine mandatory
  # keys, sometimes the frugal keys and any of the other algorithms' threshold keys, exchanges
  # included). The algorithms, their collectives, thresholds and needs come from README.md's
  # algorithm table (a host test keeps it equal to the registry). Each run then runs a collective
  # mix through the GPU suite: one of coll_counts, coll_back_to_back, coll_graphs, coll_groups,
  # coll_offsets, coll_large (plain runs only) or the AllReduce counts_* cases; where a forced
  # algorithm needs registered buffers, about half the time registered_small (twoshot_direct
  # alone) or coll_registered (every collective on registered buffers under the selector's choice,
  # laid out for the copy engines too), which a tenth of the other runs take as well, to put the
  # *_direct and *_ce thresholds to work (elsewhere a forced *_direct or *_ce gives way to the
  # selector's choice among the rest, also worth a run). The generator prints "kind<TAB>ranks<TAB>filter<TAB>VAR=value ..." per run:
  # FUZZ_RUNS lines of kind memcheck (compute-sanitizer memcheck, in one process, --quick, 2 or 3
  # ranks), then FUZZ_PLAIN_RUNS of kind plain (single mode, 2 to 4 ranks, all sizes but
  # coll_counts and coll_registered, which are --quick) or multi (the same in multi mode, one
  # process per rank: where a copy-engine algorithm may run on registered buffers, since the
  # library turns *_ce off for ranks of one process sharing a GPU, which is what single mode is
  # where GPUs are few; memcheck runs cannot follow forked processes and keep single mode). Same
  # FUZZ_SEED, same combinations (logs/fuzz_plan.txt). YALI_TIMEOUT_MS=30000 turns a hang into a
  # failure well inside each run's limit. 4 + 4 runs of the AllReduce-only fuzz took 9 s on one
  # H100 (2026-11-24); the collective mix takes longer (not yet measured).
  sm=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1)
  python3 - "${FUZZ_SEED:-1}" "${FUZZ_RUNS:-8}" "${FUZZ_PLAIN_RUNS:-16}" "$LOG" "${sm:-9}" README.md > "$LOG/fuzz_plan.txt" <<'PY'
import random, re, sys
seed, nsan, nplain, log, sm, readme = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6]
rng = random.Random(seed)
# README.md's algorithm table: | `name` | collective | up to|from `YALI_..._BYTES`[, output|input registered ...]|otherwise | ... |
algos = []
for line in open(readme):
    m = re.match(r"^\| `([a-z0-9_]+)` \| ([a-z]+) \| (up to|from|otherwise)(?: `(YALI_[A-Z0-9_]+)`)?([^|]*)\|", line)
    if not m:
        continue
    name, coll, when, env, rest = m.groups()
    bound = {"up to": "max", "from": "min"}.get(when)
    needs = "output" if "output registered" in rest else "input" if "input registered" in rest else None
    # The tuning key (registry.cc's tuningKey): <name>_max / <name>_min, but one-shot LL's, which is
    # the mandatory ll_max. A wrong key shows: the library refuses the file (unknown key).
    key = None if bound is None else "ll_max" if name == "oneshot_ll" else f"{name}_{bound}"
    algos.append((name, coll, bound, env, needs, key))
if len(algos) < 20 or not any(a[0] == "oneshot_ll" for a in algos):
    sys.exit(f"{readme}: the algorithm table was not found ({len(algos)} rows)")
collectives = sorted({a[1] for a in algos})
bounded = [a for a in algos if a[2]]
by_name = {a[0]: a for a in algos}
def size(choices, lo, hi):  # a listed value (odd ones included) or a uniform one in [lo, hi]
    return rng.choice(choices) if rng.random() < 0.7 else rng.randint(lo, hi)
def threshold():  # -2 table, -1 always, 0 never, or bytes
    return rng.choice([-2, -1, 0, rng.randint(1, 1 << 24)])
def threads():
    return rng.choice([64, 96, 128, 256, 512, 1024])
memcheck_filters = ["counts_", "coll_counts", "coll_back_to_back", "coll_graphs", "coll_groups"]
plain_filters = memcheck_filters + ["coll_offsets", "coll_large"]
for i in range(nsan + nplain):
    sanitized = i < nsan
    ranks = rng.choice([2, 3]) if sanitized else rng.choice([2, 3, 4])
    r = rng.random()
    if r < 0.3:  # one algorithm per collective (some left to the selector; fewer that need registration)
        forced = [rng.choice([a[0] for a in algos if a[1] == c and (not a[4] or rng.random() < 0.3)] or
                             [a[0] for a in algos if a[1] == c]) for c in collectives if rng.random() < 0.75]
    elif r < 0.85:
        forced = [rng.choice(algos)[0]]
    else:
        forced = []
    env = {
        "YALI_TIMEOUT_MS": 30000,
        "YALI_STAGING_BYTES": size([65536, 100000, 131072, 1000000, 4194304, 8388608], 65536, 8388608),
        "YALI_LL_BUFFER_BYTES": size([4096, 65536, 100000, 262144, 1048576], 4096, 4 << 20),
        "YALI_PULL_BUFFER_BYTES": size([0, 65536, 100000, 1048576, 4194304, 8388608], 0, 8 << 20),
        "YALI_MAX_CTAS": rng.choice([0, 0, 1, 2, 7, 32, 64, rng.randint(0, 64)]),
        "YALI_ALGO": ",".join(forced) if forced else "auto",
    }
    for a in bounded:  # every collective's thresholds, each set or left to the table
        if rng.random() < 0.5:
            env[a[3]] = threshold()
    tuning = {}
    if rng.random() < 0.35:
        # A valid table line for this GPU and world size: the nine mandatory keys, sometimes optional ones.
        min_slot = rng.choice([256, 4096, 16384, 65536, rng.randint(1, 256) * 256])
        line = (f"sm={sm} nranks={ranks} ll_max={rng.choice([0, 4096, 65536, 1 << 20, rng.randint(0, 1 << 21)])} "
                f"ll_threads={threads()} ll_ctas={rng.randint(1, 64)} twoshot_threads={threads()} "
                f"twoshot_ctas={rng.randint(1, 64)} twoshot_min_slot={min_slot} "
                f"twoshot_max_slot={min_slot + rng.choice([0, 256, 65536, rng.randint(0, 1 << 20) // 256 * 256])}")
        if rng.random() < 0.5:
            line += f" frugal_min={rng.choice([0, 1 << 20, rng.randint(0, 1 << 26)])} frugal_ctas={rng.randint(1, 64)} frugal_teams={rng.choice([1, 2])}"
        for a in bounded:  # the other algorithms' keys, the exchanges' included (0: never)
            if a[5] != "ll_max" and rng.random() < 0.3:
                tuning[a[5]] = rng.choice([0, 1, 4096, 65536, 1 << 20, rng.randint(0, 1 << 24)])
        line += "".join(f" {k}={v}" for k, v in tuning.items())
        path = f"{log}/fuzz_tuning_{i + 1}.txt"  # run i + 1 in the log
        with open(path, "w") as f:
            f.write(f"# fuzz run {i + 1}, FUZZ_SEED={seed}\n{line}\n")
        env["YALI_TUNING_FILE"] = path
    # Forced algorithms for registered outputs or inputs take them only there: the registered cases
    # about half the time (elsewhere the selector chooses among the rest, which is worth a run too).
    registered = [n for n in forced if by_name[n][4]]
    if registered == ["twoshot_direct"] and rng.random() < 0.4:
        filt = "registered_small"
    elif rng.random() < (0.5 if registered else 0.1):
        filt = "coll_registered"
    else:
        filt = rng.choice(memcheck_filters if sanitized else plain_filters)
    # Copy engines possible (forced, a threshold or a tuning key that turns them on): mostly multi
    # mode, where they can run when GPUs are few.
    ce = any(by_name[n][4] == "input" for n in forced) or any(
        a[4] == "input" and (env.get(a[3], -2) not in (-2, 0) or tuning.get(a[5], 0) > 0) for a in bounded)
    kind = "memcheck" if sanitized else "multi" if filt == "coll_registered" and ce and rng.random() < 0.7 else "plain"
    print(f"{kind}\t{ranks}\t{filt}\t" + " ".join(f"{k}={v}" for k, v in env.items()))
PY
  [ -s "$LOG/fuzz_plan.txt" ] || note "fuzz: no plan (the generator failed: README.md's algorithm table?)"
  i=0; fuzz_fail=0
  while IFS=$'\t' read -r kind n filt vars; do
    i=$((i + 1))
    flog="$LOG/fuzz_${i}_$kind.log"
    # The two large matrices run --quick in plain runs too (all collectives x types x ops).
    quick=""; case "$filt" in coll_counts|coll_registered) quick=--quick ;; esac
    if [ "$kind" = memcheck ]; then
      env $vars timeout ${FUZZ_RUN_TIMEOUT:-150} compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$BUILD/tests/yali-gpu-tests" --in-process --share-gpus --ranks "$n" --quick --deadline-scale 5 \
        --filter "$filt" > "$flog" 2>&1
    else
      mode=single; [ "$kind" = multi ] && mode=multi
      env $vars timeout ${FUZZ_RUN_TIMEOUT:-150} "$BUILD/tests/yali-gpu-tests" --share-gpus --ranks "$n" \
        --mode "$mode" $quick --filter "$filt" > "$flog" 2>&1
    fi
    rc=$?
    [ $rc -ne 0 ] && fuzz_fail=$((fuzz_fail + 1))
    errs=""
    [ "$kind" = memcheck ] && errs=", $(grep -c '========= Invalid\|========= Program hit' "$flog") memcheck errors"
    result=$(grep -E 'passed, .* failed' "$flog" | tail -1)
    [ -z "$result" ] && result=$(grep -E 'FAIL|SKIP|WATCHDOG' "$flog" | head -1 | cut -c1-160)
    echo "fuzz $i $kind $n ranks --filter $filt: rc=$rc$errs, ${result:-no result} | ${vars#YALI_TIMEOUT_MS=30000 }" \
      | sed 's|YALI_TUNING_FILE=[^ ]*/|YALI_TUNING_FILE=logs/|' | tee -a "$LOG/fuzz.txt"
  done < "$LOG/fuzz_plan.txt"
  note "fuzz (FUZZ_SEED=${FUZZ_SEED:-1}): $i runs, $fuzz_fail failed (one line each in logs/fuzz.txt)"
  [ $fuzz_fail -ne 0 ] && grep -v ': rc=0,' "$LOG/fuzz.txt" | sed 's/^/   /'
fi

if has pytests; then
  # What a user does: pip install ., then the tests import the installed package.
  python3 -m pip install --no-build-isolation --no-deps . > "$LOG/pip.log" 2>&1
  note "pip install: rc=$?"
  (cd /tmp && python3 -c "import yali; print(yali.__file__)") >> "$LOG/pip.log" 2>&1
  env -u PYTHONPATH -u YALI_LIBRARY timeout "${PYTEST_TIMEOUT:-420}" python3 -m pytest -q -rs ${PYTEST_ARGS:-tests/python} \
    > "$LOG/pytest.log" 2>&1
  note "pytest: rc=$? $(tail -1 "$LOG/pytest.log")"
fi

perf=$BUILD/bench/yali-perf
if has perf; then
  for n in ${PERF_NP:-2 4 8}; do
    shared=""
    if [ "$n" -gt "$ngpus" ]; then
      # PERF_SHARE=1: more ranks than GPUs, sharing them (YALI only: kernel-level costs, not NVLink).
      [ "${PERF_SHARE:-0}" = 1 ] || continue
      shared="YALI_ALLOW_SHARED_GPU=1"
    fi
    env $shared "$perf" -g "$n" $PERF_SIZES -d "$PERF_DTYPES" $PERF_ITERS $PERF_EXTRA -J "$LOG/perf_single_g$n.json" \
      > "$LOG/perf_single_g$n.txt" 2>&1
    note "yali-perf single -g $n${shared:+ (ranks share GPUs)}: rc=$?"
  done
fi
if has mpiperf; then
  for n in ${PERF_NP:-2 4 8}; do
    [ "$n" -gt "$ngpus" ] && continue
    bash scripts/launch_ranks.sh "$n" "$perf" -g 1 $PERF_SIZES -d "$PERF_DTYPES" $PERF_ITERS $PERF_EXTRA \
      -J "$LOG/perf_multi_np$n.json" > "$LOG/perf_multi_np$n.txt" 2>&1
    note "yali-perf multi -np $n: rc=$?"
  done
fi

if has collperf; then
  # Every collective and type through yali-perf (correctness: #wrong; with ranks sharing GPUs the
  # times are kernel-level costs, not NVLink speed).
  for n in ${COLL_NP:-2 4}; do
    YALI_ALLOW_SHARED_GPU=1 timeout 300 "$perf" -g "$n" ${COLL_ARGS:--C all -d all -b 1K -e 4M -f 16 -n 5 -w 2} --impl yali \
      -J "$LOG/coll_g$n.json" > "$LOG/coll_g$n.txt" 2>&1
    rc=$?
    note "yali-perf collectives -g $n (ranks share GPUs): rc=$rc, wrong=$(python3 -c "import json,sys; print(sum(r.get('wrong',0) for r in json.load(open(sys.argv[1]))['results']))" "$LOG/coll_g$n.json" 2>/dev/null)"
  done
fi
if has emax; then
  # yali-perf -e max (issue 18's memory stress): every collective up to the largest message that
  # fits beside the libraries, ending with the largest size that ran per collective. One process
  # driving EMAX_NP ranks (YALI only where ranks share a GPU: NCCL refuses two ranks of one GPU in
  # one process), then, at EMAX_NCCL_NP, one process per rank, each with its own NCCL_HOSTID, YALI
  # and NCCL side by side (processes sharing a GPU take turns: 4 GB AllReduce took NCCL 11 s per
  # call on one H200 at 2 processes, 2026-11-29, so give it EMAX_NCCL_COLLS and time).
  for n in ${EMAX_NP:-2 3}; do
    YALI_ALLOW_SHARED_GPU=1 timeout ${EMAX_TIMEOUT:-240} "$perf" -g "$n" -C all -e max ${EMAX_ARGS:--b 8G -f 4 -n 1 -w 1 -d bfloat16} \
      > "$LOG/emax_g$n.txt" 2>&1
    note "yali-perf -e max -g $n: rc=$? $(grep -A14 '^# Largest message' "$LOG/emax_g$n.txt" | grep -c '#wrong 0') collective lines with #wrong 0, $(grep -A14 '^# Largest message' "$LOG/emax_g$n.txt" | grep '#wrong' | grep -vc '#wrong 0') other"
  done
  if [ -n "${EMAX_NCCL_NP:-}" ]; then
    YALI_ALLOW_SHARED_GPU=1 timeout ${EMAX_NCCL_TIMEOUT:-400} mpirun --allow-run-as-root -np "$EMAX_NCCL_NP" \
      -x YALI_ALLOW_SHARED_GPU -x LD_LIBRARY_PATH="$(nccl_lib_dir):${LD_LIBRARY_PATH:-}" -x NCCL_NVLS_ENABLE \
      "$(mpi_hostid_wrapper)" "$perf" -g 1 \
      -C ${EMAX_NCCL_COLLS:-allgather} -e max ${EMAX_NCCL_ARGS:--b 16G -f 4 -n 1 -w 0 -d bfloat16} \
      > "$LOG/emax_np${EMAX_NCCL_NP}_nccl.txt" 2>&1
    note "yali-perf -e max, $EMAX_NCCL_NP processes, YALI and NCCL: rc=$? $(grep -A14 '^# Largest message' "$LOG/emax_np${EMAX_NCCL_NP}_nccl.txt" | grep '#wrong' | tr -s ' ' | paste -sd ';')"
  fi
fi
if has abperf; then
  # Before/after, YALI only, ranks sharing GPUs (kernel-level cost per call, not NVLink speed).
  base=${AB_BASE:-base-src}
  bb=${AB_BASE_BUILD:-build-base}  # one build folder per base tree (CMake keeps a folder to one source)
  cmake -S "$base" -B "$bb" -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF \
    > "$LOG/cmake_base.log" 2>&1 && cmake --build "$bb" -j "$(nproc)" --target yali-perf > "$LOG/build_base.log" 2>&1
  note "abperf: base build ($base): rc=$?"
  for rep in $(seq 1 ${AB_REPS:-2}); do
    for n in ${AB_NP:-2 4}; do
      for which in base new; do
        p=$perf; [ $which = base ] && p=$bb/bench/yali-perf
        run=("$p" -g "$n")
        [ "${AB_LAUNCH:-single}" = multi ] && run=(bash scripts/launch_ranks.sh "$n" "$p" -g 1)
        YALI_NO_MPIRUN=1 YALI_ALLOW_SHARED_GPU=1 "${run[@]}" ${AB_ARGS:--b 4K -e 64M -f 4 -d float -n 50 -w 10 --inplace 0} --impl yali \
          -J "$LOG/ab_${which}_e_g${n}_r$rep.json" > "$LOG/ab_${which}_e_g${n}_r$rep.txt" 2>&1
        YALI_NO_MPIRUN=1 YALI_ALLOW_SHARED_GPU=1 "${run[@]}" ${AB_ARGS:--b 4K -e 64M -f 4 -d float -n 50 -w 10 --inplace 0} --impl yali -G 10 \
          -J "$LOG/ab_${which}_g_g${n}_r$rep.json" > "$LOG/ab_${which}_g_g${n}_r$rep.txt" 2>&1
      done
    done
  done
  python3 scripts/ab_table.py "$LOG" > "$LOG/ab_table.txt" 2>&1
  note "abperf: table in logs/ab_table.txt"
  cat "$LOG/ab_table.txt"
fi
if has graphperf; then
  for n in ${PERF_NP:-2 4 8}; do
    [ "$n" -gt "$ngpus" ] && continue
    bash scripts/launch_ranks.sh "$n" "$perf" -g 1 ${GRAPH_SIZES:--b 4K -e 64M -f 4} -d "$PERF_DTYPES" -n 20 -w 5 -G 20 \
      -J "$LOG/perf_graph_np$n.json" > "$LOG/perf_graph_np$n.txt" 2>&1
    note "yali-perf graph -np $n: rc=$?"
  done
fi
if has everycoll; then
  # The multi-GPU speed issue's table (issue 21): every collective, YALI and NCCL from the same runs,
  # one process per GPU (what users run), eager and CUDA graphs, plain buffers (-R 0), registered
  # ones (-R 1: yaliCommRegister and ncclCommRegister) and each library at its best (-R 2: NCCL on
  # ncclMemAlloc buffers registered as symmetric windows; with :2, NCCL's comms under
  # NCCL_CTA_POLICY_ZERO, its copy-engine collectives), then the MoE exchange. Only world sizes the
  # machine has GPUs for: NVLink figures, never ranks sharing a GPU.
  every_json=()
  for n in ${PERF_NP:-2 4 8}; do
    [ "$n" -gt "$ngpus" ] && continue
    for entry in ${EVERY_REG:-0 1 2 2:2}; do
      reg=${entry%%:*}; cta=""; tag="r$reg"
      if [[ "$entry" == *:* ]]; then cta="-x ${entry#*:}"; tag="r${reg}x${entry#*:}"; fi
      for mode in ${EVERY_MODES:-eager graph}; do
        graph=""; [ "$mode" = graph ] && graph="-G 20"
        bash scripts/launch_ranks.sh "$n" "$perf" -g 1 -C all ${EVERY_SIZES:--b 4K -e 1G -f 4} -d "$PERF_DTYPES" \
          -n 20 -w 5 -R "$reg" $cta $graph -J "$LOG/every_np${n}_${tag}_$mode.json" \
          > "$LOG/every_np${n}_${tag}_$mode.txt" 2>&1
        rc=$?
        every_json+=("$LOG/every_np${n}_${tag}_$mode.json")
        note "every collective -np $n -R $reg $cta $mode: rc=$rc, $(grep -c 'Out of bounds.*: 0 OK' "$LOG/every_np${n}_${tag}_$mode.txt") checks OK, $(grep -c 'Out of bounds.*FAILED' "$LOG/every_np${n}_${tag}_$mode.txt") FAILED"
      done
    done
    if [ "${EVERY_A2AV:-1}" = 1 ]; then
      bash scripts/launch_ranks.sh "$n" "$perf" -g 1 -C alltoallv --dist uniform,zipf --tokens ${EVERY_TOKENS:-128,1K,4K} \
        -n 20 -w 5 -J "$LOG/every_np${n}_alltoallv.json" > "$LOG/every_np${n}_alltoallv.txt" 2>&1
      note "alltoallv -np $n: rc=$?"
    fi
  done
  existing=(); for f in "${every_json[@]}"; do [ -f "$f" ] && existing+=("$f"); done
  if [ "${#existing[@]}" -gt 0 ]; then
    python3 scripts/perf_tables.py --best "${existing[@]}" > "$LOG/every_best_table.md" 2>&1
    note "best table: rc=$? (logs/every_best_table.md)"
  fi
fi

if has tune; then
  for n in 2 4 8; do
    [ "$n" -gt "$ngpus" ] && continue
    "$perf" --tune -g "$n" --tune-out "$LOG/tuning_g$n.txt" -J "$LOG/tune_g$n.json" > "$LOG/tune_g$n.log" 2>&1
    note "tune -g $n: rc=$? $(grep -v '^#' "$LOG/tuning_g$n.txt" 2>/dev/null)"
  done
fi

if has algocmp; then
  # Two-shot with the all-gather by reads (twoshot) against by writes (twoshot_push), and
  # programmatic launch on/off for small messages; one process per GPU.
  for n in 2 4; do
    [ "$n" -gt "$ngpus" ] && continue
    for variant in pull push; do
      min=0; [ "$variant" = push ] && min=-1
      YALI_TWOSHOT_PUSH_MIN_BYTES=$min YALI_ONESHOT_LL_MAX_BYTES=0 bash scripts/launch_ranks.sh "$n" "$perf" -g 1 \
        -b 256K -e 1G -f 4 -d float -n 20 -w 5 --inplace 0 -J "$LOG/cmp_${variant}_np$n.json" > "$LOG/cmp_${variant}_np$n.txt" 2>&1
      note "algocmp $variant np$n: rc=$?"
    done
    for pdl in 0 1; do
      YALI_PDL=$pdl bash scripts/launch_ranks.sh "$n" "$perf" -g 1 -b 4K -e 256K -f 4 -d float -n 50 -w 10 --inplace 0 \
        -J "$LOG/cmp_pdl${pdl}_np$n.json" > "$LOG/cmp_pdl${pdl}_np$n.txt" 2>&1
      note "pdl=$pdl np$n: rc=$?"
    done
  done
fi
if has variants; then
  # The same sizes under several settings (algorithm, blocks, slots), YALI only, then NCCL once.
  for n in ${VARIANT_NP:-2 4}; do
    [ "$n" -gt "$ngpus" ] && continue
    for v in ${VARIANTS:-pull:YALI_ALGO=twoshot push:YALI_ALGO=twoshot_push}; do
      name=${v%%:*}; settings=${v#*:}
      vperf=$perf; [[ ",$settings," =~ ,PERF_BUILD=([^,]*), ]] && vperf=${BASH_REMATCH[1]}/bench/yali-perf
      env $(settings_words "$settings") bash scripts/launch_ranks.sh "$n" "$vperf" -g 1 ${VARIANT_SIZES:--b 256K -e 1G -f 4} \
        -d float -n 20 -w 5 --inplace 0 --impl yali -J "$LOG/var_${name}_np$n.json" > "$LOG/var_${name}_np$n.txt" 2>&1
      note "variant $name ($settings) np$n: rc=$?"
    done
    bash scripts/launch_ranks.sh "$n" "$perf" -g 1 ${VARIANT_SIZES:--b 256K -e 1G -f 4} -d float -n 20 -w 5 \
      --inplace 0 --impl nccl -J "$LOG/var_nccl_np$n.json" > "$LOG/var_nccl_np$n.txt" 2>&1
  done
fi
if has ncu; then
  # Rank 0 runs under ncu, rank 1 plainly, both at full speed: only metrics that fit one pass are
  # asked for, because a kernel replay would wait for a peer that does not replay.
  # (2026-11-22: adding nvltx__bytes/nvlrx__bytes and sm__throughput made it 6 passes; it failed.)
  metrics=${NCU_METRICS:-gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum}
  for c in ${NCU_CASES:-push1G:1G:YALI_ALGO=twoshot_push push1M:1M:YALI_ALGO=twoshot_push}; do
    name=${c%%:*}; rest=${c#*:}; size=${rest%%:*}; settings=${rest#*:}
    export YALI_PERF_JOBID="ncu-$$-$name"
    ( export $(settings_words "$settings") YALI_TIMEOUT_MS=20000
      RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 timeout 90 ncu --clock-control none \
        -k regex:'twoshotKernel|oneshotLLKernel' --launch-skip 4 --launch-count 1 --metrics "$metrics" \
        "$perf" -g 1 -b "$size" -e "$size" -d float -n 10 -w 3 -c 0 --impl yali > "$LOG/ncu_$name.txt" 2>&1 &
      RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 timeout 90 \
        "$perf" -g 1 -b "$size" -e "$size" -d float -n 10 -w 3 -c 0 --impl yali > "$LOG/ncu_${name}_peer.txt" 2>&1
      wait )
    note "ncu $name: $(grep -E '__' "$LOG/ncu_$name.txt" | grep -v '==' | awk '{print $1"="$(NF-1)$(NF)}' | tr '\n' ' ')"
  done
fi
# The sweep and the backend benchmark run from this checkout: its python/ and the fresh libyali.
export_repo_python() { export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" YALI_LIBRARY="$PWD/$BUILD/src/libyali.so"; }
if has backends; then
  export_repo_python
  timeout 300 python3 -m yali.bench_backends --run_all --output_dir "$LOG/backends" > "$LOG/backends.log" 2>&1
  note "bench_backends --run_all: rc=$?"
fi
if has sweep; then
  export_repo_python
  timeout ${SWEEP_TIMEOUT:-300} python3 -m yali.sweep --build "$BUILD" ${SWEEP_ARGS:---quick} --output "$OUT/sweep" > "$LOG/sweep.log" 2>&1
  note "sweep ${SWEEP_ARGS:---quick}: rc=$?"
  tar -czf "$OUT/sweep.tar.gz" -C "$OUT" sweep 2>/dev/null
fi

if has symm; then
  export_repo_python
  timeout 300 python3 -m yali.bench_symm --output_dir "$LOG/symm" > "$LOG/symm.log" 2>&1
  note "bench_symm: rc=$? $(tail -1 "$LOG/symm.log")"
fi
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs
echo
echo "==== summary ($(( $(date +%s) - t0 )) s, $ngpus GPUs, commit $(cat "$LOG/commit.txt" 2>/dev/null | cut -c1-10))"
printf '%s\n' "${summary[@]}"
# (if, not &&: a missing table must not make the script's exit status an error)
if ls "$LOG"/perf_*.json >/dev/null 2>&1; then python3 scripts/summarize_perf.py "$LOG"/perf_*.json; fi
if ls "$LOG"/var_*.json >/dev/null 2>&1; then python3 scripts/summarize_perf.py --variants "$LOG"/var_*.json; fi
