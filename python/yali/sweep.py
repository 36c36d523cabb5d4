"""The benchmark sweep: hardware baseline, examples, then YALI vs NCCL AllReduce over sizes, dtypes,
launch modes and timing modes, repeated --runs times; then the report (yali.report).
--colls (yali-perf -C) adds other collectives, or all of them (--colls all), to every step.

    make sweep                               # = python3 -m yali.sweep --build build (--standard)
    python3 -m yali.sweep --quick                # fp32, 5 sizes, 1 run
    python3 -m yali.sweep --sizes 4K:1G --dtypes bf16 --timing cuda-events,graph --runs 3
    python3 -m yali.sweep --dry-run --quick      # print the commands, run nothing
    python3 -m yali.sweep --quick --colls all    # every collective (yali-perf -C ...)
    python3 -m yali.sweep --from-json output/2026-11-22/100000   # rebuild the report only

Each step is one yali-perf process (or one process per GPU) for one launch mode and one timing
mode: it measures YALI and NCCL side by side over every dtype and size, with the same buffers, and
writes its results with -J into raw/<launch>_<timing>_run1-<runs>.json (run1.json with one run;
each result names its dtype and run). Start-up (CUDA contexts, both libraries' communicators)
costs seconds per process, so a sweep makes as few processes as it can.

A run is one pass over every dtype and size of a (launch, timing) step. By default the --runs runs
are passes of one process (yali-perf --repeat), one after the other, and the report treats each
pass as it would a separate process: its own busBW per size, mean ± std across runs. Passes share
the process's communicators, buffers and start-up, so their spread shows the drift over time
of one set-up, not the variation between set-ups; --process-per-run makes every run its own
process (one raw file each, run<k>.json) to include that too, at the cost of a start-up per run.

--max-case-time S (the --extensive preset sets one) caps the timed calls of each case (size,
dtype, library, placement) at about S seconds: yali-perf shrinks -n and -w for the large sizes from
a per-call time it measures in the warmup, never below 10 iterations, and records the counts it
used in each result.

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
import math
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

# The sweep's --colls names: yali-perf's -C names ("all": every one of them).
COLL_NAMES = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "gather",
              "scatter", "alltoall", "rs_ag", "sendrecv")

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
    max_case_time: Optional[float]  # yali-perf --max-case-time; None: no limit
    about: str


# Why these numbers: --quick answers "does it work and roughly how fast" in about a minute;
# --standard gives 3 runs so that mean ± std across runs means something, over the full range the
# issue asks for (4 KB to 2 GB); --extensive adds runs and iterations for the latency percentiles
# (P99 over 5 x 100 samples per size is an interpolation between real samples, not an extreme).
# --extensive's 100 iterations would cost a 2 GB case 2 s (10 ms per call, twice over in events
# and graph timing), 30 minutes for the whole grid; its 20 ms limit per case keeps the full 100
# where a call takes up to ~0.1 ms (16 MB), fewer above (10 from 256 MB up), so that the whole
# sweep fits in ~6 minutes on 4 H200s: ~5 for the benchmarks by estimate_seconds (which errs
# long), the rest for yali-hw (~20 s), the examples and the report. The 10-iteration floor at the
# largest sizes is most of what is left: a lower limit would save little.
PRESETS = {
    "quick": Preset("4K:256M:16", ("fp32",), 1, 20, 5, "out-of-place", None,
                    "fp32, 4K..256M x16 (5 sizes), 1 run, 20 iterations"),
    "standard": Preset("4K:2G", ("fp32", "fp16", "bf16"), 3, 20, 5, "both", None,
                       "fp32/fp16/bf16, 4K..2G x2 (20 sizes), 3 runs, 20 iterations"),
    "extensive": Preset("4K:2G", ("fp32", "fp16", "bf16"), 5, 100, 20, "both", 0.02,
                        "fp32/fp16/bf16, 4K..2G x2 (20 sizes), 5 runs, 100 iterations\n"
                        "              (fewer at large sizes: --max-case-time 0.02)"),
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


def parse_colls(text: str) -> List[str]:
    """'allreduce,allgather' -> the list (duplicates dropped, yali-perf's order); 'all' -> every
    collective."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError("--colls: empty list")
    if "all" in names:
        return list(COLL_NAMES)
    bad = [n for n in names if n not in COLL_NAMES]
    if bad:
        raise ValueError(f"unknown collective(s) {','.join(bad)} (use "
                         f"{', '.join(COLL_NAMES)} or all)")
    return [c for c in COLL_NAMES if c in names]


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
    runs: List[int]          # the runs it measures (1-based): passes of yali-perf --repeat
    launch: str              # "single" | "multi"
    timing: str              # yali-perf name
    dtypes: List[str]        # yali-perf names
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
    max_case_time: Optional[float] = None  # yali-perf --max-case-time; None: no limit
    process_per_run: bool = False          # one process per run instead of --repeat
    colls: List[str] = field(default_factory=lambda: ["allreduce"])  # yali-perf -C


# The estimate's model of yali-perf on H200s (NVLink, 4 GPUs). The calls' part is calibrated
# against the sweep of docs/results/2026-11-22-sweep-h200x4 (YALI 5.1 ms and NCCL 4.5 ms per 1 GB
# AllReduce; events timing 0.5-1 s longer than throughput timing at 30 iterations). Start-up was
# ~3 s there (single) and ~3.5 s (mpirun); the model keeps 4 and 6 s, to err long on a cold
# machine, a slow /tmp (the multi-process rendezvous) or the self launcher.
STARTUP_S = {"single": 4.0, "multi": 6.0}  # process(es), CUDA contexts, both libraries' comms
CALL_BASE_S = {"latency": 45e-6}           # a small call; a synchronized one costs more
CALL_BASE_DEFAULT_S = 25e-6
BUS_BANDWIDTH_BPS = 300e9                  # busBW of a large call
CASE_OVERHEAD_S = {"single": 0.5e-3, "multi": 2e-3}  # syncs; host exchanges between processes
CHECK_BANDWIDTH_BPS = 500e9                # fill, check and checksum kernels over the buffers
# yali-perf's CallsPerIteration: events times -n calls twice; graph runs the captured calls once
# to upload the graph, then once per launch (the sweep launches once).
CALLS_PER_ITERATION = {"events": 2, "graph": 2, "throughput": 1, "latency": 1}
# yali-perf's kMinItersWithinTimeLimit and kTimeLimitProbeCalls (perf_args.h).
MIN_ITERS_WITHIN_TIME_LIMIT = 10
TIME_LIMIT_PROBE_CALLS = 2


def counts_within_time_limit(iters: int, warmup: int, max_case_time: Optional[float],
                             seconds_per_call: float, calls_per_iteration: float
                             ) -> Tuple[int, int]:
    """(timed iterations, warmup calls) of one case, as yali-perf's CallCountsWithinTimeLimit
    (perf_args.cc) decides them under --max-case-time; kept equal by the tests."""
    if not max_case_time or max_case_time <= 0:
        return iters, warmup
    probe_warmup = max(warmup, TIME_LIMIT_PROBE_CALLS)
    if seconds_per_call <= 0 or calls_per_iteration <= 0:
        return iters, probe_warmup
    fitting = max_case_time / (seconds_per_call * calls_per_iteration)
    if fitting >= iters:
        return iters, probe_warmup
    n = min(iters, max(MIN_ITERS_WITHIN_TIME_LIMIT, int(fitting)))
    w = max(TIME_LIMIT_PROBE_CALLS, min(warmup, math.ceil(warmup * fitting / iters)))
    return n, w


def seconds_per_call(nbytes: int, timing: str, ngpus: int) -> float:
    n = max(ngpus, 2)
    return (CALL_BASE_S.get(timing, CALL_BASE_DEFAULT_S)
            + nbytes * 2.0 * (n - 1) / n / BUS_BANDWIDTH_BPS)


def estimate_seconds(cfg: Config, launch: str, timing: str, sizes: Sequence[int],
                     runs: int = 1) -> float:
    """A model of one yali-perf process, for the plan's total, the progress line's time left and
    the default timeout: start-up, then for each run, dtype, size, library and placement, the
    case's fixed cost (syncs, the check's kernels) and its calls (warmup, the checked call, the
    timed iterations) at seconds_per_call, with the counts that --max-case-time leaves. Real runs
    replace it as they finish."""
    placements = 2 if cfg.placement == "both" else 1
    k = CALLS_PER_ITERATION.get(timing, 1)
    per_pass = 0.0
    for s in sizes:
        t = seconds_per_call(s, timing, cfg.ngpus)
        iters, warmup = counts_within_time_limit(cfg.iters, cfg.warmup, cfg.max_case_time, t, k)
        calls = warmup + (1 if cfg.check else 0) + k * iters
        case = CASE_OVERHEAD_S[launch] + (s / CHECK_BANDWIDTH_BPS if cfg.check else 0.0)
        per_pass += 2 * placements * (case + calls * t)
    return STARTUP_S[launch] + runs * len(cfg.dtypes) * len(cfg.colls) * per_pass


def run_label(runs: Sequence[int]) -> str:
    """'run3' for one run, 'run1-5' for several (file names and progress lines)."""
    return f"run{runs[0]}" if len(runs) == 1 else f"run{runs[0]}-{runs[-1]}"


def build_plan(cfg: Config) -> List[Step]:
    """One step per launch mode, timing mode and size group, covering every dtype and (through
    --repeat) every run; with process_per_run, one step per run of each, runs outermost so that
    slow drift hits every mode alike."""
    steps: List[Step] = []
    groups = size_groups(cfg.sizes)
    all_runs = list(range(1, cfg.runs + 1))
    run_sets = [[r] for r in all_runs] if cfg.process_per_run else [all_runs]
    for runs in run_sets:
        for launch in cfg.launches:
            for timing in cfg.timings:
                for sizes, size_args in groups:
                    name = f"{launch}_{timing}_{run_label(runs)}"
                    if len(groups) > 1:
                        name += f"_{sizes[0]}"
                    steps.append(Step(len(steps) + 1, runs, launch, timing, list(cfg.dtypes),
                                      sizes, size_args, name,
                                      estimate_seconds(cfg, launch, timing, sizes, len(runs))))
    return steps


def find_perf(build: str) -> Optional[str]:
    return _hw.find_binary(build, PERF_CANDIDATES)


def perf_argv(cfg: Config, step: Step, binary: str) -> List[str]:
    json_path = os.path.join(cfg.out_dir, "raw", step.name + ".json")
    g = cfg.ngpus if step.launch == "single" else 1
    limits = []
    if len(step.runs) > 1:
        limits += ["--repeat", str(len(step.runs))]
    if cfg.max_case_time:
        limits += ["--max-case-time", f"{cfg.max_case_time:g}"]
    if cfg.colls != ["allreduce"]:
        limits += ["-C", ",".join(cfg.colls)]
    return ([binary, "-g", str(g)] + step.size_args +
            ["-n", str(cfg.iters), "-w", str(cfg.warmup), "-c", str(cfg.check),
             "-d", ",".join(step.dtypes), "--impl", "yali,nccl", "--timing", step.timing,
             "--inplace", str(PLACEMENT_ARGS[cfg.placement])] + limits + ["-J", json_path]
            + cfg.perf_args)


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


def dtype_labels(dtypes: Sequence[str]) -> str:
    return ",".join(_report.dtype_label(d) for d in dtypes)


def runs_text(runs: Sequence[int], total: int) -> str:
    """'run 2/3' for a step of one run, 'runs 1-5/5' for one of several (passes of --repeat)."""
    if len(runs) == 1:
        return f"run {runs[0]}/{total}"
    return f"runs {runs[0]}-{runs[-1]}/{total}"


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
               + "\n(default --standard; --sizes/--dtypes/--runs/--iters/--max-case-time override a "
                 "preset)")
    p = ap.add_mutually_exclusive_group()
    p.add_argument("--quick", dest="preset", action="store_const", const="quick")
    p.add_argument("--standard", dest="preset", action="store_const", const="standard")
    p.add_argument("--extensive", dest="preset", action="store_const", const="extensive")
    ap.add_argument("--sizes", help="list and/or ranges: 4K,1M,1G or 4K:2G (x2) or 4K:2G:4")
    ap.add_argument("--dtypes", help="comma list of fp32, fp16, bf16")
    ap.add_argument("--colls", default="allreduce",
                    help="collectives, passed to yali-perf as -C: comma list of "
                         + ", ".join(COLL_NAMES) + ", or all (default allreduce)")
    ap.add_argument("--runs", type=int,
                    help="runs of every (launch, timing) step: passes of one yali-perf process "
                         "(--repeat) unless --process-per-run")
    ap.add_argument("--process-per-run", action="store_true",
                    help="start a yali-perf process for every run instead of repeating in one "
                         "(adds start-up to each run; the spread across runs then includes the "
                         "variation between processes)")
    ap.add_argument("--max-case-time", type=float, metavar="SECONDS",
                    help="yali-perf --max-case-time: about this many seconds of timed calls per "
                         "case at most, fewer iterations at large sizes (never below 10); 0 for "
                         "no limit (default: the preset's)")
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
    colls = parse_colls(args.colls)
    launches = [m for m, on in (("single", args.single), ("multi", args.mpi)) if on] or \
        ["single", "multi"]
    out = args.output or os.path.join("output", _dt.datetime.now().strftime("%Y-%m-%d"),
                                      _dt.datetime.now().strftime("%H%M%S"))
    runs = args.runs if args.runs is not None else preset.runs
    iters = args.iters if args.iters is not None else preset.iters
    warmup = args.warmup if args.warmup is not None else preset.warmup
    if runs < 1 or iters < 1 or warmup < 0:
        raise ValueError("--runs and --iters must be >= 1, --warmup >= 0")
    max_case_time = (args.max_case_time if args.max_case_time is not None
                     else preset.max_case_time)
    if max_case_time is not None and (not math.isfinite(max_case_time) or max_case_time < 0):
        raise ValueError("--max-case-time must be seconds >= 0 (0: no limit)")
    return Config(build=args.build, out_dir=out, ngpus=ngpus,
                  sizes=parse_sizes(args.sizes or preset.sizes), dtypes=dtypes, timings=timings,
                  launches=launches, runs=runs, iters=iters, warmup=warmup, check=args.check,
                  placement=args.placement or preset.placement, launcher=launcher,
                  perf_args=shlex.split(args.perf_args), timeout=args.timeout,
                  preset=args.preset or "standard", max_case_time=max_case_time or None,
                  process_per_run=args.process_per_run, colls=colls)


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
    runs_how = ("one process each" if cfg.process_per_run or cfg.runs == 1
                else "passes of one process")
    limit = (f", at most ~{cfg.max_case_time:g} s of timed calls per case"
             if cfg.max_case_time else "")
    print(f"YALI sweep: {len(steps)} yali-perf processes on {cfg.ngpus} GPU(s)"
          f"{' (assumed: GPU count unknown here)' if assumed else ''}; "
          f"sizes {_report.human_size(cfg.sizes[0])}..{_report.human_size(cfg.sizes[-1])} "
          f"({len(cfg.sizes)}), dtypes {','.join(_report.dtype_label(d) for d in cfg.dtypes)}, "
          f"{'' if cfg.colls == ['allreduce'] else 'collectives ' + ','.join(cfg.colls) + ', '}"
          f"timing {','.join(_report.timing_label(t) for t in cfg.timings)}, "
          f"launch {','.join(cfg.launches)} (multi via {cfg.launcher}), {cfg.runs} run(s) "
          f"({runs_how}), {cfg.iters} iterations{limit}; estimated {_fmt_duration(total_est)} "
          f"for the benchmarks (a model, not a measurement)", flush=True)

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
                  f"{_report.timing_label(step.timing)} {dtype_labels(step.dtypes)} "
                  f"{runs_text(step.runs, cfg.runs)} (~{_fmt_duration(step.est_seconds)})")
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
        "runs": cfg.runs, "process_per_run": cfg.process_per_run,
        "max_case_time_s": cfg.max_case_time,
        "estimated_seconds": round(total_est, 1),
        "yali_perf": perf, "child_env": _hw.CHILD_ENV, "failures": [], "steps": [],
    }

    def save_record() -> None:
        record["steps"] = [{"index": s.index, "name": s.name, "launch": s.launch,
                            "timing": s.timing, "dtypes": s.dtypes, "runs": s.runs,
                            "status": s.status, "seconds": round(s.seconds, 2),
                            "estimated_seconds": round(s.est_seconds, 1), "reason": s.reason,
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
                  f"{_report.timing_label(step.timing):11} {dtype_labels(step.dtypes)} "
                  f"{_report.human_size(step.sizes[0])}..{_report.human_size(step.sizes[-1])} "
                  f"{runs_text(step.runs, cfg.runs)} | elapsed "
                  f"{_fmt_duration(time.time() - t_start)}"
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
