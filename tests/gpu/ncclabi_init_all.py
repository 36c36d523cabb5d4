"""ncclCommInitAll through libyali-nccl, blocking and non-blocking (issue 20; docs/NCCL_ABI.md).

Run in one process with libyali-nccl.so preloaded (LD_PRELOAD) and NCCL_COMM_BLOCKING=0 or 1 in the
environment, on a machine with 2 GPUs or more (NCCL refuses two ranks of one GPU in one process).
NCCL calls go through ctypes to the preloaded library, as a C program's would: ncclCommInitAll for
NDEV devices (argv[1], default 2), a poll of every comm's ncclCommGetAsyncError until it leaves
ncclInProgress (a non-blocking comm; NCCL requires it before any use), then one AllReduce per comm
in a group, checked exactly (integer-valued floats), then destroy. Prints one line per device,
"ok" or "WRONG", and exits 1 on any. Whether YALI ran is in the shim's log (YALI_NCCL_DEBUG=1):
"ncclAllReduce ... YALI" lines, and for NCCL_COMM_BLOCKING=0 the "a non-blocking ncclCommInitAll:
set up in the background" lines.
"""

import ctypes
import os
import sys
import time

import torch

NCCL_FLOAT32, NCCL_SUM, NCCL_IN_PROGRESS = 7, 0, 7


def main():
    ndev = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    if torch.cuda.device_count() < ndev:
        print(f"skipped: {torch.cuda.device_count()} GPUs, {ndev} needed")
        return 0
    nccl = ctypes.CDLL(None)  # the process's symbols: the preloaded libyali-nccl's first
    comms = (ctypes.c_void_p * ndev)()
    devlist = (ctypes.c_int * ndev)(*range(ndev))
    r = nccl.ncclCommInitAll(comms, ndev, devlist)
    blocking = os.environ.get("NCCL_COMM_BLOCKING", "1") != "0"
    print(f"ncclCommInitAll returned {r} (NCCL_COMM_BLOCKING={'1' if blocking else '0'})", flush=True)
    if r not in (0, NCCL_IN_PROGRESS):
        return 1
    deadline = time.time() + 120
    for d in range(ndev):  # NCCL requires this poll of a non-blocking comm before any use
        state = ctypes.c_int(NCCL_IN_PROGRESS)
        while True:
            assert nccl.ncclCommGetAsyncError(ctypes.c_void_p(comms[d]), ctypes.byref(state)) == 0
            if state.value != NCCL_IN_PROGRESS or time.time() > deadline:
                break
            time.sleep(0.001)
        if state.value != 0:
            print(f"[device {d}] WRONG: ncclCommGetAsyncError says {state.value}", flush=True)
            return 1
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
        assert r == 0, f"ncclAllReduce on device {d} returned {r}"
    r = nccl.ncclGroupEnd()
    assert r in (0, NCCL_IN_PROGRESS), f"ncclGroupEnd returned {r}"
    for d in range(ndev):  # a non-blocking group may still be launching its calls
        state = ctypes.c_int(NCCL_IN_PROGRESS)
        while nccl.ncclCommGetAsyncError(ctypes.c_void_p(comms[d]), ctypes.byref(state)) == 0 and \
                state.value == NCCL_IN_PROGRESS and time.time() < deadline:
            time.sleep(0.001)
    want = (torch.arange(count, dtype=torch.float32) % 97 + 1) * sum(d + 1 for d in range(ndev))
    failures = 0
    for d in range(ndev):
        torch.cuda.synchronize(d)
        ok = torch.equal(recvs[d].cpu(), want)
        failures += 0 if ok else 1
        print(f"[device {d}] AllReduce of {count} floats: {'ok' if ok else 'WRONG'}", flush=True)
    for d in range(ndev):
        nccl.ncclCommDestroy(ctypes.c_void_p(comms[d]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
