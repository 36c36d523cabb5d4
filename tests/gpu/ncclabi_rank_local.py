"""A refusal only one rank has, through libyali-nccl (issue 20; docs/NCCL_ABI.md, "What runs where").

Run under mpirun with libyali-nccl.so preloaded, every rank on GPU 0 with its own NCCL_HOSTID
(scripts/gpu_check.sh, stage ncclabi). NCCL calls go through ctypes to the preloaded library, so
buffers torch.distributed would refuse (pinned host memory, overlaps) reach it as a C program's
would. In each case (one per collective, and 9, the same inside ncclGroupStart/End; all ran on 2
H200s, last on 2026-11-30: 20 ok, 9 staged)
one rank passes a buffer libyali refuses for that rank alone and
its peers plain device buffers: every rank must still run the same library and get NCCL's answer, exactly
(integer-valued floats). Before the rule that stages such buffers, the refusing rank ran the call on
NCCL while its peer waited in YALI: the peer timed out and the refusing rank hung (this script's
outer `timeout` turns that into a failure).

Prints one line per case and rank, "ok" or "WRONG", and exits 1 on any wrong or failed call. Passing
values alone would not show that YALI ran (NCCL also gets them right): gpu_check.sh counts the
shim's "[staged through libyali-nccl's scratch]" lines (YALI_NCCL_DEBUG=1), one per case (9) from its
refusing rank, and the YALI lines of its peers.
"""

import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncclabi_mpi import world_comm  # noqa: E402

NCCL_FLOAT32, NCCL_SUM = 7, 0


