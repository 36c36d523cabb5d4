"""A Mixture-of-Experts layer's exchange through torch: dispatch + combine, YALI vs NCCL.

    python -m yali.bench_moe --world_size 2                       # every distribution and path
    python -m yali.bench_moe --world_size 4 --tokens 4096 --hidden 7168 --topk 8 --experts 256 \\
        --dists zipf --paths yali_dispatch_graph,nccl_a2a_host

The layer's shape: --tokens tokens of --hidden features per rank, each routed to --topk of --experts
experts (experts / world_size per rank; global expert g lives on rank g // E). Each rank's routing is
drawn from a --dists distribution (seeded, so every rank knows every rank's counts):
  uniform   every expert equally likely;
  zipf      expert popularity ~ 1 / rank^1.2 (ranks in a seeded random order), the same on all ranks;
  hot       the experts of rank 0 are 32x as likely as the others: rank 0 receives most rows.

One iteration moves the rows to the experts and back, the experts being the identity. Paths:
  yali_dispatch        Communicator.expert_dispatch + expert_combine with the counts on the device
                       (the router's output, never read by the host), eager;
  yali_dispatch_graph  the same two calls captured once in a CUDA graph, replayed;
  yali_a2a_host        Communicator.all_to_all_single with host split sizes: the counts are
                       exchanged (an even all_to_all of the int64 counts), copied to the host (a
                       synchronization), the rows sent, regrouped expert-major by a gather on the
                       GPU, regrouped back and returned with the splits swapped;
  nccl_a2a_host        the same through torch.distributed.all_to_all_single on NCCL.
The host-split paths' time includes the device-to-host copy of the counts and the synchronization
(the GPU idles while the host turns counts into split sizes): the round trip that device counts
save. "sync ms" is that round trip alone (host clock around the copy, median).

Before timing, each path is checked on every rank against the layout yali.h defines (the rows every
expert received, byte for byte; recv_counts and expert_offsets; the combined rows equal to the sent
ones, into buffers pre-filled with a value the data never takes). The sent rows encode (rank, row)
so that a misplaced row cannot match. The graph path is also replayed with a second routing written
into the same device counts and checked again. Timing: --num_warmup untimed iterations, then
--num_iterations each between CUDA events on the current stream; an iteration's time is the max over
ranks, reported as the median over iterations (and min, max).

With more ranks than GPUs the ranks share GPUs (YALI_ALLOW_SHARED_GPU=1, a NCCL_HOSTID per rank):
then the numbers show correctness and the host round trip saved, not NVLink speed.

Output: a table on stdout, saved as results.md, results.csv and results.json under --output_dir
(default output/bench_moe/<timestamp>/).
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
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run as a file (python python/yali/bench_moe.py): the directory holding yali/torch.py must not
    # shadow PyTorch. Make it `python -m yali.bench_moe` instead.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import torch  # noqa: E402

DISTS = ("uniform", "zipf", "hot")
PATHS = ("yali_dispatch", "yali_dispatch_graph", "yali_a2a_host", "nccl_a2a_host")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
ZIPF_EXPONENT = 1.2
HOT_WEIGHT = 32.0  # how much likelier the hot rank's experts are (dist "hot")
# The rows' values: integers in [-120, 120], exact in every DTYPES entry (bf16 holds integers to 256).
PATTERN_MOD = 241  # a prime: the row encoding below is unique for rows < 241^3 and ranks < 241
PATTERN_SENTINEL = 1000.0  # never a pattern value: what unwritten outputs hold during the checks
MIN_HIDDEN = 4  # the row encoding needs 4 columns


# ---- Routing and data (pure functions: tests/python/test_moe_host.py) ---------------------------


def expert_weights(dist, num_experts, nranks, seed):
    """Unnormalized probability of each global expert under ``dist`` (float64 [G])."""
    if dist == "uniform":
        return torch.ones(num_experts, dtype=torch.float64)
    if dist == "zipf":
        order = torch.randperm(num_experts, generator=torch.Generator().manual_seed(seed))
        return 1.0 / (order.double() + 1.0) ** ZIPF_EXPONENT
    if dist == "hot":
        w = torch.ones(num_experts, dtype=torch.float64)
        w[:num_experts // nranks] = HOT_WEIGHT  # rank 0's experts
        return w
    raise ValueError(f"unknown distribution {dist!r}; choose one of {', '.join(DISTS)}")


def make_routing(dist, rank, tokens, topk, num_experts, nranks, seed):
    """topi int64 [tokens, topk] (CPU): each token's topk distinct experts drawn from ``dist``,
    seeded by (seed, rank): every rank can compute every rank's routing."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    w = expert_weights(dist, num_experts, nranks, seed).expand(tokens, num_experts)
    return torch.multinomial(w, topk, replacement=False, generator=gen)


