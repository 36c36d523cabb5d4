"""Errors and aborts on libyali-nccl's hierarchical path, on a GPU (issue 20; docs/NCCL_ABI.md,
"Several nodes: the hierarchical path", and docs/ARCHITECTURE.md, "Failures across nodes").

Run under mpirun with libyali-nccl.so preloaded: N ranks as K simulated nodes of L = N / K (rank r
has YALI_NODE_ID=node<r/L> and NCCL_HOSTID of its own; K >= 2, L >= 2), every rank on GPU 0
(YALI_ALLOW_SHARED_GPU=1), a small YALI_TIMEOUT_MS (3000; scripts/gpu_check.sh, stage ncclabi,
NCCLABI_HIER_FAULTS=1, layouts NCCLABI_HIER_FAULTS_LAYOUTS="2x2 2x4 4x2"). NCCL calls go through
ctypes to the preloaded library, as in ncclabi_rank_local.py; torch only gives the device buffers
and the stream (one of torch's pool, non-blocking: nothing torch does on its own stream waits behind
a stuck collective). The layout (checked at the start): node k = ranks kL .. kL + L - 1, local rank
= r % L, the cross comms are {r' : r' % L = l} for each l. The text below names the ranks of the
first layout, 4 ranks as 2 nodes of 2 (node 0 = ranks 0, 1, node 1 = ranks 2, 3; cross comms {0, 2}
and {1, 3}); in general "rank 3" is the last rank V = N - 1 (the victim), "node 1" its node (the
last), "rank 2" its node peers, "node 0" and "ranks 0 and 1" every other node and rank: the whole
last node fails in case 3, so every local index has a failed rank and every other rank is a
cross-comm peer of one.

Every hierarchical call is one ncclAllReduce of COUNT = 2^20 + 1 fp32 elements, sum: any AllReduce of
at least L = 2 elements outside a group and a capture is hierarchical (routing.cc, decideHierRoute),
and the odd count gives the flat NCCL tail of one element too. The inputs are small integers, so
the exact sum is the only right answer. Every case makes a fresh comm (ncclCommInitRank, the id
broadcast by MPI) and makes one correct call on it first: NCCL 2.22 and newer set up their
connections at a comm's first collective that needs them (NCCL_RUNTIME_CONNECT), an exchange with
the peers on the host that could hold up a call whose peer never comes; the same call again needs
no new connection. Every collective call, synchronize, abort and destroy runs on a thread with a
time limit (`timed`); ncclCommInitRank and MPI's barriers are bounded by gpu_check.sh's `timeout` only.

Checked, each with the documentation it rests on:

1. Sanity: the hierarchical AllReduce returns 0, gives the exact sum on every rank, and leaves no
   asynchronous error; ncclCommDestroy returns 0 ("Every element is reduced once and copied";
   "ncclCommDestroy destroys all of them", reporting a failure only when one happened).

2. Abort while peers wait: ranks 0-2 make one hierarchical AllReduce that rank 3 never makes, and do
   not wait for it. Then (ABORT_AFTER_S later) every rank calls ncclCommAbort. By then rank 1's cross
   step (NCCL, on the split {1, 3}) waits for ever for rank 3, with its YALI AllGather and the call's
   flat tail (NCCL, on the comm) queued behind it; rank 2 waits in YALI's ReduceScatter for rank 3
   (until YALI_TIMEOUT_MS), then would wait for ever in the tail; rank 0 waits in its cross step for
   rank 2's, then in YALI's AllGather for rank 1 (bounded), then in the tail. Checked: the host call
   returns 0 on ranks 0-2 within ENQUEUE_LIMIT_S ("Both libraries enqueue on the caller's stream and
   neither waits there for the work to finish"); ncclCommAbort returns within ABORT_LIMIT_S on every
   rank ("ncclCommAbort/Revoke abort the YALI comm (at once), then both splits and the comm together,
   each split's abort on a thread of its own ...: one after the other could wait for ever"; "an abort
   must wait for no kernel"); after it the stream drains (torch.cuda.synchronize returns within
   DRAIN_LIMIT_S: only that comm's abort ends a stuck kernel, and every one was aborted); a destroy
   of the aborted handle returns 0 ("A destroy of the handle after the abort, which libyali-nccl
   accepts, frees it"). Then a fresh comm on all 4 ranks gives the exact sum again and destroys with
   0. That last part is the issue's requirement (a program whose watchdog aborted a comm goes on with
   a new one), not a sentence of the docs. The abort's return value is printed, not checked (the
   docs say nothing of it: it is NCCL's).

3. A YALI failure reaches every rank: (a) rank 3 makes the call LATE_S = 1.5 x YALI_TIMEOUT_MS
   after the others. Rank 2's YALI ReduceScatter times out (yaliTimeout), YALI tells rank 3's window,
   and rank 3's late launch fails at its admission with the same code ("every survivor fails within
   about one YALI_TIMEOUT_MS, and they all report the same code: a peer's timeout is yaliTimeout
   here too"). Every NCCL step is still made by every rank (rank 3 late, not absent), so nothing
   waits for ever: checked that every rank's stream drains within LATE_S + DRAIN_LIMIT_S. Then
   ncclCommGetAsyncError must report ncclRemoteError (6) on every rank, polled with a deadline:
   on ranks 2 and 3 from their node's YALI comm ("yaliTimeout (a peer never arrived, reported on
   every survivor) becomes ncclRemoteError"); on ranks 0 and 1 from the cross-node status, as the
   cross-comm peers of a rank whose YALI step failed before its cross step ("ncclCommGetAsyncError
   returns ncclRemoteError once either is nonzero"; "in the same call only the failed rank's
   cross-comm peers (same local index) learn it"; here both ranks of node 1 failed, so both ranks of
   node 0 are such peers). (b) All 4 ranks then make the call again, on time. Node 1's YALI comm has
   failed, so its first YALI step fails at the call: ranks 2 and 3 must return ncclRemoteError (YALI:
   "Host calls on a failed comm return its error"; NCCL_ABI.md: such a step "returns its error too,
   but only after the call's NCCL steps (the cross step with status 1, AllReduce's flat tail) were
   enqueued ..., so that no rank of another node waits for a step that never comes"), every rank's
   stream must drain within DRAIN_LIMIT_S, and ncclCommGetAsyncError must still be ncclRemoteError on
   every rank ("Both sources are sticky ... a later successful call or replay does not hide an
   earlier failure"). The case ends with ncclCommAbort on every rank (within ABORT_LIMIT_S) and a
   destroy of the aborted handle (0).

Printed, not checked (timing decides them, or the docs promise nothing): the return values of the
late call (3a) on every rank and of the second call (3b) on node 0 (0 while node 0's YALI comm is
healthy; with LATE_S = 1.5 x the timeout, rank 0's YALI AllGather, which waits for rank 1 behind
rank 1's cross step, should not time out, but if it did, node 0 fails too and returns the error);
which source ncclGetLastError names after the asynchronous error (the cross-node status on node 0,
YALI's own message on node 1, when node 0 stayed healthy); the outputs after a failure ("flagged,
not poisoned"). Not exercised: a rank that dies (case 2's rank 3 is alive and aborts; for a dead
one: "NCCL's waits are NCCL's own (libyali-nccl adds no bound: the program's watchdog and
ncclCommAbort end them)"), the one-call-late spread to a failed rank's node peers, a failure inside
a CUDA graph, ReduceScatter and AllGather.

Prints one line per case and rank, "[rank R] case N (...): ok (...)" or ": FAIL <why> (...)", then
"[rank R] PASS" or "[rank R] FAIL"; exits 1 on any FAIL. A wait that does not end within its limit
prints its case's FAIL line and ends the process at once (os._exit(1)): it cannot go on, and the
outer `timeout` of gpu_check.sh bounds whatever is left.
"""

