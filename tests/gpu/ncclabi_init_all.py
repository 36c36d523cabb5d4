"""ncclCommInitAll through libyali-nccl, blocking and non-blocking (issue 20; docs/NCCL_ABI.md).

Run in one process with libyali-nccl.so preloaded (LD_PRELOAD) and NCCL_COMM_BLOCKING=0 or 1 in the
environment, on a machine with 2 GPUs or more (NCCL refuses two ranks of one GPU in one process).
NCCL calls go through ctypes to the preloaded library, as a C program's would: ncclCommInitAll for
NDEV devices (argv[1], default 2; argv[2] "group": the call inside ncclGroupStart/End, where NCCL's
call returns ncclSuccess and only the group's end ncclInProgress), a poll of every comm's
ncclCommGetAsyncError until it leaves ncclInProgress (a non-blocking comm; NCCL requires it before
any use), then one AllReduce per comm in a group, checked exactly (integer-valued floats); then a
split of every comm in a group (NULL config: the parent's blocking), each parent polled to
ncclSuccess, after which its child must be written, and one exact AllReduce per child; then destroy.
Prints one line per device and step, "ok" or "WRONG", and exits 1 on any. Whether YALI ran is in the shim's log (YALI_NCCL_DEBUG=1):
"ncclAllReduce ... YALI" lines, and for NCCL_COMM_BLOCKING=0 the "a non-blocking ncclCommInitAll:
set up in the background" lines.
"""

import ctypes
import os
import sys
import time

import torch

NCCL_FLOAT32, NCCL_SUM, NCCL_IN_PROGRESS = 7, 0, 7
nccl = ctypes.CDLL(None)  # the process's symbols: the preloaded libyali-nccl's first


def poll(comm, deadline):
    """ncclCommGetAsyncError until it leaves ncclInProgress (NCCL requires it of a non-blocking comm)."""
    state = ctypes.c_int(NCCL_IN_PROGRESS)
    while nccl.ncclCommGetAsyncError(ctypes.c_void_p(comm), ctypes.byref(state)) == 0 and \
            state.value == NCCL_IN_PROGRESS and time.time() < deadline:
        time.sleep(0.001)
    return state.value


def all_reduce_each(comms, what, deadline):
    """One exact AllReduce per comm, in one group: the number of devices WRONG."""
    ndev = len(comms)
    count = 1_000_003
    sends, recvs, streams = [], [], []
    for d in range(ndev):
        with torch.cuda.device(d):
            sends.append((torch.arange(count, dtype=torch.float32, device=d) % 97 + 1) * (d + 1))
            recvs.append(torch.full((count,), -1.0, device=d))
            streams.append(torch.cuda.current_stream(d))
    assert nccl.ncclGroupStart() == 0
    for d in range(ndev):
        r = nccl.ncclAllReduce(ctypes.c_void_p(sends[d].data_ptr()), ctypes.c_void_p(recvs[d].data_ptr()),
                               ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, ctypes.c_void_p(comms[d]),
                               ctypes.c_void_p(streams[d].cuda_stream))
        assert r == 0, f"{what}: ncclAllReduce on device {d} returned {r}"
    r = nccl.ncclGroupEnd()
    assert r in (0, NCCL_IN_PROGRESS), f"{what}: ncclGroupEnd returned {r}"
    for d in range(ndev):  # a non-blocking group may still be launching its calls
        poll(comms[d], deadline)
    want = (torch.arange(count, dtype=torch.float32) % 97 + 1) * sum(d + 1 for d in range(ndev))
    failures = 0
    for d in range(ndev):
        torch.cuda.synchronize(d)
        ok = torch.equal(recvs[d].cpu(), want)
        failures += 0 if ok else 1
        print(f"[device {d}] {what}: AllReduce of {count} floats: {'ok' if ok else 'WRONG'}", flush=True)
    return failures


def main():
    ndev = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    in_group = len(sys.argv) > 2 and sys.argv[2] == "group"
    if torch.cuda.device_count() < ndev:
        print(f"skipped: {torch.cuda.device_count()} GPUs, {ndev} needed")
        return 0
    comms = (ctypes.c_void_p * ndev)()
    devlist = (ctypes.c_int * ndev)(*range(ndev))
    if in_group:  # inside a group NCCL's call returns ncclSuccess, the group's end ncclInProgress
        assert nccl.ncclGroupStart() == 0
    r = nccl.ncclCommInitAll(comms, ndev, devlist)
    if in_group:
        end = nccl.ncclGroupEnd()
        print(f"ncclCommInitAll in a group returned {r}, the group's end {end}", flush=True)
        r = r if r != 0 else end
    blocking = os.environ.get("NCCL_COMM_BLOCKING", "1") != "0"
    print(f"ncclCommInitAll returned {r} (NCCL_COMM_BLOCKING={'1' if blocking else '0'})", flush=True)
    if r not in (0, NCCL_IN_PROGRESS):
        return 1
    deadline = time.time() + 120
    for d in range(ndev):
        state = poll(comms[d], deadline)
        if state != 0:
            print(f"[device {d}] WRONG: ncclCommGetAsyncError says {state}", flush=True)
            return 1
    failures = all_reduce_each(comms, "the clique", deadline)
    # Split every comm (color 0, NULL config: the parent's blocking), in one group: a parent that says
    # ncclSuccess has its child written (NCCL's rule for a non-blocking parent), then the children's
    # AllReduce. (A non-blocking clique made in a group lost its children before Session 34's fix.)
    kids = [ctypes.c_void_p() for _ in range(ndev)]
    assert nccl.ncclGroupStart() == 0
    for d in range(ndev):
        assert nccl.ncclCommSplit(ctypes.c_void_p(comms[d]), 0, d, ctypes.byref(kids[d]), None) in (0, NCCL_IN_PROGRESS)
    r = nccl.ncclGroupEnd()
    print(f"the split group returned {r}", flush=True)
    for d in range(ndev):
        state = poll(comms[d], deadline)
        if state != 0 or not kids[d].value:
            print(f"[device {d}] WRONG: after the split the parent says {state}, its child "
                  f"{'written' if kids[d].value else 'NULL'}", flush=True)
            failures += 1
    if all(k.value for k in kids):
        failures += all_reduce_each([k.value for k in kids], "the split children", deadline)
    for k in kids:
        if k.value:
            nccl.ncclCommDestroy(k)
    for d in range(ndev):
        nccl.ncclCommDestroy(ctypes.c_void_p(comms[d]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
