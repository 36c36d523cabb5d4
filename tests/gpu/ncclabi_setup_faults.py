"""A peer late for one of libyali-nccl's set-up rounds, on a GPU (issue 20; docs/NCCL_ABI.md,
"Per-rank gates answer "no"" and "What the bound does not cover").

Run under mpirun with libyali-nccl.so preloaded, 2 ranks on GPU 0, each with its own NCCL_HOSTID,
YALI_TIMEOUT_MS small (2000) and YALI_NCCL_TEST_SETUP_DELAY=1:<round>:<ms> with ms above it (the
testing hook of src/nccl_abi/env.h: rank 1 sleeps before it issues that round); the round's name is
this script's argument (records, id or agreement). scripts/gpu_check.sh, stage ncclabi,
NCCLABI_SETUP_FAULTS=1, runs it once per round. NCCL calls go through ctypes to the preloaded
library (ncclabi_hier_faults.py's helpers).

What happens is what the code review of Session 30 could only reason about (NCCL's own behaviour
decides part of it: its connection at a comm's first collective, NCCL_RUNTIME_CONNECT, may block a
round's group end until the late peer comes). Checked:
  1. every rank's ncclCommInitRank returns within LIMIT_S (no hang: the bound the docs claim for
     waits on the set-up's stream, plus the late rank's delay and one more round's timeout);
  2. the ranks agree: both ncclSuccess, or both an error, as the second argument expects ("success",
     "error"; "any": either) (a rank told success while its peer was
     told an error is the split Session 31 saw for the id round and the agreement, fixed since for a
     peer late by less than twice YALI_TIMEOUT_MS: with the 3 s delay against 2 s both rounds
     should now end ncclSuccess on both ranks, NCCL only after the id round, YALI after the
     agreement);
  3. ncclCommAbort returns within ABORT_LIMIT_S on every rank, and a destroy of the aborted handle
     then returns.
Printed: each rank's return code, seconds, and ncclCommGetAsyncError after the init.

Prints "[rank R] round <round>: ok (...)" or ": FAIL <why> (...)", exits 1 on FAIL.
"""

import ctypes
import os
import sys

from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncclabi_hier_faults import UniqueId, nccl, rank, nranks, say, timed  # noqa: E402

world = MPI.COMM_WORLD
ABORT_LIMIT_S = 5.0


def main():
    round_name = sys.argv[1] if len(sys.argv) > 1 else "?"
    # What both ranks are to return besides agreeing: "success", "error" or "any" (agreement only).
    expect = sys.argv[2] if len(sys.argv) > 2 else "any"
    timeout_s = int(os.environ.get("YALI_TIMEOUT_MS", "0") or 0) / 1000.0
    delay = os.environ.get("YALI_NCCL_TEST_SETUP_DELAY", "")
    parts = delay.split(":")
    if nranks != 2 or not 0 < timeout_s <= 10 or len(parts) != 3 or parts[1] != round_name:
        say(f"round {round_name}: FAIL needs 2 ranks, YALI_TIMEOUT_MS of at most 10000 (has "
            f"{timeout_s * 1000:.0f}) and YALI_NCCL_TEST_SETUP_DELAY=1:{round_name}:<ms> (has '{delay}')")
        sys.exit(1)
    delay_s = int(parts[2]) / 1000.0
    # The late rank's delay, then at most three timeouts (its own round's, and the agreement's,
    # which waits twice YALI_TIMEOUT_MS; or YALI's init, bounded by one, then the agreement, which
    # its peer's queued round completes), with a margin.
    limit_s = delay_s + 3 * timeout_s + 10.0

    import torch  # after the checks: the device only

    torch.cuda.set_device(0)
    uid = UniqueId()
    if rank == 0 and nccl.ncclGetUniqueId(ctypes.byref(uid)) != 0:
        say(f"round {round_name}: FAIL ncclGetUniqueId")
        sys.exit(1)
    raw = world.bcast(bytes(uid.internal) if rank == 0 else None, root=0)
    ctypes.memmove(ctypes.byref(uid), raw, 128)
    comm = ctypes.c_void_p()
    finished, code, error, secs = timed(lambda: nccl.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank),
                                        limit_s)
    problems, details = [], []
    if not finished:
        say(f"round {round_name}: FAIL ncclCommInitRank did not return within {limit_s:.0f} s "
            f"(the process cannot go on: ending it)")
        os._exit(1)
    if error is not None:
        problems.append(f"ncclCommInitRank raised {error!r}")
        code = -1
    details.append(f"init returned {code} in {secs:.2f} s")
    async_error = ctypes.c_int(-1)
    if comm.value:
        nccl.ncclCommGetAsyncError(comm, ctypes.byref(async_error))
        details.append(f"async error {async_error.value}")
    codes = world.allgather(code)
    if (codes[0] == 0) != (codes[1] == 0):
        problems.append(f"the ranks disagree: init returned {codes[0]} on rank 0, {codes[1]} on rank 1")
    elif expect == "success" and codes[0] != 0:
        problems.append(f"both ranks failed (init returned {codes[0]} and {codes[1]}): a peer late by less than "
                        f"twice YALI_TIMEOUT_MS is to end in ncclSuccess on both")
    elif expect == "error" and codes[0] == 0:
        problems.append("both ranks returned ncclSuccess where the late round leaves the peer out (an error expected)")
    if comm.value:
        finished, aborted, _, secs = timed(lambda: nccl.ncclCommAbort(comm), ABORT_LIMIT_S)
        if not finished:
            say(f"round {round_name}: FAIL ncclCommAbort did not return within {ABORT_LIMIT_S:.0f} s "
                f"({'; '.join(details)})")
            os._exit(1)
        details.append(f"abort returned {aborted} in {secs:.2f} s")
        finished, destroyed, _, _ = timed(lambda: nccl.ncclCommDestroy(comm), ABORT_LIMIT_S)
        details.append(f"destroy returned {destroyed}" if finished else "destroy did not return")
    text = f"round {round_name}: " + ("ok" if not problems else "FAIL " + "; ".join(problems))
    say(text + f" ({'; '.join(details)})")
    world.Barrier()
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