import ctypes
import os
import sys
import threading
import time

import torch
from mpi4py import MPI

NCCL_FLOAT32, NCCL_SUM = 7, 0
NCCL_SUCCESS, NCCL_REMOTE_ERROR = 0, 6
COUNT = (1 << 20) + 1  # L * shard elements on the hierarchical steps, 1 on the flat tail
ENQUEUE_LIMIT_S = 10.0  # a host call that enqueues work
ABORT_LIMIT_S = 15.0    # ncclCommAbort
DRAIN_LIMIT_S = 30.0    # torch.cuda.synchronize once nothing waits for ever
ABORT_AFTER_S = 2.0     # case 2: how long ranks 0-2 wait before the aborts
POLL_LIMIT_S = 10.0     # ncclCommGetAsyncError, polled until it reports


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


world = MPI.COMM_WORLD
rank, nranks = world.Get_rank(), world.Get_size()
nccl = ctypes.CDLL(None)  # the process's symbols: the preloaded libyali-nccl's first
nccl.ncclGetLastError.restype = ctypes.c_char_p
nccl.ncclGetLastError.argtypes = [ctypes.c_void_p]


def say(line):
    print(f"[rank {rank}] {line}", flush=True)


def timed(fn, limit):
    """fn() on a thread of its own: (finished, value, exception, seconds); not finished after limit s."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (reported by the caller)
            box["error"] = e

    start = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    return not t.is_alive(), box.get("value"), box.get("error"), time.monotonic() - start


def give_up(case, why):
    say(f"case {case}: FAIL {why} (the process cannot go on: ending it)")
    os._exit(1)


def must_end(case, what, fn, limit):
    """fn()'s (value, seconds); gives up when it does not end within limit s or raises."""
    finished, value, error, secs = timed(fn, limit)
    if not finished:
        give_up(case, f"{what} did not return within {limit:.0f} s")
    if error is not None:
        give_up(case, f"{what} raised {error!r}")
    return value, secs