def routing_counts(topi, num_experts):
    """send_counts of one rank as a list: rows for each global expert."""
    return torch.bincount(topi.reshape(-1), minlength=num_experts).tolist()


def row_pattern(rank, rows, hidden, dtype, device="cpu"):
    """The rows rank ``rank`` sends: row i, column c holds digits of i (base 241) and the rank as the
    coefficients of a cubic in (c + 1) mod 241, minus 120. Two (rank, row) pairs with equal rows
    would make that cubic vanish at c + 1 = 1, 2, 3, 4, so with hidden >= 4 every row is unique
    (rows < 241^3, ranks < 241) and every value is an integer in [-120, 120]."""
    m = PATTERN_MOD
    i = torch.arange(rows, device=device, dtype=torch.int64).unsqueeze(1)
    c1 = (torch.arange(hidden, device=device, dtype=torch.int64) + 1) % m
    c2 = c1 * c1 % m
    c3 = c2 * c1 % m
    v = (i % m + (i // m % m) * c1 + (i // (m * m) % m) * c2 + (rank % m) * c3) % m
    return (v - (m - 1) // 2).to(dtype)


def capacity_rows(tokens, topk, nranks, local_experts, align):
    """Rows an expert-major buffer needs whatever the routing: a token's experts are distinct, so it
    sends at most min(topk, E) rows to one rank; every rank's tokens may go to one rank; each of the
    E segments may start up to align - 1 rows late."""
    return nranks * tokens * min(topk, local_experts) + local_experts * (align - 1)


def dispatch_plan(all_counts, rank, local_experts, align):
    """What yaliExpertDispatch gives ``rank``, from every rank's send counts (all_counts[s][g], s a
    rank, g a global expert; each rank's send rows sorted by g, packed): {"recv_counts": [e * nranks
    + s], "expert_offsets": [E + 1], "blocks": [(first row here, source rank, first row in the
    source's send rows, rows)]} in expert-major order (expert 0: rank 0's rows, rank 1's, ...; each
    expert's segment from a multiple of ``align``). Its inverse is the combine's."""
    nranks = len(all_counts)
    starts = []
    for counts in all_counts:
        s, acc = [], 0
        for n in counts:
            s.append(acc)
            acc += n
        starts.append(s)
    recv_counts, offsets, blocks = [], [0], []
    row = 0
    for e in range(local_experts):
        g = rank * local_experts + e
        if e:
            row = -(-row // align) * align
            offsets.append(row)
        for s in range(nranks):
            n = all_counts[s][g]
            recv_counts.append(n)
            if n:
                blocks.append((row, s, starts[s][g], n))
            row += n
    offsets.append(row)
    return {"recv_counts": recv_counts, "expert_offsets": offsets, "blocks": blocks}


def regroup_index(counts_se, total):
    """idx int64 [total]: where each row received source-major (rank 0's rows for expert 0, for
    expert 1, ..., then rank 1's) goes expert-major (expert 0's rows from rank 0, rank 1, ...).
    counts_se [nranks, E] int64 on the rows' device; ``total`` its sum, known on the host (no
    synchronization: repeat_interleave is told its output size)."""
    nranks, num_local = counts_se.shape
    flat = counts_se.reshape(-1)
    src_start = flat.cumsum(0) - flat
    by_expert = counts_se.t().reshape(-1)
    dst_start = (by_expert.cumsum(0) - by_expert).view(num_local, nranks).t().reshape(-1)
    shift = torch.repeat_interleave(dst_start - src_start, flat, output_size=total)
    return torch.arange(total, device=counts_se.device) + shift


def check_layout(buf, recv_counts, expert_offsets, plan, sent_by):
    """'' when the expert-major ``buf`` holds what ``plan`` says (rows byte for byte) and the counts
    the call reported (host lists) are the plan's; else the first difference. ``sent_by(rank)``:
    that rank's send rows."""
    if list(recv_counts) != plan["recv_counts"]:
        return f"recv_counts {list(recv_counts)} != {plan['recv_counts']}"
    if list(expert_offsets) != plan["expert_offsets"]:
        return f"expert_offsets {list(expert_offsets)} != {plan['expert_offsets']}"
    for row, src, src_row, n in plan["blocks"]:
        want = sent_by(src)[src_row:src_row + n]
        if not torch.equal(buf[row:row + n].view(torch.uint8), want.view(torch.uint8)):
            return f"rows {row}..{row + n - 1} (from rank {src}, its rows {src_row}..) differ"
    return ""


# ---- The paths (one rank's side; collective) ----------------------------------------------------


class _Setup:
    """What every path of one distribution shares on this rank: the rows to send (row_pattern,
    [tokens * topk, H]) and their counts on the device (int64 [G], as a router leaves them)."""

    def __init__(self, comm, rank, world, args, counts, device):
        self.comm = comm
        self.rank = rank
        self.world = world
        self.local_experts = args.experts // world
        self.align = args.align
        self.hidden = args.hidden
        self.dtype = DTYPES[args.dtype]
        self.device = device
        self.rows = args.tokens * args.topk  # every rank sends tokens x topk rows
        self.send = row_pattern(rank, self.rows, args.hidden, self.dtype, device)
        self._sent = {rank: self.send}
        self.counts = torch.tensor(counts, dtype=torch.int64, device=device)
        self.capacity = capacity_rows(args.tokens, args.topk, world, self.local_experts, args.align)
        self.packed_capacity = capacity_rows(args.tokens, args.topk, world, self.local_experts, 1)

    def sent_by(self, rank):
        """Rank ``rank``'s send rows, made here once (for the checks)."""
        if rank not in self._sent:
            self._sent[rank] = row_pattern(rank, self.rows, self.hidden, self.dtype, self.device)
        return self._sent[rank]


class _YaliDispatch:
    """yali_dispatch: expert_dispatch + expert_combine, device counts."""

    name = "yali_dispatch"

    def __init__(self, s):
        self.s = s
        e, w, dev = s.local_experts, s.world, s.device
        self.recv = torch.empty(s.capacity, s.hidden, dtype=s.dtype, device=dev)
        self.recv_counts = torch.empty(e * w, dtype=torch.int64, device=dev)
        self.expert_offsets = torch.empty(e + 1, dtype=torch.int64, device=dev)
        self.back = torch.empty_like(s.send)
        self.sync_s = []

    def prepare(self):
        pass

    def step(self):
        s = self.s
        s.comm.expert_dispatch(self.recv, s.send, s.counts, s.local_experts, align=s.align,
                               recv_counts=self.recv_counts, expert_offsets=self.expert_offsets)
        s.comm.expert_combine(self.back, self.recv, s.counts, s.local_experts, align=s.align)

    def layout(self):
        """(expert-major buffer, recv_counts, expert_offsets as host lists, align used)."""
        return (self.recv, self.recv_counts.tolist(), self.expert_offsets.tolist(), self.s.align)

    def outputs(self):
        return (self.recv, self.back)

    def check_errors(self):
        self.s.comm.check()


class _YaliDispatchGraph(_YaliDispatch):
    """yali_dispatch_graph: the same two calls captured once in a CUDA graph."""

    name = "yali_dispatch_graph"

    def prepare(self):
        dev = self.s.device
        side = torch.cuda.Stream(device=dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            super().step()  # warm-up, as torch recommends before capture (every rank does it)
        torch.cuda.current_stream(dev).wait_stream(side)
        torch.cuda.synchronize(dev)
        self.check_errors()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            super().step()
        torch.cuda.synchronize(dev)

    def step(self):
        self.graph.replay()


class _HostSplits:
    """yali_a2a_host / nccl_a2a_host: all_to_all_single with host split sizes, as a layer without
    device counts must run it (see the module docstring). ``a2a(output, input, output_split_sizes,
    input_split_sizes)``: the library's call."""

    def __init__(self, s, name, a2a, check_errors):
        self.s = s
        self.name = name
        self.a2a = a2a
        self._check_errors = check_errors
        dev, n = s.device, s.packed_capacity
        self.counts_in = torch.empty_like(s.counts)  # [src * E + e]: rows src sends to expert e
        self.recv_src = torch.empty(n, s.hidden, dtype=s.dtype, device=dev)  # source-major
        self.recv = torch.empty(n, s.hidden, dtype=s.dtype, device=dev)  # expert-major
        self.src_back = torch.empty(n, s.hidden, dtype=s.dtype, device=dev)
        self.back = torch.empty_like(s.send)
        self.sync_s = []  # host seconds of each counts round trip

    def prepare(self):
        pass

    def step(self):
        s = self.s
        w, e = s.world, s.local_experts
        self.a2a(self.counts_in, s.counts, None, None)  # even: E counts for each peer
        t0 = time.perf_counter()
        # The round trip: one copy of both count vectors' per-rank sums, which waits for the GPU.
        in_splits, out_splits = torch.stack((s.counts, self.counts_in)).view(2, w, e).sum(2).tolist()
        self.sync_s.append(time.perf_counter() - t0)
        total = sum(out_splits)
        recv_src = self.recv_src[:total]
        self.a2a(recv_src, s.send, out_splits, in_splits)
        idx = regroup_index(self.counts_in.view(w, e), total)
        self.recv[:total].index_copy_(0, idx, recv_src)
        # The experts would run here, on self.recv[:total] (identity). Then back, source-major:
        src_back = self.src_back[:total]
        torch.index_select(self.recv[:total], 0, idx, out=src_back)
        self.a2a(self.back, src_back, in_splits, out_splits)

    def layout(self):
        w, e = self.s.world, self.s.local_experts
        rc = self.counts_in.view(w, e).t().reshape(-1).tolist()  # [e * nranks + s], as yali's
        rows = [sum(rc[x * w:(x + 1) * w]) for x in range(e)]
        offsets = [0]
        for n in rows:
            offsets.append(offsets[-1] + n)
        return (self.recv, rc, offsets, 1)

    def outputs(self):
        return (self.recv, self.back)

    def check_errors(self):
        self._check_errors()


def _make_path(name, s):
    import torch.distributed as dist

    if name == "yali_dispatch":
        return _YaliDispatch(s)
    if name == "yali_dispatch_graph":
        return _YaliDispatchGraph(s)
    if name == "yali_a2a_host":
        def yali_a2a(out, inp, out_splits, in_splits):
            s.comm.all_to_all_single(out, inp, out_splits, in_splits)
        return _HostSplits(s, name, yali_a2a, s.comm.check)
    if name == "nccl_a2a_host":
        def nccl_a2a(out, inp, out_splits, in_splits):
            dist.all_to_all_single(out, inp, out_splits, in_splits)
        return _HostSplits(s, name, nccl_a2a, lambda: None)
    raise ValueError(f"unknown path {name!r}")


def _check_path(path, s, all_counts):
    """'' when one step of ``path`` gives what yali.h says (see the module docstring)."""
    for t in path.outputs():
        t.fill_(PATTERN_SENTINEL)
    path.step()
    if s.device.type == "cuda":  # (the host tests run the host-split path on CPU tensors)
        torch.cuda.synchronize(s.device)
    path.check_errors()
    buf, rc, offsets, align = path.layout()
    plan = dispatch_plan(all_counts, s.rank, s.local_experts, align)
    why = check_layout(buf, rc, offsets, plan, s.sent_by)
    if not why and not torch.equal(path.back.view(torch.uint8), s.send.view(torch.uint8)):
        why = "the combined rows differ from the rows sent"
    return why


# ---- Worker (one per rank) -----------------------------------------------------------------------


def _worker(args):
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    ndev = torch.cuda.device_count()
    dev = torch.device("cuda", local % ndev)
    if world > ndev:  # ranks share a GPU: NCCL wants a host id of its own per rank
        os.environ["NCCL_HOSTID"] = f"yali-bench-moe-rank-{rank}"
    torch.cuda.set_device(dev)
    # CPU tensors (timings, verdicts) through gloo, CUDA tensors (nccl_a2a_host) through NCCL.
    dist.init_process_group("cpu:gloo,cuda:nccl", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=max(60, int(args.timeout))))
    comm = None
    if any(p.startswith("yali") for p in args.paths):
        import yali.torch

        comm = yali.torch.Communicator()

    def agree_all(ok):
        t = torch.tensor([int(ok)])
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())

    def reduce_max(values):
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    g = args.experts
    rows = []
    for dist_name in args.dists:
        routing = [[routing_counts(make_routing(dist_name, r, args.tokens, args.topk, g, world,
                                                args.seed + k), g) for r in range(world)]
                   for k in (0, 1)]  # the timed routing, and a second one for the graph check
        s = _Setup(comm, rank, world, args, routing[0][rank], dev)
        rows_in = max(dispatch_plan(routing[0], d, s.local_experts, 1)["expert_offsets"][-1]
                      for d in range(world))
        for name in args.paths:
            why, times, sync, path = "", [], [], None
            try:
                path = _make_path(name, s)
                path.prepare()
                why = _check_path(path, s, routing[0])
                if not why and name == "yali_dispatch_graph":
                    # Counts are device data: a replay of the same graph follows new ones.
                    s.counts.copy_(torch.tensor(routing[1][rank], device=dev))
                    why = _check_path(path, s, routing[1])
                    s.counts.copy_(torch.tensor(routing[0][rank], device=dev))
                    if why:
                        why = "second routing: " + why
            except Exception as e:  # noqa: BLE001 (reported in the row; the others go on)
                why = f"ERROR {type(e).__name__}: {e}".splitlines()[0][:200]
            if why:
                print(f"rank {rank} [{dist_name} {name}] {why}", file=sys.stderr, flush=True)
            ok = agree_all(not why)
            raised = not agree_all(not why.startswith("ERROR"))
            if not raised:  # every rank has a working path (a wrong result is still timed)
                for _ in range(args.num_warmup):
                    path.step()
                torch.cuda.synchronize(dev)
                path.sync_s.clear()
                agree_all(True)  # a barrier (through gloo: no NCCL communicator for it)
                starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.num_iterations)]
                ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.num_iterations)]
                for a, b in zip(starts, ends):
                    a.record()
                    path.step()
                    b.record()
                torch.cuda.synchronize(dev)
                path.check_errors()
                times = reduce_max([a.elapsed_time(b) for a, b in zip(starts, ends)])
                sync = reduce_max([x * 1e3 for x in path.sync_s]) if path.sync_s else []
            if rank == 0:
                rows.append(_row(args, world, dist_name, name, rows_in, times, sync,
                                 "ok" if ok else ("ERROR" if raised else "FAIL")))
                print(_format_row(rows[-1]), flush=True)
                if args.result_file:  # after every row: a later hang keeps what was measured
                    Path(args.result_file).write_text(json.dumps(rows))
            path = None
            torch.cuda.synchronize(dev)
            torch.cuda.empty_cache()
    if comm is not None:
        try:
            comm.close()
        except Exception:  # noqa: BLE001 (a failed comm: its rows say so already)
            comm.abort()
    agree_all(True)
    dist.destroy_process_group()


