"""Unchanged PyTorch on NCCL, to run twice: plain, and under yali-run (libyali-nccl preloaded).

Each rank runs a few steps of DDP, FSDP2, functional collectives under torch.compile,
all_to_all_single (even and with splits), tensor parallelism (DTensor), a CUDA-graph-captured
all_reduce and a CUDA-graph-captured training step (forward, backward, gradient all_reduce, SGD),
and writes what it saw (losses, parameter checksums, collective outputs) to OUT.rank<r>.json; rank 0 merges them into
OUT. `--compare a.json b.json` then checks that the two runs agree (float tolerance, since YALI's
reduction order differs from NCCL's) and that, within each run, every rank got bitwise the same
results where a collective promises it (all_reduce, all_gather, DDP's parameters).

    torchrun --nproc-per-node 2 check_torch.py --out plain.json
    python -m yali.run torchrun --nproc-per-node 2 check_torch.py --out yali.json
    python check_torch.py --compare plain.json yali.json

Ranks may share one GPU: YALI_ALLOW_SHARED_GPU=1, NCCL_HOSTID per rank, NCCL_NVLS_ENABLE=0
(README.md). By default the process group is made with dist.init_process_group("nccl") and no
device_id: torch makes its communicator lazily, at the first collective, with ncclCommInitRank.
`--device-id` passes device_id instead: torch makes the communicator eagerly and makes every later
group by ncclCommSplit of it; the run then adds subgroups (one of every rank, and at 4 ranks or
more, pairs from dist.new_subgroups), so the splits' collectives are checked too.
"""
import argparse
import hashlib
import json
import os
import struct
import sys


def digest(t):
    """Bitwise identity of a tensor: sha1 of its bytes (on the CPU)."""
    import torch
    b = t.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy().tobytes()  # 0-dim too
    return hashlib.sha1(b).hexdigest()


def values(t):
    return [float(x) for x in t.detach().float().flatten().cpu().tolist()]


def record(out, name, t, same_on_all_ranks):
    """One result: its values (compared across runs with a tolerance) and its bytes' digest
    (compared across ranks within a run when the collective promises identical results)."""
    out[name] = {"values": values(t), "digest": digest(t), "same": same_on_all_ranks}


def library_lines():
    """Which NCCL this process resolved: libyali-nccl when preloaded."""
    pre = os.environ.get("LD_PRELOAD", "")
    return "libyali-nccl (LD_PRELOAD=%s)" % pre if "yali-nccl" in pre else "NCCL (no preload)"


