"""Host tests of yali.torch's failure paths: PyTorch (a CPU build is enough), no GPU, no libyali (the
library is faked: conftest.FakeLib). Skipped without PyTorch >= 2.4.

    cd /work/main && PYTHONPATH=python python3 -m pytest tests/python/test_torch_host.py

What the GPU runs check for real (tests/python/test_torch_gpu.py, the faults sections), checked here
on the Python side alone: a comm's asynchronous error becomes the right YaliError subclass with the
library's message at every collective entry point and in check_async_error()/check(); the
single-process form launches on no GPU once any comm has failed; replay() checks around a graph.
"""

import types

import pytest

torch = pytest.importorskip("torch")

import yali  # noqa: E402

try:
    import yali.torch as yt
except ImportError as e:  # torch older than 2.4: yali.torch says so
    pytest.skip(str(e), allow_module_level=True)

_TIMEOUT_TEXT = "an earlier operation on this comm failed on the device: a wait for a peer timed out"


def _fake_comm(i=0, n=2, device=0):
    c = object.__new__(yali.Comm)
    c._handle = 0x1000 + i
    c._registrations = []
    c._rank, c._size, c._device = i, n, device
    return c


def _fake_single(n=2):
    """A SingleProcessCommunicator over n fake comms, all on cuda:0 (as with YALI_ALLOW_SHARED_GPU)."""
    sp = object.__new__(yt.SingleProcessCommunicator)
    sp.devices = [0] * n
    sp.comms = [_fake_comm(i, n) for i in range(n)]
    return sp


def _fake_communicator(monkeypatch, rank=0, n=2):
    comm = _fake_comm(rank, n)
    comm._handle = 0x2000 + rank  # apart from _fake_single's
    c = object.__new__(yt.Communicator)
    c._comm, c._handle = comm, comm.handle
    c.rank, c.world_size = rank, n
    c.device, c._device_index = torch.device("cuda", 0), 0
    monkeypatch.setitem(yt._LIVE, comm.handle, comm)
    return c


class _FakeCudaTensor:
    """What the custom operators' launch path reads of a CUDA tensor."""

    device = torch.device("cuda", 0)
    dtype = torch.float32

    def __init__(self, ptr=0x10000, n=16):
        self._ptr, self._n = ptr, n

    def is_contiguous(self):
        return True

    def numel(self):
        return self._n

    def data_ptr(self):
        return self._ptr


def _launches(fake_lib):
    return [c for c in fake_lib.calls if c[0] == "yaliAllReduce"]


def test_single_process_check_async_error(fake_lib):
    sp = _fake_single(3)
    assert sp.check_async_error() is None and sp.check() is None
    fake_lib.async_errors[sp.comms[1].handle] = (int(yali.Result.Timeout), _TIMEOUT_TEXT)
    for method in (sp.check_async_error, sp.check):
        with pytest.raises(yali.YaliTimeout) as info:
            method()
        e = info.value
        assert e.code == yali.Result.Timeout
        assert e.call == "SingleProcessCommunicator.check_async_error"
        assert e.detail == "rank 1 (cuda:0): yaliCommGetAsyncError: " + _TIMEOUT_TEXT, str(e)
    sp.comms = []  # closed
    with pytest.raises(yali.YaliInvalidUsage, match="closed"):
        sp.check_async_error()


def test_single_process_all_reduce_raises_before_launching(fake_lib):
    """Any failed comm stops the call before a launch on any GPU (a launch on a healthy comm whose
    peer failed would only wait for it), and before the tensors are even looked at."""
    sp = _fake_single(2)
    fake_lib.async_errors[sp.comms[1].handle] = (int(yali.Result.RemoteError), "a peer aborted")
    with pytest.raises(yali.YaliRemoteError) as info:
        sp.all_reduce([object(), object()])
    assert info.value.call == "SingleProcessCommunicator.all_reduce"
    assert "rank 1 (cuda:0): yaliCommGetAsyncError: a peer aborted" in str(info.value)
    assert _launches(fake_lib) == []