def _row(args, world, dist_name, path, rows_in, times, sync, correct):
    nan = float("nan")
    return {
        "dist": dist_name,
        "path": path,
        "world_size": world,
        "tokens": args.tokens,
        "hidden": args.hidden,
        "dtype": args.dtype,
        "topk": args.topk,
        "experts": args.experts,
        "align": args.align,
        "rows_in_max": rows_in,
        "iterations": len(times),
        "median_ms": statistics.median(times) if times else nan,
        "min_ms": min(times) if times else nan,
        "max_ms": max(times) if times else nan,
        "sync_ms": statistics.median(sync) if sync else nan,
        "correct": correct,
        "times_ms": times,
    }


def add_speedups(rows):
    """vs_nccl: nccl_a2a_host's median over each row's, within its distribution."""
    base = {r["dist"]: r["median_ms"] for r in rows if r["path"] == "nccl_a2a_host"}
    for r in rows:
        b, m = base.get(r["dist"], float("nan")), r["median_ms"]
        r["vs_nccl"] = b / m if m == m and b == b and m > 0 else float("nan")
    return rows


# ---- Table ---------------------------------------------------------------------------------------

COLUMNS = ["dist", "path", "world_size", "tokens", "hidden", "dtype", "topk", "experts", "align",
           "rows_in_max", "iterations", "median_ms", "min_ms", "max_ms", "sync_ms", "vs_nccl",
           "correct"]
