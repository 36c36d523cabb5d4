"""Host tests of the MoE example (examples/04_moe/moe.py) and of python -m yali.bench_moe: PyTorch (a
CPU build is enough), no GPU, no libyali. Skipped without PyTorch.

    cd /work/main && PYTHONPATH=python python3 -m pytest tests/python/test_moe_host.py

What the GPU runs check for real (the example's per-step check, the benchmark's per-path check),
checked here on the logic alone:
  - the example's steps: routing, the counting sort by expert and its counts, the un-sort and
    weighted sum; the capacity and offsets rules; which expert implementation is chosen where;
  - the whole layer over simulated ranks: every rank's step with the exchange done by a simulation
    of yaliExpertDispatch/Combine as yali.h defines it, each expert implementation (grouped, padded,
    loop; NaN in the padding rows, which must not leak), against the float64 reference;
  - the reference and the router check (a wrong choice or weight is caught);
  - the benchmark's routing distributions, the row encoding (unique rows, exact values), the
    dispatch plan against a brute-force construction, the source-major to expert-major regrouping,
    the layout check (it catches a swapped row, a wrong count), the host-split path end to end over
    3 simulated ranks (threads exchanging through a fake all_to_all_single), argument parsing, the
    worker's command line, the table and JSON outputs;
  - MoELayer.forward and the benchmark's yali_dispatch step on fake CUDA tensors through the real
    yali.torch expert_dispatch/expert_combine: every call passes yali.torch's argument checks;
  - over 3 CPU processes and a gloo group (test_example_layer_over_gloo_ranks): the example's
    MoELayer.forward, check_step and check_nccl (its all_to_all_single path through gloo), and the
    benchmark's yali_dispatch and host-split paths, the YALI calls played by a gloo-backed stand-in
    (_GlooExpertComm) that follows yali.h; a wrong layout must fail both example checks.
"""

import argparse
import importlib.util
import json
import math
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from yali import bench_moe as bm  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _load_example():
    path = REPO / "examples" / "04_moe" / "moe.py"
    spec = importlib.util.spec_from_file_location("moe_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


moe = _load_example()


# ---- Simulated exchange (yali.h: yaliExpertDispatch / yaliExpertCombine) -------------------------


def _brute_force_dispatch(sends, all_counts, rank, local_experts, align, capacity):
    """Rank ``rank``'s dispatch output built from yali.h's words, independently of dispatch_plan:
    label every sent row with its expert, then for each local expert take every rank's rows of it
    in rank order, each segment from a multiple of align. Padding and unused rows are NaN."""
    nranks = len(sends)
    hidden = sends[0].size(1)
    num_experts = nranks * local_experts
    labels = [torch.repeat_interleave(torch.arange(num_experts), torch.tensor(c)) for c in all_counts]
    recv = torch.full((capacity, hidden), float("nan"), dtype=sends[0].dtype)
    recv_counts, offsets, row = [], [], 0
    for e in range(local_experts):
        g = rank * local_experts + e
        row = -(-row // align) * align
        offsets.append(row)
        for s in range(nranks):
            rows = sends[s][labels[s] == g]
            recv_counts.append(rows.size(0))
            recv[row:row + rows.size(0)] = rows
            row += rows.size(0)
    offsets.append(row)
    return recv, torch.tensor(recv_counts), torch.tensor(offsets)


def _combine(expert_outs, all_counts, local_experts, align, rows_per_rank):
    """The combine: every rank's rows back from every expert-major buffer (dispatch_plan's inverse)."""
    nranks = len(expert_outs)
    hidden = expert_outs[0].size(1)
    backs = [torch.full((rows_per_rank[s], hidden), float("nan"), dtype=expert_outs[0].dtype)
             for s in range(nranks)]
    for d in range(nranks):
        for row, s, src_row, n in bm.dispatch_plan(all_counts, d, local_experts, align)["blocks"]:
            backs[s][src_row:src_row + n] = expert_outs[d][row:row + n]
    return backs


def _example_args(**kw):
    a = moe.parse_args([])
    for k, v in kw.items():
        setattr(a, k, v)
    return a


# ---- The example's steps -------------------------------------------------------------------------


def test_route_picks_topk_and_renormalizes():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(50, 16, generator=gen)
    router_w = torch.randn(16, 6, generator=gen)
    topi, topw = moe.route(x, router_w, 3)
    assert topi.shape == (50, 3) and topi.dtype == torch.int64 and topw.dtype == torch.float32
    probs = torch.softmax(x @ router_w, dim=-1)
    want = probs.topk(3, dim=-1)
    assert torch.equal(topi, want.indices)
    assert torch.allclose(topw, want.values / want.values.sum(-1, keepdim=True))
    assert torch.allclose(topw.sum(-1), torch.ones(50))
    assert moe.check_router(x, router_w, topi, topw) == ""


def test_check_router_catches_a_wrong_choice_and_wrong_weights():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(40, 8, generator=gen)
    router_w = torch.randn(8, 5, generator=gen) * 3
    topi, topw = moe.route(x, router_w, 2)
    worst = torch.softmax(x.double() @ router_w.double(), -1).argmin(-1)
    bad = topi.clone()
    bad[0, 1] = worst[0]
    assert "beats" in moe.check_router(x, router_w, bad, topw)
    twice = topi.clone()
    twice[3, 1] = twice[3, 0]
    assert "twice" in moe.check_router(x, router_w, twice, topw)
    off = topw.clone()
    off[5, 0] += 1e-3
    assert "weights" in moe.check_router(x, router_w, topi, off)
    every, w_every = moe.route(x, router_w, 5)  # every expert chosen: nothing to beat
    assert moe.check_router(x, router_w, every, w_every) == ""


@pytest.mark.parametrize("tokens,topk,experts", [(1, 1, 1), (7, 2, 4), (64, 4, 16), (33, 3, 3)])
def test_sort_by_expert_is_a_stable_counting_sort(tokens, topk, experts):
    gen = torch.Generator().manual_seed(tokens)
    topi = torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(tokens)])
    pos, order, counts = moe.sort_by_expert(topi, experts)
    flat = topi.reshape(-1)
    n = flat.numel()
    assert torch.equal(pos[order], torch.arange(n)) and torch.equal(order[pos], torch.arange(n))
    assert torch.equal(counts, torch.bincount(flat, minlength=experts))
    assert counts.dtype == torch.int64
    assert torch.equal(order, torch.argsort(flat, stable=True))  # stable: ties keep their order