def test_communicator_check_async_error(fake_lib, monkeypatch):
    c = _fake_communicator(monkeypatch)
    assert c.check_async_error() is None and c.check() is None
    fake_lib.comm_errors[c.handle] = "yaliCommRegister: an old, unrelated failure"
    fake_lib.async_errors[c.handle] = (int(yali.Result.InvalidUsage), "ranks disagree")
    for method in (c.check_async_error, c.check):
        with pytest.raises(yali.YaliInvalidUsage) as info:
            method()
        assert info.value.detail == "yaliCommGetAsyncError: ranks disagree", str(info.value)


def test_custom_op_launch_path_raises_the_async_error(fake_lib, monkeypatch):
    """The launch function behind torch.ops.yali.all_reduce_/_out/all_reduce: yaliAllReduce returns
    the comm's asynchronous error; the op raises its subclass with yaliAllReduce's own message."""
    c = _fake_communicator(monkeypatch)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: types.SimpleNamespace(cuda_stream=0))
    t, out = _FakeCudaTensor(), _FakeCudaTensor(0x20000)
    yt._launch_all_reduce("yali::all_reduce_", c.handle, t, t, 0)  # healthy: launched
    assert len(_launches(fake_lib)) == 1
    fake_lib.comm_errors[c.handle] = "yaliCommRegister: an old, unrelated failure"
    fake_lib.record_on_comm = False  # the comm's record keeps the old text
    fake_lib.async_errors[c.handle] = (int(yali.Result.Timeout), _TIMEOUT_TEXT)
    for opname, dst in (("yali::all_reduce_", t), ("yali::all_reduce_out", out),
                        ("yali::all_reduce", out)):
        with pytest.raises(yali.YaliTimeout) as info:
            yt._launch_all_reduce(opname, c.handle, t, dst, 0)
        e = info.value
        assert e.call == "yaliAllReduce" and e.detail == "yaliAllReduce: " + _TIMEOUT_TEXT, str(e)


class _FakeGraph:
    def __init__(self, on_replay=None):
        self.replays = 0
        self.on_replay = on_replay

    def replay(self):
        self.replays += 1
        if self.on_replay:
            self.on_replay()


def test_replay_checks_around_the_graph(fake_lib, monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    c = _fake_communicator(monkeypatch)
    sp = _fake_single(2)
    g = _FakeGraph()
    yt.replay(g, c, sp)
    assert g.replays == 1 and synced == []
    yt.replay(g, c, sp, synchronize=True)
    assert g.replays == 2 and synced == [0]  # every comm is on cuda:0: one synchronize

    # A failure during the replay: raised once the replay has finished.
    def fail():
        fake_lib.async_errors[sp.comms[0].handle] = (int(yali.Result.Timeout), _TIMEOUT_TEXT)

    g = _FakeGraph(fail)
    with pytest.raises(yali.YaliTimeout, match="rank 0"):
        yt.replay(g, c, sp, synchronize=True)
    assert g.replays == 1
    # A failure of earlier work: raised before replaying.
    with pytest.raises(yali.YaliTimeout):
        yt.replay(g, sp)
    assert g.replays == 1
    with pytest.raises(TypeError, match="communicators"):
        yt.replay(g)


def test_single_process_abort_goes_on_after_an_error(monkeypatch):
    """abort() is the way out of a failure: one comm's refusal must not leave the others alive."""
    aborted = []

    def comm_abort(handle):
        aborted.append(handle)
        if handle == 0x1000:
            raise yali._capi._make_error(int(yali.Result.Timeout), "yaliCommAbort", "", "refused")

    monkeypatch.setattr(yali._capi, "comm_abort", comm_abort)
    sp = _fake_single(3)
    with pytest.raises(yali.YaliTimeout, match="refused"):
        sp.abort()
    assert aborted == [0x1000, 0x1001, 0x1002] and sp.closed
    sp.abort()  # idempotent
    assert len(aborted) == 3
