"""AllReduce: YALI against PyTorch's symmetric-memory one-shot and two-shot kernels, one process
per GPU.

    python -m yali.bench_symm                                   # 2 and 4 GPUs, 4K..256M, bf16
    python -m yali.bench_symm --world_sizes 2 --sizes 4K,1M --dtype fp32
    python -m yali.bench_symm --timing eager --symm_backend NVSHMEM
    python -m yali.bench_symm --yali_buffers plain              # YALI on unregistered tensors

Variants (sum; sizes in bytes, 1K = 2^10):
  yali                 yali.torch.Communicator.all_reduce(x, out=y): out of place. With
                       --yali_buffers registered (the default), x and y are prefix views of two
                       buffers of the largest size registered once with yaliCommRegister
                       (Communicator.empty_registered), so YALI, like the symmetric-memory kernels,
                       reads pre-registered memory and runs its zero-copy algorithms where the
                       library selects them (twoshot_direct from 16 MB); with plain, x and y
                       are ordinary tensors allocated per size (YALI copies through its staging
                       buffers). The algorithm YALI ran is recorded per size.
  symm_one_shot        torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group_name): reads a
                       symmetric buffer (torch.distributed._symmetric_memory.empty + rendezvous),
                       returns a new tensor.
  symm_one_shot_out    torch.ops.symm_mem.one_shot_all_reduce_out(buf, "sum", group_name, y): the
                       same kernel into a preallocated plain tensor, the out-of-place partner of
                       yali's call (n/a where this torch lacks the op).
  symm_two_shot        torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group_name): in place
                       on the symmetric buffer.
  symm_two_shot+copy   a plain tensor copied into the symmetric buffer, then two_shot_all_reduce_:
                       what a caller whose data is not already in symmetric memory pays.
  nccl                 torch.distributed.all_reduce on the NCCL process group (in place).
The symmetric-memory kernels read their input from a pre-registered buffer, so no copy-in is
counted in symm_one_shot(_out) and symm_two_shot; nccl reads ordinary tensors, and so does yali with
--yali_buffers plain. Registered YALI buffers (the default) are the like-for-like comparison with the
pure symmetric-memory variants; plain ones compare what a caller whose data is not in registered
memory pays (as symm_two_shot+copy does). The symmetric buffer comes from torch's default
allocation backend unless --symm_backend names one.

Timing (--timing), per (variant, size), after --num_warmup calls and the correctness check:
  graph (default)  the warm-up runs on a side stream, then N calls are captured into one
                   torch.cuda.CUDAGraph, replayed once untimed, then replayed --num_replays times
                   between CUDA events: time per call = elapsed / (replays * N); p50/p99 over the
                   replays (each divided by N). This is GPU time: from Python, eager calls below
                   ~16 MB measure the host's dispatch (45-70 us at 4K for every library).
  eager            N back-to-back calls on the current stream between two CUDA events (time per
                   call = elapsed / N), then N calls with events around each (p50, p99).
N is --num_iterations; by default 50, fewer for large sizes (at most 4G of messages per loop, at
least 10 calls). Every figure is the max over ranks. Once per (variant, size) the result of
rank-dependent small-integer inputs (exact in every dtype) is compared bitwise with the exact sum
on every rank; in graph mode the untimed replay is checked too for the variants whose result
depends only on their input. An op that is missing or raises (unsupported dtype, alignment,
memory, graph capture) is recorded as "n/a (reason)" and the run goes on; if the CUDA context is
left unusable, that world size stops and the rest of its results are n/a.

Each world size is its own group of processes (yali._launch: MASTER_ADDR=127.0.0.1, a free port,
NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1), bounded by --timeout.
Output: a table per world size on stdout; results.json and results.md under --output_dir (default
output/bench_symm/<timestamp>/). Exit status 1 if a result was wrong or a process group failed.
"""

import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run as a file (python python/yali/bench_symm.py): the directory holding yali/torch.py must
    # not shadow PyTorch. Make it `python -m yali.bench_symm` instead.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

# Torch is imported only inside the worker and the GPU count, so that the table code runs (and is
# tested) without it.

VARIANTS = ("yali", "symm_one_shot", "symm_one_shot_out", "symm_two_shot", "symm_two_shot+copy",
            "nccl")
# Symmetric-memory variants that read a registered buffer; "best symm" is the fastest of these, the
# strictest comparison for YALI (the +copy variant is slower by construction).
PURE_SYMM = ("symm_one_shot", "symm_one_shot_out", "symm_two_shot")
# The worker runs the variants in this order, one variant over every size before the next: a hang
# (bounded by --timeout) then loses the variant that hung and those after it, never the reference
# figures already measured. YALI, the library under development, goes last.
RUN_ORDER = ("nccl", "symm_one_shot", "symm_one_shot_out", "symm_two_shot", "symm_two_shot+copy",
             "yali")
COLUMN_TITLES = {"yali": "yali us", "symm_one_shot": "symm one-shot us",
                 "symm_one_shot_out": "symm one-shot out us",
                 "symm_two_shot": "symm two-shot us", "symm_two_shot+copy": "symm two-shot+copy us",
                 "nccl": "nccl us"}
# dtype flag -> (torch.dtype attribute name, element size in bytes).
DTYPES = {"bf16": ("bfloat16", 2), "fp16": ("float16", 2), "fp32": ("float32", 4)}
YALI_MODE = "out-of-place (Communicator.all_reduce(x, out=y))"
TIMINGS = ("graph", "eager")
# --yali_buffers: registered (yaliCommRegister, zero-copy; the default) or plain tensors. Results
# written before the option existed were plain.
YALI_BUFFERS = ("registered", "plain")
DEFAULT_YALI_BUFFERS = "registered"

