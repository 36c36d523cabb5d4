"""The benchmark sweep: hardware baseline, examples, then YALI vs NCCL AllReduce over sizes, dtypes,
launch modes and timing modes, repeated --runs times; then the report (yali.report).

    make sweep                               # = python3 -m yali.sweep --build build (--standard)
    python3 -m yali.sweep --quick                # fp32, 5 sizes, 1 run
    python3 -m yali.sweep --sizes 4K:1G --dtypes bf16 --timing cuda-events,graph --runs 3
    python3 -m yali.sweep --dry-run --quick      # print the commands, run nothing
    python3 -m yali.sweep --from-json output/2026-11-22/100000   # rebuild the report only

Each step is one yali-perf process (or one process per GPU) that measures YALI and NCCL side by
side with the same timing mode, sizes and buffers, and writes its results with -J into raw/.
Multi-process steps use mpirun when it is on PATH (--launcher to choose), else this script starts
one yali-perf per GPU itself with RANK / WORLD_SIZE / LOCAL_RANK and a shared YALI_PERF_JOBID (a
file rendezvous in yali-perf). Child processes always get NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1.

Output: output/YYYY-MM-DD/HHMMSS/ (or --output) with hw-baseline/, examples/, raw/, yali/, nccl/,
figures/, summary.md and sweep.json (this sweep's command line, plan and failures).

Standard library only (the report imports numpy and matplotlib).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from . import hw as _hw
from . import report as _report

# ---- Settings ------------------------------------------------------------------------------------

PERF_CANDIDATES = ("bench/yali_perf/yali-perf", "bench/yali-perf")

# The sweep's --timing names -> yali-perf's --timing values.
TIMING_ARGS = {"cuda-events": "events", "events": "events", "throughput": "throughput",
               "latency": "latency", "graph": "graph"}
ALL_TIMINGS = ("cuda-events", "throughput", "latency", "graph")

# The sweep's --dtypes names -> yali-perf's -d values.
DTYPE_ARGS = {"fp32": "float", "float": "float", "float32": "float",
              "fp16": "half", "half": "half", "float16": "half",
              "bf16": "bfloat16", "bfloat16": "bfloat16"}

# yali-perf --inplace: 0 out-of-place only, 1 in-place only, 2 both.
PLACEMENT_ARGS = {"out-of-place": 0, "in-place": 1, "both": 2}


@dataclass(frozen=True)
class Preset:
    sizes: str
    dtypes: Tuple[str, ...]
    runs: int
    iters: int
    warmup: int
    placement: str
    about: str


# Why these numbers: --quick answers "does it work and roughly how fast" in about a minute;
# --standard gives 3 runs so that mean ± std across runs means something, over the full range the
# issue asks for (4 KB to 2 GB); --extensive adds runs and iterations for the latency percentiles
# (P99 over 5 x 100 samples per size is an interpolation between real samples, not an extreme).
PRESETS = {
    "quick": Preset("4K:256M:16", ("fp32",), 1, 20, 5, "out-of-place",
                    "fp32, 4K..256M x16 (5 sizes), 1 run, 20 iterations"),
    "standard": Preset("4K:2G", ("fp32", "fp16", "bf16"), 3, 20, 5, "both",
                       "fp32/fp16/bf16, 4K..2G x2 (20 sizes), 3 runs, 20 iterations"),
    "extensive": Preset("4K:2G", ("fp32", "fp16", "bf16"), 5, 100, 20, "both",
                        "fp32/fp16/bf16, 4K..2G x2 (20 sizes), 5 runs, 100 iterations"),
}


# ---- Parsing -------------------------------------------------------------------------------------

def parse_sizes(text: str) -> List[int]:
    """'4K,64K,1M' (a list), '4K:2G' (powers of 2 from 4K to 2G), '4K:2G:4' (factor 4),
    or a mix separated by commas. Returns sorted unique byte counts."""
    out = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if ":" in item:
            parts = item.split(":")
            if len(parts) not in (2, 3):
                raise ValueError(f"bad size range '{item}' (use START:END or START:END:FACTOR)")
            lo, hi = _report.parse_size(parts[0]), _report.parse_size(parts[1])
            factor = int(parts[2]) if len(parts) == 3 else 2
            if factor < 2 or lo > hi:
                raise ValueError(f"bad size range '{item}': need START <= END and FACTOR >= 2")
            s = lo
            while s <= hi:
                out.add(s)
                s *= factor
        else:
            out.add(_report.parse_size(item))
    if not out:
        raise ValueError(f"no sizes in '{text}'")
    return sorted(out)


def size_groups(sizes: Sequence[int]) -> List[Tuple[List[int], List[str]]]:
    """Splits sizes into yali-perf invocations: one -b/-e/-f range when they form a geometric
    series with an integer factor, else one invocation per size."""
    sizes = sorted(sizes)
    h = _report.human_size

    def exact(n: int) -> str:
        s = h(n)
        return s if "." not in s and not s.endswith("B") else str(n)

    if len(sizes) == 1:
        return [(sizes, ["-b", exact(sizes[0]), "-e", exact(sizes[0]), "-f", "2"])]
    f = sizes[1] // sizes[0]
    if f >= 2 and all(b == a * f for a, b in zip(sizes, sizes[1:])):
        return [(sizes, ["-b", exact(sizes[0]), "-e", exact(sizes[-1]), "-f", str(f)])]
    return [([s], ["-b", exact(s), "-e", exact(s), "-f", "2"]) for s in sizes]


def parse_list(text: str, allowed: Dict[str, str], what: str) -> List[str]:
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        if item not in allowed:
            raise ValueError(f"unknown {what} '{item}' (choose from {', '.join(sorted(allowed))})")
        if item not in out:
            out.append(item)
    if not out:
        raise ValueError(f"no {what} given")
    return out


def visible_gpus() -> Optional[int]:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        entries = [e for e in cvd.split(",") if e.strip()]
        if entries and entries[0].strip() == "-1":
            return 0
        return len(entries)
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


# ---- The plan ------------------------------------------------------------------------------------

@dataclass
class Step:
    index: int
    run: int
    launch: str              # "single" | "multi"
    timing: str              # yali-perf name
    dtype: str               # yali-perf name
    sizes: List[int]
    size_args: List[str]
    name: str                # file stem under raw/
    est_seconds: float = 0.0
    # filled when run
    status: str = "pending"
    seconds: float = 0.0
    reason: str = ""
    commands: List[str] = field(default_factory=list)


@dataclass
class Config:
    build: str
    out_dir: str
    ngpus: int
    sizes: List[int]
    dtypes: List[str]        # yali-perf names
    timings: List[str]       # yali-perf names
    launches: List[str]
    runs: int
    iters: int
    warmup: int
    check: int
    placement: str
    launcher: str            # "mpirun" | "self"
    perf_args: List[str]
    timeout: Optional[float]
    preset: str


def estimate_seconds(cfg: Config, launch: str, timing: str, sizes: Sequence[int]) -> float:
    """A rough model of one yali-perf run, for the progress line's time left and the default
    timeout: start-up (process, CUDA contexts, NCCL and YALI communicators), then for each size,
    impl and placement, (warmup + iters + check) calls at ~20 us + bytes x 2(n-1)/n / 300 GB/s,
    plus the correctness check's host-side work (~2 GB/s). Real runs replace it as they finish."""
    n = max(cfg.ngpus, 2)
    startup = 4.0 if launch == "single" else 6.0
    base = 40e-6 if timing == "latency" else 20e-6
    placements = 2 if cfg.placement == "both" else 1
    calls = cfg.warmup + cfg.iters + (1 if cfg.check else 0)
    total = startup
    for s in sizes:
        per_call = base + s * 2.0 * (n - 1) / n / 300e9
        total += 2 * placements * (calls * per_call + (s / 2e9 if cfg.check else 0.0))
    return total * 1.2