def main():
    nccl, comm, world, rank, n = world_comm()
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    failures = 0

    def values(r, count):  # small integers: every sum is exact in fp32
        return (torch.arange(count, dtype=torch.float32) % 97 + 1) * (r + 1)

    def check(name, returned, got, want):
        nonlocal failures
        torch.cuda.synchronize()
        err = ctypes.c_int(0)
        nccl.ncclCommGetAsyncError(comm, ctypes.byref(err))
        ok = returned == 0 and err.value == 0 and torch.equal(got.cpu(), want)
        failures += 0 if ok else 1
        print(f"[rank {rank}] {name}: {'ok' if ok else 'WRONG'} (returned {returned}, async error {err.value})",
              flush=True)

    def host(t):  # pinned host memory: libyali refuses it (not device memory), NCCL takes it
        return t.pin_memory()

    # 1. AllReduce: rank 1's input and output in pinned host memory, rank 0's on the device.
    count = 1_000_003
    send = values(rank, count)
    send = host(send) if rank == 1 else send.cuda()
    recv = torch.full((count,), -1.0, pin_memory=True) if rank == 1 else torch.full((count,), -1.0, device="cuda")
    r = nccl.ncclAllReduce(ctypes.c_void_p(send.data_ptr()), ctypes.c_void_p(recv.data_ptr()), ctypes.c_size_t(count),
                           NCCL_FLOAT32, NCCL_SUM, comm, stream)
    check("AllReduce, rank 1 on pinned host memory", r, recv,
          sum(values(q, count) for q in range(n)))

    # 2. AllGather: rank 1's input overlaps its output but not in NCCL's in-place layout (it lies
    #    at block 0, not at block 1): libyali refuses the overlap on rank 1 alone.
    count = 4099
    recv = torch.full((n * count,), -1.0, device="cuda")
    if rank == 1:
        recv[:count] = values(rank, count).cuda()
        send_ptr = recv.data_ptr()
    else:
        send = values(rank, count).cuda()
        send_ptr = send.data_ptr()
    r = nccl.ncclAllGather(ctypes.c_void_p(send_ptr), ctypes.c_void_p(recv.data_ptr()), ctypes.c_size_t(count),
                           NCCL_FLOAT32, comm, stream)
    check("AllGather, rank 1's input overlapping its output out of place", r, recv,
          torch.cat([values(q, count) for q in range(n)]))

    # 3. Broadcast from rank 0, whose input is in pinned host memory; the others' outputs on the device.
    count = 65537
    send = host(values(7, count)) if rank == 0 else None
    recv = torch.full((count,), -1.0, device="cuda")
    r = nccl.ncclBroadcast(ctypes.c_void_p(send.data_ptr() if send is not None else 0),
                           ctypes.c_void_p(recv.data_ptr()), ctypes.c_size_t(count), NCCL_FLOAT32, 0, comm, stream)
    check("Broadcast, the root's input in pinned host memory", r, recv, values(7, count))

    def ptr(t):
        return ctypes.c_void_p(t.data_ptr() if t is not None else 0)

    def on(refuses, t):  # this rank's buffer: pinned host memory where it is the one that refuses
        return host(t) if refuses else t.cuda()

    # 4. ReduceScatter: rank 1's output in pinned host memory.
    rc = 3001
    send = values(rank, n * rc).cuda()
    recv = on(rank == 1, torch.full((rc,), -1.0))
    r = nccl.ncclReduceScatter(ptr(send), ptr(recv), ctypes.c_size_t(rc), NCCL_FLOAT32, NCCL_SUM, comm, stream)
    check("ReduceScatter, rank 1's output in pinned host memory", r, recv,
          sum(values(q, n * rc) for q in range(n))[rank * rc:(rank + 1) * rc])

    # 5. Reduce to root 1, whose input is in pinned host memory; the others pass no output.
    count, root = 65539, 1
    send = on(rank == root, values(rank, count))
    recv = torch.full((count,), -1.0, device="cuda") if rank == root else None
    r = nccl.ncclReduce(ptr(send), ptr(recv), ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, root, comm, stream)
    if rank == root:
        check("Reduce to root 1, the root's input in pinned host memory", r, recv,
              sum(values(q, count) for q in range(n)))
    else:
        check("Reduce to root 1 (a non-root: its call returns)", r, torch.zeros(1), torch.zeros(1))

    # 6. Gather to root 0, rank 1's input in pinned host memory.
    count, root = 1025, 0
    send = on(rank == 1, values(rank, count))
    recv = torch.full((n * count,), -1.0, device="cuda") if rank == root else None
    r = nccl.ncclGather(ptr(send), ptr(recv), ctypes.c_size_t(count), NCCL_FLOAT32, root, comm, stream)
    if rank == root:
        check("Gather to root 0, rank 1's input in pinned host memory", r, recv,
              torch.cat([values(q, count) for q in range(n)]))
    else:
        check("Gather to root 0 (a non-root: its call returns)", r, torch.zeros(1), torch.zeros(1))

    # 7. Scatter from root 1, whose input is in pinned host memory.
    count, root = 2049, 1
    data = values(5, n * count)
    send = on(True, data) if rank == root else None
    recv = torch.full((count,), -1.0, device="cuda")
    r = nccl.ncclScatter(ptr(send), ptr(recv), ctypes.c_size_t(count), NCCL_FLOAT32, root, comm, stream)
    check("Scatter from root 1, the root's input in pinned host memory", r, recv,
          data[rank * count:(rank + 1) * count])

    # 8. AlltoAll, rank 1 in place (AlltoAll has no in-place form in YALI), the others out of place.
    count = 777
    mine = torch.cat([values(rank * n + d, count) for d in range(n)])  # block d goes to rank d
    if rank == 1:
        recv = mine.cuda()
        send = recv
    else:
        send = mine.cuda()
        recv = torch.full((n * count,), -1.0, device="cuda")
    r = nccl.ncclAlltoAll(ptr(send), ptr(recv), ctypes.c_size_t(count), NCCL_FLOAT32, comm, stream)
    check("AlltoAll, rank 1 in place", r, recv, torch.cat([values(q * n + rank, count) for q in range(n)]))

    # 9. Inside ncclGroupStart/End: an AllReduce with rank 1's input and output in pinned host
    #    memory, grouped with an AllReduce every rank makes on device buffers. Rank 1's call is staged
    #    on memory of its own (cudaMallocAsync on the stream), its output copied back at the group's
    #    end after YALI's launch. Before, it went to NCCL alone inside a group while its peers waited
    #    in YALI. (Its own size class, so that its staged line is logged apart from case 1's.)
    count, other = 12289, 3001
    send = on(rank == 1, values(rank, count))
    recv = on(rank == 1, torch.full((count,), -1.0))
    other_send = values(rank + 3, other).cuda()
    other_recv = torch.full((other,), -1.0, device="cuda")
    assert nccl.ncclGroupStart() == 0
    r = nccl.ncclAllReduce(ptr(send), ptr(recv), ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, comm, stream)
    r2 = nccl.ncclAllReduce(ptr(other_send), ptr(other_recv), ctypes.c_size_t(other), NCCL_FLOAT32, NCCL_SUM, comm,
                            stream)
    end = nccl.ncclGroupEnd()
    check("AllReduce in a group, rank 1 on pinned host memory", r or end, recv,
          sum(values(q, count) for q in range(n)))
    check("AllReduce in the same group, on device buffers", r2 or end, other_recv,
          sum(values(q + 3, other) for q in range(n)))

    torch.cuda.synchronize()
    nccl.ncclCommDestroy(comm)
    world.Barrier()
    print(f"[rank {rank}] {'PASS' if failures == 0 else 'FAIL'}: {failures} wrong or failed", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