def test_unsort_and_weight_inverts_the_sort():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(20, 8, generator=gen, dtype=torch.float64)
    topi, topw = moe.route(x.float(), torch.randn(8, 5, generator=gen), 2)
    pos, order, _ = moe.sort_by_expert(topi, 5)
    back = x.index_select(0, order // 2)  # identity experts: each row comes back as sent
    out = moe.unsort_and_weight(back, pos, topw)
    assert out.dtype == x.dtype
    assert torch.allclose(out, x * topw.sum(-1, keepdim=True).double())
    # Distinct values per (token, k): the weight lands on the right row.
    back = (torch.arange(40, dtype=torch.float64) + 1).unsqueeze(1).expand(40, 8).contiguous()
    out = moe.unsort_and_weight(back, pos, topw)
    want = ((pos.view(20, 2).double() + 1) * topw.double()).sum(-1)
    assert torch.allclose(out[:, 0], want)


def test_capacity_and_offsets():
    assert moe.capacity_rows(10, 2, 4, 3, 1) == 80
    assert moe.capacity_rows(10, 5, 4, 3, 16) == 4 * 10 * 3 + 3 * 15  # min(topk, E) rows a token
    assert moe.capacity_rows(7, 3, 2, 4, 8) == bm.capacity_rows(7, 3, 2, 4, 8)
    assert moe.max_rows_per_expert(10, 4) == 40
    assert moe.aligned_offsets([3, 0, 5], 1) == [0, 3, 3, 8]
    assert moe.aligned_offsets([3, 0, 5], 4) == [0, 4, 4, 9]  # the last segment's end: not padded
    assert moe.aligned_offsets([0, 0], 16) == [0, 0, 0]
    assert moe.aligned_offsets([16, 1], 16) == [0, 16, 17]
    # The same rule as the benchmark's model of the dispatch.
    counts = [[3, 0, 5, 2, 0, 1], [1, 4, 0, 0, 2, 2]]
    for rank in range(2):
        plan = bm.dispatch_plan(counts, rank, 3, 8)
        rows = [sum(plan["recv_counts"][e * 2:(e + 1) * 2]) for e in range(3)]
        assert plan["expert_offsets"] == moe.aligned_offsets(rows, 8)


def test_expected_recv_counts_matches_the_plan():
    nranks, local, topk = 3, 2, 2
    topis = [bm.make_routing("zipf", r, 25, topk, nranks * local, nranks, 5) for r in range(nranks)]
    counts = [bm.routing_counts(t, nranks * local) for t in topis]
    want = moe.expected_recv_counts(topis, local)
    for d in range(nranks):
        assert want[d] == bm.dispatch_plan(counts, d, local, 1)["recv_counts"]


def test_choose_experts_impl():
    bf16, f32 = torch.bfloat16, torch.float32
    choose = moe.choose_experts_impl
    assert choose("auto", bf16, (9, 0), True, 256, 512, True)[0] == "grouped"
    assert choose("auto", bf16, (10, 0), False, 256, 512, True)[0] == "grouped"
    assert choose("auto", bf16, (8, 0), True, 256, 512, True)[0] == "padded"  # A100: fallback syncs
    assert choose("auto", f32, (9, 0), True, 256, 512, True)[0] == "padded"
    assert choose("auto", f32, (9, 0), False, 256, 512, True)[0] == "loop"
    assert choose("auto", bf16, (9, 0), True, 264, 512, True)[0] == "grouped"
    assert choose("auto", bf16, (9, 0), True, 260, 512, True)[0] == "padded"  # rows not 16-byte
    assert choose("auto", bf16, (9, 0), True, 256, 512, False)[0] == "padded"  # no _grouped_mm
    assert choose("padded", f32, (8, 0), True, 256, 512, True)[0] == "padded"
    assert choose("grouped", f32, (8, 0), False, 256, 512, True)[0] == "grouped"  # eager: allowed
    with pytest.raises(ValueError, match="no-graph"):
        choose("loop", bf16, (9, 0), True, 256, 512, True)
    with pytest.raises(ValueError, match="sm90"):
        choose("grouped", f32, (9, 0), True, 256, 512, True)
    with pytest.raises(ValueError, match="_grouped_mm"):
        choose("grouped", bf16, (9, 0), False, 256, 512, False)


def test_make_weights_and_tokens_are_reproducible():
    a = moe.make_weights(4, 8, 16, torch.bfloat16, 3)
    b = moe.make_weights(4, 8, 16, torch.bfloat16, 3)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert a[0].shape == (8, 4) and a[0].dtype == torch.float32
    assert a[1].shape == (4, 8, 16) and a[2].shape == (4, 16, 8) and a[1].dtype == torch.bfloat16
    x0 = moe.make_tokens(2, 0, 5, 8, torch.float32, 0, "cpu")
    assert torch.equal(x0, moe.make_tokens(2, 0, 5, 8, torch.float32, 0, "cpu"))
    assert not torch.equal(x0, moe.make_tokens(2, 1, 5, 8, torch.float32, 0, "cpu"))
    assert not torch.equal(x0, moe.make_tokens(3, 0, 5, 8, torch.float32, 0, "cpu"))


def test_reference_moe_against_a_token_by_token_loop():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(9, 6, generator=gen)
    w1 = torch.randn(4, 6, 10, generator=gen)
    w2 = torch.randn(4, 10, 6, generator=gen)
    topi, topw = moe.route(x, torch.randn(6, 4, generator=gen), 2)
    ref = moe.reference_moe(x, topi, topw, w1, w2)
    assert ref.dtype == torch.float64
    for t in range(9):
        want = sum(topw[t, j].double() * moe.expert_ffn(x[t].double(), w1[topi[t, j]].double(),
                                                        w2[topi[t, j]].double())
                   for j in range(2))
        assert torch.allclose(ref[t], want)


def test_mismatch():
    ref = torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64)
    err, excess, ok = moe.mismatch(ref.float(), ref, torch.float32)
    assert err == 0 and ok
    err, excess, ok = moe.mismatch(torch.tensor([1.0, -2.0, 0.5]), ref, torch.bfloat16)
    assert err == 0.5 and not ok and excess > 0.4