def build_plan(cfg: Config) -> List[Step]:
    steps: List[Step] = []
    groups = size_groups(cfg.sizes)
    for run in range(1, cfg.runs + 1):  # runs outermost: slow drift hits every mode alike
        for launch in cfg.launches:
            for timing in cfg.timings:
                for dtype in cfg.dtypes:
                    for sizes, size_args in groups:
                        name = f"{_report.dtype_label(dtype)}_{launch}_{timing}_run{run}"
                        if len(groups) > 1:
                            name += f"_{sizes[0]}"
                        steps.append(Step(len(steps) + 1, run, launch, timing, dtype, sizes,
                                          size_args, name,
                                          estimate_seconds(cfg, launch, timing, sizes)))
    return steps


def find_perf(build: str) -> Optional[str]:
    return _hw.find_binary(build, PERF_CANDIDATES)


def perf_argv(cfg: Config, step: Step, binary: str) -> List[str]:
    json_path = os.path.join(cfg.out_dir, "raw", step.name + ".json")
    g = cfg.ngpus if step.launch == "single" else 1
    return ([binary, "-g", str(g)] + step.size_args +
            ["-n", str(cfg.iters), "-w", str(cfg.warmup), "-c", str(cfg.check),
             "-d", step.dtype, "--impl", "yali,nccl", "--timing", step.timing,
             "--inplace", str(PLACEMENT_ARGS[cfg.placement]), "-J", json_path] + cfg.perf_args)


