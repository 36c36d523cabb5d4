"""A group whose calls use two streams, through libyali-nccl (issue 20; docs/NCCL_ABI.md, "Streams").

NCCL treats such a group as if it were posted on every one of its streams: its work waits for what
each stream held, and each stream waits for its work (NCCL's guide, "Mixing multiple streams within
the same ncclGroupStart/End() group"). A program may rely on it. Here every rank, in one group on
one comm, makes an AllReduce on stream A (YALI's, through the shim) and a send and a receive in a
ring on stream B (NCCL's); its input was filled on B, behind a sleep, just before the group, and A
sleeps too, so that the AllReduce is still running when B goes on. After the group a copy of the
AllReduce's output is made on B. Both must be exact: the AllReduce must have waited for B's fill,
and B's copy for the AllReduce. Without the shim's join (YALI_NCCL_TEST_NO_STREAM_JOIN=1), YALI's
AllReduce reads the input before B fills it, and B copies the output before it is written.

Run under mpirun with libyali-nccl.so preloaded (or NCCL's own library, as the reference), every
rank on GPU 0 with its own NCCL_HOSTID (scripts/gpu_check.sh, stage ncclabi). NCCL calls go through
ctypes, as a C program's would. argv[1]: rounds (default 3). Prints one line per round and rank,
"ok" or "WRONG", and exits 1 on any.
"""

import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncclabi_mpi import world_comm  # noqa: E402

NCCL_FLOAT32, NCCL_INT32, NCCL_SUM = 7, 2, 0
SLEEP_CYCLES = 100_000_000  # about 50 ms at the H200's clock


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    nccl, comm, world, rank, n = world_comm()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    count = 4 * 1024 * 1024 + 3

    def values(q):  # small integers: every sum is exact in fp32
        return (torch.arange(count, dtype=torch.float32, device="cuda") % 97 + 1) * (q + 1)

    want = sum(values(q) for q in range(n))
    mine = values(rank)
    failures = 0
    for i in range(rounds):
        x = torch.full((count,), -1.0, device="cuda")
        y = torch.full((count,), -7.0, device="cuda")
        z = torch.full((count,), -9.0, device="cuda")
        ring_out = torch.full((16,), rank, dtype=torch.int32, device="cuda")
        ring_in = torch.full((16,), -1, dtype=torch.int32, device="cuda")
        torch.cuda.synchronize()
        world.Barrier()
        with torch.cuda.stream(b):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.copy_(mine)  # the AllReduce's input, filled on B
        with torch.cuda.stream(a):
            torch.cuda._sleep(SLEEP_CYCLES)
        sa, sb = ctypes.c_void_p(a.cuda_stream), ctypes.c_void_p(b.cuda_stream)
        returned = [nccl.ncclGroupStart()]
        returned.append(nccl.ncclAllReduce(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                                           ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, comm, sa))
        returned.append(nccl.ncclSend(ctypes.c_void_p(ring_out.data_ptr()), ctypes.c_size_t(16), NCCL_INT32,
                                      (rank + 1) % n, comm, sb))
        returned.append(nccl.ncclRecv(ctypes.c_void_p(ring_in.data_ptr()), ctypes.c_size_t(16), NCCL_INT32,
                                      (rank - 1) % n, comm, sb))
        returned.append(nccl.ncclGroupEnd())
        with torch.cuda.stream(b):
            z.copy_(y)  # after the group, on B: must see the AllReduce's output
        torch.cuda.synchronize()
        err = ctypes.c_int(0)
        nccl.ncclCommGetAsyncError(comm, ctypes.byref(err))
        input_seen = torch.equal(y, want)
        copy_seen = torch.equal(z, want)
        ring = torch.equal(ring_in.cpu(), torch.full((16,), (rank - 1) % n, dtype=torch.int32))
        ok = all(v == 0 for v in returned) and err.value == 0 and input_seen and copy_seen and ring
        failures += 0 if ok else 1
        print(f"[rank {rank}] round {i}: {'ok' if ok else 'WRONG'} (returned {returned}, async error {err.value}, "
              f"AllReduce saw B's input: {input_seen}, B's copy saw the AllReduce: {copy_seen}, ring: {ring})",
              flush=True)
    nccl.ncclCommDestroy(comm)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
