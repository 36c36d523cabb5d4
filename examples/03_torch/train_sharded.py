"""Sharded data-parallel training (ZeRO-style) on YALI's reduce-scatter and all-gather, checked
against NCCL at every step.

    python examples/03_torch/train_sharded.py --nproc 4 --steps 20    # spawns 4 ranks itself
    torchrun --nproc_per_node 4 examples/03_torch/train_sharded.py     # or under torchrun

Every rank holds the whole MLP but owns one shard of its flattened weights (the optimizer state
lives with the shard). At the start rank 0's weights are broadcast to every rank
(Communicator.broadcast). After each backward pass the flattened gradients are reduce-scattered with
op="avg" (Communicator.reduce_scatter_tensor), so that each rank gets the averaged gradient of its
shard only; the rank steps its shard (SGD with momentum) and the shards are all-gathered back into
the full weights (Communicator.all_gather_into_tensor). The averaged gradient shard must agree with
NCCL's (torch.distributed.reduce_scatter_tensor, ReduceOp.AVG) at every step; whether any rank
disagreed is itself combined with an int32 all_reduce (op="max"). At the end rank 0 gathers every
rank's weights (Communicator.gather, the list form) and checks that they are bitwise identical.
Exit status 0 when all of that holds, 1 otherwise.

With fewer GPUs than ranks the ranks share GPUs: the script then sets YALI_ALLOW_SHARED_GPU=1 and
gives each rank its own NCCL_HOSTID (NCCL refuses two ranks on one GPU otherwise), so that it runs
on a one-GPU machine too (slowly: the ranks take turns on the GPU).
"""

import argparse
import datetime
import importlib.util
import os
import socket
import sys
from pathlib import Path

# NVLink multicast must stay off on the shared machines: set for this process and the ranks it spawns.
os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")

if importlib.util.find_spec("yali") is None:  # running from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import yali.torch  # noqa: E402


def make_model(width, depth):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    layers.append(torch.nn.Linear(width, 1))
    return torch.nn.Sequential(*layers)


@torch.no_grad()
def unflatten(flat, params):
    """Copies the flat weights back into the model's parameters."""
    offset = 0
    for p in params:
        n = p.numel()
        p.copy_(flat[offset:offset + n].view_as(p))
        offset += n


def train(local_rank, rank, world, args):
    ndev = torch.cuda.device_count()
    dev = torch.device("cuda", local_rank % ndev)
    if world > ndev:  # ranks share GPUs (must be set before NCCL and YALI start)
        os.environ["YALI_ALLOW_SHARED_GPU"] = "1"
        os.environ["NCCL_HOSTID"] = f"train-sharded-rank-{rank}"
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=120))
    comm = yali.torch.Communicator()  # bootstrapped through the NCCL process group

    torch.manual_seed(100 + rank)  # different on every rank on purpose: rank 0's are broadcast
    model = make_model(args.width, args.depth).to(dev)
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    shard = -(-numel // world)  # the flat buffers are padded to world * shard elements
    mine = slice(rank * shard, (rank + 1) * shard)

    flat = torch.zeros(world * shard, device=dev)  # the whole weights, flat
    with torch.no_grad():
        torch.cat([p.reshape(-1) for p in params], out=flat[:numel])
    comm.broadcast(flat, src=0)  # every rank starts from rank 0's weights
    unflatten(flat, params)
    weights = flat[mine].clone()  # this rank's shard, and its optimizer state
    momentum = torch.zeros_like(weights)

    grads = torch.zeros(world * shard, device=dev)  # the padding stays 0
    grad_shard = torch.empty(shard, device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1000 + rank)  # each rank its own data
    w_true = torch.randn(args.width, 1, device=dev, generator=torch.Generator(device=dev).manual_seed(7))

    failed = False
    for step in range(args.steps):
        x = torch.randn(args.batch, args.width, device=dev, generator=gen)
        y = torch.tanh(x @ w_true)
        loss = F.mse_loss(model(x), y)
        model.zero_grad(set_to_none=False)
        loss.backward()

        torch.cat([p.grad.reshape(-1) for p in params], out=grads[:numel])
        nccl = torch.empty_like(grad_shard)
        dist.reduce_scatter_tensor(nccl, grads.clone(), op=dist.ReduceOp.AVG)  # the reference
        # YALI: this rank's shard of the gradient averaged over the ranks, on the current stream.
        comm.reduce_scatter_tensor(grad_shard, grads, op="avg")
        diff = (grad_shard - nccl).abs().max()
        bad = torch.tensor([0 if torch.allclose(grad_shard, nccl, rtol=1e-5, atol=1e-6) else 1],
                           dtype=torch.int32, device=dev)
        comm.all_reduce(bad, op="max")  # every rank learns whether any rank disagreed

        momentum.mul_(0.9).add_(grad_shard)
        weights.add_(momentum, alpha=-args.lr)
        comm.all_gather_into_tensor(flat, weights)  # every rank gets every updated shard
        unflatten(flat, params)

        mean_loss = loss.detach().clone()
        comm.all_reduce(mean_loss, op="avg")
        if rank == 0:
            status = "ok" if bad.item() == 0 else "MISMATCH"
            print(f"step {step:3d}  loss {mean_loss.item():.6f}  max|yali-nccl| {diff.item():.2e}  "
                  f"{status}", flush=True)
        if bad.item():
            failed = True
            break

    # The replicas are assembled from the same shards: they must not differ at all.
    gathered = [torch.empty_like(flat) for _ in range(world)] if rank == 0 else None
    comm.gather(flat, gathered, dst=0)
    torch.cuda.synchronize()
    drift = torch.zeros(1, dtype=torch.int32, device=dev)
    if rank == 0:
        differ = [r for r, w in enumerate(gathered) if not torch.equal(w, gathered[0])]
        if differ:
            print(f"weights differ between rank 0 and rank(s) {differ}", flush=True)
            drift.fill_(1)
    comm.broadcast(drift, src=0)
    failed = failed or bool(drift.item())
    if rank == 0 and not failed:
        print(f"OK: {args.steps} steps on {world} ranks, YALI's reduce-scatter matched NCCL at every "
              "step, weights identical on every rank", flush=True)

    comm.close()
    dist.destroy_process_group()
    if failed:
        sys.exit(1)


def _spawned(local_rank, world, args):
    train(local_rank, local_rank, world, args)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=None, help="ranks to spawn (default: every GPU)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        train(int(os.environ.get("LOCAL_RANK", os.environ["RANK"])), int(os.environ["RANK"]),
              int(os.environ["WORLD_SIZE"]), args)
        return 0

    world = args.nproc or torch.cuda.device_count()
    if world < 2:
        print(f"need at least 2 ranks, got {world} (--nproc 2 shares one GPU)", file=sys.stderr)
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        mp.spawn(_spawned, args=(world, args), nprocs=world, join=True)
    except Exception as e:  # noqa: BLE001 (a rank failed or exited non-zero)
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