def forwarded_env_names() -> List[str]:
    """Variables mpirun must forward with -x: the multicast switches, the loader path, and every
    YALI_*, NCCL_* and CUDA_* setting of this environment."""
    names = list(_hw.CHILD_ENV)
    for k in sorted(os.environ):
        if k in ("PATH", "LD_LIBRARY_PATH") or k.startswith(("YALI_", "NCCL_", "CUDA_")):
            if k not in names:
                names.append(k)
    return names


def mpirun_argv(cfg: Config, argv: List[str]) -> List[str]:
    cmd = ["mpirun", "--allow-run-as-root", "-np", str(cfg.ngpus), "--bind-to", "none"]
    for name in forwarded_env_names():
        cmd += ["-x", name]
    return cmd + argv


def self_launch_envs(cfg: Config, jobid: str) -> List[Dict[str, str]]:
    return [{"RANK": str(r), "WORLD_SIZE": str(cfg.ngpus), "LOCAL_RANK": str(r),
             "LOCAL_WORLD_SIZE": str(cfg.ngpus), "YALI_PERF_JOBID": jobid}
            for r in range(cfg.ngpus)]


def describe(cfg: Config, step: Step, binary: str) -> List[str]:
    """The shell command(s) of a step, as printed by --dry-run and recorded in sweep.json."""
    argv = perf_argv(cfg, step, binary)
    if step.launch == "single":
        return [shlex.join(argv)]
    if cfg.launcher == "mpirun":
        return [shlex.join(mpirun_argv(cfg, argv))]
    jobid = f"<sweep-id>-{step.name}"
    return [" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(argv)
            + " &" for env in self_launch_envs(cfg, jobid)] + ["wait"]


# ---- Running -------------------------------------------------------------------------------------

class Children:
    """The process groups this sweep started, so that a timeout or Ctrl-C ends exactly them."""

    def __init__(self):
        self.procs: List[subprocess.Popen] = []

    def start(self, argv: List[str], env: Dict[str, str], log_path: str) -> subprocess.Popen:
        log = open(log_path, "w")
        try:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
        finally:
            log.close()
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.time() + 5
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                p.wait()
        self.procs = []

    def wait_all(self, timeout: float) -> Tuple[List[Optional[int]], bool]:
        """Waits for every child; stops early when one fails (its peers would wait for it until
        their own timeout). Returns (return codes, timed out)."""
        deadline = time.time() + timeout
        while True:
            codes = [p.poll() for p in self.procs]
            if all(c is not None for c in codes):
                self.procs = []
                return codes, False
            if any(c not in (None, 0) for c in codes):
                self.kill_all()
                return codes, False
            if time.time() > deadline:
                self.kill_all()
                return codes, True
            time.sleep(0.05)


