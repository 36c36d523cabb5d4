"""A group whose calls on several comms each rank makes in its own order, through libyali-nccl, on
comms that span simulated nodes (issue 20; docs/NCCL_ABI.md, "Several nodes", review finding (2)).

NCCL launches a group's comms in an order of its own (by a hash of each comm), so a program may make
a group's calls on two comms in a different order on each rank. The shim defers a hierarchical call
to the group's end and runs the deferred calls comm by comm in the order of a key every rank of a
comm shares (intercept.cc, runDeferredCallsOf). Here 4 ranks as 2 simulated nodes of 2 (YALI_NODE_ID)
hold two comms of all 4 ranks, A and B (both hierarchical: YALI inside each node, NCCL across), and C,
A split by node (one node: YALI). In one group on one stream, every rank makes an AllReduce on each,
in an order that depends on the rank; each round a different one. Every result must be exact, every
call and ncclCommGetAsyncError ncclSuccess. With YALI_NCCL_TEST_CALL_ORDER=1 the shim runs the
deferred calls in call order (as before session 42): ranks then queue A's and B's steps on the
stream in different orders and wait for each other until YALI_TIMEOUT_MS (the check must fail there,
or it proves nothing). With NCCL's own library preloaded (the reference) every round is ok.

With argv[2] = "p2p", each rank also sends its AllReduce input to the next rank and receives from
the previous one on A (NCCL's: point-to-point across nodes stays NCCL's), in the same group, the
comms in one order on every rank: even ranks before their AllReduce on A, odd ranks after it (NCCL keeps no order between a group's
collectives and its point-to-point calls). The shim runs a hierarchical comm's point-to-point calls
of a group after its other calls (since session 43; before, the even ranks' transfer went into
NCCL's part of the group and launched before the AllReduce, the odd ranks' after it).

Run under mpirun, every rank on GPU 0 with its own NCCL_HOSTID and YALI_NODE_ID=node(rank / 2)
(scripts/gpu_check.sh, stage ncclabi, NCCLABI_GROUP_ORDER=1). argv[1]: rounds (default 4). Prints
one line per round and rank, "ok" or "WRONG", and exits 1 on any.
"""

import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncclabi_mpi import new_comm, world_comm  # noqa: E402

NCCL_FLOAT32, NCCL_SUM = 7, 0
# Each round's order per rank, of the comms A, B, C: rank r takes ORDERS[round][r % 4].
ORDERS = [
    ["ABC", "CBA", "BAC", "CAB"],
    ["BCA", "ACB", "ABC", "CBA"],
    ["CAB", "ABC", "CBA", "BAC"],
    ["ACB", "BCA", "BAC", "ABC"],
]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    with_p2p = len(sys.argv) > 2 and sys.argv[2] == "p2p"
    nccl, comm_a, world, rank, n = world_comm()
    assert n == 4, "4 ranks: 2 simulated nodes of 2"
    comm_b = new_comm(nccl, world)  # B: a second comm of every rank, from its own unique id
    # C: A split by node (ranks 0-1 and 2-3).
    node = rank // 2
    comm_c = ctypes.c_void_p()
    assert nccl.ncclCommSplit(comm_a, node, rank, ctypes.byref(comm_c), None) == 0
    comms = {"A": (comm_a, range(n)), "B": (comm_b, range(n)), "C": (comm_c, range(2 * node, 2 * node + 2))}
    count = (1 << 20) + 3
    stream = torch.cuda.Stream()

    def values(q, salt):  # small integers: every sum is exact in fp32
        return (torch.arange(count, dtype=torch.float32, device="cuda") % 89 + 1 + salt) * (q + 1)

    failures = 0
    for i in range(rounds):
        # With p2p, the comms in one order on every rank: only the transfer's place differs.
        order = "ABC" if with_p2p else ORDERS[i % len(ORDERS)][rank % 4]
        bufs = {}
        for k, name in enumerate("ABC"):
            send = values(rank, k)
            recv = torch.full((count,), -1.0, device="cuda")
            want = sum(values(q, k) for q in comms[name][1])
            bufs[name] = (send, recv, want)
        torch.cuda.synchronize()
        world.Barrier()
        s = ctypes.c_void_p(stream.cuda_stream)
        ring_in = torch.full((count,), -1.0, device="cuda")

        def ring():  # on A: this rank's A input to the next rank, the previous rank's into ring_in
            send = bufs["A"][0]
            returned.append(nccl.ncclSend(ctypes.c_void_p(send.data_ptr()), ctypes.c_size_t(count), NCCL_FLOAT32,
                                          (rank + 1) % n, comm_a, s))
            returned.append(nccl.ncclRecv(ctypes.c_void_p(ring_in.data_ptr()), ctypes.c_size_t(count), NCCL_FLOAT32,
                                          (rank - 1) % n, comm_a, s))

        returned = [nccl.ncclGroupStart()]
        for name in order:
            send, recv, _ = bufs[name]
            if with_p2p and name == "A" and rank % 2 == 0:
                ring()
            returned.append(nccl.ncclAllReduce(ctypes.c_void_p(send.data_ptr()), ctypes.c_void_p(recv.data_ptr()),
                                               ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, comms[name][0], s))
            if with_p2p and name == "A" and rank % 2 == 1:
                ring()
        returned.append(nccl.ncclGroupEnd())
        stream.synchronize()
        errors = []
        for name in "ABC":
            err = ctypes.c_int(0)
            nccl.ncclCommGetAsyncError(comms[name][0], ctypes.byref(err))
            errors.append(err.value)
        exact = {name: torch.equal(bufs[name][1], bufs[name][2]) for name in "ABC"}
        if with_p2p:
            exact["ring"] = torch.equal(ring_in, values((rank - 1) % n, 0))
        ok = all(v == 0 for v in returned) and all(e == 0 for e in errors) and all(exact.values())
        failures += 0 if ok else 1
        print(f"[rank {rank}] round {i} order {order}{' +p2p' if with_p2p else ''}: {'ok' if ok else 'WRONG'} (returned {returned}, async errors "
              f"{errors}, exact {exact})", flush=True)
        if not ok:
            break  # the comms are in error: a later round proves nothing
    world.Barrier()
    for c in (comm_c, comm_b, comm_a):
        if failures:
            nccl.ncclCommAbort(c)
        else:
            nccl.ncclCommDestroy(c)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
