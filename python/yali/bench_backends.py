"""AllReduce through torch: gloo vs NCCL vs YALI, one process per GPU.

Backends: gloo, nccl, yali (yali.torch.Communicator), and nccl+yali: torch's NCCL process group
unchanged, with libyali-nccl preloaded (what `yali-run` does), so that the same dist.all_reduce
runs on YALI inside the machine: the drop-in as DDP users would meet it.

    python -m yali.bench_backends --backend yali --world_size 4 --data_size_mb 100
    python -m yali.bench_backends --run_all                 # every backend x world size x size

Each (backend, world size) runs as its own group of processes (bounded by --timeout), launched by
this command with MASTER_ADDR=127.0.0.1, a free port and NVLink multicast off. Per configuration:
one correctness check (float32 all-reduce of rank-dependent values, compared exactly), then
--num_warmup untimed and --num_iterations timed all-reduces (sum, float32, in place).

Timing: nccl and yali run on CUDA tensors and are timed with CUDA events recorded on the current
stream around each iteration (one synchronize after the loop). gloo runs on CPU tensors (host
memory, as it is normally compared) and is timed with the wall clock. The time of an iteration is
the max over ranks. 1 MB = 2**20 bytes.

Output: a table on stdout, saved as results.md, results.csv and results.json under --output_dir
(default output/bench_backends/<timestamp>/).
"""

import argparse
import csv
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run as a file (python python/yali/bench_backends.py): the directory holding yali/torch.py
    # must not shadow PyTorch. Make it `python -m yali.bench_backends` instead.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

BACKENDS = ("gloo", "nccl", "yali", "nccl+yali")
DEFAULT_SIZES_MB = (1, 10, 100, 1000)
DEFAULT_WORLD_SIZES = (2, 4, 8)
MB = 2**20
TENSORS = {"gloo": "cpu", "nccl": "cuda", "yali": "cuda", "nccl+yali": "cuda"}
TIMING = {"gloo": "wall clock", "nccl": "CUDA events", "yali": "CUDA events", "nccl+yali": "CUDA events"}

COLUMNS = ["backend", "tensors", "world_size", "size_mb", "bytes", "dtype", "iterations",
           "mean_ms", "std_ms", "min_ms", "max_ms", "algbw_gbps", "busbw_gbps", "correct"]


# ---- Worker (one per rank) -----------------------------------------------------------------------


def _worker(args):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    backend = args.backend
    timeout = datetime.timedelta(seconds=max(60, int(args.timeout)))
    comm = None
    if backend == "gloo":
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    else:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        if backend == "nccl":
            dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timeout,
                                    device_id=device)
        elif backend == "nccl+yali":
            # No device_id: torch then makes blocking NCCL communicators lazily, which
            # libyali-nccl gives a YALI communicator (its first phase leaves non-blocking ones,
            # which eager init may choose, to NCCL alone: docs/NCCL_ABI.md).
            dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timeout)
        else:
            # The process group only bootstraps YALI (carries the unique id) and gathers timings.
            dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
            import yali.torch

            comm = yali.torch.Communicator()
    pg_device = device if backend in ("nccl", "nccl+yali") else torch.device("cpu")

    def all_reduce(t):
        if comm is not None:
            comm.all_reduce(t)
        else:
            dist.all_reduce(t)

    def reduce_max(values):
        t = torch.tensor(values, dtype=torch.float64, device=pg_device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def reduce_min_int(value):
        t = torch.tensor([value], dtype=torch.int64, device=pg_device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t.item())

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    rows = []
    for size_mb in args.sizes:
        n = int(size_mb * MB) // 4
        # Correctness: x[i] = (rank + 1) + (i % 7); the sum is world(world+1)/2 + world*(i % 7),
        # exact in float32. Compared on every rank; ok only if every rank agrees.
        pattern = torch.arange(7, dtype=torch.float32, device=device)
        reps = -(-n // 7)
        x = (pattern + (rank + 1)).repeat(reps)[:n].contiguous()
        all_reduce(x)
        sync()
        expected = (pattern * world + world * (world + 1) / 2).repeat(reps)[:n]
        ok = bool(torch.equal(x, expected))
        del x, expected
        ok = reduce_min_int(int(ok)) == 1

        # Timing on a buffer of zeros (the values do not change the speed; zeros keep repeated
        # in-place sums finite whatever the iteration count).
        buf = torch.zeros(n, dtype=torch.float32, device=device)
        for _ in range(args.num_warmup):
            all_reduce(buf)
        sync()
        dist.barrier()
        times = []
        if device.type == "cuda":
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.num_iterations)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.num_iterations)]
            for s, e in zip(starts, ends):
                s.record()
                all_reduce(buf)
                e.record()
            sync()
            times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        else:
            import time

            for _ in range(args.num_iterations):
                t0 = time.perf_counter()
                all_reduce(buf)
                times.append((time.perf_counter() - t0) * 1e3)
        del buf
        times = reduce_max(times)
        if rank == 0:
            rows.append(_row(backend, world, size_mb, times, ok))
            print(_format_row(rows[-1]), flush=True)
    if rank == 0 and args.result_file:
        Path(args.result_file).write_text(json.dumps(rows))
    if comm is not None:
        comm.close()
    dist.barrier()
    dist.destroy_process_group()


