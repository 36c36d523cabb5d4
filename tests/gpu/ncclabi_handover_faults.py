"""An abort or revoke of a non-blocking parent while libyali-nccl hands its split child over, on a
GPU (issue 20; docs/NCCL_ABI.md, "Communicators": a non-blocking parent's splits and shrinks).

A non-blocking parent's ncclCommSplit returns at once; NCCL makes the child in its background, and
a thread of libyali-nccl's waits for NCCL's verdict, sets the child up (rounds with the peers) and
only then writes the handle into the program's pointer, the parent saying ncclInProgress until
then. What an abort or revoke of the parent in that window does was host-tested only (fake NCCL;
host tests an_abort_of_a_non_blocking_parent_during_its_childs_hand_over_..., a_revoke_of_...,
two_parents_of_one_hand_over_aborted_from_two_threads_...). Here it runs on the real NCCL.

Two modes (the first argument); NCCL calls go through ctypes to the preloaded library
(ncclabi_hier_faults.py's helpers); every call that could wait runs on a thread with a limit.

"ranks": under mpirun, 2 ranks on GPU 0 (NCCL_HOSTID per rank, YALI_ALLOW_SHARED_GPU=1), with
NCCL_COMM_BLOCKING=0 (every comm non-blocking; a split's NULL config copies its parent's),
YALI_TIMEOUT_MS=3000, and YALI_NCCL_TEST_SETUP_DELAY=1:records:2000 (rank 1 sleeps 2 s before each
set-up's first round, so that rank 0's set-up of the child waits for it in that round). When the
stops come: HANDOVER_STOP_POINTS, seconds after the split returned (gpu_check.sh's default "0.5":
inside the hand-over's rounds; "0": at once, most likely while NCCL still makes the child in its
background, see "At once" below). Cases (HANDOVER_CASES selects):
  1. sanity: non-blocking parent, split, the parent polled until ready; the child is written, says
     ncclSuccess, and an AllReduce on it is exact.
  2. rank 0 aborts its parent after its split returned; rank 1 polls its own.
  3. the same with ncclCommRevoke (flags 0) of rank 0's parent, then a poll of it until NCCL says it
     is quiescent (no longer ncclInProgress).
  4. both ranks abort their parents after their splits returned.
  5. a fresh parent and child after all that: exact (a program whose watchdog aborted goes on).
In 2-4, checked: every abort and revoke returns within ABORT_LIMIT_S; a rank that does not stop its
parent sees it leave ncclInProgress within POLL_LIMIT_S (its peer's rounds never come: they end at
YALI_TIMEOUT_MS), where the stop came after the split's NCCL part; each child the program got (its
pointer non-NULL) says ncclSuccess (0) or ncclRemoteError (6), nothing else and never ncclInProgress
for good; where every rank's child says 0, an AllReduce on them is exact (the stop came after the
hand-over); then every child and parent still held is aborted within ABORT_LIMIT_S and the stream
drains. A mix (one child 0, its peer's 6) is printed, not judged (below).

At once (HANDOVER_STOP_POINTS=0; Session 34 on 2 H200s, PERF.md): the stop may end the stopping
rank's part of NCCL's own job making the child. The peer's parent may then stay ncclInProgress
until the stopping rank aborts its child or the peer aborts its parent: accepted here after
POLL_AT_ONCE_S (NCCL alone did the same after a revoke at once, mode "plain"; after an abort at once
it reported ncclRemoteError within 1 s). A peer whose NCCL child init failed gets an NCCL-only child
that says 0, as NCCL alone says (NCCL never sets a child's own state; its calls fail): the mix
above. The revoking rank's process twice ended in glibc heap corruption after case 3 at once (2 of
5 runs; not in 1 run on NCCL alone, nor in any run with the stop at 0.5 s): by NCCL 2.28.9's code,
NCCL's own use-after-free of the revoked comm's group job (NVIDIA/nccl pull request 2251), which the
split's job, still linked to the parent at a revoke at once, exposes; so stops at once are not in
gpu_check.sh's default.

"plain" (gpu_check.sh, NCCLABI_HANDOVER_PLAIN=1): mode "ranks" with HANDOVER_PLAIN_NCCL=1 on NCCL
alone (NCCL's own library preloaded, no libyali-nccl), stops at once: what NCCL itself does,
printed as "observed", not judged (case 2 at once crashed NCCL 2.28.9 there: a child NCCL wrote
after its peer's abort said 0, and an AllReduce on it returned ncclInvalidArgument, then NCCL's
thread died of an integer division by zero).

"threads": one process driving 2 GPUs (mpirun -np 1; NCCL refuses two ranks of one GPU in one
process), both parents made in one group and both split in one group, so that one hand-over holds
two parents; then both parents are aborted at once from two threads (the race the host test
two_parents_of_one_hand_over_aborted_from_two_threads_both_hand_their_children_over guards), with
YALI_NCCL_TEST_SETUP_DELAY=1:records:2000 too (the one thread that sets both ranks up sleeps 2 s
before the records round, so that the aborts land inside the hand-over).
Checked as above, and then a fresh pair is exact. Skipped on fewer than 2 GPUs.

Prints "[rank R] case N (...): ok (details)" or ": FAIL why (details)", and "PASS"/"FAIL" last;
exits 1 on any FAIL.
"""

