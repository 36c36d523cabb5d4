"""Host test of yali-run (python/yali/run.py) with the libyali-nccl.so of the build: no GPU, no
NCCL, no pytest (ctest runs it as `python3 test_yali_run.py LIBYALI_NCCL`).

It checks how the library is found, that LD_PRELOAD gets it first and keeps what was there, that
the command replaces yali-run (its exit status comes back), and that the library preloads into an
ordinary process (sh, cat) without a message from the loader: it needs no CUDA runtime, no libyali
and no NCCL to load (src/nccl_abi/yali_lib.h).
"""

import os
import subprocess
import sys

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYTHON_DIR)

from yali import run  # noqa: E402

FAILURES = []


def check(cond, what):
    print(("PASS  " if cond else "FAIL  ") + what)
    if not cond:
        FAILURES.append(what)


def yali_run(args, **env):
    full = dict(os.environ)
    full["PYTHONPATH"] = PYTHON_DIR + os.pathsep + full.get("PYTHONPATH", "")
    full.pop("LD_PRELOAD", None)
    full.update(env)
    return subprocess.run([sys.executable, "-m", "yali.run"] + args, env=full, capture_output=True, text=True,
                          timeout=120)


def main(library):
    library = os.path.abspath(library)

    check(run.preload_value("/a/lib.so", "") == "/a/lib.so", "preload: alone")
    check(run.preload_value("/a/lib.so", "/b.so /c.so") == "/a/lib.so:/b.so:/c.so", "preload: first, spaces")
    check(run.preload_value("/a/lib.so", "/b.so:/a/lib.so") == "/a/lib.so:/b.so", "preload: once")

    r = yali_run(["--print-library"], YALI_NCCL_SHIM=library)
    check(r.returncode == 0 and r.stdout.strip() == library, "--print-library with YALI_NCCL_SHIM")
    r = yali_run(["--print-library"], YALI_NCCL_SHIM=library + ".missing")
    check(r.returncode == 1 and "YALI_NCCL_SHIM" in r.stderr, "a YALI_NCCL_SHIM that does not exist is an error")
    libyali = os.path.join(os.path.dirname(os.path.dirname(library)), "libyali.so")
    r = yali_run(["--print-library"], YALI_LIBRARY=libyali, YALI_NCCL_SHIM="")
    check(r.returncode == 0 and r.stdout.strip() == library, "found beside $YALI_LIBRARY (a build tree)")
    check(yali_run([]).returncode == 2, "no command: usage, status 2")

    r = yali_run(["sh", "-c", 'echo "$LD_PRELOAD"; grep -c libyali-nccl /proc/self/maps; exit 7'],
                 YALI_NCCL_SHIM=library)
    lines = r.stdout.split()
    check(r.returncode == 7, "the command's exit status comes back (%d)" % r.returncode)
    check(bool(lines) and lines[0].split(":")[0] == library, "LD_PRELOAD starts with the library")
    check(len(lines) > 1 and lines[1] != "0", "a child (grep) has it loaded")
    check("cannot be preloaded" not in r.stderr and "error" not in r.stderr.lower(),
          "it preloads without a loader message: %r" % r.stderr[:300])
    r = yali_run(["no-such-command-yali"], YALI_NCCL_SHIM=library)
    check(r.returncode == 127, "a command that does not exist: status 127")

    print("%d failed" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