def _row(backend, world, size_mb, times, ok):
    nbytes = int(size_mb * MB) // 4 * 4
    mean = statistics.fmean(times) if times else float("nan")
    std = statistics.stdev(times) if len(times) > 1 else 0.0
    algbw = nbytes / (mean * 1e-3) / 1e9 if times and mean > 0 else float("nan")
    return {
        "backend": backend,
        "tensors": TENSORS[backend],
        "world_size": world,
        "size_mb": size_mb,
        "bytes": nbytes,
        "dtype": "float32",
        "iterations": len(times),
        "mean_ms": mean,
        "std_ms": std,
        "min_ms": min(times) if times else float("nan"),
        "max_ms": max(times) if times else float("nan"),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (world - 1) / world,
        "correct": "ok" if ok else "FAIL",
        "times_ms": times,
    }


def _error_row(backend, world, size_mb, why):
    row = {c: "" for c in COLUMNS}
    row.update(backend=backend, tensors=TENSORS[backend], world_size=world, size_mb=size_mb,
               bytes=int(size_mb * MB) // 4 * 4, dtype="float32", iterations=0, correct=why)
    return row


# ---- Table ---------------------------------------------------------------------------------------

_HEADERS = ["backend", "tensors", "world size", "size (MB)", "dtype", "iters", "mean ms", "std ms",
            "min ms", "max ms", "algbw GB/s", "busbw GB/s", "correct"]
_KEYS = ["backend", "tensors", "world_size", "size_mb", "dtype", "iterations", "mean_ms", "std_ms",
         "min_ms", "max_ms", "algbw_gbps", "busbw_gbps", "correct"]


def _fmt(v):
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.1f}"
    return str(v)


def _format_row(row):
    return "| " + " | ".join(_fmt(row[k]) for k in _KEYS) + " |"


NOTE = ("gloo runs on CPU tensors (host memory), timed with the wall clock; nccl, yali and "
        "nccl+yali (torch's NCCL process group with libyali-nccl preloaded) run on "
        "CUDA tensors, timed with CUDA events on the current stream. Each iteration's time is the "
        "max over ranks; mean/std/min/max are over iterations. AllReduce sum, float32, in place; "
        "1 MB = 2^20 bytes; busbw = algbw * 2(n-1)/n. correct: one all-reduce of rank-dependent "
        "values compared exactly on every rank.")


def markdown(rows, title=None):
    lines = []
    if title:
        lines += [f"# {title}", ""]
    lines += ["| " + " | ".join(_HEADERS) + " |", "|" + " --- |" * len(_HEADERS)]
    lines += [_format_row(r) for r in rows]
    lines += ["", NOTE, ""]
    return "\n".join(lines)