_HEADERS = ["dist", "path", "ranks", "tokens", "hidden", "dtype", "top-k", "experts", "align",
            "max rows in", "iters", "median ms", "min ms", "max ms", "sync ms", "x nccl", "correct"]

NOTE = ("One iteration: dispatch + combine of every rank's tokens x top-k rows (identity experts). "
        "Time: CUDA events on the current stream, max over ranks, median (min, max) over "
        "iterations. The *_a2a_host paths include the counts' exchange, their device-to-host copy "
        "and the synchronization (sync ms: that round trip alone, host clock) and the regrouping "
        "to expert-major and back; the yali_dispatch paths keep the counts on the device. x nccl: "
        "nccl_a2a_host's median / this one's. correct: each path checked once against the layout "
        "of yali.h, byte for byte.")
NOTE_SHARED = ("The ranks shared GPUs here (more ranks than GPUs): the numbers show correctness and "
               "the host round trip saved, not NVLink speed.")


def _fmt(v):
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.1f}"
    return str(v)


def _format_row(row):
    return "| " + " | ".join(_fmt(row.get(k, "")) for k in COLUMNS) + " |"


def markdown(rows, title=None, shared=False):
    lines = [f"# {title}", ""] if title else []
    lines += ["| " + " | ".join(_HEADERS) + " |", "|" + " --- |" * len(_HEADERS)]
    lines += [_format_row(r) for r in rows]
    lines += ["", NOTE] + ([NOTE_SHARED] if shared else []) + [""]
    return "\n".join(lines)