def new_comm(case):
    uid = UniqueId()
    if rank == 0:
        r = nccl.ncclGetUniqueId(ctypes.byref(uid))
        if r != 0:
            say(f"case {case}: ncclGetUniqueId returned {r}")
    raw = world.bcast(bytes(uid.internal) if rank == 0 else None, root=0)
    ctypes.memmove(ctypes.byref(uid), raw, 128)
    comm = ctypes.c_void_p()
    r = nccl.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank)
    if r != 0:
        give_up(case, f"ncclCommInitRank returned {r}")
    return comm


def values(r):  # small integers: every sum is exact in fp32
    return (torch.arange(COUNT, dtype=torch.float32) % 97 + 1) * (r + 1)


WANT = None    # the exact sum, made in main()
LOCAL = 0      # ranks per simulated node (L), from the YALI_NODE_ID of every rank, in main()
VICTIM = nranks - 1  # the rank that misses (case 2) or is late for (case 3) a call
STREAM = None  # the collectives' stream (torch's pool: non-blocking), made in main()


def buffers():
    """This rank's input and a poisoned output, ready for a call on STREAM (made on torch's stream)."""
    send = values(rank).cuda()
    recv = torch.full((COUNT,), -1.0, device="cuda")
    STREAM.wait_stream(torch.cuda.current_stream())
    return send, recv


def all_reduce(comm, send, recv):
    return nccl.ncclAllReduce(ctypes.c_void_p(send.data_ptr()), ctypes.c_void_p(recv.data_ptr()),
                              ctypes.c_size_t(COUNT), NCCL_FLOAT32, NCCL_SUM, comm,
                              ctypes.c_void_p(STREAM.cuda_stream))


def async_error(comm):
    err = ctypes.c_int(-1)
    r = nccl.ncclCommGetAsyncError(comm, ctypes.byref(err))
    return r, err.value


