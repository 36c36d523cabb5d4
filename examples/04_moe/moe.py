"""A top-k Mixture-of-Experts layer whose experts are spread over the ranks, exchanged by YALI's
expert dispatch and combine, captured once in a CUDA graph and replayed with new tokens each step.

    python examples/04_moe/moe.py --nproc 2 --steps 10          # spawns 2 ranks (they may share a GPU)
    torchrun --nproc_per_node 4 examples/04_moe/moe.py          # or under torchrun

Every rank holds --tokens tokens of --hidden features and --experts / nranks of the --experts experts
(global expert g = rank * E + e is local expert e of that rank; an expert is a two-layer GELU MLP,
hidden -> ffn -> hidden). One step, router to output, all on the GPU with no host read:

  1. router: float32 logits x @ W_r, softmax, top-k experts per token, weights renormalized over them;
  2. the (token, k) assignments sorted by global expert (a stable counting sort) and the rows to send
     gathered in that order; send_counts[g] = assignments to expert g (int64, on the GPU);
  3. Communicator.expert_dispatch: every rank's rows for this rank's experts, expert-major, each
     expert's segment starting at a multiple of --align rows; recv_counts and expert_offsets are
     written on the GPU by the call itself;
  4. the experts over those segments: torch._grouped_mm (bf16 on sm90/sm100), or a padded batched
     matmul (graph-safe anywhere), or a loop over experts that reads expert_offsets on the host (eager
     only); --experts-impl picks, default auto;
  5. Communicator.expert_combine: every row back to the rank and the place it came from;
  6. the rows un-sorted back to (token, k) order and summed with the router weights.

Because the counts never leave the GPU, the whole step is captured once (torch.cuda.graph) and
replayed each step with new tokens, although the counts change every step.

Checked at every step, on rank 0, against a single-process reference: every rank's tokens, routing
and output gathered (gloo, CPU tensors), every expert's output recomputed in float64 on one GPU. The
router's choice must be a top-k of the float64 probabilities (up to a tie tolerance), the counts
YALI wrote (recv_counts, expert_offsets) must equal those derived from every rank's routing, and the
output must match the reference within the dtype's tolerance (the reference takes the routing the
step chose, checked on its own as above, so that a near-tie cannot make the two pick different
experts). With --check-nccl (default on), the first step is also run with its exchange done by
torch.distributed.all_to_all_single on NCCL (host split sizes): the rows each expert received must
be the same bytes, the outputs equal within tolerance. Exit status 0 when every check passed, 1
otherwise.

With fewer GPUs than ranks the ranks share GPUs: the script then sets YALI_ALLOW_SHARED_GPU=1 and a
NCCL_HOSTID per rank (NCCL refuses two ranks on one GPU otherwise), so --nproc 2 or 4 runs on one GPU.
"""

import argparse
import datetime
import importlib.util
import math
import os
import socket
import sys
from pathlib import Path

if importlib.util.find_spec("yali") is None:  # running from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# NVLink multicast must stay off on the shared machines: main() sets these for itself and the ranks
# it spawns (not at import, so that the host tests can import this file without side effects).
NVLS_OFF_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
          "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}

# Output tolerance against the float64 reference, as (rtol, atol) per dtype. The tested path rounds
# the expert's hidden activation and its output to the dtype (bf16: 8 significant bits, a relative
# error of 2^-8 per rounding), then sums k of them in float32; a routing or placement bug gives
# errors of the size of the outputs themselves (~1), far above these.
TOLERANCES = {torch.bfloat16: (3e-2, 3e-2), torch.float16: (4e-3, 4e-3),
              torch.float32: (1e-4, 1e-4)}

# The router's top-k must be a top-k of the float64 probabilities up to this much: a token whose k-th
# and (k+1)-th probabilities are closer than the float32 router's rounding may pick either.
ROUTER_TIE_TOL = 1e-5
# And the renormalized weights must match the float64 ones this closely (float32 softmax).
ROUTER_WEIGHT_TOL = 1e-4

EXPERT_IMPLS = ("auto", "grouped", "padded", "loop")