def write_outputs(rows, out_dir, meta):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.md").write_text(markdown(rows, "AllReduce: gloo vs NCCL vs YALI"))
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in COLUMNS})
    (out_dir / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return out_dir


# ---- Driver --------------------------------------------------------------------------------------


def _gpu_count():
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def _run_config(backend, world, sizes, args):
    """Launch one process group for (backend, world); returns its rows (error rows on failure)."""
    from yali import _launch

    with tempfile.TemporaryDirectory(prefix="yali_bench_") as tmp:
        result_file = os.path.join(tmp, "rows.json")
        cmd = ["-m", "yali.bench_backends", "--_worker", "--backend", backend,
               "--sizes", ",".join(str(s) for s in sizes), "--num_warmup", str(args.num_warmup),
               "--num_iterations", str(args.num_iterations), "--timeout", str(args.timeout),
               "--result_file", result_file]
        env = {}
        if backend in ("yali", "nccl+yali"):
            from yali import _capi

            path = _capi.library_path()
            if path:
                env["YALI_LIBRARY"] = path
        if backend == "nccl+yali":
            from yali import run

            try:
                shim = run.find_library()
            except run.LibraryNotFound as e:  # --run_all goes on with the other backends
                print(f"[{backend} x{world}] skipped: {e}", file=sys.stderr, flush=True)
                return [_error_row(backend, world, s, "NO LIBYALI-NCCL") for s in sizes]
            env["LD_PRELOAD"] = run.preload_value(shim, os.environ.get("LD_PRELOAD", ""))
        res = _launch.launch(cmd, world, timeout=args.timeout, env=env, echo_rank=0)
        rows = json.loads(Path(result_file).read_text()) if os.path.exists(result_file) else []
    if not res.ok:
        why = "TIMEOUT" if res.timed_out else "ERROR"
        print(f"[{backend} x{world}] {why}:\n{res.summary()}", file=sys.stderr, flush=True)
        done = {r["size_mb"] for r in rows}
        rows += [_error_row(backend, world, s, why) for s in sizes if s not in done]
    return rows


def _parse_sizes(text):
    return [float(s) if "." in s else int(s) for s in text.split(",") if s]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m yali.bench_backends", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=BACKENDS, default="yali")
    p.add_argument("--world_size", type=int, default=2)
    p.add_argument("--data_size_mb", type=float, default=None,
                   help="message size in MB (2^20 bytes), float32 elements")
    p.add_argument("--num_warmup", type=int, default=5)
    p.add_argument("--num_iterations", type=int, default=10)
    p.add_argument("--run_all", action="store_true",
                   help="every backend x world size (2, 4, 8 as GPUs allow) x 1, 10, 100, 1000 MB")
    p.add_argument("--output_dir", default=None,
                   help="default: output/bench_backends/<timestamp>/")
    p.add_argument("--timeout", type=float, default=1200,
                   help="seconds for one (backend, world size) process group")
    p.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--sizes", type=_parse_sizes, default=None, help=argparse.SUPPRESS)
    p.add_argument("--result_file", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.num_iterations < 1 or args.num_warmup < 0:
        p.error("--num_iterations must be >= 1 and --num_warmup >= 0")

    if args._worker:
        _worker(args)
        return 0

    gpus = _gpu_count()
    if args.run_all:
        worlds = [w for w in DEFAULT_WORLD_SIZES if w <= gpus]
        if not worlds:
            p.error(f"--run_all needs at least 2 GPUs; {gpus} visible")
        configs = [(b, w) for b in BACKENDS for w in worlds]
        sizes = list(DEFAULT_SIZES_MB) if args.data_size_mb is None else [args.data_size_mb]
    else:
        if args.world_size < 1:
            p.error("--world_size must be >= 1")
        if args.backend != "gloo" and args.world_size > gpus:
            p.error(f"--backend {args.backend} --world_size {args.world_size} needs "
                    f"{args.world_size} GPUs; {gpus} visible")
        configs = [(args.backend, args.world_size)]
        sizes = [args.data_size_mb if args.data_size_mb is not None else 100]
    sizes = [int(s) if float(s).is_integer() else s for s in sizes]

    print("| " + " | ".join(_HEADERS) + " |", flush=True)
    rows = []
    for backend, world in configs:
        rows += _run_config(backend, world, sizes, args)

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.output_dir or os.path.join("output", "bench_backends", stamp)
    meta = {"date": stamp, "gpus_visible": gpus, "num_warmup": args.num_warmup,
            "num_iterations": args.num_iterations, "argv": sys.argv[1:], "note": NOTE}
    try:
        import torch

        meta["torch"] = torch.__version__
    except ImportError:
        pass
    out_dir = write_outputs(rows, out_dir, meta)
    print()
    print(markdown(rows))
    print(f"saved {out_dir / 'results.md'}, {out_dir / 'results.csv'}, {out_dir / 'results.json'}")
    return 0 if all(r.get("correct") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