@pytest.mark.parametrize("impl", ["grouped", "padded", "loop"])
@pytest.mark.parametrize("nranks,local,topk,align", [(2, 2, 2, 1), (3, 2, 3, 8), (4, 1, 1, 16)])
def test_layer_over_simulated_ranks(impl, nranks, local, topk, align):
    """Every rank's step (route, sort, dispatch, experts, combine, un-sort) with the exchange
    simulated as yali.h defines it, against the float64 reference over every rank's tokens."""
    if impl == "grouped" and not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no torch._grouped_mm")
    tokens, hidden, ffn, dtype = 24, 16, 32, torch.float32
    num_experts = nranks * local
    router_w, w1, w2 = moe.make_weights(num_experts, hidden, ffn, dtype, 11)
    xs = [moe.make_tokens(1, r, tokens, hidden, dtype, 11, "cpu") for r in range(nranks)]
    capacity = moe.capacity_rows(tokens, topk, nranks, local, align)
    max_rows = min(capacity, moe.max_rows_per_expert(tokens, nranks))
    pre = []
    for x in xs:
        topi, topw = moe.route(x, router_w, topk)
        pos, order, counts = moe.sort_by_expert(topi, num_experts)
        pre.append((topi, topw, pos, x.index_select(0, order // topk), counts.tolist()))
    sends = [p[3] for p in pre]
    all_counts = [p[4] for p in pre]
    ys = []
    for d in range(nranks):
        recv, recv_counts, offsets = _brute_force_dispatch(sends, all_counts, d, local, align,
                                                           capacity)
        plan = bm.dispatch_plan(all_counts, d, local, align)
        assert recv_counts.tolist() == plan["recv_counts"]
        assert offsets.tolist() == plan["expert_offsets"]
        mine = slice(d * local, (d + 1) * local)
        y = moe.run_experts(impl, recv, recv_counts, offsets, w1[mine], w2[mine], max_rows)
        assert y.shape == recv.shape and y.is_contiguous()
        ys.append(y)
    backs = _combine(ys, all_counts, local, align, [tokens * topk] * nranks)
    outs = [moe.unsort_and_weight(b, p[2], p[1]) for b, p in zip(backs, pre)]
    ref = moe.reference_moe(torch.cat(xs), torch.cat([p[0] for p in pre]),
                            torch.cat([p[1] for p in pre]), w1, w2)
    got = torch.cat(outs)
    assert not got.isnan().any(), "padding rows (NaN here) leaked into the output"
    err, excess, ok = moe.mismatch(got, ref, dtype)
    assert ok, (err, excess)


class _GlooExpertComm:
    """Stands in for yali.torch.Communicator's expert_dispatch/expert_combine on CPU tensors, over a
    gloo process group, as yali.h defines them (through dispatch_plan, which the tests above check
    against a brute-force construction). ``bug="swap"`` reverses the source ranks inside every
    expert's segment (a wrong layout that the example's checks must catch)."""

    def __init__(self, rank, world, bug=""):
        self.rank, self.world_size, self.device, self.bug = rank, world, torch.device("cpu"), bug

    def _all_gather(self, t):
        import torch.distributed as dist

        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t.contiguous())
        return parts

    def expert_dispatch(self, output, input, send_counts, local_experts, align=1, recv_counts=None,
                        expert_offsets=None):
        all_counts = [c.tolist() for c in self._all_gather(send_counts)]
        sends = self._all_gather(input)
        plan = bm.dispatch_plan(all_counts, self.rank, local_experts, align)
        assert plan["expert_offsets"][-1] <= output.size(0), "capacity exceeded"
        blocks = plan["blocks"]
        if self.bug == "swap":  # the sources' rows in reverse order within each segment
            by_expert = {}
            for b in blocks:
                e = next(x for x in range(local_experts)
                         if plan["expert_offsets"][x] <= b[0] < plan["expert_offsets"][x + 1]
                         or x == local_experts - 1)
                by_expert.setdefault(e, []).append(b)
            blocks = []
            for e, bs in by_expert.items():
                row = plan["expert_offsets"][e]
                for _, src, src_row, n in reversed(bs):
                    blocks.append((row, src, src_row, n))
                    row += n
        for row, src, src_row, n in blocks:
            output[row:row + n] = sends[src][src_row:src_row + n]
        if recv_counts is not None:
            recv_counts.copy_(torch.tensor(plan["recv_counts"]))
        if expert_offsets is not None:
            expert_offsets.copy_(torch.tensor(plan["expert_offsets"]))
        return output

    def expert_combine(self, output, input, send_counts, local_experts, align=1):
        all_counts = [c.tolist() for c in self._all_gather(send_counts)]
        expert_outs = self._all_gather(input)
        for d in range(self.world_size):
            for row, src, src_row, n in bm.dispatch_plan(all_counts, d, local_experts,
                                                         align)["blocks"]:
                if src == self.rank:
                    output[src_row:src_row + n] = expert_outs[d][row:row + n]
        return output

    def check(self):
        pass


def _example_worker(rank, world, init_file, result_dir):
    """One rank of the example's layer on CPU over gloo (test_example_layer_over_gloo_ranks)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    results = {}
    for impl, bug in (("grouped", ""), ("padded", ""), ("loop", ""), ("padded", "swap")):
        if impl == "grouped" and not hasattr(torch, "_grouped_mm"):
            continue
        args = moe.parse_args(["--tokens", "24", "--hidden", "16", "--ffn", "32", "--experts",
                               str(2 * world), "--topk", "2", "--align", "4", "--dtype", "float32",
                               "--experts-impl", impl] + (["--no-graph"] if impl == "loop" else []))
        dtype = moe.DTYPES[args.dtype]
        router_w, w1_all, w2_all = moe.make_weights(args.experts, args.hidden, args.ffn, dtype, 5)
        mine = slice(rank * 2, (rank + 1) * 2)
        layer = moe.MoELayer(_GlooExpertComm(rank, world, bug), router_w, w1_all[mine],
                             w2_all[mine], args, impl)
        ref_w = (router_w, w1_all, w2_all) if rank == 0 else None
        oks = []
        for step in range(2):
            layer.x.copy_(moe.make_tokens(step, rank, args.tokens, args.hidden, dtype, 5, "cpu"))
            out = layer.forward()
            oks.append(moe.check_step(layer, out, step, rank, world, ref_w, dtype))
            oks.append(moe.check_nccl(layer, out, rank, world, dtype))
        results[f"{impl}{'-' + bug if bug else ''}"] = oks

    # The benchmark's eager YALI path (the fake's calls) and its NCCL path (here through gloo's
    # all_to_all_single with split sizes), each checked by the benchmark's own check.
    bench = bm.parse_args(["--world_size", str(world), "--tokens", "20", "--hidden", "8",
                           "--topk", "3", "--experts", str(2 * world), "--dtype", "bfloat16"])
    for dist_name in bm.DISTS:
        counts = [bm.routing_counts(bm.make_routing(dist_name, r, 20, 3, 2 * world, world, 1),
                                    2 * world) for r in range(world)]
        s = bm._Setup(_GlooExpertComm(rank, world), rank, world, bench, counts[rank],
                      torch.device("cpu"))

        def gloo_a2a(out, inp, out_splits, in_splits):
            dist.all_to_all_single(out, inp, out_splits, in_splits)

        for path in (bm._YaliDispatch(s), bm._HostSplits(s, "nccl_a2a_host", gloo_a2a, s.comm.check)):
            path.prepare()
            results[f"bench {dist_name} {path.name}"] = bm._check_path(path, s, counts)
    Path(result_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def test_example_layer_over_gloo_ranks(tmp_path):
    """The example's layer (MoELayer.forward), its per-step check (check_step: router, counts,
    offsets, float64 reference over every rank's tokens) and its all_to_all_single cross-check
    (nccl_forward, here through gloo) over 3 processes on CPU, the YALI calls played by
    _GlooExpertComm; with a wrong layout (bug="swap") both checks fail on every rank. And the
    benchmark's yali_dispatch path (same fake) and host-split path (gloo's all_to_all_single with
    split sizes) under the benchmark's check, for every distribution."""
    import torch.multiprocessing as mp

    world = 3
    mp.spawn(_example_worker, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world,
             join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    for r in results:
        for name, oks in r.items():
            if name.startswith("bench"):
                assert oks == "", (name, oks)
            elif name.endswith("swap"):
                assert oks == [False] * 4, (name, oks)
            else:
                assert oks == [True] * 4, (name, oks)
    assert results[0] == results[1] == results[2]


def test_example_arguments():
    a = moe.parse_args([])
    assert (a.steps, a.tokens, a.hidden, a.experts, a.topk, a.dtype) == (10, 512, 256, 8, 2,
                                                                         "bfloat16")
    assert a.check_nccl and not a.no_graph and a.experts_impl == "auto" and a.nproc is None
    a = moe.parse_args(["--no-check-nccl", "--no-graph", "--dtype", "fp32", "--experts", "12",
                        "--experts-impl", "loop", "--nproc", "4"])
    assert not a.check_nccl and a.no_graph and a.dtype == "fp32" and a.experts_impl == "loop"
    assert moe.validate(a, 4) == "" and moe.validate(a, 3) == ""
    assert "multiple" in moe.validate(a, 5)
    assert "at least 2" in moe.validate(a, 1)
    assert "more than" in moe.validate(_example_args(topk=9), 2)
    assert "no-graph" in moe.validate(_example_args(experts_impl="loop"), 2)
    assert ">= 1" in moe.validate(_example_args(align=0), 2)
    assert "512" in moe.validate(_example_args(experts=1026), 2)
    with pytest.raises(SystemExit):
        moe.parse_args(["--dtype", "int8"])


def test_importing_the_example_leaves_the_environment_alone(monkeypatch):
    import os

    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    _load_example()
    assert "NCCL_NVLS_ENABLE" not in os.environ


# ---- The benchmark -------------------------------------------------------------------------------


@pytest.mark.parametrize("dist", bm.DISTS)
def test_routing_distributions(dist):
    nranks, experts, tokens, topk = 4, 16, 400, 2
    topi = bm.make_routing(dist, 1, tokens, topk, experts, nranks, 0)
    assert topi.shape == (tokens, topk) and topi.dtype == torch.int64
    assert (topi.sort(1).values.diff(1) != 0).all(), "a token's experts must be distinct"
    assert torch.equal(topi, bm.make_routing(dist, 1, tokens, topk, experts, nranks, 0))
    assert not torch.equal(topi, bm.make_routing(dist, 2, tokens, topk, experts, nranks, 0))
    counts = torch.tensor(bm.routing_counts(topi, experts))
    assert counts.sum() == tokens * topk
    per_rank = counts.view(nranks, -1).sum(1)
    if dist == "uniform":
        assert counts.max() < 2 * counts.float().mean()
    elif dist == "zipf":
        assert counts.max() > 3 * counts.float().mean()
    else:  # hot: rank 0's experts get most rows
        assert per_rank[0] > 0.5 * tokens * topk
    with pytest.raises(ValueError, match="unknown"):
        bm.expert_weights("gauss", experts, nranks, 0)


def test_row_pattern_rows_are_unique_and_exact():
    rows = bm.PATTERN_MOD ** 2 + 300  # crosses the first two digits' wrap-around
    pats = torch.cat([bm.row_pattern(r, rows, 4, torch.float32) for r in range(3)])
    assert torch.unique(pats, dim=0).size(0) == pats.size(0)
    assert pats.min() >= -120 and pats.max() <= 120 and torch.equal(pats, pats.round())
    for dtype in bm.DTYPES.values():
        p = bm.row_pattern(5, 600, 9, dtype)
        assert torch.equal(p.double(), bm.row_pattern(5, 600, 9, torch.float64))
        assert not (p == bm.PATTERN_SENTINEL).any()
    assert torch.equal(bm.row_pattern(1, 10, 6, torch.float32)[4:],
                       bm.row_pattern(1, 4 + 6, 6, torch.float32)[4:])


@pytest.mark.parametrize("align", [1, 3, 16])
def test_dispatch_plan_against_brute_force(align):
    nranks, local, tokens, topk, hidden = 3, 4, 30, 3, 5
    g = nranks * local
    counts = [bm.routing_counts(bm.make_routing("zipf", r, tokens, topk, g, nranks, 9), g)
              for r in range(nranks)]
    sends = [bm.row_pattern(r, tokens * topk, hidden, torch.float32) for r in range(nranks)]
    capacity = bm.capacity_rows(tokens, topk, nranks, local, align)
    total_in = 0
    for d in range(nranks):
        plan = bm.dispatch_plan(counts, d, local, align)
        recv, rc, offsets = _brute_force_dispatch(sends, counts, d, local, align, capacity)
        assert plan["recv_counts"] == rc.tolist() and plan["expert_offsets"] == offsets.tolist()
        assert plan["expert_offsets"][-1] <= capacity
        assert all(o % align == 0 for o in plan["expert_offsets"][:-1])
        assert bm.check_layout(recv, rc.tolist(), offsets.tolist(), plan, lambda s: sends[s]) == ""
        total_in += sum(plan["recv_counts"])
    assert total_in == nranks * tokens * topk
    # The combine (the plan's inverse) gives every rank its rows back.
    outs = [_brute_force_dispatch(sends, counts, d, local, align, capacity)[0] for d in range(nranks)]
    backs = _combine(outs, counts, local, align, [tokens * topk] * nranks)
    assert all(torch.equal(b, s) for b, s in zip(backs, sends))


def test_capacity_holds_the_worst_routing():
    nranks, local, tokens, topk, align = 4, 2, 10, 3, 8
    g = nranks * local
    # Every token of every rank sends its rows to rank 0's experts as far as it can (min(k, E)).
    topi = torch.tensor([[0, 1, 2]] * tokens)
    counts = [bm.routing_counts(topi, g)] * nranks
    plan = bm.dispatch_plan(counts, 0, local, align)
    assert plan["expert_offsets"][-1] <= bm.capacity_rows(tokens, topk, nranks, local, align)
    assert sum(plan["recv_counts"]) == nranks * tokens * min(topk, local)


def test_check_layout_catches_errors():
    counts = [[2, 1, 0, 3], [1, 1, 2, 0]]
    sends = [bm.row_pattern(r, 6 if r == 0 else 4, 4, torch.bfloat16) for r in range(2)]
    plan = bm.dispatch_plan(counts, 1, 2, 4)
    recv, rc, offs = _brute_force_dispatch(sends, counts, 1, 2, 4, 32)
    sent_by = sends.__getitem__
    assert bm.check_layout(recv, rc.tolist(), offs.tolist(), plan, sent_by) == ""
    swapped = recv.clone()
    swapped[[4, 5]] = swapped[[5, 4]]
    assert "differ" in bm.check_layout(swapped, rc.tolist(), offs.tolist(), plan, sent_by)
    assert "recv_counts" in bm.check_layout(recv, [0] * 4, offs.tolist(), plan, sent_by)
    assert "expert_offsets" in bm.check_layout(recv, rc.tolist(), [0, 2, 7], plan, sent_by)


def test_regroup_index_against_the_plan():
    nranks, local = 3, 4
    gen = torch.Generator().manual_seed(6)
    counts_se = torch.randint(0, 5, (nranks, local), generator=gen)
    counts_se[1, 2] = 0
    total = int(counts_se.sum())
    idx = bm.regroup_index(counts_se, total)
    assert sorted(idx.tolist()) == list(range(total))
    # Rows received source-major, labelled (source, expert, i), land expert-major, in source order.
    labels = [(s, e, i) for s in range(nranks) for e in range(local)
              for i in range(int(counts_se[s, e]))]
    regrouped = [None] * total
    for r, lab in enumerate(labels):
        regrouped[idx[r]] = lab
    assert regrouped == sorted(labels, key=lambda t: (t[1], t[0], t[2]))
    assert bm.regroup_index(torch.zeros(2, 3, dtype=torch.int64), 0).numel() == 0


class _ThreadAllToAll:
    """all_to_all_single among threads (one per simulated rank), torch.distributed's semantics:
    split sizes in rows, None for even splits."""

    def __init__(self, nranks):
        self.n = nranks
        self.barrier = threading.Barrier(nranks)
        self.parts = [None] * nranks

    def for_rank(self, rank):
        def a2a(out, inp, out_splits, in_splits):
            splits = in_splits or [inp.size(0) // self.n] * self.n
            self.parts[rank] = inp.split(splits)
            self.barrier.wait()
            got = [self.parts[s][rank] for s in range(self.n)]
            assert [p.size(0) for p in got] == (out_splits or [out.size(0) // self.n] * self.n)
            out.copy_(torch.cat(got))
            self.barrier.wait()  # nobody overwrites parts before every rank has read them
        return a2a


@pytest.mark.parametrize("dist", bm.DISTS)
def test_host_split_path_over_threads(dist):
    """The *_a2a_host path's step (counts exchange, host splits, regroup, back) over 3 simulated
    ranks, checked by the benchmark's own check against the dispatch plan."""
    nranks = 3
    args = bm.parse_args(["--world_size", str(nranks), "--tokens", "20", "--hidden", "8",
                          "--topk", "2", "--experts", "6", "--dtype", "float32"])
    counts = [bm.routing_counts(bm.make_routing(dist, r, 20, 2, 6, nranks, 0), 6)
              for r in range(nranks)]
    fake = _ThreadAllToAll(nranks)
    results = [None] * nranks

    def rank_main(rank):
        try:
            s = bm._Setup(None, rank, nranks, args, counts[rank], torch.device("cpu"))
            path = bm._HostSplits(s, "nccl_a2a_host", fake.for_rank(rank), lambda: None)
            why = bm._check_path(path, s, counts)
            path.step()  # a second step reuses the buffers
            results[rank] = why or ("" if torch.equal(path.back, s.send) else "second step")
            results[rank] += "" if len(path.sync_s) == 2 else " (no round trip timed)"
        except Exception as e:  # noqa: BLE001
            results[rank] = repr(e)
            fake.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(nranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [""] * nranks


def test_bench_arguments_and_worker_command_line():
    a = bm.parse_args([])
    assert a.dists == list(bm.DISTS) and a.paths == list(bm.PATHS)
    assert (a.world_size, a.dtype, a.topk, a.experts, a.align) == (2, "bfloat16", 8, 64, 16)
    a = bm.parse_args(["--world_size", "4", "--dists", "zipf,hot", "--paths",
                       "yali_dispatch_graph,nccl_a2a_host", "--tokens", "100", "--dtype", "float16"])
    assert a.dists == ["zipf", "hot"] and a.paths == ["yali_dispatch_graph", "nccl_a2a_host"]
    back = bm.parse_args(bm.worker_argv(a, "/tmp/r.json")[2:])
    assert back._worker and back.result_file == "/tmp/r.json"
    for k in ("world_size", "tokens", "hidden", "dtype", "topk", "experts", "align", "dists",
              "paths", "num_warmup", "num_iterations", "seed", "timeout"):
        assert getattr(back, k) == getattr(a, k), k
    assert bm.parse_args(["--paths", "all"]).paths == list(bm.PATHS)
    for bad in (["--paths", "yali,nccl"], ["--dists", "gauss"], ["--world_size", "1"],
                ["--experts", "63"], ["--hidden", "3"], ["--topk", "65"], ["--num_iterations", "0"],
                ["--experts", "2048", "--world_size", "2"]):
        with pytest.raises(SystemExit):
            bm.parse_args(bad)


def _fake_rows():
    args = argparse.Namespace(tokens=8, hidden=16, dtype="bfloat16", topk=2, experts=4, align=16)
    return [bm._row(args, 2, "uniform", "yali_dispatch_graph", 20, [1.0, 2.0, 4.0], [], "ok"),
            bm._row(args, 2, "uniform", "nccl_a2a_host", 20, [3.0, 5.0, 9.0], [0.5, 0.7], "ok"),
            bm._row(args, 2, "hot", "yali_dispatch", "", [], [], "ERROR")]


def test_rows_table_and_outputs(tmp_path):
    rows = bm.add_speedups(_fake_rows())
    assert rows[0]["median_ms"] == 2.0 and rows[0]["vs_nccl"] == 2.5
    assert rows[1]["sync_ms"] == pytest.approx(0.6) and rows[1]["vs_nccl"] == 1.0
    assert math.isnan(rows[2]["median_ms"]) and math.isnan(rows[2]["vs_nccl"])
    md = bm.markdown(rows, "t", shared=True)
    assert "| uniform | yali_dispatch_graph | 2 |" in md and "not NVLink speed" in md
    assert "not NVLink speed" not in bm.markdown(rows)
    assert all(line.count("|") == len(bm._HEADERS) + 1 for line in md.splitlines()
               if line.startswith("|"))
    out = bm.write_outputs(rows, tmp_path / "o", {"shared_gpu": True})
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["shared_gpu"] and data["rows"][0]["times_ms"] == [1.0, 2.0, 4.0]
    header = (out / "results.csv").read_text().splitlines()[0]
    assert header == ",".join(bm.COLUMNS)
    assert "not NVLink speed" in (out / "results.md").read_text()


# ---- Against yali.torch's own argument checks (fake CUDA tensors, nothing launched) ---------------


def _fake_yali_communicator(monkeypatch, rank, n):
    """A yali.torch.Communicator over a fake yali.Comm (rank ``rank`` of ``n`` on cuda:0), live for
    the operators, as tests/python/test_torch_host.py builds it."""
    import yali
    import yali.torch as yt

    comm = object.__new__(yali.Comm)
    comm._handle, comm._registrations = 0x3000 + rank, []
    comm._rank, comm._size, comm._device = rank, n, 0
    c = object.__new__(yt.Communicator)
    c._comm, c._handle = comm, comm.handle
    c.rank, c.world_size = rank, n
    c.device, c._device_index = torch.device("cuda", 0), 0
    monkeypatch.setitem(yt._LIVE, comm.handle, comm)
    return c


@pytest.mark.parametrize("impl", ["grouped", "padded"])
def test_example_step_passes_yali_torch_checks(monkeypatch, impl):
    """MoELayer.forward on fake CUDA tensors (FakeTensorMode) through the real
    Communicator.expert_dispatch/expert_combine: every call the step makes (shapes, dtypes, count
    tensors, capacity, no overlaps) passes yali.torch's checks, and every torch op of the graph
    path traces on CUDA tensors."""
    yt = pytest.importorskip("yali.torch")
    if not hasattr(yt.Communicator, "expert_dispatch"):
        pytest.skip("yali.torch has no expert_dispatch yet")
    if impl == "grouped" and not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no torch._grouped_mm")
    from torch._subclasses.fake_tensor import FakeTensorMode

    c = _fake_yali_communicator(monkeypatch, 1, 3)
    args = moe.parse_args(["--tokens", "40", "--hidden", "64", "--ffn", "128", "--experts", "6",
                           "--topk", "2", "--experts-impl", impl])
    with FakeTensorMode():
        router_w = torch.empty(64, 6, device="cuda")
        w1 = torch.empty(2, 64, 128, dtype=torch.bfloat16, device="cuda")
        w2 = torch.empty(2, 128, 64, dtype=torch.bfloat16, device="cuda")
        layer = moe.MoELayer(c, router_w, w1, w2, args, impl)
        step = layer.forward()
        assert step["out"].shape == (40, 64) and step["out"].dtype == torch.bfloat16
        assert step["send"].shape == (80, 64) and step["send_counts"].shape == (6,)
        assert layer.recv.shape[0] == moe.capacity_rows(40, 2, 3, 2, 16)


def test_bench_yali_dispatch_passes_yali_torch_checks(monkeypatch):
    """The benchmark's yali_dispatch step, likewise."""
    yt = pytest.importorskip("yali.torch")
    if not hasattr(yt.Communicator, "expert_dispatch"):
        pytest.skip("yali.torch has no expert_dispatch yet")
    from torch._subclasses.fake_tensor import FakeTensorMode

    c = _fake_yali_communicator(monkeypatch, 0, 2)
    args = bm.parse_args(["--tokens", "10", "--hidden", "8", "--topk", "3", "--experts", "4"])
    counts = bm.routing_counts(bm.make_routing("zipf", 0, 10, 3, 4, 2, 0), 4)
    with FakeTensorMode():
        s = bm._Setup(c, 0, 2, args, counts, torch.device("cuda", 0))
        path = bm._YaliDispatch(s)
        path.prepare()
        path.step()
        assert path.back.shape == s.send.shape == (30, 8)