def run_step(cfg: Config, step: Step, binary: str, children: Children) -> None:
    raw = os.path.join(cfg.out_dir, "raw")
    json_path = os.path.join(raw, step.name + ".json")
    log_path = os.path.join(raw, step.name + ".log")
    if os.path.exists(json_path):
        os.remove(json_path)
    argv = perf_argv(cfg, step, binary)
    timeout = cfg.timeout or max(120.0, 5.0 * step.est_seconds + 60.0)
    t0 = time.time()
    if step.launch == "single":
        children.start(argv, _hw.child_env(), log_path)
    elif cfg.launcher == "mpirun":
        children.start(mpirun_argv(cfg, argv), _hw.child_env(), log_path)
    else:
        jobid = f"yali-sweep-{os.getpid()}-{int(t0)}-{step.index}"
        for env in self_launch_envs(cfg, jobid):
            rank = env["RANK"]
            children.start(argv, _hw.child_env(env),
                           log_path if rank == "0" else f"{log_path[:-4]}.rank{rank}.log")
    codes, timed_out = children.wait_all(timeout)
    step.seconds = time.time() - t0
    if timed_out:
        step.status, step.reason = "failed", f"timed out after {timeout:.0f} s"
        return
    bad = [c for c in codes if c not in (0, None)]
    if bad:
        step.status, step.reason = "failed", f"exit code {bad[0]} (log: {log_path})"
        return
    try:
        with open(json_path) as f:
            doc = json.load(f)
        if doc.get("schema") != _report.PERF_SCHEMA or not doc.get("results"):
            raise ValueError("no results in it")
    except (OSError, ValueError) as e:
        step.status, step.reason = "failed", f"no usable JSON at {json_path}: {e}"
        return
    step.status = "ok"


def find_examples(build: str) -> List[str]:
    root = os.path.join(build, "examples")
    found = []
    for dirpath, _, files in os.walk(root):
        for fn in files:
            p = os.path.join(dirpath, fn)
            if fn.startswith("yali-example-") and os.access(p, os.X_OK) and os.path.isfile(p):
                found.append(p)
    return sorted(found, key=os.path.basename)


def uses_mpi(path: str) -> bool:
    """An MPI example: its name says "mpi", or it is linked against libmpi."""
    if "mpi" in os.path.basename(path).lower():
        return True
    try:
        with open(path, "rb") as f:
            return b"libmpi" in f.read(64 << 20)
    except OSError:
        return False


def example_argv(cfg: Config, path: str) -> Optional[List[str]]:
    """MPI examples run under mpirun, one process per GPU; the others run as one process (which
    drives every GPU itself). None when an MPI example has no mpirun to run under."""
    if uses_mpi(path):
        if not shutil.which("mpirun"):
            return None
        return mpirun_argv(cfg, [os.path.abspath(path)])
    return [os.path.abspath(path)]