import ctypes
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncclabi_hier_faults import UniqueId, must_end, nccl, rank, nranks, say, world  # noqa: E402

NCCL_FLOAT32, NCCL_SUM = 7, 0
NCCL_SUCCESS, NCCL_REMOTE_ERROR, NCCL_IN_PROGRESS = 0, 6, 7
COUNT = (1 << 20) + 3
# How long after its split a rank stops its parent: at once (NCCL still making the child in its
# background: the abort joins that job) and 0.5 s later (inside the set-up's first round, which waits
# for rank 1, 2 s late). Each of cases 2-4 and 6 runs once per point.
STOP_POINTS_S = tuple(float(x) for x in os.environ.get("HANDOVER_STOP_POINTS", "0 0.5").split())
# HANDOVER_PLAIN_NCCL=1: the same calls on NCCL alone (LD_PRELOAD of NCCL's own library, no
# libyali-nccl; gpu_check.sh's mode "plain"): what NCCL itself does, printed as "observed", never
# judged (cases 2-4 only: the reference for what the shim may and may not do).
PLAIN = os.environ.get("HANDOVER_PLAIN_NCCL") == "1"
# HANDOVER_CASES="2 3": only those cases (default: all of the mode's).
CASES = {int(x) for x in os.environ.get("HANDOVER_CASES", "1 2 3 4 5 6 7").split()}
ABORT_LIMIT_S = 20.0     # ncclCommAbort, ncclCommRevoke
POLL_LIMIT_S = 25.0      # a parent or comm leaving ncclInProgress (a set-up with a peer 2 s late, then
                         # rounds that time out: about 11 s)
POLL_AT_ONCE_S = 8.0     # the same for the peer of a rank that stopped its parent at once (see below)
DRAIN_LIMIT_S = 30.0     # torch.cuda.synchronize


def state_of(comm):
    err = ctypes.c_int(-1)
    r = nccl.ncclCommGetAsyncError(comm, ctypes.byref(err))
    return err.value if r == NCCL_SUCCESS else -100 - r


def poll(comm, limit=POLL_LIMIT_S):
    """Polls ncclCommGetAsyncError until it leaves ncclInProgress: (state, seconds)."""
    start = time.monotonic()
    while True:
        s = state_of(comm)
        if s != NCCL_IN_PROGRESS or time.monotonic() - start > limit:
            return s, time.monotonic() - start
        time.sleep(0.002)


def init_parents(case, devices, uid_bytes, nranks_total, first_rank):
    """Non-blocking ncclCommInitRank for each device of this process, in one group; polled ready."""
    import torch

    uid = UniqueId()
    ctypes.memmove(ctypes.byref(uid), uid_bytes, 128)
    comms = [ctypes.c_void_p() for _ in devices]
    nccl.ncclGroupStart()
    for i, d in enumerate(devices):
        torch.cuda.set_device(d)
        nccl.ncclCommInitRank(ctypes.byref(comms[i]), nranks_total, uid, first_rank + i)
    r = nccl.ncclGroupEnd()
    if r not in (NCCL_SUCCESS, NCCL_IN_PROGRESS):
        say(f"case {case}: FAIL the parents' group returned {r}")
        os._exit(1)
    for c in comms:
        s, _ = poll(c)
        if s != NCCL_SUCCESS:
            say(f"case {case}: FAIL a parent's init ended with {s}")
            os._exit(1)
    return comms


def split_all(parents):
    """ncclCommSplit of every parent (color 0, key 0: NCCL keeps the parent's order), in one group:
    (children, the group's result)."""
    children = [ctypes.c_void_p() for _ in parents]
    nccl.ncclGroupStart()
    for p, c in zip(parents, children):
        nccl.ncclCommSplit(p, 0, 0, ctypes.byref(c), None)
    return children, nccl.ncclGroupEnd()