DEFAULT_WORLD_SIZES = "2,4"
DEFAULT_SIZES = "4K,64K,256K,1M,4M,16M,64M,256M"
# Calls per timed loop (per graph in graph mode) when --num_iterations is not given. Large messages
# get fewer: a loop moves at most _AUTO_BYTES_PER_LOOP, so 256M runs 16 calls (~18 ms per loop at
# 4 GPUs), which keeps every (variant, size) near 0.1-0.3 s and the default run (2 and 4 GPUs, 6
# variants, 8 sizes, mostly process start-up) within about 2.5 minutes. Never fewer than
# _MIN_AUTO_ITERATIONS, so a loop still averages over several calls.
DEFAULT_ITERATIONS = 50
_AUTO_BYTES_PER_LOOP = 4 * 2**30
_MIN_AUTO_ITERATIONS = 10
DEFAULT_REPLAYS = 5
_SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
# Longest reason kept in a table cell; results.json keeps the whole message.
_REASON_CHARS = 48

_METHOD = {
    "graph": ("Time per call in microseconds: N calls captured into one CUDA graph, replayed R "
              "times between CUDA events, elapsed / (R * N); p50/p99 over the R replays; max over "
              "ranks."),
    "eager": ("Time per call in microseconds: N back-to-back calls on the current stream between "
              "two CUDA events, divided by N; p50/p99 of single calls; max over ranks. Below "
              "~16 MB this is mostly Python dispatch, not GPU time."),
}


def yali_buffers_of(meta):
    """The --yali_buffers of a result; results written before the option existed were plain."""
    return meta.get("yali_buffers", "plain")


def yali_reads(buffers):
    """What the yali variant reads, in words."""
    if buffers == "registered":
        return ("YALI reads tensors registered with yaliCommRegister (zero-copy algorithms "
                "where the library selects them)")
    return "YALI reads a plain tensor"


def note(timing, yali_buffers="plain"):
    """The paragraph under the tables: how a figure was measured and what each variant reads."""
    if yali_buffers == "registered":
        reads = ("yali reads and writes buffers registered with yaliCommRegister (no copy-in "
                 "counted either); nccl reads plain tensors")
    else:
        reads = "yali and nccl read plain tensors"
    return (
        _METHOD.get(timing, _METHOD["eager"]) + " symm_one_shot(_out) and symm_two_shot read their "
        "input from a pre-registered symmetric buffer (no copy-in counted); " + reads + "; "
        "symm_two_shot+copy adds the copy of a plain tensor into the symmetric "
        "buffer (the result stays in that buffer). yali: " + YALI_MODE + "; symm_one_shot_out: "
        "into a plain tensor; nccl and symm_two_shot: in place; symm_one_shot: returns a new "
        "tensor. Speedup = best of (symm one-shot, one-shot out, two-shot) / yali, correct results "
        "only. correct: bitwise equality with the exact sum of small-integer inputs, on every rank."
    )


# ---- Arguments -----------------------------------------------------------------------------------