def run_examples(cfg: Config, timeout: float, children: Children) -> List[Dict[str, object]]:
    out_dir = os.path.join(cfg.out_dir, "examples")
    os.makedirs(out_dir, exist_ok=True)
    results = []
    for path in find_examples(cfg.build):
        name = os.path.basename(path)
        argv = example_argv(cfg, path)
        log_path = os.path.join(out_dir, name + ".log")
        entry: Dict[str, object] = {"name": name, "command": shlex.join(argv) if argv else ""}
        if argv is None:
            entry.update(status="SKIP", returncode=None, seconds=0.0,
                         tail="needs mpirun, which is not on PATH")
            results.append(entry)
            print(f"  {name}: SKIP (needs mpirun)", flush=True)
            continue
        t0 = time.time()
        children.start(argv, _hw.child_env(), log_path)
        codes, timed_out = children.wait_all(timeout)
        secs = time.time() - t0
        with open(log_path, errors="replace") as f:
            tail = "".join(f.readlines()[-20:])
        status = "TIMEOUT" if timed_out else ("PASS" if codes and codes[0] == 0 else "FAIL")
        entry.update(status=status, returncode=None if timed_out else codes[0],
                     seconds=round(secs, 2), tail=tail, log=os.path.basename(log_path))
        results.append(entry)
        print(f"  {name}: {status} ({secs:.1f} s)", flush=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    return results


def _fmt_duration(s: float) -> str:
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _git_info(repo: str) -> Tuple[Optional[str], Optional[bool]]:
    """(commit, has local changes), read-only git plumbing; (None, None) outside a checkout."""
    try:
        commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        if commit.returncode != 0:
            return None, None
        dirty = subprocess.run(["git", "-C", repo, "diff-index", "--quiet", "HEAD", "--"],
                               capture_output=True, timeout=10).returncode != 0
        return commit.stdout.strip(), dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


# ---- Main ----------------------------------------------------------------------------------------

def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python3 -m yali.sweep",
        description="YALI vs NCCL AllReduce sweep: hardware baseline, examples, benchmarks, "
                    "report.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="presets:\n" + "\n".join(f"  --{k:9} {p.about}" for k, p in PRESETS.items())
               + "\n(default --standard; --sizes/--dtypes/--runs/--iters override a preset)")
    p = ap.add_mutually_exclusive_group()
    p.add_argument("--quick", dest="preset", action="store_const", const="quick")
    p.add_argument("--standard", dest="preset", action="store_const", const="standard")
    p.add_argument("--extensive", dest="preset", action="store_const", const="extensive")
    ap.add_argument("--sizes", help="list and/or ranges: 4K,1M,1G or 4K:2G (x2) or 4K:2G:4")
    ap.add_argument("--dtypes", help="comma list of fp32, fp16, bf16")
    ap.add_argument("--runs", type=int, help="repeat each yali-perf invocation this many times")
    ap.add_argument("--iters", type=int, help="timed iterations per size (yali-perf -n)")
    ap.add_argument("--warmup", type=int, help="warm-up iterations per size (yali-perf -w)")
    ap.add_argument("--check", type=int, default=1, help="yali-perf -c (default 1: check results)")
    ap.add_argument("--placement", choices=sorted(PLACEMENT_ARGS),
                    help="out-of-place, in-place or both (preset default)")
    ap.add_argument("--gpus", type=int, help="GPUs per run (default: all visible)")
    ap.add_argument("--single", action="store_true", help="single-process mode (yali-perf -g N)")
    ap.add_argument("--mpi", action="store_true",
                    help="multi-process mode, one process per GPU (default: both modes)")
    ap.add_argument("--launcher", choices=("auto", "mpirun", "self"), default="auto",
                    help="multi-process launcher (auto: mpirun if on PATH, else self)")
    ap.add_argument("--timing", default=",".join(ALL_TIMINGS),
                    help="comma list of cuda-events, throughput, latency, graph (default all)")
    ap.add_argument("--perf-args", default="", help="extra arguments for every yali-perf run")
    ap.add_argument("--build", default="build", help="CMake build directory (default build)")
    ap.add_argument("--output", help="output directory (default output/YYYY-MM-DD/HHMMSS)")
    ap.add_argument("--timeout", type=float,
                    help="seconds per yali-perf run (default: 5x its estimate + 60, >= 120)")
    ap.add_argument("--example-timeout", type=float, default=120.0)
    ap.add_argument("--hw-bytes", help="yali-hw --bytes (default 1G)")
    ap.add_argument("--skip-hw", action="store_true", help="do not run yali-hw")
    ap.add_argument("--skip-examples", action="store_true", help="do not run the examples")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--from-json", metavar="DIR",
                    help="rebuild the report from DIR's saved raw JSON; run nothing")
    return ap


def config_from_args(args, ngpus: int, launcher: str) -> Config:
    preset = PRESETS[args.preset or "standard"]
    dtypes = [DTYPE_ARGS[d] for d in parse_list(args.dtypes or ",".join(preset.dtypes),
                                                 DTYPE_ARGS, "dtype")]
    dtypes = list(dict.fromkeys(dtypes))
    timings = list(dict.fromkeys(TIMING_ARGS[t] for t in parse_list(args.timing, TIMING_ARGS,
                                                                      "timing mode")))
    launches = [m for m, on in (("single", args.single), ("multi", args.mpi)) if on] or \
        ["single", "multi"]
    out = args.output or os.path.join("output", _dt.datetime.now().strftime("%Y-%m-%d"),
                                      _dt.datetime.now().strftime("%H%M%S"))
    runs = args.runs if args.runs is not None else preset.runs
    iters = args.iters if args.iters is not None else preset.iters
    warmup = args.warmup if args.warmup is not None else preset.warmup
    if runs < 1 or iters < 1 or warmup < 0:
        raise ValueError("--runs and --iters must be >= 1, --warmup >= 0")
    return Config(build=args.build, out_dir=out, ngpus=ngpus,
                  sizes=parse_sizes(args.sizes or preset.sizes), dtypes=dtypes, timings=timings,
                  launches=launches, runs=runs, iters=iters, warmup=warmup, check=args.check,
                  placement=args.placement or preset.placement, launcher=launcher,
                  perf_args=shlex.split(args.perf_args), timeout=args.timeout,
                  preset=args.preset or "standard")