# ---- Sizes --------------------------------------------------------------------------------------


def capacity_rows(tokens, topk, nranks, local_experts, align):
    """Rows the dispatch's output must hold so that no routing can overflow it: a token's k experts
    are distinct, so it sends at most min(k, E) rows to one rank; every rank's tokens may go to the
    same rank; each of the E segments may start up to align - 1 rows late. (A production layer sizes
    this with a capacity factor instead and handles the overflow: the dispatch then fails the comm on
    every rank and writes -1 into the counts.)"""
    return nranks * tokens * min(topk, local_experts) + local_experts * (align - 1)


def max_rows_per_expert(tokens, nranks):
    """Rows one expert can receive: each rank sends it at most one row per token."""
    return nranks * tokens


def aligned_offsets(expert_rows, align):
    """expert_offsets as the dispatch defines them, from the rows each local expert receives
    (list of ints): offsets[e] the first row of expert e's segment (a multiple of ``align``),
    offsets[E] the end of the last segment."""
    offsets = [0]
    for e, n in enumerate(expert_rows):
        end = offsets[e] + n
        offsets.append(end if e == len(expert_rows) - 1 else -(-end // align) * align)
    return offsets


# ---- The layer's steps (tensors on any device; no host read: CUDA-graph safe) -------------------


def route(x, router_w, topk):
    """(topi int64 [T, k], topw float32 [T, k]): each token's top-k experts by float32 softmax
    probability, weights renormalized to sum to 1 over the k (as Mixtral does)."""
    probs = torch.softmax(x.float() @ router_w, dim=-1)
    topw, topi = probs.topk(topk, dim=-1)
    return topi, topw / topw.sum(dim=-1, keepdim=True)


def sort_by_expert(topi, num_experts):
    """Sorts the assignments a = t * k + j (token t's j-th expert) by global expert, stably.

    Returns (pos, order, send_counts): pos[a] the sorted row of assignment a, order the inverse
    (order[row] = a), send_counts int64 [num_experts] the assignments per expert. A counting sort
    built from elementwise ops and cumsums: no torch.sort (whose capture in a CUDA graph depends on
    the algorithm torch picks for the size) and no torch.bincount (on CUDA it reads the maximum on
    the host to size its output, a synchronization that capture refuses). Memory: one int32 per
    (assignment, expert)."""
    flat = topi.reshape(-1)
    n = flat.numel()
    experts = torch.arange(num_experts, device=flat.device)
    onehot = (flat.unsqueeze(1) == experts).to(torch.int32)
    seen = onehot.cumsum(dim=0, dtype=torch.int32)  # seen[a, g]: assignments <= a to expert g
    send_counts = seen[-1].to(torch.int64)
    starts = send_counts.cumsum(0) - send_counts
    rank_in_expert = seen.gather(1, flat.unsqueeze(1)).squeeze(1).to(torch.int64) - 1
    pos = starts.index_select(0, flat) + rank_in_expert
    order = torch.empty_like(pos)
    order.scatter_(0, pos, torch.arange(n, device=flat.device))
    return pos, order, send_counts


def unsort_and_weight(back, pos, topw):
    """The layer's output [T, H] from the combined rows ``back`` (in sorted order, one per
    assignment): each token's k rows weighted by topw and summed in float32."""
    tokens, topk = topw.shape
    rows = back.index_select(0, pos).view(tokens, topk, back.size(1))
    return (rows.float() * topw.unsqueeze(-1)).sum(dim=1).to(back.dtype)


def expert_ffn(x, w1, w2):
    """One expert: GELU(x @ w1) @ w2 (w1 [H, F], w2 [F, H])."""
    return F.gelu(x @ w1) @ w2


def experts_grouped(recv, recv_counts, expert_offsets, w1, w2):
    """The experts as two torch._grouped_mm calls over the expert-major segments. Group e spans rows
    offsets[e]..offsets[e + 1], its padding rows included (rows are independent in a matmul: the
    padding's outputs are never sent back); rows past offsets[E] are not computed. Graph safe only
    where torch takes its CUTLASS path (bf16 on sm90/sm100): its fallback copies the offsets to the
    host."""
    ends = expert_offsets[1:].to(torch.int32)
    h = F.gelu(torch._grouped_mm(recv, w1, offs=ends))
    return torch._grouped_mm(h, w2, offs=ends).contiguous()


def experts_padded(recv, recv_counts, expert_offsets, w1, w2, max_rows):
    """The experts as two batched matmuls over [E, max_rows, H]: expert e's rows are gathered from
    its segment (row j from offsets[e] + j, for j < its row count), multiplied, and scattered back
    into the expert-major layout. No host read, so graph safe on any GPU and dtype; costs E x
    max_rows rows of work and memory whatever the routing."""
    num_local, hidden = w1.size(0), recv.size(1)
    nranks = recv_counts.numel() // num_local
    capacity = recv.size(0)
    rows = recv_counts.view(num_local, nranks).sum(dim=1)
    j = torch.arange(max_rows, device=recv.device)
    idx = expert_offsets[:num_local].unsqueeze(1) + j  # [E, max_rows]
    valid = j < rows.unsqueeze(1)
    xg = recv.index_select(0, torch.where(valid, idx, 0).reshape(-1)).view(num_local, max_rows,
                                                                           hidden)
    y = torch.bmm(F.gelu(torch.bmm(xg, w1)), w2)
    out = recv.new_empty(capacity + 1, hidden)  # row `capacity`: where the rows past a count go
    out.index_copy_(0, torch.where(valid, idx, capacity).reshape(-1), y.reshape(-1, hidden))
    return out[:capacity]


def experts_loop(recv, recv_counts, expert_offsets, w1, w2):
    """The experts one at a time over their segments, whose bounds are read on the host (a
    synchronization: eager only, not in a CUDA graph)."""
    num_local = w1.size(0)
    nranks = recv_counts.numel() // num_local
    offsets = expert_offsets.tolist()
    rows = recv_counts.view(num_local, nranks).sum(dim=1).tolist()
    out = torch.empty_like(recv)
    for e in range(num_local):
        s, n = offsets[e], rows[e]
        if n:
            out[s:s + n] = expert_ffn(recv[s:s + n], w1[e], w2[e])
    return out


def choose_experts_impl(requested, dtype, capability, graph, hidden, ffn,
                        has_grouped_mm=hasattr(torch, "_grouped_mm")):
    """(impl, why): how the experts run. ``capability``: the GPU's (major, minor). torch._grouped_mm
    runs its CUTLASS kernel for bf16 on sm90/sm100 with 16-byte-aligned rows; elsewhere it falls
    back to a loop that reads the offsets on the host, which a CUDA graph cannot hold. Raises
    ValueError for a choice that cannot work (loop, or grouped off its fast path, in a graph)."""
    fast = (has_grouped_mm and dtype == torch.bfloat16 and capability[0] in (9, 10)
            and hidden % 8 == 0 and ffn % 8 == 0)
    if requested == "auto":
        if fast:
            return "grouped", "torch._grouped_mm (bf16, sm90/sm100)"
        if graph:
            return "padded", ("padded batched matmul (torch._grouped_mm would read the offsets on "
                              "the host here, which a graph cannot hold)")
        return "loop", "loop over local experts (eager: offsets read on the host)"
    if requested not in EXPERT_IMPLS:
        raise ValueError(f"--experts-impl {requested!r}: choose one of {', '.join(EXPERT_IMPLS)}")
    if requested == "grouped" and not has_grouped_mm:
        raise ValueError("--experts-impl grouped: this torch has no torch._grouped_mm")
    if graph and requested == "loop":
        raise ValueError("--experts-impl loop reads the offsets on the host: use it with --no-graph")
    if graph and requested == "grouped" and not fast:
        raise ValueError("--experts-impl grouped in a CUDA graph needs bf16 on sm90/sm100 and "
                         "hidden, ffn multiples of 8 (torch's fallback reads the offsets on the "
                         "host); use --no-graph or --experts-impl padded")
    return requested, requested


def run_experts(impl, recv, recv_counts, expert_offsets, w1, w2, max_rows):
    if impl == "grouped":
        return experts_grouped(recv, recv_counts, expert_offsets, w1, w2)
    if impl == "padded":
        return experts_padded(recv, recv_counts, expert_offsets, w1, w2, max_rows)
    return experts_loop(recv, recv_counts, expert_offsets, w1, w2)


# ---- Reference and checks (host logic, any device) ---------------------------------------------


def reference_moe(x, topi, topw, w1_all, w2_all):
    """The layer computed on one device in float64, given the routing: every token's k experts
    (all G of them available here) weighted by topw. x [N, H] (all ranks' tokens), topi/topw
    [N, k], w1_all [G, H, F], w2_all [G, F, H]."""
    x64 = x.double()
    out = torch.zeros_like(x64)
    for g in range(w1_all.size(0)):
        t, j = (topi == g).nonzero(as_tuple=True)
        if t.numel():
            y = expert_ffn(x64[t], w1_all[g].double(), w2_all[g].double())
            out.index_add_(0, t, topw[t, j].double().unsqueeze(1) * y)
    return out


def check_router(x, router_w, topi, topw):
    """'' when (topi, topw) is a top-k of the float64 router within ROUTER_TIE_TOL and its weights
    are the renormalized float64 ones within ROUTER_WEIGHT_TOL; else what is wrong."""
    probs = torch.softmax(x.double() @ router_w.double(), dim=-1)
    chosen = probs.gather(1, topi)
    if topi.size(1) > 1 and (topi.sort(dim=1).values.diff(dim=1) == 0).any():
        return "a token chose the same expert twice"
    if probs.size(1) == topi.size(1):  # every expert chosen: nothing to beat
        gap = 0.0
    else:
        others = probs.scatter(1, topi, -1.0).max(dim=1).values
        gap = (others - chosen.min(dim=1).values).max().item()
    if gap > ROUTER_TIE_TOL:
        return f"an unchosen expert beats a chosen one by {gap:.2e}"
    want = chosen / chosen.sum(dim=1, keepdim=True)
    werr = (topw.double() - want).abs().max().item()
    if werr > ROUTER_WEIGHT_TOL:
        return f"router weights off by {werr:.2e}"
    return ""


def expected_recv_counts(topis, local_experts):
    """What the dispatch writes into recv_counts on each rank, from every rank's routing (a list
    of topi, one per rank): [d][e * nranks + s] = assignments of rank s to expert d * E + e."""
    nranks = len(topis)
    per_rank = [torch.bincount(t.reshape(-1).cpu(), minlength=nranks * local_experts)
                for t in topis]
    return [[int(per_rank[s][d * local_experts + e]) for e in range(local_experts)
             for s in range(nranks)] for d in range(nranks)]


def mismatch(out, ref, dtype):
    """(max |out - ref|, worst element's excess over its tolerance, ok)."""
    rtol, atol = TOLERANCES[dtype]
    err = (out.double() - ref).abs()
    excess = (err - (atol + rtol * ref.abs())).max().item() if err.numel() else -1.0
    return (err.max().item() if err.numel() else 0.0), excess, excess <= 0


# ---- Weights and inputs ---------------------------------------------------------------------------


def make_weights(num_experts, hidden, ffn, dtype, seed):
    """(router_w float32 [H, G], w1 [G, H, F], w2 [G, F, H]) from a CPU generator: the same on every
    rank. The router's scale makes routing uneven (some experts clearly preferred per token)."""
    gen = torch.Generator().manual_seed(seed)
    router_w = torch.randn(hidden, num_experts, generator=gen) * (2.0 / math.sqrt(hidden))
    w1 = (torch.randn(num_experts, hidden, ffn, generator=gen) / math.sqrt(hidden)).to(dtype)
    w2 = (torch.randn(num_experts, ffn, hidden, generator=gen) / math.sqrt(ffn)).to(dtype)
    return router_w, w1, w2


def make_tokens(step, rank, tokens, hidden, dtype, seed, device):
    """This step's tokens on this rank: noise plus a shift shared by every rank that changes each
    step, so that which experts are busy (and every count) changes from step to step."""
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + step)
    shift = torch.randn(hidden, device=device, generator=gen)
    gen.manual_seed(seed * 1_000_003 + 7919 * (rank + 1) + step * 104_729)
    x = torch.randn(tokens, hidden, device=device, generator=gen) + 0.5 * shift
    return x.to(dtype)


# ---- The layer over a YALI communicator ---------------------------------------------------------


class MoELayer:
    """One rank's share of the layer: the router (replicated), its E experts, and the static
    buffers the exchange writes (so that a CUDA graph can hold them). ``forward()`` runs one step
    on ``self.x`` and returns its tensors (the layer's output and what the checks look at)."""

    def __init__(self, comm, router_w, w1_local, w2_local, args, impl):
        dev = comm.device
        self.comm = comm
        self.nranks = comm.world_size
        self.local_experts = w1_local.size(0)
        self.num_experts = self.nranks * self.local_experts
        self.topk = args.topk
        self.align = args.align
        self.impl = impl
        self.router_w = router_w.to(dev)
        self.w1 = w1_local.to(dev).contiguous()
        self.w2 = w2_local.to(dev).contiguous()
        dtype = w1_local.dtype
        self.x = torch.zeros(args.tokens, args.hidden, dtype=dtype, device=dev)
        self.capacity = capacity_rows(args.tokens, args.topk, self.nranks, self.local_experts,
                                      args.align)
        self.max_rows = min(self.capacity, max_rows_per_expert(args.tokens, self.nranks))
        self.recv = torch.empty(self.capacity, args.hidden, dtype=dtype, device=dev)
        self.recv_counts = torch.empty(self.local_experts * self.nranks, dtype=torch.int64,
                                       device=dev)
        self.expert_offsets = torch.empty(self.local_experts + 1, dtype=torch.int64, device=dev)
        self.back = torch.empty(args.tokens * args.topk, args.hidden, dtype=dtype, device=dev)

    def pre(self):
        """Steps 1-2: routing, the sorted rows to send and the counts (no communication)."""
        topi, topw = route(self.x, self.router_w, self.topk)
        pos, order, send_counts = sort_by_expert(topi, self.num_experts)
        send = self.x.index_select(0, order // self.topk)
        return topi, topw, pos, send, send_counts

    def forward(self):
        topi, topw, pos, send, send_counts = self.pre()
        self.comm.expert_dispatch(self.recv, send, send_counts, self.local_experts,
                                  align=self.align, recv_counts=self.recv_counts,
                                  expert_offsets=self.expert_offsets)
        y = run_experts(self.impl, self.recv, self.recv_counts, self.expert_offsets, self.w1,
                        self.w2, self.max_rows)
        self.comm.expert_combine(self.back, y, send_counts, self.local_experts, align=self.align)
        out = unsort_and_weight(self.back, pos, topw)
        return {"out": out, "topi": topi, "topw": topw, "pos": pos, "send": send,
                "send_counts": send_counts}

    def received_rows(self):
        """The rows the dispatch wrote, expert-major without the padding (host reads; checks only)."""
        offsets = self.expert_offsets.tolist()
        rows = self.recv_counts.view(self.local_experts, self.nranks).sum(dim=1).tolist()
        return torch.cat([self.recv[offsets[e]:offsets[e] + rows[e]]
                          for e in range(self.local_experts)])


def capture(layer):
    """(graph, static outputs): forward() warmed up once on a side stream (as torch recommends;
    every rank does it, so the exchanges match) and captured once."""
    dev = layer.x.device
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        layer.forward()
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize(dev)
    layer.comm.check()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        static = layer.forward()
    torch.cuda.synchronize(dev)
    return graph, static


def nccl_forward(layer, step):
    """The same step with its exchange done by torch.distributed.all_to_all_single on NCCL, as a
    layer without device counts must: the counts go to the host (a synchronization) to give the
    split sizes; the rows arrive source-major and are regrouped expert-major around the experts
    (a loop over them, host counts). Uses ``step``'s routing and sorted rows. Returns (output, the
    rows each expert received expert-major, the counts received [s][e])."""
    import torch.distributed as dist

    nranks, num_local, hidden = layer.nranks, layer.local_experts, layer.x.size(1)
    send, send_counts = step["send"], step["send_counts"]
    counts_in = torch.empty_like(send_counts)  # [s * E + e]: rows rank s sends to local expert e
    dist.all_to_all_single(counts_in, send_counts)
    c = counts_in.view(nranks, num_local).tolist()
    in_splits = send_counts.view(nranks, num_local).sum(dim=1).tolist()
    out_splits = [sum(row) for row in c]
    recv = send.new_empty(sum(out_splits), hidden)
    dist.all_to_all_single(recv, send, out_splits, in_splits)
    blocks = recv.split([c[s][e] for s in range(nranks) for e in range(num_local)])
    per_expert = [torch.cat([blocks[s * num_local + e] for s in range(nranks)])
                  for e in range(num_local)]
    ys = [expert_ffn(rows, layer.w1[e], layer.w2[e]) for e, rows in enumerate(per_expert)]
    yblocks = [y.split([c[s][e] for s in range(nranks)]) for e, y in enumerate(ys)]
    y_src = torch.cat([yblocks[e][s] for s in range(nranks) for e in range(num_local)])
    back = torch.empty_like(send)
    dist.all_to_all_single(back, y_src, in_splits, out_splits)
    out = unsort_and_weight(back, step["pos"], step["topw"])
    return out, torch.cat(per_expert), c


# ---- One rank -----------------------------------------------------------------------------------


def _gather0(t, rank, world):
    """Every rank's CPU copy of ``t`` on rank 0 (gloo), None elsewhere."""
    import torch.distributed as dist

    t = t.detach().cpu().contiguous()
    parts = [torch.empty_like(t) for _ in range(world)] if rank == 0 else None
    dist.gather(t, parts, dst=0)
    return parts


def _agree(bad):
    """Whether any rank reported a failure (gloo all-reduce of a CPU flag)."""
    import torch.distributed as dist

    flag = torch.tensor([int(bool(bad))])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def check_step(layer, step_out, step, rank, world, ref_w, dtype):
    """The per-step check (see the module docstring). Collective over the ranks. Returns whether
    every rank passed; rank 0 prints the step's line."""
    gathered = {k: _gather0(v, rank, world) for k, v in (
        ("x", layer.x), ("topi", step_out["topi"]), ("topw", step_out["topw"]),
        ("out", step_out["out"]), ("recv_counts", layer.recv_counts),
        ("expert_offsets", layer.expert_offsets))}
    problems = []
    if rank == 0:
        router_w, w1_all, w2_all = ref_w
        for r in range(world):
            why = check_router(gathered["x"][r], router_w, gathered["topi"][r], gathered["topw"][r])
            if why:
                problems.append(f"rank {r} router: {why}")
        want = expected_recv_counts(gathered["topi"], layer.local_experts)
        rows_in = []
        for r in range(world):
            got_counts = gathered["recv_counts"][r].tolist()
            got_offsets = gathered["expert_offsets"][r].tolist()
            per_expert = [sum(want[r][e * world:(e + 1) * world])
                          for e in range(layer.local_experts)]
            rows_in.append(sum(per_expert))
            if got_counts != want[r]:
                problems.append(f"rank {r} recv_counts {got_counts} != {want[r]}")
            if got_offsets != aligned_offsets(per_expert, layer.align):
                problems.append(f"rank {r} expert_offsets {got_offsets} != "
                                f"{aligned_offsets(per_expert, layer.align)}")
        dev = w1_all.device
        ref = reference_moe(torch.cat(gathered["x"]).to(dev), torch.cat(gathered["topi"]).to(dev),
                            torch.cat(gathered["topw"]).to(dev), w1_all, w2_all)
        err, excess, ok = mismatch(torch.cat(gathered["out"]).to(dev), ref, dtype)
        if not ok:
            problems.append(f"output off the reference by {excess:.2e} past the tolerance")
        status = "ok" if not problems else "MISMATCH: " + "; ".join(problems)
        print(f"step {step:3d}  rows in per rank {rows_in}  max|out-ref| {err:.2e} "
              f"(rtol=atol={TOLERANCES[dtype][0]:g})  {status}", flush=True)
    return not _agree(problems)


def check_nccl(layer, step_out, rank, world, dtype):
    """The step's output and received rows against the same step exchanged by NCCL (collective)."""
    out_nccl, rows_nccl, counts_nccl = nccl_forward(layer, step_out)
    problems = []
    rows_yali = layer.received_rows()
    if not torch.equal(rows_yali.view(torch.uint8), rows_nccl.view(torch.uint8)):
        problems.append("the rows the experts received differ from NCCL's")
    yali_counts = layer.recv_counts.view(layer.local_experts, world).t().tolist()
    if yali_counts != counts_nccl:
        problems.append(f"recv_counts {yali_counts} != NCCL's {counts_nccl}")
    err, excess, ok = mismatch(step_out["out"], out_nccl.double(), dtype)
    if not ok:
        problems.append(f"output off NCCL's by {excess:.2e} past the tolerance")
    bad = _agree(problems)
    if problems:
        print(f"rank {rank}: NCCL check: " + "; ".join(problems), flush=True)
    if rank == 0 and not bad:
        print(f"NCCL check ok: the experts received the same bytes as through "
              f"torch.distributed.all_to_all_single, max|yali-nccl| {err:.2e}", flush=True)
    return not bad


def run(local_rank, rank, world, args):
    import torch.distributed as dist

    import yali.torch

    ndev = torch.cuda.device_count()
    dev = torch.device("cuda", local_rank % ndev)
    if world > ndev:  # ranks share GPUs (must be set before NCCL and YALI start)
        os.environ["YALI_ALLOW_SHARED_GPU"] = "1"
        os.environ["NCCL_HOSTID"] = f"moe-example-rank-{rank}"
    torch.cuda.set_device(dev)
    # CPU tensors (the checks' gathers) go through gloo; CUDA tensors (only the --check-nccl step)
    # through NCCL, whose communicator is created on first use.
    dist.init_process_group("cpu:gloo,cuda:nccl", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    comm = yali.torch.Communicator()  # bootstrapped through the process group

    dtype = DTYPES[args.dtype]
    num_local = args.experts // world
    router_w, w1_all, w2_all = make_weights(args.experts, args.hidden, args.ffn, dtype, args.seed)
    mine = slice(rank * num_local, (rank + 1) * num_local)
    # Every rank decides alike (same GPU model, same arguments), so a ValueError ends them all.
    impl, why = choose_experts_impl(args.experts_impl, dtype, torch.cuda.get_device_capability(dev),
                                    not args.no_graph, args.hidden, args.ffn)
    layer = MoELayer(comm, router_w, w1_all[mine], w2_all[mine], args, impl)
    if impl == "grouped" and args.experts_impl == "auto":
        try:  # torch may lack the kernel though the GPU and dtype fit: then fall back
            rows = min(16, layer.capacity)
            trial_offsets = torch.tensor([0] + [rows] * num_local, device=dev)
            experts_grouped(layer.recv[:rows], None, trial_offsets, layer.w1, layer.w2)
            torch.cuda.synchronize(dev)
        except RuntimeError as e:
            impl = "padded" if not args.no_graph else "loop"
            why = f"{impl} (torch._grouped_mm failed: {str(e).splitlines()[0][:120]})"
            layer.impl = impl
    ref_w = None  # the reference's weights, all G experts (router on the CPU, experts on the GPU)
    if rank == 0:
        ref_w = (router_w, w1_all.to(dev), w2_all.to(dev))
        print(f"{world} ranks on {min(world, ndev)} GPU(s), {args.tokens} tokens x {args.hidden} "
              f"{args.dtype} per rank, {args.experts} experts ({num_local} per rank), "
              f"top-{args.topk}, align {args.align}, capacity {layer.capacity} rows; experts: {why}; "
              f"{'eager' if args.no_graph else 'CUDA graph, captured once'}", flush=True)

    failed = False
    layer.x.copy_(make_tokens(0, rank, args.tokens, args.hidden, dtype, args.seed, dev))
    graph, static = (None, None) if args.no_graph else capture(layer)
    for step in range(args.steps):
        layer.x.copy_(make_tokens(step, rank, args.tokens, args.hidden, dtype, args.seed, dev))
        if graph is None:
            step_out = layer.forward()
            torch.cuda.synchronize(dev)
            comm.check()  # raises the comm's error (a capacity overflow, a timeout) on every rank
        else:
            yali.torch.replay(graph, comm, synchronize=True)
            step_out = static
        if not check_step(layer, step_out, step, rank, world, ref_w, dtype):
            failed = True
            break
        if step == 0 and args.check_nccl and not check_nccl(layer, step_out, rank, world, dtype):
            failed = True
            break

    if rank == 0 and failed:
        print(f"FAIL at step {step} on {world} ranks (see above)", flush=True)
    elif rank == 0:
        print(f"PASS: {args.steps} step(s) on {world} ranks, every step matched the float64 "
              "reference" + (", step 0 matched NCCL" if args.check_nccl else ""), flush=True)
    comm.close()
    dist.destroy_process_group()
    if failed:
        sys.exit(1)


def _spawned(local_rank, world, args):
    run(local_rank, local_rank, world, args)


# ---- Command line -------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=None,
                   help="ranks to spawn (default: every GPU, at least 2; ranks beyond the GPU count "
                        "share GPUs)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--tokens", type=int, default=512, help="tokens per rank")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--ffn", type=int, default=512, help="the experts' inner width")
    p.add_argument("--experts", type=int, default=8, help="experts in all (a multiple of the ranks)")
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--align", type=int, default=16,
                   help="rows each expert's segment is aligned to (a grouped GEMM's tile)")
    p.add_argument("--experts-impl", choices=EXPERT_IMPLS, default="auto")
    p.add_argument("--no-graph", action="store_true", help="run each step eagerly")
    p.add_argument("--check-nccl", action=argparse.BooleanOptionalAction, default=True,
                   help="also run step 0 with NCCL's all_to_all_single and compare")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def validate(args, world):
    """'' when the arguments fit ``world`` ranks, else why not."""
    if world < 2:
        return f"need at least 2 ranks, got {world} (--nproc 2 shares one GPU)"
    if min(args.steps, args.tokens, args.hidden, args.ffn, args.topk, args.align) < 1:
        return "--steps, --tokens, --hidden, --ffn, --topk and --align must be >= 1"
    if args.experts < world or args.experts % world:
        return f"--experts {args.experts} must be a positive multiple of the ranks ({world})"
    if args.topk > args.experts:
        return f"--topk {args.topk} is more than --experts {args.experts}"
    import yali

    if args.experts // world > yali.MAX_LOCAL_EXPERTS or args.experts > yali.MAX_EXPERTS:
        return (f"at most {yali.MAX_LOCAL_EXPERTS} experts per rank and {yali.MAX_EXPERTS} in all "
                "(YALI_MAX_LOCAL_EXPERTS, YALI_MAX_EXPERTS)")
    if args.experts_impl == "loop" and not args.no_graph:
        return "--experts-impl loop reads the offsets on the host: use it with --no-graph"
    return ""  # whether grouped fits depends on the GPU: decided on it (choose_experts_impl)


def main(argv=None):
    args = parse_args(argv)
    os.environ.update(NVLS_OFF_ENV)  # for this process and the ranks it spawns
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        world = int(os.environ["WORLD_SIZE"])
        why = validate(args, world)
        if why:
            print(why, file=sys.stderr)
            return 2
        run(int(os.environ.get("LOCAL_RANK", os.environ["RANK"])), int(os.environ["RANK"]), world,
            args)
        return 0

    import torch.multiprocessing as mp

    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    world = args.nproc or max(2, torch.cuda.device_count())
    why = validate(args, world)
    if why:
        print(why, file=sys.stderr)
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        mp.spawn(_spawned, args=(world, args), nprocs=world, join=True)
    except Exception as e:  # noqa: BLE001 (a rank failed or exited non-zero)
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
