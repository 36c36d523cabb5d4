"""Data-parallel training whose gradients are averaged by YALI, checked against NCCL at every step.

    python examples/03_torch/train_ddp.py --nproc 4 --steps 20     # spawns 4 ranks itself
    torchrun --nproc_per_node 4 examples/03_torch/train_ddp.py      # or under torchrun

Every rank holds the same MLP (same seed) and trains on its own random batches. After backward the
gradients are packed into one flat bucket and averaged across ranks twice: by YALI
(Communicator.all_reduce(bucket, op="avg")) and, on a copy, by NCCL (torch.distributed.all_reduce,
ReduceOp.AVG). The two must agree (allclose) at every step; the optimizer then steps with YALI's
result. At the end the weights must be bitwise identical on every rank (YALI gives every rank the
same bits). Exit status 0 when all of that holds, 1 otherwise.
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


def train(local_rank, rank, world, args):
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=120))
    comm = yali.torch.Communicator()  # bootstrapped through the NCCL process group

    torch.manual_seed(0)  # the same initial weights on every rank
    model = make_model(args.width, args.depth).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    params = list(model.parameters())
    bucket = torch.empty(sum(p.numel() for p in params), device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1000 + rank)  # each rank its own data
    w_true = torch.randn(args.width, 1, device=dev, generator=torch.Generator(device=dev).manual_seed(7))

    failed = False
    for step in range(args.steps):
        x = torch.randn(args.batch, args.width, device=dev, generator=gen)
        y = torch.tanh(x @ w_true)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()

        torch.cat([p.grad.reshape(-1) for p in params], out=bucket)
        nccl = bucket.clone()
        dist.all_reduce(nccl, op=dist.ReduceOp.AVG)  # the reference
        comm.all_reduce(bucket, op="avg")  # YALI, in place, on the current stream
        diff = (bucket - nccl).abs().max()
        close = torch.allclose(bucket, nccl, rtol=1e-5, atol=1e-6)
        bad = torch.tensor([0 if close else 1], device=dev)
        dist.all_reduce(bad)  # every rank learns whether any rank disagreed

        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(bucket[offset:offset + n].view_as(p))
            offset += n
        opt.step()

        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            status = "ok" if bad.item() == 0 else f"MISMATCH on {bad.item()} rank(s)"
            print(f"step {step:3d}  loss {mean_loss.item():.6f}  max|yali-nccl| {diff.item():.2e}  "
                  f"{status}", flush=True)
        if bad.item():
            failed = True
            break

    # YALI gives every rank the same bits, so the replicas must not drift apart at all.
    weights = torch.cat([p.detach().reshape(-1) for p in params])
    gathered = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    drift = [r for r, w in enumerate(gathered) if not torch.equal(w, gathered[0])]
    if drift:
        failed = True
        if rank == 0:
            print(f"weights differ between rank 0 and rank(s) {drift}", flush=True)
    elif rank == 0 and not failed:
        print(f"OK: {args.steps} steps on {world} ranks, YALI matched NCCL at every step, "
              "weights identical on every rank", flush=True)

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
    if world < 2 or world > torch.cuda.device_count():
        print(f"need 2..{torch.cuda.device_count()} ranks (one GPU each), got {world}", file=sys.stderr)
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