def sweep_command(argv: Sequence[str]) -> str:
    return "PYTHONPATH=python python3 -m yali.sweep " + shlex.join(list(argv))


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = make_parser().parse_args(argv)

    if args.from_json:
        out = args.output or args.from_json
        if not _report.find_perf_files(args.from_json):
            print(f"yali.sweep: no raw JSON under {args.from_json}", file=sys.stderr)
            return 1
        ds = _report.generate(args.from_json, out)
        for line in _report.headline_lines(ds):
            print(line)
        print(f"report: {os.path.join(out, 'summary.md')}")
        return 0

    ngpus = args.gpus if args.gpus is not None else visible_gpus()
    assumed = False
    if ngpus is None or ngpus < 1:
        if not args.dry_run:
            print("yali.sweep: no GPU visible (nvidia-smi -L / CUDA_VISIBLE_DEVICES); "
                  "pass --gpus N", file=sys.stderr)
            return 1
        ngpus, assumed = 4, True
    launcher = args.launcher
    if launcher == "auto":
        launcher = "mpirun" if shutil.which("mpirun") else "self"
    try:
        cfg = config_from_args(args, ngpus, launcher)
    except ValueError as e:
        print(f"yali.sweep: {e}", file=sys.stderr)
        return 2

    steps = build_plan(cfg)
    perf = find_perf(cfg.build)
    perf_shown = perf or os.path.join(cfg.build, PERF_CANDIDATES[0])
    total_est = sum(s.est_seconds for s in steps)
    print(f"YALI sweep: {len(steps)} yali-perf runs on {cfg.ngpus} GPU(s)"
          f"{' (assumed: GPU count unknown here)' if assumed else ''}; "
          f"sizes {_report.human_size(cfg.sizes[0])}..{_report.human_size(cfg.sizes[-1])} "
          f"({len(cfg.sizes)}), dtypes {','.join(_report.dtype_label(d) for d in cfg.dtypes)}, "
          f"timing {','.join(_report.timing_label(t) for t in cfg.timings)}, "
          f"launch {','.join(cfg.launches)} (multi via {cfg.launcher}), {cfg.runs} run(s), "
          f"{cfg.iters} iterations; estimated {_fmt_duration(total_est)} for the benchmarks "
          f"(a model, not a measurement)", flush=True)

    if args.dry_run:
        print(f"# output directory: {cfg.out_dir}")
        print("# environment of every child: "
              + " ".join(f"{k}={v}" for k, v in _hw.CHILD_ENV.items()))
        if not args.skip_hw:
            res = _hw.run(cfg.build, os.path.join(cfg.out_dir, "hw-baseline"), args.hw_bytes,
                          dry_run=True)
            print("# hardware baseline\n" + str(res["command"]))
        if not args.skip_examples:
            exs = find_examples(cfg.build)
            print("# examples" + ("" if exs else f" (none under {cfg.build}/examples)"))
            for e in exs:
                a = example_argv(cfg, e)
                print(shlex.join(a) if a else f"# {e}: skipped, needs mpirun")
        for step in steps:
            print(f"# [{step.index}/{len(steps)}] {step.launch} "
                  f"{_report.timing_label(step.timing)} {_report.dtype_label(step.dtype)} "
                  f"run {step.run}/{cfg.runs} (~{_fmt_duration(step.est_seconds)})")
            for line in describe(cfg, step, perf_shown):
                print(line)
        print(f"# then: python3 -m yali.report --input {cfg.out_dir} --output {cfg.out_dir}")
        return 0

    if perf is None:
        print(f"yali.sweep: yali-perf not found under {cfg.build} "
              f"({', '.join(PERF_CANDIDATES)}); build it with `make build`", file=sys.stderr)
        return 1

    os.makedirs(os.path.join(cfg.out_dir, "raw"), exist_ok=True)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    commit, dirty = _git_info(repo)
    record: Dict[str, object] = {
        "schema": "yali-sweep/1", "command": sweep_command(argv), "argv": argv,
        "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "hostname": socket.gethostname(), "commit": commit, "dirty": dirty,
        "ngpus": cfg.ngpus, "preset": cfg.preset, "launcher": cfg.launcher,
        "yali_perf": perf, "child_env": _hw.CHILD_ENV, "failures": [], "steps": [],
    }

    def save_record() -> None:
        record["steps"] = [{"index": s.index, "name": s.name, "status": s.status,
                            "seconds": round(s.seconds, 2), "reason": s.reason,
                            "commands": s.commands} for s in steps]
        record["failures"] = [{"command": " ; ".join(s.commands), "reason": s.reason,
                               "step": s.name} for s in steps if s.status == "failed"]
        with open(os.path.join(cfg.out_dir, "sweep.json"), "w") as f:
            json.dump(record, f, indent=1)

    save_record()
    children = Children()
    t_start = time.time()
    interrupted = False
    try:
        if not args.skip_hw:
            print("[hw] yali-hw: NVLink topology and P2P bandwidth ...", flush=True)
            res = _hw.run(cfg.build, os.path.join(cfg.out_dir, "hw-baseline"), args.hw_bytes)
            record["hw"] = res
            log = os.path.join(cfg.out_dir, "hw-baseline", "yali-hw.txt")
            msg = {"ok": "done",
                   "missing": f"yali-hw not built (looked under {cfg.build}); SoL% will say n/a",
                   }.get(str(res["status"]), f"{res['status']} (see {log}); SoL% will say n/a")
            print(f"[hw] {msg} ({_fmt_duration(time.time() - t_start)})", flush=True)
        if not args.skip_examples:
            exs = find_examples(cfg.build)
            print(f"[examples] {len(exs)} found under {cfg.build}/examples", flush=True)
            if exs:
                run_examples(cfg, args.example_timeout, children)
        t_bench = time.time()
        done_est = 0.0
        for step in steps:
            elapsed = time.time() - t_bench
            remaining_est = sum(s.est_seconds for s in steps[step.index - 1:])
            scale = (elapsed / done_est) if done_est > 0 else 1.0
            print(f"[{step.index}/{len(steps)}] {step.launch:6} "
                  f"{_report.timing_label(step.timing):11} {_report.dtype_label(step.dtype):4} "
                  f"{_report.human_size(step.sizes[0])}..{_report.human_size(step.sizes[-1])} "
                  f"run {step.run}/{cfg.runs} | elapsed {_fmt_duration(time.time() - t_start)}"
                  f" | left ~{_fmt_duration(remaining_est * scale)}", flush=True)
            step.commands = describe(cfg, step, perf)
            run_step(cfg, step, perf, children)
            done_est += step.est_seconds
            if step.status != "ok":
                print(f"    FAILED: {step.reason}", flush=True)
            save_record()
    except KeyboardInterrupt:
        interrupted = True
        children.kill_all()
        print("\ninterrupted: writing the report from what finished", flush=True)
    record["finished"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    record["seconds"] = round(time.time() - t_start, 1)
    save_record()

    ok = sum(1 for s in steps if s.status == "ok")
    failed = [s for s in steps if s.status == "failed"]
    print(f"\nSweep finished in {_fmt_duration(time.time() - t_start)}: {ok}/{len(steps)} runs ok"
          f"{f', {len(failed)} failed' if failed else ''}.")
    if ok:
        ds = _report.generate(cfg.out_dir, cfg.out_dir)
        for line in _report.headline_lines(ds):
            print("  " + line)
        print(f"Report: {os.path.join(cfg.out_dir, 'summary.md')}")
    for s in failed[:10]:
        print(f"  failed: {s.name}: {s.reason}")
    if interrupted:
        return 130
    return 0 if ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