class Sums:
    """Inputs, poisoned outputs and the exact sum for one AllReduce per device of this process."""

    def __init__(self, devices, ranks_before, nranks_total):
        import torch

        base = torch.arange(COUNT, dtype=torch.float32) % 89 + 1
        self.want = base * sum(r + 1 for r in range(nranks_total))
        self.sends, self.recvs, self.streams = [], [], []
        for i, d in enumerate(devices):
            with torch.cuda.device(d):
                self.sends.append((base * (ranks_before + i + 1)).to(d))
                self.recvs.append(torch.full((COUNT,), -1.0, device=d))
                self.streams.append(torch.cuda.current_stream(d))

    def run(self, case, comms):
        """One AllReduce per comm in one group, then checked: its problems (a list)."""
        import torch

        def group():  # one thread from start to end: NCCL's group state is the calling thread's
            nccl.ncclGroupStart()
            for i, c in enumerate(comms):
                nccl.ncclAllReduce(ctypes.c_void_p(self.sends[i].data_ptr()), ctypes.c_void_p(self.recvs[i].data_ptr()),
                                   ctypes.c_size_t(COUNT), NCCL_FLOAT32, NCCL_SUM, c,
                                   ctypes.c_void_p(self.streams[i].cuda_stream))
            return nccl.ncclGroupEnd()

        r, _ = must_end(case, "the AllReduce group", group, DRAIN_LIMIT_S)
        problems = [] if r in (NCCL_SUCCESS, NCCL_IN_PROGRESS) else [f"the AllReduce group returned {r}"]
        for i, c in enumerate(comms):
            s, _ = poll(c, DRAIN_LIMIT_S)
            if s != NCCL_SUCCESS:
                problems.append(f"comm {i} says {s} after its AllReduce")
            must_end(case, "torch.cuda.synchronize", lambda: torch.cuda.synchronize(self.streams[i].device),
                     DRAIN_LIMIT_S)
            wrong = int((self.recvs[i].cpu() != self.want).sum())
            if wrong:
                problems.append(f"comm {i}: {wrong} of {COUNT} elements wrong")
        return problems


def stop(case, how, comm):
    """Aborts or revokes comm, bounded: its details (a string)."""
    if how == "abort":
        r, secs = must_end(case, "ncclCommAbort of the parent", lambda: nccl.ncclCommAbort(comm), ABORT_LIMIT_S)
        return f"abort {r} in {secs:.2f} s"
    r, secs = must_end(case, "ncclCommRevoke of the parent", lambda: nccl.ncclCommRevoke(comm, 0), ABORT_LIMIT_S)
    s, quiet = poll(comm, ABORT_LIMIT_S)
    return f"revoke {r} in {secs:.2f} s, then the parent said {s} after {quiet:.2f} s"


def stop_during_hand_over(case, title, devices, uid_bytes, ntotal, first, stoppers, how, gather, after_s):
    """Cases 2-4 and the threads case: split, stop the parents of `stoppers` (indices into devices)
    after_s later (from one thread each), poll the others; check, clean up."""
    import torch

    if case not in CASES:
        return 0

    parents = init_parents(case, devices, uid_bytes, ntotal, first)
    sums = Sums(devices, first, ntotal)
    children, split = split_all(parents)
    details, problems = [f"split group {split}"], []
    time.sleep(after_s)
    results = {}

    def stop_one(i):
        results[i] = stop(case, how, parents[i])

    threads = [threading.Thread(target=stop_one, args=(i,)) for i in stoppers]
    for t in threads:
        t.start()
    for i, p in enumerate(parents):
        if i not in stoppers:
            s, secs = poll(p, POLL_LIMIT_S if after_s > 0 else POLL_AT_ONCE_S)
            details.append(f"parent {i} said {s} after {secs:.2f} s")
            # A stop at once can end the peer's part of NCCL's own job making the child, and then
            # this parent may stay in progress until the peer aborts its child or this rank aborts
            # it (below, bounded), as NCCL alone left one after a revoke at once ("At once" above).
            # A later stop finds NCCL's job done: the shim's rounds are bounded, so the parent must
            # leave ncclInProgress.
            if s == NCCL_IN_PROGRESS and after_s > 0:
                problems.append(f"parent {i} still in progress after {POLL_LIMIT_S:.0f} s")
    for t in threads:
        t.join()
    details += [f"parent {i}: {results[i]}" for i in sorted(results)]
    states = [state_of(c) if c.value else None for c in children]
    for i, c in enumerate(children):
        if c.value and states[i] == NCCL_IN_PROGRESS:
            states[i], _ = poll(c)
    details.append("children " + ", ".join("NULL" if s is None else str(s) for s in states))
    for i, s in enumerate(states):
        if s is not None and s not in (NCCL_SUCCESS, NCCL_REMOTE_ERROR):
            problems.append(f"child {i} says {s} (0 or 6 expected)")
    everywhere = gather(states)
    if all(s == NCCL_SUCCESS for s in everywhere):
        problems += sums.run(case, children)
        details.append("every child said 0: AllReduce checked")
    elif any(s == NCCL_SUCCESS for s in everywhere):
        details.append(f"mixed: children {everywhere} across the job")
    for i, c in enumerate(children):
        if c.value:
            must_end(case, f"ncclCommAbort of child {i}", lambda: nccl.ncclCommAbort(c), ABORT_LIMIT_S)
    for i, p in enumerate(parents):
        if not (how == "abort" and i in stoppers):
            must_end(case, f"ncclCommAbort of parent {i}", lambda: nccl.ncclCommAbort(p), ABORT_LIMIT_S)
    for d in devices:
        _, secs = must_end(case, "torch.cuda.synchronize after the aborts", lambda: torch.cuda.synchronize(d),
                           DRAIN_LIMIT_S)
        details.append(f"device {d} drained {secs:.2f} s after them")
    if PLAIN:
        say(f"case {case} ({title}, {after_s:.1f} s after the split), NCCL alone: observed " +
            "; ".join(details + problems))
        return 0
    say(f"case {case} ({title}, {after_s:.1f} s after the split): " +
        ("ok" if not problems else "FAIL " + "; ".join(problems)) + f" ({'; '.join(details)})")
    return 1 if problems else 0