def poll_async_error(comm, want):
    """Polls until the asynchronous error is `want` (or the call fails) or POLL_LIMIT_S passed."""
    deadline = time.monotonic() + POLL_LIMIT_S
    while True:
        r, e = async_error(comm)
        if r != NCCL_SUCCESS or e == want or time.monotonic() > deadline:
            return r, e
        time.sleep(0.1)


def last_error(comm):
    text = nccl.ncclGetLastError(comm)
    text = text.decode(errors="replace") if text else ""
    return text if len(text) <= 260 else text[:257] + "..."


def exact_all_reduce(case, comm, what):
    """One hierarchical AllReduce that must give the exact sum: its problems (a list)."""
    problems = []
    send, recv = buffers()
    r, _ = must_end(case, f"{what}: ncclAllReduce", lambda: all_reduce(comm, send, recv), DRAIN_LIMIT_S)
    if r != NCCL_SUCCESS:
        problems.append(f"{what}: ncclAllReduce returned {r}")
    must_end(case, f"{what}: torch.cuda.synchronize", torch.cuda.synchronize, DRAIN_LIMIT_S)
    ar, e = async_error(comm)
    if ar != NCCL_SUCCESS or e != NCCL_SUCCESS:
        problems.append(f"{what}: ncclCommGetAsyncError returned {ar}, error {e} ('{last_error(comm)}')")
    wrong = int((recv.cpu() != WANT).sum())
    if wrong:
        problems.append(f"{what}: {wrong} of {COUNT} elements wrong")
    return problems


def destroy(case, comm, what):
    r, _ = must_end(case, f"{what}: ncclCommDestroy", lambda: nccl.ncclCommDestroy(comm), DRAIN_LIMIT_S)
    return [] if r == NCCL_SUCCESS else [f"{what}: ncclCommDestroy returned {r}"]


def abort(case, comm, details):
    r, secs = must_end(case, "ncclCommAbort", lambda: nccl.ncclCommAbort(comm), ABORT_LIMIT_S)
    details.append(f"abort returned {r} in {secs:.2f} s")


def report(case, title, problems, details):
    text = f"case {case} ({title}): " + ("ok" if not problems else "FAIL " + "; ".join(problems))
    say(text + (f" ({'; '.join(details)})" if details else ""))
    return 0 if not problems else 1


def case_sanity():
    comm = new_comm(1)
    problems = exact_all_reduce(1, comm, "AllReduce")
    problems += destroy(1, comm, "destroy")
    world.Barrier()
    return report(1, "hierarchical AllReduce, exact", problems, [])


def case_abort_while_peers_wait():
    comm = new_comm(2)
    problems = exact_all_reduce(2, comm, "first call")
    details = []
    world.Barrier()
    send, recv = buffers()
    if rank != VICTIM:  # the victim never makes this call; no rank waits for it
        finished, r, error, secs = timed(lambda: all_reduce(comm, send, recv), ENQUEUE_LIMIT_S)
        if not finished:
            problems.append(f"the unmatched ncclAllReduce still blocks its host thread after {ENQUEUE_LIMIT_S:.0f} s")
        elif error is not None or r != NCCL_SUCCESS:
            problems.append(f"the unmatched ncclAllReduce returned {r if error is None else repr(error)}")
    world.Barrier()
    time.sleep(ABORT_AFTER_S)
    abort(2, comm, details)
    _, secs = must_end(2, "torch.cuda.synchronize after the abort", torch.cuda.synchronize, DRAIN_LIMIT_S)
    details.append(f"stream drained {secs:.2f} s after it")
    problems += destroy(2, comm, "destroy after the abort")
    del send, recv
    world.Barrier()
    fresh = new_comm(2)
    problems += exact_all_reduce(2, fresh, "a fresh comm after the abort")
    problems += destroy(2, fresh, "the fresh comm's destroy")
    world.Barrier()
    return report(2, "abort while peers wait, then a fresh comm", problems, details)