def parse_size(text):
    """Bytes in "4096", "4K", "1M", "2G" (powers of 2^10, case-insensitive)."""
    t = text.strip().upper()
    if t.endswith("B"):
        t = t[:-1]
    suffix = t[-1] if t and t[-1] in "KMG" else ""
    try:
        value = int(t[:len(t) - len(suffix)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: use a whole number with an optional "
                                         "K, M or G suffix, e.g. 4K") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: must be > 0")
    return value * _SUFFIXES[suffix]


def parse_sizes(text):
    sizes = [parse_size(s) for s in text.split(",") if s.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sizes


def parse_world_sizes(text):
    try:
        worlds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad world sizes {text!r}: e.g. 2,4") from None
    if not worlds or any(w < 2 for w in worlds):
        raise argparse.ArgumentTypeError(f"bad world sizes {text!r}: each must be >= 2")
    return worlds


def parse_variants(text):
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {unknown}; choose from {VARIANTS}")
    return names


def format_size(nbytes):
    for suffix in ("G", "M", "K"):
        unit = _SUFFIXES[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return f"{nbytes}B"


def build_parser():
    p = argparse.ArgumentParser(prog="python -m yali.bench_symm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world_sizes", type=parse_world_sizes, default=DEFAULT_WORLD_SIZES,
                   help=f"comma-separated; those above the visible GPUs are skipped "
                        f"(default {DEFAULT_WORLD_SIZES})")
    p.add_argument("--sizes", type=parse_sizes, default=DEFAULT_SIZES,
                   help=f"message sizes in bytes, K/M/G = 2^10/2^20/2^30 (default {DEFAULT_SIZES})")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    p.add_argument("--variants", type=parse_variants, default=",".join(VARIANTS),
                   help=f"comma-separated subset of {','.join(VARIANTS)}")
    p.add_argument("--timing", choices=TIMINGS, default="graph",
                   help="graph: N calls captured into one CUDA graph, timed over replays (GPU "
                        "time); eager: calls issued from Python one by one (host-bound below "
                        "~16 MB) (default graph)")
    p.add_argument("--num_warmup", type=int, default=10)
    p.add_argument("--num_iterations", type=int, default=None,
                   help=f"calls per timed loop / per graph (default {DEFAULT_ITERATIONS}, fewer "
                        f"for large sizes: at most {format_size(_AUTO_BYTES_PER_LOOP)} of "
                        f"messages per loop, at least {_MIN_AUTO_ITERATIONS} calls)")
    p.add_argument("--num_replays", type=int, default=DEFAULT_REPLAYS,
                   help=f"timed replays of each graph (--timing graph; default {DEFAULT_REPLAYS})")
    p.add_argument("--symm_backend", default=None, metavar="NAME",
                   help="pin the symmetric-memory allocation backend "
                        "(torch.distributed._symmetric_memory.set_backend, e.g. CUDA, NVSHMEM); "
                        "default: torch's own choice")
    p.add_argument("--yali_buffers", choices=YALI_BUFFERS, default=DEFAULT_YALI_BUFFERS,
                   help="registered: YALI's input and output are registered once with "
                        "yaliCommRegister (zero-copy, like the symmetric-memory kernels' "
                        "pre-registered buffer); plain: ordinary tensors (YALI copies through its "
                        f"staging buffers) (default {DEFAULT_YALI_BUFFERS})")
    p.add_argument("--timeout", type=float, default=120,
                   help="seconds for one world size's process group (start-up included)")
    p.add_argument("--output_dir", default=None, help="default: output/bench_symm/<timestamp>/")
    p.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result_file", default=None, help=argparse.SUPPRESS)
    return p


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if (args.num_iterations is not None and args.num_iterations < 1) or args.num_warmup < 0:
        p.error("--num_iterations must be >= 1 and --num_warmup >= 0")
    if args.num_replays < 1:
        p.error("--num_replays must be >= 1")
    elem = DTYPES[args.dtype][1]
    odd = [s for s in args.sizes if s % elem]
    if odd:
        p.error(f"sizes {odd} are not a whole number of {args.dtype} elements ({elem} bytes)")
    return args


# ---- Arithmetic ----------------------------------------------------------------------------------


def percentile(values, q):
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def iterations_for(nbytes, requested=None):
    """Calls per timed loop for a message of ``nbytes``: ``requested`` (--num_iterations) when
    given, else DEFAULT_ITERATIONS capped so that one loop moves at most _AUTO_BYTES_PER_LOOP."""
    if requested is not None:
        return requested
    return min(DEFAULT_ITERATIONS, max(_MIN_AUTO_ITERATIONS, _AUTO_BYTES_PER_LOOP // nbytes))


def graph_per_call_us(elapsed_ms, replays, calls_per_graph):
    """Microseconds per call from the CUDA-event time of ``replays`` replays of a graph holding
    ``calls_per_graph`` calls (events measure milliseconds)."""
    if replays < 1 or calls_per_graph < 1:
        raise ValueError(f"replays ({replays}) and calls_per_graph ({calls_per_graph}) must be "
                         ">= 1")
    return elapsed_ms * 1e3 / (replays * calls_per_graph)


def _usable_time(row):
    """A row's time per call if it was measured and found correct, else None."""
    if row is None or row.get("error") or row.get("correct") is not True:
        return None
    t = row.get("time_us")
    return t if isinstance(t, (int, float)) and t > 0 else None


def best_symm(cells):
    """(variant, us) of the faster correct pure symmetric-memory variant, or (None, None)."""
    timed = [(cells.get(v) and _usable_time(cells[v]), v) for v in PURE_SYMM]
    timed = [(t, v) for t, v in timed if t is not None]
    if not timed:
        return None, None
    t, v = min(timed)
    return v, t


def speedup(cells):
    """best symm time / yali time (> 1: YALI is faster), or None when either is missing."""
    yali_us = _usable_time(cells.get("yali"))
    _, symm_us = best_symm(cells)
    if yali_us is None or symm_us is None:
        return None
    return symm_us / yali_us


# ---- Tables --------------------------------------------------------------------------------------


def _cells_by_size(rows, world):
    """{bytes: {variant: row}} for one world size, sizes ascending."""
    table = {}
    for r in rows:
        if r["world_size"] == world:
            table.setdefault(r["bytes"], {})[r["variant"]] = r
    return dict(sorted(table.items()))


def _time_cell(row):
    if row is None:
        return ""
    if row.get("error"):
        reason = " ".join(str(row["error"]).split())
        if len(reason) > _REASON_CHARS:
            reason = reason[:_REASON_CHARS - 3] + "..."
        return f"n/a ({reason})".replace("|", "/")
    t = row.get("time_us")
    if t is None:
        return ""
    text = f"{t:.1f}"
    return text if row.get("correct") is not False else text + " WRONG"


def _correct_cell(cells, variants):
    measured = [v for v in variants if cells.get(v) and not cells[v].get("error")]
    wrong = [v for v in measured if cells[v].get("correct") is not True]
    if not measured:
        return "-"
    return "ok" if not wrong else "FAIL: " + ",".join(wrong)


def table_header(variants):
    return (["size"] + [COLUMN_TITLES[v] for v in variants]
            + (["yali speedup vs best symm"] if "yali" in variants else []) + ["correct"])


def table_rows(rows, world, variants):
    """The cells of one world size's table, one list per size (strings)."""
    out = []
    for nbytes, cells in _cells_by_size(rows, world).items():
        line = [format_size(nbytes)] + [_time_cell(cells.get(v)) for v in variants]
        if "yali" in variants:
            s = speedup(cells)
            line.append(f"{s:.2f}x ({best_symm(cells)[0].replace('symm_', '')})"
                        if s is not None else "")
        line.append(_correct_cell(cells, variants))
        out.append(line)
    return out


def markdown_table(rows, world, variants):
    header = table_header(variants)
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(rows, world, variants)]
    return lines


def text_table(rows, world, variants):
    """Aligned plain-text table for the terminal."""
    header = table_header(variants)
    body = table_rows(rows, world, variants)
    widths = [max(len(header[i]), *(len(r[i]) for r in body)) if body else len(header[i])
              for i in range(len(header))]
    fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in body]


def _detail_lines(rows, world, variants):
    """Per variant: time per call, p50, p99 (of single calls in eager mode, of graph replays in
    graph mode), host time to issue one call, calls per timed loop."""
    lines = ["| size | variant | us/call | p50 us | p99 us | host us/call | N | correct | "
             "algorithm |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for nbytes, cells in _cells_by_size(rows, world).items():
        for v in variants:
            r = cells.get(v)
            if r is None:
                continue
            f = lambda k: "" if r.get(k) is None else f"{r[k]:.2f}"  # noqa: E731
            correct = "n/a" if r.get("error") else ("ok" if r.get("correct") else "FAIL")
            calls = r.get("iterations") or ""
            algo = r.get("algorithm") or ""
            lines.append(f"| {format_size(nbytes)} | {v} | {_time_cell(r)} | {f('p50_us')} | "
                         f"{f('p99_us')} | {f('host_us')} | {calls} | {correct} | {algo} |")
    return lines


def worlds_of(rows):
    return sorted({r["world_size"] for r in rows})


def timing_of(meta):
    """The timing mode of a result; results written before --timing existed were eager."""
    return meta.get("timing", "eager")


def timing_text(meta):
    """E.g. "graph (50 calls per graph, 5 timed replays; 10 warmup calls)"."""
    n = meta.get("num_iterations")
    calls = (f"{n}" if n is not None else
             f"{DEFAULT_ITERATIONS} (fewer for large sizes: at most "
             f"{format_size(_AUTO_BYTES_PER_LOOP)} of messages per loop)")
    warmup = f"{meta.get('num_warmup')} warmup calls"
    if timing_of(meta) == "graph":
        return (f"graph ({calls} calls per CUDA graph, {meta.get('num_replays')} timed replays; "
                f"{warmup})")
    return f"eager ({calls} back-to-back calls; {warmup})"


def header_lines(meta):
    dtype = meta.get("dtype", "")
    torch_version = meta.get("torch", "unknown")
    backend = meta.get("symm_backend") or "unknown"
    requested = meta.get("symm_backend_requested") or "torch default"
    return [
        f"AllReduce sum, {dtype}, YALI vs PyTorch symmetric memory (torch {torch_version}); "
        f"timing: {timing_text(meta)}.",
        "symm one-shot / two-shot read a pre-registered symmetric buffer (no copy-in counted); "
        f"{yali_reads(yali_buffers_of(meta))}; symm two-shot+copy = copy of a plain tensor into "
        "the symmetric buffer + two-shot.",
        f"yali: {YALI_MODE}, buffers {yali_buffers_of(meta)} (--yali_buffers). Symmetric-memory "
        f"backend: {backend} (requested: {requested}).",
    ]


def markdown(result):
    meta, rows = result["meta"], result["rows"]
    variants = meta.get("variants", list(VARIANTS))
    lines = ["# AllReduce: YALI vs PyTorch symmetric memory", ""]
    lines += header_lines(meta) + [""]
    for world in worlds_of(rows):
        lines += [f"## {world} GPUs", ""] + markdown_table(rows, world, variants) + [""]
    lines += [note(timing_of(meta), yali_buffers_of(meta)), "", "## Details", ""]
    for world in worlds_of(rows):
        lines += [f"### {world} GPUs", ""] + _detail_lines(rows, world, variants) + [""]
    if meta.get("command"):
        lines += ["Command: `" + meta["command"] + "`", ""]
    return "\n".join(lines)


def summary_line(rows):
    """One line: where YALI is faster than the best symmetric-memory kernel, and correctness."""
    points, faster, worst = 0, 0, None
    for world in worlds_of(rows):
        for nbytes, cells in _cells_by_size(rows, world).items():
            s = speedup(cells)
            if s is None:
                continue
            points += 1
            faster += s > 1.0
            if worst is None or s < worst[0]:
                worst = (s, world, nbytes)
    wrong = sum(1 for r in rows if not r.get("error") and r.get("correct") is False)
    na = sum(1 for r in rows if r.get("error"))
    text = f"yali faster than best symm at {faster}/{points} points"
    if worst is not None:
        text += f" (lowest {worst[0]:.2f}x at {worst[1]} GPUs {format_size(worst[2])})"
    text += f"; wrong results: {wrong}; n/a: {na}"
    return text


def write_outputs(result, out_dir):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(result, indent=1))
    (out_dir / "results.md").write_text(markdown(result))
    return out_dir


# ---- Worker (one per rank) -----------------------------------------------------------------------


class _Unavailable(Exception):
    """A shared resource (YALI comm, symmetric buffer) could not be set up; its message is the
    reason already agreed on by every rank."""


def _first_line(e):
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return first if isinstance(e, _Unavailable) else f"{type(e).__name__}: {first}".strip()


def _capture_reason(e):
    """Why a graph capture failed. When the body raised, leaving torch.cuda.graph still ends the
    capture, and that usually raises too ("operation failed due to a previous error during
    capture"), with the body's exception as its context: the body's is the cause, so it comes
    first."""
    cause = e.__context__ if isinstance(e.__context__, Exception) else None
    if cause is None:
        return _first_line(e)
    return f"{_first_line(cause)} (then {_first_line(e)})"


class _Variant:
    """One variant at one size (see make_* in _worker). ``algorithm``: what the library reports it
    runs (yali only), else None."""

    def __init__(self, load, call, result, repeatable, algorithm=None):
        self.load = load
        self.call = call
        self.result = result
        self.repeatable = repeatable
        self.algorithm = algorithm


def _worker(args):
    from yali import _launch

    # Multicast stays off even when the worker is started by hand (torchrun).
    os.environ.update(_launch.NVLS_OFF_ENV)

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    timeout = datetime.timedelta(seconds=max(30, int(args.timeout)))
    # NCCL default group: the nccl variant and the symmetric-memory rendezvous. A gloo group on the
    # side: the YALI unique id and the agreement/timing reductions, which must not queue behind (or
    # between) the GPU work being timed.
    dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timeout, device_id=device)
    host_group = dist.new_group(backend="gloo", timeout=timeout)
    group_name = dist.group.WORLD.group_name
    dtype = getattr(torch, DTYPES[args.dtype][0])
    elem = DTYPES[args.dtype][1]
    bits_dtype = {2: torch.int16, 4: torch.int32}[elem]
    max_count = max(args.sizes) // elem

    def agree(error):
        """Every rank's error (None when fine) -> one reason, the same on every rank."""
        errors = [None] * world
        dist.all_gather_object(errors, error, group=host_group)
        failed = [(i, e) for i, e in enumerate(errors) if e]
        if not failed:
            return None
        i, e = failed[0]
        return e if all(other == e for other in errors) else f"rank {i}: {e}"

    def all_true(flag):
        t = torch.tensor([int(bool(flag))], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=host_group)
        return bool(t.item())

    def max_over_ranks(values):
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=host_group)
        return t.tolist()

    def sync_all():
        torch.cuda.synchronize(device)
        dist.barrier(group=host_group)

    def context_error():
        """None while this rank's CUDA context still runs work, else why not. Asked after every
        failure: a sticky error (illegal address, a kernel fault during a replay) would make every
        later variant fail for a reason that is not its own."""
        try:
            torch.cuda.synchronize(device)
            t = torch.ones(1, device=device)
            t += 1
            if t.item() != 2.0:
                return "a test kernel computed a wrong value"
        except Exception as e:  # noqa: BLE001
            return _first_line(e)
        return None

    # ---- Resources shared by the sizes, set up just before the first variant that needs them.
    symm = {"buf": None, "error": None, "ready": False}
    yali_state = {"comm": None, "error": None, "ready": False}
    yali_bufs = {"pair": None, "error": None, "ready": False}

    def symm_buffer():
        """One symmetric buffer of the largest size; each size uses a prefix view of it (the ops
        find the registration through the storage and honour the view's offset)."""
        if symm["ready"]:
            return symm["buf"], symm["error"]
        symm["ready"] = True
        err = None
        # Named in the reason, since the backend is the usual cause of an allocation failure.
        where = f"symmetric alloc (backend {args.symm_backend or 'torch default'})"
        try:
            import warnings

            import torch.distributed._symmetric_memory as symm_mem

            # Torch picks the backend unless asked: pinning "CUDA" failed on torch 2.11 ("does not
            # find allocation backend CUDA"), so only --symm_backend pins one.
            if args.symm_backend:
                if not hasattr(symm_mem, "set_backend"):
                    raise RuntimeError(f"--symm_backend {args.symm_backend}: torch "
                                       f"{torch.__version__} has no set_backend")
                symm_mem.set_backend(args.symm_backend)
            enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
            if enable is not None:
                # Required by older torch (rendezvous did not enable the group itself); deprecated
                # and harmless in newer ones.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    enable(group_name)
            buf = symm_mem.empty(max_count, dtype=dtype, device=device)
            if hasattr(symm_mem, "get_backend"):
                meta["symm_backend"] = str(symm_mem.get_backend(device))
        except Exception as e:  # noqa: BLE001 (recorded as n/a)
            err = f"{where}: " + _first_line(e)
        # Rendezvous is collective: only when every rank has its buffer.
        err = agree(err)
        if err is None:
            try:
                symm_mem.rendezvous(buf, group_name)
            except Exception as e:  # noqa: BLE001
                err = "rendezvous: " + _first_line(e)
            err = agree(err)
        if err is None:
            symm["buf"] = buf
        symm["error"] = err
        return symm["buf"], err

    def yali_comm():
        if yali_state["ready"]:
            return yali_state["comm"], yali_state["error"]
        yali_state["ready"] = True
        err = None
        try:
            import yali.torch

            yali_state["comm"] = yali.torch.Communicator(group=host_group, device=local)
        except Exception as e:  # noqa: BLE001
            err = "yali: " + _first_line(e)
        yali_state["error"] = agree(err)
        return yali_state["comm"], yali_state["error"]

    # ---- Variants: make(count) -> _Variant(load, call, result, repeatable). load(x) puts this
    # rank's input where the call reads it; call() is what is timed (and captured); result() is the
    # tensor holding the sum after a call; repeatable: the result depends only on the loaded input
    # (not on earlier calls), so a graph replay of N calls can be checked against the exact sum.
    # Every call launches on torch's current stream and never synchronizes, so it can be captured:
    # yali.torch's ops take the current stream (see its docstring and the graph section of
    # tests/python/test_torch_gpu.py), ProcessGroupNCCL's all_reduce is capturable (NCCL >= 2.9.6),
    # and so are the symm_mem ops.

    def yali_registered_pair():
        """Two registered buffers of the largest size (input, output), made once; each size uses
        prefix views of them, at offset 0 on every rank (what the zero-copy paths need)."""
        if yali_bufs["ready"]:
            return yali_bufs["pair"], yali_bufs["error"]
        yali_bufs["ready"] = True
        comm, err = yali_comm()
        if err is None:
            try:
                # Collective, in the same order on every rank.
                pair = (comm.empty_registered(max_count, dtype),
                        comm.empty_registered(max_count, dtype))
            except Exception as e:  # noqa: BLE001 (recorded as n/a)
                err = "yali register: " + _first_line(e)
            err = agree(err)
        if err is None:
            yali_bufs["pair"] = pair
        yali_bufs["error"] = err
        return yali_bufs["pair"], err

    def make_yali(count):
        comm, err = yali_comm()
        if err:
            raise _Unavailable(err)
        if args.yali_buffers == "registered":
            pair, err = yali_registered_pair()
            if err:
                raise _Unavailable(err)
            src, dst = pair[0][:count], pair[1][:count]
        else:
            src = torch.empty(count, dtype=dtype, device=device)
            dst = torch.empty_like(src)
        algorithm = comm.algo_info(src, out=dst).algorithm
        return _Variant(lambda x: src.copy_(x), lambda: comm.all_reduce(src, out=dst),
                        lambda: dst, True, algorithm)

    def make_nccl(count):
        buf = torch.empty(count, dtype=dtype, device=device)
        return _Variant(lambda x: buf.copy_(x), lambda: dist.all_reduce(buf), lambda: buf, False)

    def symm_view(count):
        buf, err = symm_buffer()
        if err:
            raise _Unavailable(err)
        return buf[:count]

    def make_symm_one_shot(count):
        view = symm_view(count)
        op = torch.ops.symm_mem.one_shot_all_reduce
        # A new tensor per call: eager, from the caching allocator; under capture, from the graph's
        # private pool (each call's result is freed by the next assignment, so the pool reuses it).
        # After a replay out[0] is the tensor the last captured call wrote.
        out = [None]

        def call():
            out[0] = op(view, "sum", group_name)

        return _Variant(lambda x: view.copy_(x), call, lambda: out[0], True)

    def make_symm_one_shot_out(count):
        if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
            raise _Unavailable(f"torch {torch.__version__} has no "
                               "torch.ops.symm_mem.one_shot_all_reduce_out")
        op = torch.ops.symm_mem.one_shot_all_reduce_out
        view = symm_view(count)
        dst = torch.empty(count, dtype=dtype, device=device)
        return _Variant(lambda x: view.copy_(x), lambda: op(view, "sum", group_name, dst),
                        lambda: dst, True)

    def make_symm_two_shot(count):
        view = symm_view(count)
        op = torch.ops.symm_mem.two_shot_all_reduce_
        return _Variant(lambda x: view.copy_(x), lambda: op(view, "sum", group_name),
                        lambda: view, False)

    def make_symm_two_shot_copy(count):
        view = symm_view(count)
        op = torch.ops.symm_mem.two_shot_all_reduce_
        plain = torch.empty(count, dtype=dtype, device=device)

        def call():
            # Copy and reduction together per call, in eager loops and in the graph alike.
            view.copy_(plain)
            op(view, "sum", group_name)

        return _Variant(lambda x: plain.copy_(x), call, lambda: view, True)

    makers = {"yali": make_yali, "nccl": make_nccl, "symm_one_shot": make_symm_one_shot,
              "symm_one_shot_out": make_symm_one_shot_out, "symm_two_shot": make_symm_two_shot,
              "symm_two_shot+copy": make_symm_two_shot_copy}

    def rank_input(count, r):
        # (i + 3r) % 8 + r: small integers, a different pattern on every rank so that a sum taken
        # from the wrong peer or the wrong offset shows. The sum is at most 7w + w(w-1)/2: 232 for
        # 16 ranks, still an integer that bf16 (8 significant bits) holds exactly.
        i = torch.arange(count, dtype=torch.int32, device=device)
        return ((i + 3 * r) % 8 + r).to(dtype)

    def expected_sum(count):
        i = torch.arange(count, dtype=torch.int32, device=device)
        total = torch.zeros(count, dtype=torch.int32, device=device)
        for r in range(world):
            total += (i + 3 * r) % 8 + r
        return total.to(dtype)

    def is_exact_sum(tensor, count):
        return torch.equal(tensor.view(bits_dtype), expected_sum(count).view(bits_dtype))

    def timing_input(v, count):
        # Repeatable variants keep the rank input (a graph replay is then checked); the in-place
        # ones sum their own output again and again, and zeros keep it finite whatever the number
        # of calls. The values do not change the speed.
        return rank_input(count, rank) if v.repeatable else torch.zeros(count, dtype=dtype,
                                                                       device=device)

    def measure_eager(call, n):
        """(us per call from one back-to-back loop, per-call us list, host us to issue one call)."""
        for _ in range(args.num_warmup):
            call()
        sync_all()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        for _ in range(n):
            call()
        end.record()
        host_us = (time.perf_counter() - t0) * 1e6 / n
        end.synchronize()
        loop_us = start.elapsed_time(end) * 1e3 / n
        sync_all()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for s, e in zip(starts, ends):
            s.record()
            call()
            e.record()
        torch.cuda.synchronize(device)
        singles = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
        return loop_us, singles, host_us

    def time_eager(v, count, n):
        """(error or None, timing, graph check (always None here))."""
        try:
            v.load(timing_input(v, count))
            return None, measure_eager(v.call, n), None
        except Exception as e:  # noqa: BLE001
            return "timing: " + _first_line(e), None, None

    def capture(call, n):
        """A CUDAGraph of n calls, captured the usual torch way, with what a failed capture leaves
        behind undone so that it does not spoil the next variant's capture."""
        graph = torch.cuda.CUDAGraph()
        # An explicit pool: when capture_end fails (cudaStreamEndCapture on an invalidated
        # capture), torch raises before it stops routing allocations into the graph's pool, and
        # without the pool's id that cannot be undone; every later capture would then fail.
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(device=device)
        try:
            # The outer stream context restores the current stream even when capture_end raises
            # (torch.cuda.graph's __exit__ then skips restoring it).
            with torch.cuda.stream(stream):
                # thread_local: only this thread's calls are checked for capture safety; the NCCL
                # watchdog thread keeps polling its events meanwhile (the mode yali's graph test
                # uses).
                with torch.cuda.graph(graph, pool=pool, stream=stream,
                                      capture_error_mode="thread_local"):
                    for _ in range(n):
                        call()
        except Exception:
            end = (getattr(torch._C, "_cuda_endAllocateToPool", None)
                   or getattr(torch._C, "_cuda_endAllocateCurrentStreamToPool", None))
            release = getattr(torch._C, "_cuda_releasePool", None)
            try:
                # Raises "not currently recording" when capture_end got that far itself; then the
                # graph owns the pool and releases it, so only an ended routing is released here.
                if end is not None:
                    end(device.index, pool)
                    if release is not None:
                        release(device.index, pool)
            except Exception:  # noqa: BLE001 (private API, best effort)
                pass
            raise
        return graph

    def time_graph(v, count, n):
        """Warm up on a side stream, capture n calls into one graph, replay it once (checked when
        the variant is repeatable), then time --num_replays replays. Each phase ends with every
        rank agreeing, so that no rank replays a graph whose peers have none (its calls would wait
        for them forever). Returns (error or None, timing, graph check: True/False/None)."""
        err, graph, timing, check = None, None, None, None
        try:
            v.load(timing_input(v, count))
            # Torch's capture pattern: whatever a call sets up lazily (workspaces, NCCL/YALI
            # state) happens here, on a side stream, not during capture.
            side = torch.cuda.Stream(device=device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(max(1, args.num_warmup)):
                    v.call()
            torch.cuda.current_stream(device).wait_stream(side)
            torch.cuda.synchronize(device)
        except Exception as e:  # noqa: BLE001
            err = "graph warmup: " + _first_line(e)
        err = agree(err)
        if err is not None:
            return err, None, None
        try:
            graph = capture(v.call, n)
        except Exception as e:  # noqa: BLE001
            graph = None
            err = "graph capture: " + _capture_reason(e)
            try:
                torch.cuda.synchronize(device)
            except Exception:  # noqa: BLE001 (context_error() reports it)
                pass
        err = agree(err)
        if err is not None:
            return err, None, None
        try:
            sync_all()
            graph.replay()  # uploads the graph; untimed
            torch.cuda.synchronize(device)
            if v.repeatable:
                check = is_exact_sum(v.result(), count)
            sync_all()
            events = [torch.cuda.Event(enable_timing=True) for _ in range(args.num_replays + 1)]
            t0 = time.perf_counter()
            events[0].record()
            for e in events[1:]:
                graph.replay()
                e.record()
            host_s = time.perf_counter() - t0
            events[-1].synchronize()
            total_ms = events[0].elapsed_time(events[-1])
            per_replay_ms = [a.elapsed_time(b) for a, b in zip(events, events[1:])]
            timing = (graph_per_call_us(total_ms, args.num_replays, n),
                      [graph_per_call_us(ms, 1, n) for ms in per_replay_ms],
                      host_s * 1e6 / (args.num_replays * n))
        except Exception as e:  # noqa: BLE001
            err = "graph replay: " + _first_line(e)
        err = agree(err)
        if err is None and check is not None:
            check = all_true(check)
        graph = None  # frees the graph and its private memory pool
        return err, timing, check

    timers = {"graph": time_graph, "eager": time_eager}

    rows = []

    def save(row, echo=True):
        if rank != 0:
            return
        rows.append(row)
        line = (f"[x{world}] {row['variant']:<19} {format_size(row['bytes']):>5}: "
                + (f"n/a ({row['error']})" if row["error"] else
                   f"{row['time_us']:.2f} us (p50 {row['p50_us']:.2f}, p99 {row['p99_us']:.2f})"
                   f" {'correct' if row['correct'] else 'WRONG'}")
                + (f" [{row['algorithm']}]" if row.get("algorithm") else ""))
        if echo:
            print(line, flush=True)
        if args.result_file:
            # Rewritten after every row so that a run cut off by its timeout keeps what it measured.
            tmp = args.result_file + ".tmp"
            Path(tmp).write_text(json.dumps({"rows": rows, "meta": meta}))
            os.replace(tmp, args.result_file)

    meta = {"torch": torch.__version__, "device": torch.cuda.get_device_name(device),
            "group_name": str(group_name), "timing": args.timing,
            "yali_buffers": args.yali_buffers}

    todo = [(v, b) for v in RUN_ORDER if v in args.variants for b in args.sizes]
    stopped = None
    for index, (variant, nbytes) in enumerate(todo):
        count = nbytes // elem
        n = iterations_for(nbytes, args.num_iterations)
        row = {"world_size": world, "variant": variant, "bytes": nbytes, "count": count,
               "dtype": args.dtype, "timing": args.timing, "iterations": n,
               "replays": args.num_replays if args.timing == "graph" else None, "time_us": None,
               "p50_us": None, "p99_us": None, "host_us": None, "correct": None,
               "graph_check": None, "error": None, "algorithm": None}
        err, ok, timing, check, v = None, False, None, None, None
        try:
            v = makers[variant](count)
            row["algorithm"] = v.algorithm
            v.load(rank_input(count, rank))
            sync_all()
            v.call()
            torch.cuda.synchronize(device)
            ok = is_exact_sum(v.result(), count)
        except Exception as e:  # noqa: BLE001 (recorded as n/a)
            err = _first_line(e)
        err = agree(err)
        if err is None:
            ok = all_true(ok)
            err, timing, check = timers[args.timing](v, count, n)
        if err is None:
            loop_us, singles, host_us = timing
            maxima = max_over_ranks([loop_us, host_us] + singles)
            row.update(time_us=maxima[0], host_us=maxima[1], p50_us=percentile(maxima[2:], 50),
                       p99_us=percentile(maxima[2:], 99), graph_check=check,
                       correct=ok and check is not False)
        else:
            row["error"] = err
            # Every rank asks, since every rank saw the same agreed error.
            broken = agree(context_error())
            if broken:
                # The row itself keeps what failed; this says what the context does now.
                stopped = f"CUDA context unusable after {variant} {format_size(nbytes)}: {broken}"
                meta["stopped"] = stopped  # before save(), which writes meta with the rows
        v = None
        save(row)
        if stopped:
            for later_variant, later_bytes in todo[index + 1:]:
                save(dict(row, variant=later_variant, bytes=later_bytes,
                          count=later_bytes // elem, iterations=0, error="not run: " + stopped),
                     echo=False)
            break
        if index + 1 == len(todo) or todo[index + 1][0] != variant:
            torch.cuda.empty_cache()

    if stopped:
        # Tearing down (comm destroy, NCCL) on a broken context can hang; the results are saved and
        # the driver reports meta["stopped"].
        if rank == 0:
            print(f"[x{world}] stopped: {stopped}", flush=True)
        dist.barrier(group=host_group)
        sys.stdout.flush()
        os._exit(3)
    yali_bufs["pair"] = None
    if yali_state["comm"] is not None:
        yali_state["comm"].close()  # also ends the registrations
    symm["buf"] = None
    torch.cuda.synchronize(device)
    dist.barrier(group=host_group)
    dist.destroy_process_group()


# ---- Driver --------------------------------------------------------------------------------------


def _missing_row(world, variant, nbytes, args, why):
    return {"world_size": world, "variant": variant, "bytes": nbytes,
            "count": nbytes // DTYPES[args.dtype][1], "dtype": args.dtype, "timing": args.timing,
            "iterations": 0, "replays": None, "time_us": None, "p50_us": None, "p99_us": None,
            "host_us": None, "correct": None, "graph_check": None, "error": why,
            "algorithm": None}


def _run_world(world, args):
    """One process group for ``world`` ranks; returns (rows, the workers' meta, failure text or
    None). Rows the group did not save (timeout, crash) come back as n/a with the reason."""
    from yali import _launch

    with tempfile.TemporaryDirectory(prefix="yali_bench_symm_") as tmp:
        result_file = os.path.join(tmp, "rows.json")
        cmd = ["-m", "yali.bench_symm", "--_worker", "--sizes", ",".join(map(str, args.sizes)),
               "--dtype", args.dtype, "--variants", ",".join(args.variants),
               "--timing", args.timing, "--num_warmup", str(args.num_warmup),
               "--num_replays", str(args.num_replays),
               "--yali_buffers", args.yali_buffers,
               "--timeout", str(args.timeout), "--result_file", result_file]
        if args.num_iterations is not None:
            cmd += ["--num_iterations", str(args.num_iterations)]
        if args.symm_backend:
            cmd += ["--symm_backend", args.symm_backend]
        env = dict(_launch.NVLS_OFF_ENV)
        try:
            from yali import _capi

            path = _capi.library_path()
            if path:
                env["YALI_LIBRARY"] = path
        except Exception:  # noqa: BLE001 (the yali variant reports it as n/a)
            pass
        res = _launch.launch(cmd, world, timeout=args.timeout, env=env, echo_rank=0)
        saved = json.loads(Path(result_file).read_text()) if os.path.exists(result_file) else {}
    rows, meta = saved.get("rows", []), saved.get("meta", {})
    failure = None
    if meta.get("stopped"):
        # The worker saved every row (the rest as "not run") and exited on purpose.
        failure = f"[x{world}] stopped: {meta['stopped']}"
    elif not res.ok:
        why = "TIMEOUT" if res.timed_out else "process group failed"
        done = {(r["variant"], r["bytes"]) for r in rows}
        missing = [(v, b) for v in args.variants for b in args.sizes if (v, b) not in done]
        if not missing:
            # Every figure was saved: a failure while tearing down is worth a look, not a failed
            # benchmark.
            print(f"[x{world}] warning: {why} after the last measurement:\n{res.summary()}",
                  file=sys.stderr, flush=True)
        else:
            failure = f"[x{world}] {why}:\n{res.summary()}"
            rows += [_missing_row(world, v, nbytes, args, why) for v, nbytes in missing]
    return rows, meta, failure


def main(argv=None):
    args = parse_args(argv)
    if args._worker:
        _worker(args)
        return 0

    from yali.bench_backends import _gpu_count

    gpus = _gpu_count()
    worlds = [w for w in args.world_sizes if w <= gpus]
    skipped = [w for w in args.world_sizes if w > gpus]
    if skipped:
        print(f"skipping world sizes {skipped}: {gpus} GPU(s) visible", flush=True)
    if not worlds:
        print(f"bench_symm: nothing to run ({gpus} GPU(s) visible, world sizes "
              f"{args.world_sizes})", flush=True)
        return 2

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    meta = {"date": stamp, "dtype": args.dtype, "sizes": args.sizes, "world_sizes": worlds,
            "variants": args.variants, "timing": args.timing, "num_warmup": args.num_warmup,
            # None: DEFAULT_ITERATIONS, fewer for large sizes (each row has its "iterations").
            "num_iterations": args.num_iterations,
            "num_replays": args.num_replays if args.timing == "graph" else None,
            "symm_backend_requested": args.symm_backend, "gpus_visible": gpus,
            "yali_mode": YALI_MODE, "yali_buffers": args.yali_buffers,
            "command": "python -m yali.bench_symm " + " ".join(sys.argv[1:] if argv is None
                                                                else argv),
            "note": note(args.timing, args.yali_buffers)}
    print(f"bench_symm: {args.dtype}, world sizes {worlds}, sizes "
          f"{','.join(format_size(b) for b in args.sizes)}, timing {args.timing}, yali buffers "
          f"{args.yali_buffers}; up to "
          f"{args.timeout:.0f} s per world size", flush=True)
    rows, failures = [], []
    for world in worlds:
        world_rows, world_meta, failure = _run_world(world, args)
        rows += world_rows
        meta.update({k: v for k, v in world_meta.items()
                     if k in ("torch", "device", "symm_backend")})
        if world_meta.get("stopped"):
            meta.setdefault("stopped", {})[str(world)] = world_meta["stopped"]
        if failure:
            failures.append(failure)
            print(failure, file=sys.stderr, flush=True)
    from yali import _launch

    meta["child_env"] = dict(_launch.NVLS_OFF_ENV)
    result = {"meta": meta, "rows": rows}
    out_dir = write_outputs(result, args.output_dir or os.path.join("output", "bench_symm", stamp))

    print()
    for line in header_lines(meta):
        print(line)
    for world in worlds_of(rows):
        print(f"\n{world} GPUs, {args.dtype}, {args.timing} timing, yali buffers "
              f"{args.yali_buffers}, us per call (max over ranks)")
        print("\n".join(text_table(rows, world, args.variants)))
    print()
    print(note(args.timing, args.yali_buffers))
    print(f"saved {out_dir / 'results.md'}, {out_dir / 'results.json'}")
    # Last line: what scripts/gpu_check.sh puts in its summary.
    print(summary_line(rows) + f"; yali buffers {args.yali_buffers}"
          + (f"; {len(failures)} process group(s) failed" if failures else ""), flush=True)
    wrong = any(not r.get("error") and r.get("correct") is False for r in rows)
    return 1 if wrong or failures else 0


if __name__ == "__main__":
    sys.exit(main())