def run_checks(steps, device_id=False):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    # Without device_id the communicator is made lazily; with it eagerly, and later groups are
    # splits of it (module docstring).
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", 0)))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    if device_id:
        dist.init_process_group("nccl", device_id=dev)
    else:
        dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    print("[rank %d] collectives through %s" % (rank, library_lines()), file=sys.stderr, flush=True)
    out = {}

    def progress(section):
        """Where a run stands, on stderr (a hang shows where it stopped)."""
        torch.cuda.synchronize()
        print("[rank %d] %s done" % (rank, section), file=sys.stderr, flush=True)

    def mlp():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).to(dev)

    def batch(step):
        g = torch.Generator(device="cpu").manual_seed(1000 * step + rank)
        return torch.randn(32, 64, generator=g).to(dev)

    def train(model, name, params_sum):
        """`steps` SGD steps; each step's loss (per rank) and params_sum(model) (every rank's)."""
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(steps):
            opt.zero_grad()
            loss = model(batch(step)).pow(2).mean()
            loss.backward()
            opt.step()
            record(out, "%s.loss.%d" % (name, step), loss, False)
            record(out, "%s.params.%d" % (name, step), params_sum(model).reshape(1), True)

    # DDP: small buckets so the gradients go in several all_reduces.
    train(DDP(mlp(), bucket_cap_mb=0.01), "ddp",
          lambda m: torch.cat([p.detach().flatten() for p in m.parameters()]).sum())

    progress("DDP")

    # FSDP2: all_gather of parameters, reduce_scatter of gradients.
    def fsdp_params_sum(m):
        """The sum of every rank's parameter shards (an all_reduce of the local sums)."""
        total = torch.stack([p.to_local().float().sum() for p in m.parameters()]).sum()
        dist.all_reduce(total)
        return total

    model = mlp()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    train(model, "fsdp", fsdp_params_sum)

    progress("FSDP2")

    # Functional collectives under torch.compile.
    group = dist.group.WORLD

    @torch.compile
    def fc(x):
        a = funcol.all_reduce(x, "sum", group)
        g = funcol.all_gather_tensor(x, 0, group)
        r = funcol.reduce_scatter_tensor(g * 2, "sum", 0, group)
        return a, g, r

    for step in range(steps):
        x = torch.arange(world * 8, dtype=torch.float32, device=dev) * (rank + 1) + step
        a, g, r = fc(x)
        record(out, "funcol.all_reduce.%d" % step, a, True)
        record(out, "funcol.all_gather.%d" % step, g, True)
        record(out, "funcol.reduce_scatter.%d.rank%d" % (step, rank), r, False)

    progress("functional collectives")

    # all_to_all_single: even (NCCL's AlltoAll) and with splits (send/recv in a group).
    x = torch.arange(world * 4, dtype=torch.float32, device=dev) + 100 * rank
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x)
    record(out, "a2a.even.rank%d" % rank, y, False)
    send_splits = [(rank + j) % 3 + 1 for j in range(world)]
    recv_splits = [(j + rank) % 3 + 1 for j in range(world)]  # what rank j sends to me
    x = torch.arange(sum(send_splits), dtype=torch.float32, device=dev) + 100 * rank
    y = torch.empty(sum(recv_splits), dtype=torch.float32, device=dev)
    dist.all_to_all_single(y, x, recv_splits, send_splits)
    record(out, "a2a.splits.rank%d" % rank, y, False)

    progress("all_to_all_single")

    # Tensor parallelism (DTensor): a column-parallel Linear, then a row-parallel one; the same
    # input on every rank. The output is replicated (the row-parallel all_reduce), so identical on
    # every rank; each rank's weight gradient is its own shard.
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cuda", (world,))
    model = parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    for step in range(steps):
        g = torch.Generator(device="cpu").manual_seed(5000 + step)
        x = torch.randn(32, 64, generator=g).to(dev)
        y = model(x)
        y.pow(2).mean().backward()
        record(out, "tp.out.%d" % step, y.detach(), True)
        record(out, "tp.grad0.%d.rank%d" % (step, rank), model[0].weight.grad.to_local(), False)
        model.zero_grad()
    progress("tensor parallel")

    # A CUDA-graph-captured all_reduce, replayed.
    buf = torch.ones(1024, device=dev) * (rank + 1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist.all_reduce(buf)  # warm-up outside the capture (communicator made)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        buf.mul_(0.5)
        dist.all_reduce(buf)
    for step in range(steps):
        graph.replay()
        torch.cuda.synchronize()
        record(out, "graph.all_reduce.%d" % step, buf, True)

    progress("graph-captured all_reduce")

    # A CUDA-graph-captured training step (what graph-captured data parallelism does): forward,
    # backward, the gradients all-reduced as one flat tensor and averaged, the SGD update; each
    # replay on a new batch copied into the static input. Warmed up on a side stream first (torch's
    # rule for capturing autograd), then captured once and replayed.
    model = mlp()
    params = list(model.parameters())
    static_x = torch.zeros(32, 64, device=dev)

    def graph_step():
        loss = model(static_x).pow(2).mean()
        grads = torch.autograd.grad(loss, params)
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
        flat.div_(world)
        with torch.no_grad():
            offset = 0
            for p in params:
                p.sub_(0.05 * flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        return loss

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for step in range(3):
            static_x.copy_(batch(100 + step))
            graph_step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = graph_step()
    for step in range(steps):
        static_x.copy_(batch(200 + step))
        graph.replay()
        torch.cuda.synchronize()
        record(out, "graphstep.loss.%d" % step, static_loss, False)
        record(out, "graphstep.params.%d" % step,
               torch.cat([p.detach().flatten() for p in params]).sum().reshape(1), True)

    progress("graph-captured training step")

    if device_id:
        # Subgroups, made by ncclCommSplit of the eager communicator: one of every rank, and at 4
        # ranks or more pairs (every rank takes part in every pair's split, outside it with
        # NCCL_SPLIT_NOCOLOR). Each runs an all_reduce and an all_gather.
        groups = [("all", dist.new_group(list(range(world))), True)]
        if world >= 4 and world % 2 == 0:
            pair, _ = dist.new_subgroups(group_size=2)
            groups.append(("pair", pair, False))
        for name, g, everywhere in groups:
            for step in range(steps):
                x = torch.arange(1000, dtype=torch.float32, device=dev) * (rank + 1) + step
                dist.all_reduce(x, group=g)
                record(out, "subgroup.%s.all_reduce.%d%s" % (name, step, "" if everywhere else ".rank%d" % rank),
                       x, everywhere)
                parts = [torch.empty(16, dtype=torch.float32, device=dev) for _ in range(dist.get_world_size(g))]
                dist.all_gather(parts, x[:16].contiguous(), group=g)
                record(out, "subgroup.%s.all_gather.%d%s" % (name, step, "" if everywhere else ".rank%d" % rank),
                       torch.cat(parts), everywhere)
        progress("subgroups")
    return rank, world, out


def teardown(rank):
    """Last, after the results are written: a hang here (seen with plain NCCL, two ranks on one GPU,
    2026-11-25) costs the run its exit status, never its results."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    print("[rank %d] teardown done" % rank, file=sys.stderr, flush=True)


def merge(out_path, world):
    merged = {"world": world, "ranks": []}
    for r in range(world):
        with open("%s.rank%d.json" % (out_path, r)) as f:
            merged["ranks"].append(json.load(f))
    with open(out_path, "w") as f:
        json.dump(merged, f)


def check_run(run, name):
    """Within one run: results promised identical on every rank are bitwise identical."""
    errors = []
    ranks = run["ranks"]
    for key, first in ranks[0].items():
        if not first["same"]:
            continue
        for r, other in enumerate(ranks[1:], 1):
            if key in other and other[key]["digest"] != first["digest"]:
                errors.append("%s: %s differs between rank 0 and rank %d" % (name, key, r))
    return errors


def close(a, b, rtol=1e-4, atol=1e-5):
    return len(a) == len(b) and all(abs(x - y) <= atol + rtol * abs(y) for x, y in zip(a, b))


def compare(a, b):
    """Two runs agree: same world, same results within tolerance; each run consistent."""
    errors = check_run(a, "first") + check_run(b, "second")
    if a["world"] != b["world"]:
        return errors + ["world sizes differ: %d and %d" % (a["world"], b["world"])]
    for r, (ra, rb) in enumerate(zip(a["ranks"], b["ranks"])):
        for key in sorted(set(ra) | set(rb)):
            if key not in ra or key not in rb:
                errors.append("rank %d: %s is in one run only" % (r, key))
            elif not close(ra[key]["values"], rb[key]["values"]):
                errors.append("rank %d: %s differs: %s vs %s" % (r, key, ra[key]["values"][:4], rb[key]["values"][:4]))
    return errors


def self_test():
    """compare() on made-up runs, CPU only (no torch needed)."""
    def run(v, same_digest=True):
        ranks = []
        for r in range(2):
            d = "x" if same_digest or r == 0 else "y"
            ranks.append({"k": {"values": v, "digest": d, "same": True},
                          "p.rank%d" % r: {"values": [float(r)], "digest": str(r), "same": False}})
        return {"world": 2, "ranks": ranks}
    base = run([1.0, 2.0])
    assert compare(base, run([1.0, 2.0])) == []
    assert compare(base, run([1.0, 2.0 + 1e-7])) == []          # reduction order: within tolerance
    assert len(compare(base, run([1.0, 2.1]))) == 2              # a real difference, on each rank
    assert any("rank 1" in e for e in compare(base, run([1.0, 2.0], same_digest=False)))
    assert check_run(run([3.0]), "x") == []
    print("self-test passed")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="results file (each rank also writes OUT.rank<r>.json)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--device-id", action="store_true",
                   help="init_process_group with device_id (eager communicator; subgroups by split)")
    args = p.parse_args(argv)
    if args.self_test:
        return self_test()
    if args.compare:
        with open(args.compare[0]) as f:
            a = json.load(f)
        with open(args.compare[1]) as f:
            b = json.load(f)
        errors = compare(a, b)
        for e in errors:
            print(e)
        print("%s: %d results per rank, %d ranks" % ("AGREE" if not errors else "DIFFER", len(a["ranks"][0]), a["world"]))
        return 1 if errors else 0
    if not args.out:
        p.error("--out, --compare or --self-test")
    rank, world, out = run_checks(args.steps, args.device_id)
    mine = "%s.rank%d.json" % (args.out, rank)
    with open(mine + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(mine + ".tmp", mine)  # rank 0 never reads a half-written file
    if rank == 0:
        import time
        deadline = time.time() + 60
        while not all(os.path.exists("%s.rank%d.json" % (args.out, r)) for r in range(world)):
            if time.time() > deadline:
                print("missing per-rank results", file=sys.stderr)
                return 1
            time.sleep(0.1)
        merge(args.out, world)
        print("wrote %s (%d ranks, %d results each) via %s" % (args.out, world, len(out), library_lines()))
    teardown(rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())
