#!/usr/bin/env bash
# libyali-nccl's host tests under a sanitizer: the shim, the fake NCCL and the fake YALI built with
# -fsanitize=thread (ThreadSanitizer, the default) or -fsanitize=address (AddressSanitizer; leak
# checks off: the shim keeps some memory on purpose, e.g. an aborted comm's), no GPU and no libyali,
# then yali-nccl-abi-error-tests run with every report logged. Not part of CI (each build takes
# about 2.5 minutes on 2 cores); run both after a change to the shim's threads (background set-ups,
# hand-overs, aborts), its memory, or the fakes.
#
#   bash scripts/host_sanitize.sh [thread|address] [BUILD_DIR]
#        (default: thread, in build-tsan or build-asan; test-name filter: TESTS=prefix)
#
# Prints one line per test that failed and per report (its first frames).
# Known, not a finding: deregistering_after_an_abort_frees_the_handle fails under both, since it
# counts freed bytes with mallinfo2, which the sanitizers' allocators do not feed.
# Known on main (fixed in docs/wip/nocolor-split; NCCL_ABI.md, "Limits"):
#   a_split_nccl_makes_in_its_background_against_our_verdict_is_never_freed reports, under thread,
#   a race in adopt (comm.cc) with the fake NCCL's delivery thread (a plain read of the child
#   pointer NCCL writes from its background), and under address a heap-use-after-free by that
#   thread: the Comm a NCCL_SPLIT_NOCOLOR split was given, freed, then written by NCCL's job.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SANITIZER="${1:-thread}"
case "$SANITIZER" in
  thread) short=tsan; flags="-fsanitize=thread"; export TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0" ;;
  address) short=asan; flags="-fsanitize=address -fno-omit-frame-pointer"; export ASAN_OPTIONS="detect_leaks=0" ;;
  *) echo "host_sanitize: thread or address, not '$SANITIZER'"; exit 2 ;;
esac
BUILD="${2:-$ROOT/build-$short}"
if [ ! -f "$BUILD/build.ninja" ]; then
  mkdir -p "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_EXE_LINKER_FLAGS=$flags" "-DCMAKE_SHARED_LINKER_FLAGS=$flags" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DYALI_BUILD_BENCH=OFF -DYALI_BUILD_EXAMPLES=OFF \
    > "$BUILD/$short-configure.log" 2>&1 ||
    { echo "host_sanitize: configure failed (see $BUILD/$short-configure.log)"; exit 2; }
fi
ninja -C "$BUILD" yali-nccl-abi-error-tests yali-nccl yali-fake-nccl yali-fake-yali yali-fake-nccl-env \
  > "$BUILD/$short-build.log" 2>&1 || { echo "host_sanitize: build failed (see $BUILD/$short-build.log)"; exit 2; }
reports="$BUILD/$short-reports"
rm -rf "$reports" && mkdir -p "$reports"
if [ "$SANITIZER" = thread ]; then
  export TSAN_OPTIONS="$TSAN_OPTIONS log_path=$reports/report"
else
  export ASAN_OPTIONS="$ASAN_OPTIONS log_path=$reports/report"
fi
"$BUILD/tests/yali-nccl-abi-error-tests" ${TESTS:-} > "$BUILD/$short-tests.log" 2>&1
echo "host_sanitize ($SANITIZER): $(tail -n 1 "$BUILD/$short-tests.log") (log: $BUILD/$short-tests.log)"
grep '^FAIL' "$BUILD/$short-tests.log"
n=0
for f in "$reports"/report*; do
  [ -e "$f" ] || continue
  n=$((n + 1))
  echo "report $f:"
  grep -E '^(WARNING|==[0-9]+==ERROR)|^ +#[01] |^(freed|previously allocated) by' "$f" | head -n 8 | sed 's/^/  /'
done
echo "host_sanitize ($SANITIZER): $n report(s) in $reports"
