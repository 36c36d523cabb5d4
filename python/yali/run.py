"""yali-run: run an unchanged NCCL program with its intra-node collectives on YALI.

    yali-run COMMAND [ARG ...]        COMMAND and its children run with libyali-nccl preloaded
    yali-run --print-library          the libyali-nccl.so that would be preloaded
    python -m yali.run ...            the same

libyali-nccl.so exports NCCL's API (docs/NCCL_ABI.md): loaded first, through LD_PRELOAD, it runs the
program's collectives on YALI where a communicator lies within this machine, and forwards everything
else to the program's own libnccl.so.2. This command prepends it to LD_PRELOAD and replaces itself
with COMMAND (same pid, signals and exit status); children inherit the variable.

Under a launcher, preload each rank, or the launcher and so everything it starts on this machine:

    mpirun -np 2 yali-run ./build/all_reduce_perf -b 8 -e 128M -f 2
    yali-run torchrun --nproc-per-node 2 train.py

The settings of libyali-nccl (YALI_NCCL_DEBUG=1, YALI_NCCL_DISABLE=allgather,..., YALI_NCCL_LIBRARY,
YALI_NCCL_REGISTER=1, YALI_NODE_ID) and of YALI (YALI_*) pass through the environment.

Where the library is looked for, in order (as ``yali._capi`` looks for libyali):
  1. ``$YALI_NCCL_SHIM``: a path to libyali-nccl.so (when set, it must exist; nothing else is tried);
  2. the package's own ``yali/lib/libyali-nccl.so`` (what ``pip install .`` ships when the build
     found nccl.h);
  3. beside ``$YALI_LIBRARY`` (a build tree's ``src/libyali.so``: its ``nccl_abi/libyali-nccl.so``);
  4. ``<repo>/build/src/nccl_abi/libyali-nccl.so`` when running from the source tree (``make build``).
The loader splits LD_PRELOAD at spaces and colons, so a library path holding one cannot be
preloaded: yali-run then refuses to run (exit status 1) instead of running COMMAND on plain NCCL.
"""

import os
import sys
from pathlib import Path

LIBRARY_NAME = "libyali-nccl.so"
_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_DIR = _PACKAGE_DIR.parent.parent  # python/yali/run.py -> <repo>


class LibraryNotFound(RuntimeError):
    pass


def _candidates():
    """[(description, path)] in search order, and whether the first came from $YALI_NCCL_SHIM."""
    env = os.environ.get("YALI_NCCL_SHIM")
    if env:
        return [("$YALI_NCCL_SHIM", env)], True
    found = [("the package", str(_PACKAGE_DIR / "lib" / LIBRARY_NAME))]
    libyali = os.environ.get("YALI_LIBRARY")
    if libyali:
        here = Path(libyali).resolve().parent
        found += [("beside $YALI_LIBRARY", str(here / "nccl_abi" / LIBRARY_NAME)),
                  ("beside $YALI_LIBRARY", str(here / LIBRARY_NAME))]
    if (_REPO_DIR / "include" / "yali" / "yali.h").is_file():
        found.append(("the source tree's build", str(_REPO_DIR / "build" / "src" / "nccl_abi" / LIBRARY_NAME)))
    return found, False


def find_library():
    """The absolute path of the libyali-nccl.so yali-run preloads, or raise LibraryNotFound."""
    cands, from_env = _candidates()
    for _, path in cands:
        if os.path.isfile(path):
            return os.path.abspath(path)
    tried = "; ".join(f"{path} ({desc})" for desc, path in cands)
    hint = ("" if from_env else
            " Build it with `make build` (CMake builds it when it finds nccl.h: NCCL_HOME, the CUDA "
            "toolkit, or pip's nvidia-nccl), or set YALI_NCCL_SHIM=/path/to/libyali-nccl.so.")
    raise LibraryNotFound(f"{LIBRARY_NAME} not found. Looked at: {tried}.{hint}")


# ld.so splits LD_PRELOAD at these: a path holding one is not preloaded as a whole.
_PRELOAD_SEPARATORS = (" ", ":")


def preload_value(library, current):
    """LD_PRELOAD with `library` first (once), then what `current` held, in its order."""
    # The loader splits LD_PRELOAD at spaces and colons (_PRELOAD_SEPARATORS).
    others = [p for p in current.replace(":", " ").split() if p and p != library] if current else []
    return ":".join([library] + others)


_USAGE = """usage: yali-run COMMAND [ARG ...]
       yali-run --print-library
Runs COMMAND with libyali-nccl preloaded (LD_PRELOAD), so that its NCCL collectives within this
machine run on YALI; `python -m yali.run --help` says more."""


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print(_USAGE, file=sys.stderr)
        return 2
    try:
        library = find_library()
    except LibraryNotFound as e:
        print(f"yali-run: {e}", file=sys.stderr)
        return 1
    if args[0] == "--print-library":
        print(library)
        return 0
    if any(sep in library for sep in _PRELOAD_SEPARATORS):
        # The loader would look for the pieces, find none and go on: the program would run on its
        # own NCCL with nothing said.
        print(f"yali-run: cannot preload {library}: the loader splits LD_PRELOAD at spaces and "
              f"colons, so a path holding one is not preloaded. Copy or link {LIBRARY_NAME} to a "
              "path without them and point YALI_NCCL_SHIM at it.", file=sys.stderr)
        return 1
    env = dict(os.environ)
    env["LD_PRELOAD"] = preload_value(library, env.get("LD_PRELOAD", ""))
    try:
        os.execvpe(args[0], args, env)
    except OSError as e:
        print(f"yali-run: cannot run {args[0]}: {e.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