def case_failure_reaches_every_rank(timeout_ms):
    late_s = 1.5 * timeout_ms / 1000.0
    comm = new_comm(3)
    problems = exact_all_reduce(3, comm, "first call")
    details = []
    send, recv = buffers()

    # (a) Rank 3 late by 1.5 x YALI_TIMEOUT_MS: node 1's YALI step times out.
    world.Barrier()
    if rank == VICTIM:
        time.sleep(late_s)
    r, _ = must_end(3, "the late call's ncclAllReduce", lambda: all_reduce(comm, send, recv), ENQUEUE_LIMIT_S)
    details.append(f"late call returned {r}")
    _, secs = must_end(3, "torch.cuda.synchronize after the late call", torch.cuda.synchronize,
                       late_s + DRAIN_LIMIT_S)
    details.append(f"drained in {secs:.2f} s")
    ar, e = poll_async_error(comm, NCCL_REMOTE_ERROR)
    if ar != NCCL_SUCCESS or e != NCCL_REMOTE_ERROR:
        problems.append(f"after the late call: ncclCommGetAsyncError returned {ar}, error {e} "
                        f"(want {NCCL_REMOTE_ERROR}, ncclRemoteError)")
    details.append(f"after it: async error {e}, '{last_error(comm)}'")

    # (b) Everyone on time: node 1's YALI comm has failed, so its step fails at the call.
    world.Barrier()
    r, _ = must_end(3, "the next call's ncclAllReduce", lambda: all_reduce(comm, send, recv), ENQUEUE_LIMIT_S)
    details.append(f"next call returned {r}")
    if rank >= nranks - LOCAL and r != NCCL_REMOTE_ERROR:
        problems.append(f"the next call returned {r} on the victim's node (want {NCCL_REMOTE_ERROR}, its YALI comm's "
                        f"yaliTimeout at the call)")
    _, secs = must_end(3, "torch.cuda.synchronize after the next call", torch.cuda.synchronize, DRAIN_LIMIT_S)
    details.append(f"drained in {secs:.2f} s")
    ar, e = poll_async_error(comm, NCCL_REMOTE_ERROR)
    if ar != NCCL_SUCCESS or e != NCCL_REMOTE_ERROR:
        problems.append(f"after the next call: ncclCommGetAsyncError returned {ar}, error {e} "
                        f"(want {NCCL_REMOTE_ERROR}: the error is sticky)")

    world.Barrier()
    abort(3, comm, details)
    problems += destroy(3, comm, "destroy after the abort")
    world.Barrier()
    return report(3, "a YALI failure reaches every rank as ncclRemoteError", problems, details)


def main():
    global WANT, STREAM, LOCAL
    torch.cuda.set_device(0)
    STREAM = torch.cuda.Stream()
    nodes = world.allgather(os.environ.get("YALI_NODE_ID", ""))
    LOCAL = nodes.count(nodes[0])
    timeout_ms = int(os.environ.get("YALI_TIMEOUT_MS", "0") or 0)
    layout_ok = (LOCAL >= 2 and nranks % LOCAL == 0 and nranks // LOCAL >= 2
                 and nodes == [f"node{r // LOCAL}" for r in range(nranks)])
    if not layout_ok or not 0 < timeout_ms <= 30000:
        say(f"case 0 (set-up): FAIL needs K >= 2 nodes of L >= 2 ranks, YALI_NODE_ID=node<r / L> "
            f"(has {nodes}), and YALI_TIMEOUT_MS of at most 30000 (has {timeout_ms})")
        sys.exit(1)
    say(f"layout: {nranks // LOCAL} simulated nodes of {LOCAL} ranks, victim rank {VICTIM}")
    WANT = sum(values(q) for q in range(nranks))
    failed = case_sanity()
    failed += case_abort_while_peers_wait()
    failed += case_failure_reaches_every_rank(timeout_ms)
    say("PASS" if failed == 0 else f"FAIL: {failed} of 3 cases")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