def write_outputs(rows, out_dir, meta):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.md").write_text(
        markdown(rows, "MoE dispatch + combine: YALI vs NCCL", meta.get("shared_gpu", False)))
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in COLUMNS})
    (out_dir / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return out_dir


# ---- Driver --------------------------------------------------------------------------------------


def _gpu_count():
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _names(allowed, what):
    def parse(text):
        names = list(allowed) if text == "all" else [x for x in text.split(",") if x]
        bad = [x for x in names if x not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"{what} {','.join(bad) or text!r}: choose from {', '.join(allowed)} (or all)")
        return names
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m yali.bench_moe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world_size", type=int, default=2,
                   help="ranks (one process each); more ranks than GPUs share them")
    p.add_argument("--tokens", type=int, default=2048, help="tokens per rank")
    p.add_argument("--hidden", type=int, default=2048, help=f"row width, >= {MIN_HIDDEN}")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16")
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=64, help="experts in all, a multiple of the ranks")
    p.add_argument("--align", type=int, default=16, help="yali_dispatch's segment alignment (rows)")
    p.add_argument("--dists", type=_names(DISTS, "--dists"), default=list(DISTS),
                   help="comma-separated, or all (default)")
    p.add_argument("--paths", type=_names(PATHS, "--paths"), default=list(PATHS),
                   help="comma-separated, or all (default)")
    p.add_argument("--num_warmup", type=int, default=5)
    p.add_argument("--num_iterations", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output_dir", default=None, help="default: output/bench_moe/<timestamp>/")
    p.add_argument("--timeout", type=float, default=900, help="seconds for the whole run")
    p.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result_file", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    why = validate(args)
    if why:
        p.error(why)
    return args


def validate(args):
    """'' when the arguments make a layer, else why not."""
    if args.world_size < 2:
        return "--world_size must be >= 2"
    if args.num_iterations < 1 or args.num_warmup < 0:
        return "--num_iterations must be >= 1 and --num_warmup >= 0"
    if min(args.tokens, args.topk, args.align) < 1:
        return "--tokens, --topk and --align must be >= 1"
    if args.hidden < MIN_HIDDEN:
        return f"--hidden must be >= {MIN_HIDDEN} (the rows encode their origin in 4 columns)"
    if args.experts < args.world_size or args.experts % args.world_size:
        return f"--experts {args.experts} must be a positive multiple of --world_size"
    if args.topk > args.experts:
        return f"--topk {args.topk} is more than --experts {args.experts}"
    from yali import _capi

    if args.experts // args.world_size > _capi.MAX_LOCAL_EXPERTS or args.experts > _capi.MAX_EXPERTS:
        return (f"at most {_capi.MAX_LOCAL_EXPERTS} experts per rank and {_capi.MAX_EXPERTS} in all "
                "(YALI_MAX_LOCAL_EXPERTS, YALI_MAX_EXPERTS)")
    if args.world_size >= PATTERN_MOD or args.tokens * args.topk >= PATTERN_MOD ** 3:
        return "the row encoding needs < 241 ranks and < 241^3 rows per rank"
    return ""


def worker_argv(args, result_file):
    """The command line of one rank (``python`` + this)."""
    return ["-m", "yali.bench_moe", "--_worker", "--world_size", str(args.world_size),
            "--tokens", str(args.tokens), "--hidden", str(args.hidden), "--dtype", args.dtype,
            "--topk", str(args.topk), "--experts", str(args.experts), "--align", str(args.align),
            "--dists", ",".join(args.dists), "--paths", ",".join(args.paths),
            "--num_warmup", str(args.num_warmup), "--num_iterations", str(args.num_iterations),
            "--seed", str(args.seed), "--timeout", str(args.timeout), "--result_file", result_file]


def main(argv=None):
    args = parse_args(argv)
    if args._worker:
        _worker(args)
        return 0

    from yali import _capi, _launch

    gpus = _gpu_count()
    if gpus < 1:
        print("python -m yali.bench_moe needs a CUDA GPU", file=sys.stderr)
        return 2
    shared = args.world_size > gpus
    env = {"YALI_ALLOW_SHARED_GPU": "1"} if shared else {}
    path = _capi.library_path()
    if path:
        env["YALI_LIBRARY"] = path
    print("| " + " | ".join(_HEADERS) + " |", flush=True)
    with tempfile.TemporaryDirectory(prefix="yali_bench_moe_") as tmp:
        result_file = os.path.join(tmp, "rows.json")
        res = _launch.launch(worker_argv(args, result_file), args.world_size,
                             timeout=args.timeout, env=env, echo_rank=0)
        rows = json.loads(Path(result_file).read_text()) if os.path.exists(result_file) else []
    if not res.ok:
        why = "TIMEOUT" if res.timed_out else "ERROR"
        print(f"[bench_moe x{args.world_size}] {why}:\n{res.summary()}", file=sys.stderr, flush=True)
        done = {(r["dist"], r["path"]) for r in rows}
        rows += [_row(args, args.world_size, d, p, "", [], [], why)
                 for d in args.dists for p in args.paths if (d, p) not in done]
    add_speedups(rows)

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.output_dir or os.path.join("output", "bench_moe", stamp)
    meta = {"date": stamp, "gpus_visible": gpus, "shared_gpu": shared,
            "num_warmup": args.num_warmup, "num_iterations": args.num_iterations,
            "argv": sys.argv[1:] if argv is None else list(argv), "torch": torch.__version__,
            "note": NOTE + (" " + NOTE_SHARED if shared else "")}
    out_dir = write_outputs(rows, out_dir, meta)
    print()
    print(markdown(rows, shared=shared))
    print(f"saved {out_dir / 'results.md'}, {out_dir / 'results.csv'}, {out_dir / 'results.json'}")
    return 0 if rows and all(r.get("correct") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
