#!/usr/bin/env bash
# Runs every test of a build: ctest (host tests, then GPU tests, which skip without GPUs and run
# with ranks sharing GPUs where GPUs are fewer than ranks) and the Python tests. One summary line per
# part; exits non-zero when any part failed.
#
#   bash scripts/test.sh [BUILD_DIR]     (default: build; `make test` calls it)
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac

# NVLink multicast stays off on shared machines (see README).
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1

if [ ! -d "$BUILD" ]; then
  echo "test.sh: build directory $BUILD not found (run: make build)" >&2
  exit 2
fi

summary=()
status=0

# ---- ctest ----------------------------------------------------------------------------------------
ctest_log="$(mktemp)"
trap 'rm -f "$ctest_log"' EXIT
ctest --test-dir "$BUILD" --output-on-failure 2>&1 | tee "$ctest_log"
ctest_rc=${PIPESTATUS[0]}
# ctest's own tally ("100% tests passed, 0 tests failed out of 6") plus the skipped ones.
tally="$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$ctest_log" | tail -n 1)"
nskip="$(grep -c '\*\*\*Skipped' "$ctest_log" || true)"
# ctest shows a passing test's output only in its log: there, each GPU test's NOTE line (ranks
# sharing GPUs: correctness only; one line per test, by name) and the skipped tests' SKIP reasons
# (one line per reason, with the tests that gave it).
notes="$(awk '/^[0-9]+\/[0-9]+ Test: /{name=$3}
  /^NOTE:/{print "  " name ": " $0}
  /^SKIP:/{if (!($0 in who)) order[n++]=$0; who[$0]=who[$0] (who[$0] ? ", " : "") name}
  END{for (i=0; i<n; i++) print "  " order[i] " [" who[order[i]] "]"}' \
  "$BUILD/Testing/Temporary/LastTest.log" 2>/dev/null)"
nshared="$(printf '%s\n' "$notes" | grep -c ': NOTE: .*ranks share GPUs' || true)"
if [ -n "$notes" ]; then
  echo
  echo "GPU tests' notes (full output: $BUILD/Testing/Temporary/LastTest.log):"
  printf '%s\n' "$notes"
fi
extra="${nskip} skipped"
[ "$nshared" -gt 0 ] && extra="$extra; $nshared ran with ranks sharing GPUs: correctness only, timings mean nothing"
if [ "$ctest_rc" -eq 0 ]; then
  summary+=("ctest:  PASS  (${tally:-no tally}; $extra)")
else
  summary+=("ctest:  FAIL  (${tally:-ctest exited $ctest_rc}; $extra)")
  status=1
fi

# ---- Python -----------------------------------------------------------------------------------------
PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
  summary+=("python: SKIP  ($PY not found)")
elif ! "$PY" -c 'import pytest' >/dev/null 2>&1; then
  summary+=("python: SKIP  (pytest is not installed for $PY: pip install pytest)")
elif [ ! -d "$ROOT/tests/python" ] || [ -z "$(find "$ROOT/tests/python" -name 'test_*.py' -print -quit)" ]; then
  summary+=("python: SKIP  (no tests in tests/python)")
else
  export YALI_LIBRARY="$BUILD/src/libyali.so"
  export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
  (cd "$ROOT" && "$PY" -m pytest -q tests/python)
  py_rc=$?
  # pytest: 0 passed, 5 nothing collected; anything else is a failure.
  if [ "$py_rc" -eq 0 ]; then
    summary+=("python: PASS")
  elif [ "$py_rc" -eq 5 ]; then
    summary+=("python: SKIP  (pytest collected no tests)")
  else
    summary+=("python: FAIL  (pytest exited $py_rc)")
    status=1
  fi
fi

echo
echo "==== test summary ($BUILD) ===="
for line in "${summary[@]}"; do echo "$line"; done
exit $status