def sanity(case, title, devices, uid_bytes, ntotal, first):
    if case not in CASES:
        return 0
    parents = init_parents(case, devices, uid_bytes, ntotal, first)
    sums = Sums(devices, first, ntotal)
    children, split = split_all(parents)
    problems = [] if split in (NCCL_SUCCESS, NCCL_IN_PROGRESS) else [f"split group returned {split}"]
    for i, p in enumerate(parents):
        s, secs = poll(p)
        if s != NCCL_SUCCESS:
            problems.append(f"parent {i} said {s} after its split")
        if not children[i].value:
            problems.append(f"child {i} not written once its parent said {s}")
    if not problems:
        problems += sums.run(case, children)
    for c in children + parents:
        if c.value:
            r, _ = must_end(case, "ncclCommDestroy", lambda: nccl.ncclCommDestroy(c), DRAIN_LIMIT_S)
            if r not in (NCCL_SUCCESS, NCCL_IN_PROGRESS):
                problems.append(f"ncclCommDestroy returned {r}")
    say(f"case {case} ({title}): " + ("ok" if not problems else "FAIL " + "; ".join(problems)))
    return 1 if problems else 0


def new_uid():
    uid = UniqueId()
    if rank == 0 and nccl.ncclGetUniqueId(ctypes.byref(uid)) != 0:
        say("FAIL ncclGetUniqueId")
        os._exit(1)
    return world.bcast(bytes(uid.internal) if rank == 0 else None, root=0)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "ranks"
    if os.environ.get("NCCL_COMM_BLOCKING") != "0":
        say("FAIL needs NCCL_COMM_BLOCKING=0 (every comm non-blocking)")
        return 1
    import torch

    failed = 0
    if mode == "ranks":
        if nranks != 2:
            say("FAIL mode ranks needs 2 ranks (mpirun -np 2)")
            return 1
        torch.cuda.set_device(0)

        def gather(states):
            return [s for per_rank in world.allgather(states) for s in per_rank]

        def barrier_then(fn, *args):
            world.Barrier()
            return fn(*args)

        if not PLAIN:
            failed += barrier_then(sanity, 1, "sanity: a non-blocking parent's child, exact", [0], new_uid(), 2, rank)
        for after_s in STOP_POINTS_S:
            failed += barrier_then(stop_during_hand_over, 2, "rank 0 aborts its parent during the hand-over", [0],
                                   new_uid(), 2, rank, [0] if rank == 0 else [], "abort", gather, after_s)
            failed += barrier_then(stop_during_hand_over, 3, "rank 0 revokes its parent during the hand-over", [0],
                                   new_uid(), 2, rank, [0] if rank == 0 else [], "revoke", gather, after_s)
            failed += barrier_then(stop_during_hand_over, 4, "both ranks abort their parents during the hand-over",
                                   [0], new_uid(), 2, rank, [0], "abort", gather, after_s)
        if not PLAIN:
            failed += barrier_then(sanity, 5, "a fresh parent and child after the stops, exact", [0], new_uid(), 2,
                                   rank)
        world.Barrier()
    elif mode == "threads":
        if torch.cuda.device_count() < 2:
            say(f"skipped: {torch.cuda.device_count()} GPU(s), 2 needed")
            return 0
        uid = new_uid
        for after_s in STOP_POINTS_S:
            failed += stop_during_hand_over(6, "one process, 2 GPUs: both parents of one hand-over aborted from two "
                                            "threads at once", [0, 1], uid(), 2, 0, [0, 1], "abort", lambda s: s,
                                            after_s)
        failed += sanity(7, "one process, 2 GPUs: a fresh pair after it, exact", [0, 1], uid(), 2, 0)
    else:
        say(f"FAIL unknown mode {mode!r} (ranks or threads)")
        return 1
    say("PASS" if failed == 0 else f"FAIL: {failed} case(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
