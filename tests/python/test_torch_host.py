"""Host tests of yali.torch: PyTorch (a CPU build is enough), no GPU, no libyali (the library is faked:
conftest.FakeLib). Skipped without PyTorch >= 2.4.

    cd /work/main && PYTHONPATH=python python3 -m pytest tests/python/test_torch_host.py

What the GPU runs check for real (tests/python/test_torch_gpu.py), checked here on the Python side
alone:
  - failures: a comm's asynchronous error becomes the right YaliError subclass with the library's
    message at every collective entry point and in check_async_error()/check(); the
    single-process form launches on no GPU once any comm has failed; replay() checks around a graph;
  - dtypes: DTYPES maps every torch dtype with an NCCL type to its yaliDataType_t; avg is refused
    for integers; bool and complex as torch.distributed's NCCL backend takes them (bool as uint8,
    sum as max, prod as min, avg refused; complex as its real view, sum and avg only);
  - every collective method (Communicator with fake CUDA tensors from FakeTensorMode, which run the
    operators' fake implementations; SingleProcessCommunicator against FakeLib): argument checks
    name the method and the argument, results have the right shapes, roots are translated as in
    torch.distributed, the list forms of gather/scatter;
  - the uneven exchange (all_to_all_single with split sizes, all_to_all_device_counts,
    expert_dispatch, expert_combine): any dtype, the checks made before any GPU work (count tensors'
    dtype, length and device, local_experts and align in yali.h's limits, row shapes), the counts,
    displacements and layouts that reach the C calls, and -1 kept in the offsets a failed count
    check leaves;
  - the operators' launch functions: what reaches each C call (counts, NULL off the root, root,
    op, dtype, stream);
  - torch.compile(fullgraph=True) traces every method (backends eager and aot_eager, on fake
    tensors: no kernel runs).
"""

import contextlib
import functools
import types
import warnings

import pytest

torch = pytest.importorskip("torch")

import yali  # noqa: E402
from conftest import COLLECTIVE_PARAMS  # noqa: E402

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

    def __init__(self, ptr=0x10000, n=16, shape=None):
        self._ptr, self._n = ptr, n
        self.shape = torch.Size((n,) if shape is None else shape)

    def is_contiguous(self):
        return True

    def is_conj(self):
        return False

    def is_neg(self):
        return False

    def numel(self):
        return self._n

    def data_ptr(self):
        return self._ptr


def _launches(fake_lib):
    return fake_lib.launches("yaliAllReduce")


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


def test_check_all_raises_any_live_comms_async_error(fake_lib, monkeypatch):
    """After work that never passes through YALI's host API (a replay of torch.compile's
    mode="reduce-overhead" graphs, a raw CUDAGraph.replay()), check_all() reads every live comm's
    asynchronous error (one host-memory read each) and raises the first, as the eager calls
    would."""
    monkeypatch.setattr(yt, "_LIVE", {})
    c = _fake_communicator(monkeypatch, rank=1, n=2)
    sp = _fake_single(3)
    for comm in sp.comms:
        monkeypatch.setitem(yt._LIVE, comm.handle, comm)
    assert yt.check_all() is None
    read = [call[1] for call in fake_lib.calls if call[0] == "yaliCommGetAsyncError"]
    assert read == [c.handle] + [comm.handle for comm in sp.comms]
    fake_lib.comm_errors[sp.comms[2].handle] = "yaliCommRegister: an old, unrelated failure"
    fake_lib.async_errors[sp.comms[2].handle] = (int(yali.Result.Timeout), _TIMEOUT_TEXT)
    with pytest.raises(yali.YaliTimeout) as info:
        yt.check_all()
    e = info.value
    assert e.code == yali.Result.Timeout and e.call == "yali.torch.check_all"
    assert e.detail == (f"comm {sp.comms[2].handle:#x} (rank 2 of 3, cuda:0): "
                        f"yaliCommGetAsyncError: {_TIMEOUT_TEXT}"), str(e)
    # A closed comm is no longer live: not read.
    monkeypatch.delitem(yt._LIVE, sp.comms[2].handle)
    del fake_lib.calls[:]
    assert yt.check_all() is None
    assert sp.comms[2].handle not in [call[1] for call in fake_lib.calls]


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


# ---- dtypes and ops ------------------------------------------------------------------------------

_NCCL_DTYPES = {"int8": "Int8", "uint8": "Uint8", "int32": "Int32", "int64": "Int64",
                "float16": "Float16", "bfloat16": "Bfloat16", "float32": "Float32",
                "float64": "Float64", "float8_e4m3fn": "Float8e4m3", "float8_e5m2": "Float8e5m2",
                "uint32": "Uint32", "uint64": "Uint64"}


def test_dtypes_cover_every_nccl_type():
    want = {getattr(torch, t): int(yali.DataType[d]) for t, d in _NCCL_DTYPES.items()
            if isinstance(getattr(torch, t, None), torch.dtype)}
    assert yt.DTYPES == want
    if hasattr(torch, "uint64"):  # every yaliDataType_t then has its torch dtype
        assert sorted(yt.DTYPES.values()) == list(range(int(yali.DataType.NumTypes)))
    # The torch-free layer names them the same way.
    for dtype, code in yt.DTYPES.items():
        assert yali.as_datatype(dtype) == code, dtype
    floating = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.float8_e4m3fn,
                torch.float8_e5m2}
    assert yt._FLOATING == floating
    for unsupported in (torch.bool, torch.complex64, torch.int16, torch.float8_e4m3fnuz):
        assert unsupported not in yt.DTYPES


def test_avg_only_for_floating_dtypes():
    for dtype in yt.DTYPES:
        if dtype in yt._FLOATING:
            yt._check_op_dtype("m", int(yali.RedOp.Avg), dtype)
        else:
            with pytest.raises(ValueError, match="avg is for floating dtypes") as info:
                yt._check_op_dtype("Communicator.reduce", int(yali.RedOp.Avg), dtype)
            assert "Communicator.reduce" in str(info.value) and str(dtype) in str(info.value)
        for op in ("sum", "prod", "max", "min"):
            yt._check_op_dtype("m", yt._op_code(op, "m"), dtype)


def test_ops_are_names_yali_redops_or_torch_reduce_ops_never_plain_ints(fake_lib):
    """torch.distributed and yali number the ops differently (int(ReduceOp.MAX) is 4, yali's Avg):
    a plain int could mean either, so the torch layer refuses it, naming the method."""
    R = torch.distributed.ReduceOp
    for op, code in (("max", 2), ("PRODUCT", 1), ("mean", 4), (yali.RedOp.Max, 2),
                     (yali.RedOp.Avg, 4), (R.MAX, 2), (R.AVG, 4)):
        assert yt._op_code(op, "m") == code, op
    for op in (4, 0, int(R.MAX), True, 7, -1):
        with pytest.raises(TypeError) as info:
            yt._op_code(op, "Communicator.all_reduce")
        text = str(info.value)
        assert "Communicator.all_reduce" in text and f"op={op!r}" in text, text
        assert "yali.RedOp" in text and "torch.distributed.ReduceOp" in text, text
    for op in (yali.RedOp.NumOps, R.BAND, R.PREMUL_SUM, "xor", 2.0):
        with pytest.raises(ValueError, match="is not supported"):
            yt._op_code(op, "m")
    # Through a method of each communicator: refused before anything is launched.
    sp = _fake_single(2)
    with pytest.raises(TypeError, match="SingleProcessCommunicator.all_reduce: op=2"):
        sp.all_reduce([object(), object()], 2)
    assert fake_lib.launches() == []


def test_operator_schemas():
    """Each operator writes exactly the tensor its schema marks (a!): what torch.compile's
    functionalization and CUDA-graph trees rely on."""
    mutated = {"all_reduce_": "tensor", "all_reduce_out": "out", "all_gather_into_tensor": "output",
               "reduce_scatter_tensor": "output", "broadcast_": "tensor", "reduce_": "tensor",
               "gather": "output", "scatter": "output", "all_to_all_single": "output",
               "recv_": "tensor"}
    functional = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
    for name, arg in mutated.items():
        schema = getattr(torch.ops.yali, name).default._schema
        marked = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
        assert marked == [arg], f"{name}: {schema}"
        assert len(schema.returns) == 0, str(schema)
    for name in functional:
        schema = getattr(torch.ops.yali, name).default._schema
        assert not any(a.alias_info for a in schema.arguments), str(schema)
        assert len(schema.returns) == 1, str(schema)
    # yaliSend writes nothing and returns nothing.
    schema = torch.ops.yali.send.default._schema
    assert not any(a.alias_info for a in schema.arguments) and len(schema.returns) == 0, str(schema)
    # The uneven exchange: the output, and the optional count outputs (None: not written).
    uneven = {"all_to_all_v": ["output"],
              "all_to_all_device_counts": ["output", "output_splits", "output_offsets"],
              "expert_dispatch": ["output", "recv_counts", "expert_offsets"],
              "expert_combine": ["output"]}
    for name, args in uneven.items():
        schema = getattr(torch.ops.yali, name).default._schema
        marked = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
        assert marked == args, f"{name}: {schema}"
        assert len(schema.returns) == 0, str(schema)


# ---- Communicator methods, on fake CUDA tensors (FakeTensorMode: the operators' fake kernels run) 


@pytest.fixture
def fake_mode():
    """Tensors made inside are fake CUDA tensors (no GPU needed); the yali operators run their fake
    implementations, so nothing is launched."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        yield


def _cuda(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="cuda")


@pytest.fixture
def comm3(monkeypatch):
    """Rank 1 of 3 (a fake comm, live for the operators)."""
    return _fake_communicator(monkeypatch, rank=1, n=3)


def test_communicator_results_and_shapes(fake_mode, comm3):
    c = comm3
    x = _cuda(4, 5)
    out = _cuda(12, 5)
    assert c.all_gather_into_tensor(out, x) is out
    assert c.all_gather_into_tensor(_cuda(3, 4, 5), x).shape == (3, 4, 5)  # stacked form
    assert c.all_gather_functional(x).shape == (12, 5)
    assert c.all_gather_functional(_cuda(())).shape == (3,)
    rs = _cuda(2, 5)
    assert c.reduce_scatter_tensor(rs, _cuda(6, 5), op="max") is rs
    assert c.reduce_scatter_functional(_cuda(6, 5), "avg").shape == (2, 5)
    assert c.broadcast(x, 2) is x and c.broadcast(x, group_src=0) is x
    assert c.reduce(x, 0, "prod") is x
    assert c.reduce(x, dst=1, op=torch.distributed.ReduceOp.MIN) is x
    glist = [_cuda(4, 5) for _ in range(3)]
    assert c.gather(x, glist, dst=1) is glist  # rank 1 is the destination: the list comes back
    assert c.gather(x, None, dst=0) is None and c.gather(x, [], dst=2) is None
    assert c.gather(x) is None  # default dst: global rank 0
    gbuf = _cuda(60)
    assert c.gather(x, gbuf, dst=1) is gbuf
    assert c.scatter(x, [_cuda(20) for _ in range(3)], src=1) is x
    assert c.scatter(x, _cuda(3, 4, 5), src=1) is x
    assert c.scatter(x, None, src=2) is x and c.scatter(x) is x
    a = _cuda(6, 5)
    assert c.all_to_all_single(a, _cuda(6, 5)) is a
    assert c.all_to_all_single(a, _cuda(6, 5), [2, 2, 2], [2, 2, 2]) is a
    assert c.all_to_all_functional(_cuda(6, 5)).shape == (6, 5)
    # The uneven exchange: rows of any dtype, moved as bytes (not only DTYPES).
    i64 = functools.partial(_cuda, dtype=torch.int64)
    for dtype in (torch.float32, torch.bool, torch.int16, torch.complex64, torch.complex128,
                  torch.float8_e4m3fnuz):
        o, t = _cuda(7, 3, dtype=dtype), _cuda(5, 3, dtype=dtype)
        assert c.all_to_all_single(o, t, [2, 0, 5], [1, 1, 3]) is o
        assert c.all_to_all_device_counts(o, t, i64(3), i64(3), i64(3)) is o
        assert c.expert_dispatch(o, t, i64(6), 2, 4, i64(6), i64(3)) is o
        assert c.expert_combine(t, o, i64(6), 2, 4) is t
    assert c.all_to_all_single(_cuda(4), _cuda(0), [1, 1, 2], [0, 0, 0]).shape == (4,)
    for dtype in yt.DTYPES:  # every dtype goes through every method
        t = _cuda(3, dtype=dtype)
        c.all_gather_into_tensor(_cuda(9, dtype=dtype), t)
        c.reduce_scatter_tensor(_cuda(1, dtype=dtype), t, "max")
        c.broadcast(t, 0)
        c.reduce(t, 1, "sum")
        c.gather(t, [_cuda(3, dtype=dtype) for _ in range(3)], 1)
        c.scatter(t, _cuda(9, dtype=dtype), 1)
        c.all_to_all_single(_cuda(3, dtype=dtype), t)
        c.all_reduce(t, "min")


def _bad_calls(c):
    """(what, call, exception type, words the message must hold)."""
    x = _cuda(4, 5)
    i32 = _cuda(4, dtype=torch.int32)
    return [
        ("cpu input", lambda: c.all_gather_into_tensor(_cuda(60), torch.empty(20)), ValueError,
         ["Communicator.all_gather_into_tensor", "input_tensor", "CUDA"]),
        ("gather output size", lambda: c.all_gather_into_tensor(_cuda(59), x), ValueError,
         ["output_tensor", "59", "world_size (3) x input_tensor.numel() (20) = 60"]),
        ("gather output dtype", lambda: c.all_gather_into_tensor(_cuda(60, dtype=torch.float16), x),
         TypeError, ["output_tensor", "dtype"]),
        ("gather output strided", lambda: c.all_gather_into_tensor(_cuda(120)[::2], x), ValueError,
         ["output_tensor", "contiguous"]),
        ("unsupported dtype", lambda: c.broadcast(_cuda(4, dtype=torch.int16), 0), TypeError,
         ["Communicator.broadcast", "tensor", "torch.int16", "float8_e4m3fn", "bool",
          "complex64"]),
        ("rs input size", lambda: c.reduce_scatter_tensor(_cuda(2), _cuda(7)), ValueError,
         ["Communicator.reduce_scatter_tensor", "input", "world_size (3) x output.numel() (2)"]),
        ("rs avg int", lambda: c.reduce_scatter_tensor(_cuda(4, dtype=torch.int64),
                                                       _cuda(12, dtype=torch.int64), "avg"),
         ValueError, ["avg", "torch.int64"]),
        ("rs functional rows", lambda: c.reduce_scatter_functional(_cuda(7)), ValueError,
         ["reduce_scatter_functional", "input", "multiple of the world size (3)"]),
        ("bad op", lambda: c.reduce_scatter_tensor(_cuda(2), _cuda(6), "xor"), ValueError,
         ["op="]),
        ("broadcast no src", lambda: c.broadcast(x), ValueError, ["Communicator.broadcast", "src"]),
        ("broadcast src range", lambda: c.broadcast(x, 3), ValueError, ["src=3", "0..2"]),
        ("broadcast src type", lambda: c.broadcast(x, 1.0), TypeError, ["src", "int"]),
        ("broadcast both", lambda: c.broadcast(x, 1, group_src=1), ValueError,
         ["src", "group_src", "not both"]),
        ("broadcast group_src", lambda: c.broadcast(x, group_src=-1), ValueError, ["group_src=-1"]),
        ("reduce no dst", lambda: c.reduce(x), ValueError, ["Communicator.reduce", "dst"]),
        ("reduce avg int", lambda: c.reduce(i32, 0, "avg"), ValueError, ["avg", "int32"]),
        ("all_reduce avg int", lambda: c.all_reduce(i32, "avg"), ValueError,
         ["Communicator.all_reduce", "avg"]),
        ("all_reduce_functional avg int", lambda: c.all_reduce_functional(i32, "mean"),
         ValueError, ["avg"]),
        ("gather list on non-dst", lambda: c.gather(x, [x, x, x], dst=0), ValueError,
         ["gather_list", "None or empty", "rank 1", "destination is rank 0"]),
        ("gather list missing", lambda: c.gather(x, None, dst=1), ValueError,
         ["gather_list", "required"]),
        ("gather list length", lambda: c.gather(x, [x, x], dst=1), ValueError,
         ["gather_list", "2 tensors", "world_size (3)"]),
        ("gather list numel", lambda: c.gather(x, [x, x, _cuda(3)], dst=1), ValueError,
         ["gather_list[2]", "3 elements"]),
        ("gather list dtype", lambda: c.gather(x, [x, x, _cuda(4, 5, dtype=torch.float64)],
                                               dst=1), TypeError, ["gather_list[2]", "dtype"]),
        ("gather list entry", lambda: c.gather(x, [x, x, "x"], dst=1), TypeError,
         ["gather_list[2]", "torch.Tensor"]),
        ("gather tensor size", lambda: c.gather(x, _cuda(59), dst=1), ValueError,
         ["gather_list", "59", "= 60"]),
        ("scatter list on non-src", lambda: c.scatter(x, [x, x, x], src=0), ValueError,
         ["Communicator.scatter", "scatter_list", "source is rank 0"]),
        ("scatter list missing", lambda: c.scatter(x, None, src=1), ValueError,
         ["scatter_list", "required"]),
        ("scatter list numel", lambda: c.scatter(x, [x, _cuda(2), x], src=1), ValueError,
         ["scatter_list[1]"]),
        ("a2a output numel", lambda: c.all_to_all_single(_cuda(5), _cuda(6)), ValueError,
         ["Communicator.all_to_all_single", "output", "input.numel()"]),
        ("a2a rows", lambda: c.all_to_all_single(_cuda(4, 3), _cuda(4, 3)), ValueError,
         ["input", "multiple of the world size"]),
        ("a2a uneven rows", lambda: c.all_to_all_single(_cuda(6, 4), _cuda(6, 5), [1, 2, 3],
                                                        [3, 2, 1]), ValueError,
         ["Communicator.all_to_all_single", "output has rows of shape (4,)", "input of (5,)"]),
        ("a2a uneven dtype", lambda: c.all_to_all_single(_cuda(6, dtype=torch.float16), _cuda(6),
                                                         [1, 2, 3]), TypeError,
         ["output has dtype torch.float16", "must match"]),
        ("a2a negative split", lambda: c.all_to_all_single(_cuda(6), _cuda(6), [3, 4, -1]),
         ValueError, ["output_split_sizes=[3, 4, -1]", ">= 0"]),
        ("a2a None not even", lambda: c.all_to_all_single(_cuda(7), _cuda(6), None, [1, 2, 3]),
         ValueError, ["output_split_sizes=None", "(7)", "multiple of the world size (3)"]),
        ("a2a uneven 0-d", lambda: c.all_to_all_single(_cuda(()), _cuda(()), [0, 0, 0]),
         ValueError, ["input is 0-d"]),
        ("a2a uneven cpu", lambda: c.all_to_all_single(_cuda(6), torch.empty(6), [2, 2, 2]),
         ValueError, ["input must be a CUDA tensor"]),
        ("a2a split count", lambda: c.all_to_all_single(_cuda(6), _cuda(6), [3, 3]), ValueError,
         ["output_split_sizes=[3, 3]", "one entry per rank (3)"]),
        ("a2a split sum", lambda: c.all_to_all_single(_cuda(6), _cuda(6), None, [1, 1, 1]),
         ValueError, ["input_split_sizes", "summing to", "(6)"]),
        ("a2a split type", lambda: c.all_to_all_single(_cuda(6), _cuda(6), "2,2,2"), TypeError,
         ["output_split_sizes", "list of ints"]),
        *_bad_a2av_calls(c),
        ("a2a functional rows", lambda: c.all_to_all_functional(_cuda(4)), ValueError,
         ["all_to_all_functional", "multiple of the world size"]),
        ("algo_info collective", lambda: c.algo_info(x, collective="allgatherv"), ValueError,
         ["collective"]),
        *_bad_p2p_calls(c),
    ]


def _bad_p2p_calls(c):
    """send and recv of rank 1 of 3: the checks the other methods make, and the peer's."""
    out = []
    for name in ("send", "recv"):
        m = f"Communicator.{name}"
        fn = getattr(c, name)
        role = "receiver" if name == "send" else "sender"
        out += [
            (f"{name} cpu", lambda fn=fn: fn(torch.empty(4), 0), ValueError,
             [m, "tensor must be a CUDA tensor"]),
            (f"{name} strided", lambda fn=fn: fn(_cuda(8)[::2], 0), ValueError,
             [m, "tensor", "contiguous"]),
            (f"{name} dtype", lambda fn=fn: fn(_cuda(4, dtype=torch.int16), 0), TypeError,
             [m, "torch.int16"]),
            (f"{name} not a tensor", lambda fn=fn: fn([1, 2], 0), TypeError,
             [m, "tensor must be a torch.Tensor"]),
            (f"{name} peer type", lambda fn=fn: fn(_cuda(4), "2"), TypeError,
             [m, "peer must be an int, got str"]),
            (f"{name} peer bool", lambda fn=fn: fn(_cuda(4), True), TypeError,
             [m, "peer must be an int, got bool"]),
            (f"{name} peer range", lambda fn=fn: fn(_cuda(4), 3), ValueError,
             [m, "peer=3 is not a rank of this communicator (0..2)"]),
            (f"{name} group_peer range", lambda fn=fn: fn(_cuda(4), group_peer=-1), ValueError,
             [m, "group_peer=-1"]),
            (f"{name} no peer", lambda fn=fn: fn(_cuda(4)), ValueError,
             [m, f"peer (the {role}'s rank) is required"]),
            (f"{name} both peers", lambda fn=fn: fn(_cuda(4), 0, group_peer=0), ValueError,
             [m, "pass peer or group_peer, not both"]),
            (f"{name} stream type", lambda fn=fn: fn(_cuda(4), 0, 0x5000), TypeError,
             [m, "stream must be a torch.cuda.Stream or None, got int"]),
        ]
    return out


def _bad_a2av_calls(c):
    """all_to_all_device_counts, expert_dispatch and expert_combine of rank 1 of 3."""
    x, out = _cuda(5, 4), _cuda(9, 4)
    i64 = functools.partial(_cuda, dtype=torch.int64)
    m = "Communicator"
    dc, ed, ec = f"{m}.all_to_all_device_counts", f"{m}.expert_dispatch", f"{m}.expert_combine"
    splits = i64(3)
    return [
        ("dc splits dtype", lambda: c.all_to_all_device_counts(out, x, _cuda(3, dtype=torch.int32)),
         TypeError, [dc, "input_splits must have dtype torch.int64", "torch.int32"]),
        ("dc splits length", lambda: c.all_to_all_device_counts(out, x, i64(4)), ValueError,
         [dc, "input_splits has shape (4,)", "(3,)", "world_size (3)"]),
        ("dc splits 2-d", lambda: c.all_to_all_device_counts(out, x, i64(3, 1)), ValueError,
         ["input_splits has shape (3, 1)"]),
        ("dc splits cpu", lambda: c.all_to_all_device_counts(
            out, x, torch.zeros(3, dtype=torch.int64)), ValueError,
         ["input_splits must be a CUDA tensor", "on the device"]),
        ("dc splits list", lambda: c.all_to_all_device_counts(out, x, [1, 2, 2]), TypeError,
         ["input_splits must be a torch.Tensor"]),
        ("dc output_splits length", lambda: c.all_to_all_device_counts(out, x, splits, i64(2)),
         ValueError, ["output_splits has shape (2,)"]),
        ("dc output_offsets dtype", lambda: c.all_to_all_device_counts(
            out, x, splits, None, _cuda(3)), TypeError, ["output_offsets", "torch.int64"]),
        ("dc rows", lambda: c.all_to_all_device_counts(_cuda(9, 3), x, splits), ValueError,
         [dc, "output has rows of shape (3,)", "input of (4,)"]),
        ("dc strided", lambda: c.all_to_all_device_counts(_cuda(9, 8)[:, ::2], x, splits),
         ValueError, ["output must be contiguous"]),
        ("dispatch E=0", lambda: c.expert_dispatch(out, x, i64(3), 0), ValueError,
         [ed, "local_experts=0", "1..512", "YALI_MAX_LOCAL_EXPERTS"]),
        ("dispatch E=513", lambda: c.expert_dispatch(out, x, i64(3 * 513), 513), ValueError,
         ["local_experts=513"]),
        ("dispatch experts", lambda: c.expert_dispatch(out, x, i64(3 * 342), 342), ValueError,
         ["local_experts=342 x world_size (3) = 1026", "at most 1024", "YALI_MAX_EXPERTS"]),
        ("dispatch E type", lambda: c.expert_dispatch(out, x, i64(6), 2.0), TypeError,
         ["local_experts must be an int"]),
        ("dispatch align", lambda: c.expert_dispatch(out, x, i64(6), 2, align=0), ValueError,
         [ed, "align=0", ">= 1"]),
        ("dispatch counts length", lambda: c.expert_dispatch(out, x, i64(5), 2), ValueError,
         [ed, "send_counts has shape (5,)", "(6,)", "world_size (3) x local_experts (2)"]),
        ("dispatch counts dtype", lambda: c.expert_dispatch(out, x, _cuda(6), 2), TypeError,
         ["send_counts must have dtype torch.int64", "torch.float32"]),
        ("dispatch recv_counts", lambda: c.expert_dispatch(out, x, i64(6), 2, 1, i64(3)),
         ValueError, ["recv_counts has shape (3,)", "local_experts (2) x world_size (3)"]),
        ("dispatch offsets", lambda: c.expert_dispatch(out, x, i64(6), 2, 1, None, i64(2)),
         ValueError, ["expert_offsets has shape (2,)", "(3,)", "local_experts (2) + 1"]),
        ("dispatch rows", lambda: c.expert_dispatch(_cuda(9, 2, 2), x, i64(6), 2), ValueError,
         [ed, "rows of shape (2, 2)"]),
        ("dispatch dtype", lambda: c.expert_dispatch(_cuda(9, 4, dtype=torch.bfloat16), x, i64(6),
                                                     2), TypeError, ["dtype", "must match"]),
        ("combine E", lambda: c.expert_combine(x, out, i64(3), 0), ValueError,
         [ec, "local_experts=0"]),
        ("combine counts", lambda: c.expert_combine(x, out, i64(3), 2), ValueError,
         [ec, "send_counts has shape (3,)"]),
        ("combine rows", lambda: c.expert_combine(_cuda(5, 5), out, i64(3), 1), ValueError,
         [ec, "rows of shape"]),
        ("combine input", lambda: c.expert_combine(x, "out", i64(3), 1), TypeError,
         [ec, "input must be a torch.Tensor"]),
    ]


def test_communicator_argument_errors(fake_mode, comm3):
    failures = []
    for what, call, exc, words in _bad_calls(comm3):
        try:
            call()
        except exc as e:
            missing = [w for w in words if w not in str(e)]
            if missing:
                failures.append(f"{what}: {str(e)!r} lacks {missing}")
        except Exception as e:  # noqa: BLE001
            failures.append(f"{what}: raised {type(e).__name__}: {e}, expected {exc.__name__}")
        else:
            failures.append(f"{what}: raised nothing, expected {exc.__name__}")
    assert not failures, "\n".join(failures)


def test_communicator_closed(fake_mode, comm3):
    comm3._comm = None
    for call in (lambda: comm3.all_gather_into_tensor(_cuda(6), _cuda(2)),
                 lambda: comm3.broadcast(_cuda(2), 0), lambda: comm3.gather(_cuda(2))):
        with pytest.raises(yali.YaliInvalidUsage, match="closed"):
            call()


class _Recorder:
    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def __call__(self, *args):
        self.calls.append((self.name, args))


@pytest.fixture
def op_calls(monkeypatch):
    """Replaces the operators the methods call (yali.torch._Ops) with recorders."""
    calls = []
    for name in ("all_gather_into_tensor", "all_gather", "reduce_scatter_tensor", "reduce_scatter",
                 "broadcast_", "reduce_", "gather", "scatter", "all_to_all_single", "all_to_all",
                 "all_to_all_v", "all_to_all_device_counts", "expert_dispatch", "expert_combine",
                 "send", "recv_"):
        monkeypatch.setattr(yt._Ops, name, _Recorder(calls, name))
    return calls


def test_methods_pass_the_operators_their_arguments(fake_mode, comm3, op_calls):
    c, h = comm3, comm3.handle
    x = _cuda(4, 5)
    out = _cuda(60)
    c.all_gather_into_tensor(out, x)
    assert op_calls[-1] == ("all_gather_into_tensor", (out, x, h))
    c.all_gather_functional(x)
    assert op_calls[-1] == ("all_gather", (x, h, 3))
    rs = _cuda(20)
    c.reduce_scatter_tensor(rs, out, torch.distributed.ReduceOp.AVG)
    assert op_calls[-1] == ("reduce_scatter_tensor", (rs, out, h, int(yali.RedOp.Avg)))
    c.reduce_scatter_functional(_cuda(6), "prod")
    assert op_calls[-1][0] == "reduce_scatter" and op_calls[-1][1][1:] == (h, 1, 3)
    c.broadcast(x, 2)
    assert op_calls[-1] == ("broadcast_", (x, h, 2))
    c.reduce(x, 0, "max")
    assert op_calls[-1] == ("reduce_", (x, h, int(yali.RedOp.Max), 0))
    # gather off the destination: an empty stand-in for the output the library does not look at.
    c.gather(x, None, dst=2)
    name, (o, t, hh, root) = op_calls[-1]
    assert (name, t, hh, root) == ("gather", x, h, 2) and o.numel() == 0 and o.dtype == x.dtype
    # gather on the destination, list form: one (world_size, numel) buffer, then copied out.
    c.gather(x, [_cuda(20), _cuda(4, 5), _cuda(2, 10)], dst=1)
    name, (o, t, hh, root) = op_calls[-1]
    assert name == "gather" and o.shape == (3, 20) and root == 1
    c.gather(x, out, dst=1)
    assert op_calls[-1] == ("gather", (out, x, h, 1))
    # scatter: the list is concatenated on the source; off the source an empty stand-in.
    c.scatter(x, [_cuda(20), _cuda(4, 5), _cuda(2, 10)], src=1)
    name, (o, i, hh, root) = op_calls[-1]
    assert name == "scatter" and o is x and i.shape == (60,) and root == 1
    c.scatter(x, None, src=0)
    name, (o, i, hh, root) = op_calls[-1]
    assert o is x and i.numel() == 0 and root == 0
    a = _cuda(6, 5)
    src = _cuda(6, 5)
    c.all_to_all_single(a, src)
    assert op_calls[-1] == ("all_to_all_single", (a, src, h))
    c.all_to_all_functional(src)
    assert op_calls[-1] == ("all_to_all", (src, h))
    # Split sizes (either): the uneven exchange, a split left None being its tensor's even split;
    # written-out even splits too (every rank must make the same call, whatever its splits).
    c.all_to_all_single(a, src, [1, 2, 3], [3, 0, 3])
    assert op_calls[-1] == ("all_to_all_v", (a, src, [1, 2, 3], [3, 0, 3], h))
    b = _cuda(7, 5)
    c.all_to_all_single(b, src, [4, 0, 3])
    assert op_calls[-1] == ("all_to_all_v", (b, src, [4, 0, 3], [2, 2, 2], h))
    c.all_to_all_single(a, src, None, [2, 2, 2])
    assert op_calls[-1] == ("all_to_all_v", (a, src, [2, 2, 2], [2, 2, 2], h))
    i64 = functools.partial(_cuda, dtype=torch.int64)
    sp, so, ii = i64(3), i64(3), i64(3)
    c.all_to_all_device_counts(b, src, ii, sp, so)
    assert op_calls[-1] == ("all_to_all_device_counts", (b, src, ii, sp, so, h))
    c.all_to_all_device_counts(b, src, ii)
    assert op_calls[-1] == ("all_to_all_device_counts", (b, src, ii, None, None, h))
    sc, rc, eo = i64(6), i64(6), i64(3)
    assert c.expert_dispatch(b, src, sc, 2, 8, rc, eo) is b
    assert op_calls[-1] == ("expert_dispatch", (b, src, sc, 2, 8, rc, eo, h))
    c.expert_dispatch(b, src, sc, 2)
    assert op_calls[-1] == ("expert_dispatch", (b, src, sc, 2, 1, None, None, h))
    assert c.expert_combine(src, b, sc, 2, align=8) is src
    assert op_calls[-1] == ("expert_combine", (src, b, sc, 2, 8, h))
    # Point-to-point: send returns nothing, recv its tensor; the peer may be this rank (1).
    assert c.send(x, 2) is None
    assert op_calls[-1] == ("send", (x, h, 2))
    assert c.recv(x, peer=0) is x
    assert op_calls[-1] == ("recv_", (x, h, 0))
    c.send(x, group_peer=1)
    assert op_calls[-1] == ("send", (x, h, 1))
    c.recv(x, 1, None)
    assert op_calls[-1] == ("recv_", (x, h, 1))


def test_send_and_recv_run_on_the_stream_given(fake_mode, comm3, op_calls, monkeypatch):
    """``stream``: the operator is called with that stream current (torch.cuda.stream), so its
    launch is queued there; a stream on another GPU is refused. (torch.cuda.Stream and
    torch.cuda.stream stand-ins: no GPU here.)"""
    c, x = comm3, _cuda(4)

    class FakeStream:
        def __init__(self, index):
            self.device = torch.device("cuda", index)

    @contextlib.contextmanager
    def current(stream):
        op_calls.append(("enter", stream))
        yield
        op_calls.append(("exit", stream))

    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", current)
    s = FakeStream(0)
    assert c.send(x, 2, s) is None
    assert op_calls == [("enter", s), ("send", (x, c.handle, 2)), ("exit", s)]
    op_calls.clear()
    assert c.recv(x, 0, stream=s) is x
    assert op_calls == [("enter", s), ("recv_", (x, c.handle, 0)), ("exit", s)]
    op_calls.clear()
    for fn in (c.send, c.recv):
        with pytest.raises(ValueError, match="stream is on cuda:1, the comm on cuda:0"):
            fn(x, 0, FakeStream(1))
    assert op_calls == []


def test_roots_are_global_ranks_as_in_torch_distributed(fake_mode, comm3, op_calls):
    """A Communicator over a subgroup (global ranks 4, 6, 9): src/dst are global ranks,
    group_src/group_dst ranks of the group."""
    c = comm3
    c._global_to_group = {4: 0, 6: 1, 9: 2}
    x = _cuda(4)
    c.broadcast(x, 9)
    assert op_calls[-1][1][2] == 2
    c.broadcast(x, group_src=0)
    assert op_calls[-1][1][2] == 0
    c.reduce(x, 6)
    assert op_calls[-1][1][3] == 1
    c.scatter(x, [x, x, x], src=6)
    assert op_calls[-1][1][3] == 1
    for call in (lambda: c.broadcast(x, 1), lambda: c.gather(x)):  # global 1 and 0: not members
        with pytest.raises(ValueError, match="not in this communicator's group") as info:
            call()
        assert "[4, 6, 9]" in str(info.value)
    c.gather(x, None, group_dst=0)
    assert op_calls[-1][1][3] == 0
    # send/recv's peer: a global rank too (torch.distributed.send's dst, recv's src).
    c.send(x, 9)
    assert op_calls[-1] == ("send", (x, c.handle, 2))
    c.recv(x, group_peer=0)
    assert op_calls[-1] == ("recv_", (x, c.handle, 0))
    with pytest.raises(ValueError, match="peer=1 .* is not in this communicator's group"):
        c.recv(x, 1)


def test_compile_fullgraph_traces_every_method(fake_mode, comm3):
    """torch.compile(fullgraph=True) traces every method without a graph break; aot_eager also
    functionalizes the mutating operators (their outputs, an input view of an output for the in-place
    all-gather, a graph input for broadcast)."""
    c = comm3

    def f(x, out):
        c.broadcast(x, 0)  # mutates a graph input
        c.all_gather_into_tensor(out, x)
        c.all_gather_into_tensor(out, out[4:8])  # in place: rank 1's block of out
        g = [torch.empty_like(x) for _ in range(3)]
        c.gather(x * 2, g, dst=1)
        s = torch.empty_like(x)
        c.scatter(s, [x + i for i in range(3)], src=1)
        c.gather(x, None, dst=0)
        c.scatter(s, None, src=2)
        r = x.clone()
        c.reduce(r, 1, "sum")
        rs = torch.empty_like(x)
        c.reduce_scatter_tensor(rs, out, "avg")
        a = torch.empty_like(out)
        c.all_to_all_single(a, out, [4, 4, 4], [4, 4, 4])
        c.all_reduce(a, "max")
        c.send(x, 2)
        c.recv(rs, 0)
        return (c.all_gather_functional(x)[:4] + g[0] + g[2] + s + r + rs + a[:4]
                + c.reduce_scatter_functional(out) + c.all_to_all_functional(out)[4:8]
                + c.all_reduce_functional(x, "avg"))

    for backend in ("eager", "aot_eager"):
        torch._dynamo.reset()
        got = torch.compile(f, fullgraph=True, backend=backend)(_cuda(4, 5), _cuda(12, 5))
        assert got.shape == (4, 5) and got.device.type == "cuda"
    torch._dynamo.reset()


def test_compile_fullgraph_takes_torch_reduce_ops(fake_mode, comm3):
    """torch.distributed.ReduceOp members trace without a graph break (Dynamo cannot compare
    pybind11 enums with ==) and reach the operator as their yali.RedOp values; yali.RedOp members
    trace too."""
    c, R = comm3, torch.distributed.ReduceOp
    graphs = []

    def keep_graph(gm, example_inputs):
        graphs.append(gm.code)
        return gm

    cases = [(getattr(R, name), code) for name, code in
             (("SUM", 0), ("PRODUCT", 1), ("MAX", 2), ("MIN", 3), ("AVG", 4))]
    cases += [(yali.RedOp.Max, 2), (yali.RedOp.Avg, 4)]  # yali's own enum traces too
    for op, code in cases:
        name = str(op)
        torch._dynamo.reset()
        graphs.clear()
        try:
            got = torch.compile(lambda x: c.all_reduce_functional(x, op) + c.all_reduce(x, op),
                                fullgraph=True, backend=keep_graph)(_cuda(6, 5))
        finally:
            torch._dynamo.reset()
        assert got.shape == (6, 5)
        (text,) = graphs
        assert text.count(f", {c.handle}, {code})") == 2, f"{name}:\n{text}"
    # Eager, ReduceOp(member) (an object of its own that compares equal to the member) too.
    for op, code in cases[:5]:
        assert yt._op_code(R(op), "m") == code


def test_all_reduce_out_of_another_shape_is_refused_compiled_as_eagerly(fake_mode, comm3, fake_lib,
                                                                         no_stream):
    """The methods skip their own checks while torch.compile traces; the operator's fake
    implementation refuses an out of another shape (the same number of elements) as the method
    does eagerly, and so does its launch (torch.ops.yali.all_reduce_out called directly)."""
    c = comm3
    x, o = _cuda(6, 5), _cuda(5, 6)
    with pytest.raises(ValueError, match=r"out has shape \(5, 6\), tensor has \(6, 5\)"):
        c.all_reduce(x, out=o)
    torch._dynamo.reset()
    try:
        with pytest.raises(Exception, match=r"out has shape \(5, 6\), tensor has \(6, 5\)"):
            torch.compile(lambda x, o: c.all_reduce(x, out=o), fullgraph=True,
                          backend="eager")(x, o)
    finally:
        torch._dynamo.reset()
    c.all_reduce(x, out=_cuda(6, 5))  # the same shape: fine
    with pytest.raises(ValueError, match=r"out has shape \(5, 6\)"):
        torch.ops.yali.all_reduce_out(x, o, c.handle, 0)  # its fake, here
    src = _FakeCudaTensor(0x100, 30, (6, 5))
    with pytest.raises(ValueError, match=r"out \(\(5, 6\) .*\) does not match tensor \(\(6, 5\)"):
        yt._launch_all_reduce("yali::all_reduce_out", c.handle, src,
                              _FakeCudaTensor(0x200, 30, (5, 6)), 0)
    assert _launches(fake_lib) == []
    yt._launch_all_reduce("yali::all_reduce_out", c.handle, src, _FakeCudaTensor(0x200, 30, (6, 5)),
                          0)
    assert len(_launches(fake_lib)) == 1


@pytest.mark.xfail(torch.torch_version.TorchVersion(torch.__version__) < "2.10", strict=False,
                   reason="torch < 2.10 ignores has_side_effect for auto_functionalized nodes and "
                   "in inductor's scheduler (torch.py says more)")
def test_compile_keeps_collectives_whose_output_this_rank_ignores(fake_mode, comm3):
    """A collective is a promise to the other ranks: a compiled function must make every call even
    where this rank never reads what it writes (reduce off the destination, gather off the root,
    an output or a result left unused), else the peers wait for this rank until YALI_TIMEOUT_MS.
    The graph aot_autograd hands its compiler (what inductor lowers) keeps every call; the
    operators are impure, which is what inductor's scheduler asks before dropping a kernel whose
    outputs nobody reads."""
    from torch._dynamo.backends.common import aot_autograd

    c = comm3
    graphs = []

    def keep_graph(gm, example_inputs):
        graphs.append(gm.code)
        return gm

    def f(x):
        r = x.clone()
        c.reduce(r, 0)  # rank 1 is not the destination: r is not read afterwards
        c.gather(x, None, dst=0)  # off the root: the output is an internal 0-element stand-in
        c.all_gather_into_tensor(torch.empty(18, 5, device="cuda"), x)  # output never read
        c.all_reduce_functional(x)  # result unused
        c.all_gather_functional(x)  # result unused
        c.send(x, 2)  # writes nothing
        c.recv(torch.empty(6, 5, device="cuda"), 0)  # received into a tensor never read
        return x + 1

    torch._dynamo.reset()
    try:
        torch.compile(f, backend=aot_autograd(fw_compiler=keep_graph), fullgraph=True)(_cuda(6, 5))
    finally:
        torch._dynamo.reset()
    (code,) = graphs
    for op in ("yali.reduce_.", "yali.gather.", "yali.all_gather_into_tensor.",
               "yali.all_reduce.", "yali.all_gather.", "yali.send.", "yali.recv_."):
        assert code.count(op) == 1, f"{op} missing from the compiled graph:\n{code}"
    is_impure = getattr(getattr(torch._library, "utils", None), "is_impure", None)
    if is_impure is not None:  # what inductor's FallbackKernel.has_side_effects asks
        for name in dir(torch.ops.yali):
            packet = getattr(torch.ops.yali, name)
            if isinstance(packet, torch._ops.OpOverloadPacket):
                assert is_impure(packet.default), f"torch.ops.yali.{name} is pure for inductor"


# ---- The operators' launch functions (real launch path, library faked) ---------------------------


class _Duck:
    """What the launch functions read of a CUDA tensor."""

    def __init__(self, ptr, n, dtype=torch.float32, device=0):
        self._ptr, self._n = ptr, n
        self.dtype = dtype
        self.device = torch.device("cuda", device)

    def is_contiguous(self):
        return True

    def is_conj(self):
        return False

    def is_neg(self):
        return False

    def numel(self):
        return self._n

    def data_ptr(self):
        return self._ptr


@pytest.fixture
def no_stream(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: types.SimpleNamespace(cuda_stream=0x5000))


def test_launch_functions_make_the_c_calls(fake_lib, monkeypatch, no_stream):
    c = _fake_communicator(monkeypatch, rank=1, n=3)
    h = c.handle
    bf = torch.bfloat16
    D = yali.DataType

    def last():
        return fake_lib.calls[-1][0], fake_lib.launches()[-1]

    yt._launch_all_gather("op", h, _Duck(0x200, 12, bf), _Duck(0x100, 4, bf))
    assert last() == ("yaliAllGather", dict(sendbuff=0x100, recvbuff=0x200, sendcount=4,
                                            datatype=D.Bfloat16, comm=h, stream=0x5000))
    yt._launch_reduce_scatter("op", h, _Duck(0x200, 4), _Duck(0x100, 12), 3)
    assert last() == ("yaliReduceScatter", dict(sendbuff=0x100, recvbuff=0x200, recvcount=4,
                                                datatype=D.Float32, op=3, comm=h, stream=0x5000))
    yt._launch_broadcast("op", h, _Duck(0x300, 7, torch.int64), 2)
    assert last() == ("yaliBroadcast", dict(sendbuff=0x300, recvbuff=0x300, count=7,
                                            datatype=D.Int64, root=2, comm=h, stream=0x5000))
    yt._launch_reduce("op", h, _Duck(0x300, 7, torch.uint8), 2, 0)
    assert last() == ("yaliReduce", dict(sendbuff=0x300, recvbuff=0x300, count=7, datatype=D.Uint8,
                                         op=2, root=0, comm=h, stream=0x5000))
    # gather/scatter: the root's extra buffer is passed on the root only (NULL elsewhere).
    yt._launch_gather("op", h, _Duck(0x200, 12), _Duck(0x100, 4), 1)
    assert last()[1]["recvbuff"] == 0x200 and last()[1]["count"] == 4
    yt._launch_gather("op", h, _Duck(0, 0), _Duck(0x100, 4), 0)
    assert last()[1]["recvbuff"] is None and last()[1]["root"] == 0
    yt._launch_scatter("op", h, _Duck(0x200, 4), _Duck(0x100, 12), 1)
    assert last() == ("yaliScatter", dict(sendbuff=0x100, recvbuff=0x200, count=4,
                                          datatype=D.Float32, root=1, comm=h, stream=0x5000))
    yt._launch_scatter("op", h, _Duck(0x200, 4), _Duck(0, 0), 2)
    assert last()[1]["sendbuff"] is None
    yt._launch_all_to_all("op", h, _Duck(0x200, 12, torch.float8_e5m2),
                          _Duck(0x100, 12, torch.float8_e5m2))
    assert last() == ("yaliAlltoAll", dict(sendbuff=0x100, recvbuff=0x200, count=4,
                                           datatype=D.Float8e5m2, comm=h, stream=0x5000))
    yt._launch_send("op", h, _Duck(0x100, 6, torch.int32), 2)
    assert last() == ("yaliSend", dict(sendbuff=0x100, count=6, datatype=D.Int32, peer=2, comm=h,
                                       stream=0x5000))
    yt._launch_recv("op", h, _Duck(0x200, 6, bf), 1)  # the peer may be this rank
    assert last() == ("yaliRecv", dict(recvbuff=0x200, count=6, datatype=D.Bfloat16, peer=1,
                                       comm=h, stream=0x5000))
    n_calls = len(fake_lib.launches())

    bad = [
        (lambda: yt._launch_all_gather("yali::all_gather", h, _Duck(0x200, 11), _Duck(0x100, 4)),
         ValueError, "output has 11 elements"),
        (lambda: yt._launch_reduce_scatter("yali::rs", h, _Duck(0x200, 4), _Duck(0x100, 11), 0),
         ValueError, "input has 11 elements"),
        (lambda: yt._launch_reduce_scatter("yali::rs", h, _Duck(0x200, 4, torch.int32),
                                           _Duck(0x100, 12, torch.int32), 4), ValueError, "avg"),
        (lambda: yt._launch_broadcast("yali::broadcast_", h, _Duck(0x100, 4), 3), ValueError,
         "root=3"),
        (lambda: yt._launch_gather("yali::gather", h, _Duck(0x200, 11), _Duck(0x100, 4), 1),
         ValueError, "output has 11"),
        (lambda: yt._launch_scatter("yali::scatter", h, _Duck(0x200, 4), _Duck(0x100, 4), 1),
         ValueError, "input has 4"),
        (lambda: yt._launch_all_to_all("yali::a2a", h, _Duck(0x200, 4), _Duck(0x100, 4)),
         ValueError, "not a multiple"),
        (lambda: yt._launch_all_gather("yali::ag", h, _Duck(0x200, 12, torch.float16),
                                       _Duck(0x100, 4)), TypeError, "dtype"),
        (lambda: yt._launch_all_gather("yali::ag", h, _Duck(0x200, 12, device=1),
                                       _Duck(0x100, 4)), ValueError, "cuda:1"),
        (lambda: yt._launch_broadcast("yali::broadcast_", 0xBAD, _Duck(0x100, 4), 0),
         yali.YaliInvalidUsage, "not a live"),
        (lambda: yt._launch_send("yali::send", h, _Duck(0x100, 4), 3), ValueError,
         "yali::send: peer=3 is not a rank"),
        (lambda: yt._launch_recv("yali::recv_", h, _Duck(0x100, 4), -1), ValueError,
         "yali::recv_: peer=-1 is not a rank"),
        (lambda: yt._launch_send("yali::send", h, _Duck(0x100, 4), "2"), TypeError,
         "peer must be an int"),
        (lambda: yt._launch_recv("yali::recv_", h, _Duck(0x100, 4, device=1), 0), ValueError,
         "tensor is on cuda:1"),
        (lambda: yt._launch_recv("yali::recv_", 0xBAD, _Duck(0x100, 4), 0),
         yali.YaliInvalidUsage, "not a live"),
    ]
    for call, exc, words in bad:
        with pytest.raises(exc, match=words):
            call()
    assert len(fake_lib.launches()) == n_calls  # refused before the C call


_LAUNCHES = [
    ("yaliAllGather", lambda h: yt._launch_all_gather("yali::all_gather_into_tensor", h,
                                                      _Duck(0x200, 8), _Duck(0x100, 4))),
    ("yaliReduceScatter", lambda h: yt._launch_reduce_scatter("yali::reduce_scatter_tensor", h,
                                                              _Duck(0x200, 4), _Duck(0x100, 8), 0)),
    ("yaliBroadcast", lambda h: yt._launch_broadcast("yali::broadcast_", h, _Duck(0x100, 4), 0)),
    ("yaliReduce", lambda h: yt._launch_reduce("yali::reduce_", h, _Duck(0x100, 4), 0, 1)),
    ("yaliGather", lambda h: yt._launch_gather("yali::gather", h, _Duck(0x200, 8), _Duck(0x100, 4),
                                               0)),
    ("yaliScatter", lambda h: yt._launch_scatter("yali::scatter", h, _Duck(0x200, 4),
                                                 _Duck(0x100, 8), 0)),
    ("yaliAlltoAll", lambda h: yt._launch_all_to_all("yali::all_to_all_single", h, _Duck(0x200, 8),
                                                     _Duck(0x100, 8))),
    ("yaliSend", lambda h: yt._launch_send("yali::send", h, _Duck(0x100, 8), 1)),
    ("yaliRecv", lambda h: yt._launch_recv("yali::recv_", h, _Duck(0x200, 8), 1)),
]


@pytest.mark.parametrize("call,launch", _LAUNCHES, ids=[c for c, _ in _LAUNCHES])
def test_launch_raises_the_async_error(fake_lib, monkeypatch, no_stream, call, launch):
    """Every operator of a failed comm raises its asynchronous error with its own C call's
    message (the C call returns it, launching nothing)."""
    c = _fake_communicator(monkeypatch, rank=0, n=2)
    fake_lib.comm_errors[c.handle] = "yaliCommRegister: an old, unrelated failure"
    fake_lib.record_on_comm = False
    fake_lib.async_errors[c.handle] = (int(yali.Result.Timeout), _TIMEOUT_TEXT)
    with pytest.raises(yali.YaliTimeout) as info:
        launch(c.handle)
    e = info.value
    assert e.call == call and e.detail == f"{call}: {_TIMEOUT_TEXT}", str(e)


def test_check_overlap_rules():
    """In place only at the collective's own block; any other shared byte is refused."""
    buf = torch.zeros(12)
    yt._check_overlap("m", "out", buf, "inp", buf[4:8], 4)  # rank 1's block of 4
    yt._check_overlap("m", "out", buf, "inp", torch.zeros(4))  # disjoint
    yt._check_overlap("m", "out", buf[:0], "inp", buf)  # empty: nothing shared
    # Off the block, no in-place form, another block, and a start at the block running past the
    # end of the buffer.
    for out, inp, at in ((buf, buf[3:7], 4), (buf, buf[4:8], None), (buf, buf[4:8], 8),
                         (buf[:10], buf[8:12], 8)):
        with pytest.raises(ValueError, match="inp overlaps out") as info:
            yt._check_overlap("Communicator.m", "out", out, "inp", inp, at, "its block")
        assert "Communicator.m" in str(info.value)
    assert yt._overlaps(0, 4, 3, 4) and not yt._overlaps(0, 4, 4, 4) and not yt._overlaps(0, 0, 0, 4)


# ---- SingleProcessCommunicator (library faked, fake CUDA tensors) --------------------------------


class _FakeStream:
    count = 0

    def __init__(self, device=None):
        _FakeStream.count += 1
        self.cuda_stream = 0x9000 + _FakeStream.count
        self.device = device
        self.waits = []

    def wait_stream(self, other):
        self.waits.append(other)


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's stream and device calls of SingleProcessCommunicator._run, without CUDA; the
    current stream of device d has cuda_stream 0x7000 + d."""
    current = {}

    def current_stream(device=None):
        d = device if isinstance(device, int) else 0
        if d not in current:
            current[d] = _FakeStream(d)
            current[d].cuda_stream = 0x7000 + d
        return current[d]

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "Stream", _FakeStream)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    return current


@pytest.fixture
def quiet_data_ptr():
    """data_ptr() of a fake tensor is 0 (with a warning) in the torch versions that allow it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with FakeTensorMode():
            try:
                _cuda(1).data_ptr()
            except Exception as e:  # noqa: BLE001
                pytest.skip(f"this torch refuses data_ptr() of fake tensors: {e}")
            yield


def _fake_devices(n):
    """Device ids 0..n-1 for fake tensors that model ranks on distinct GPUs. Where CUDA is real,
    torch makes a real tensor on each fake tensor's device the first time it meets it, which fails
    for a device this machine lacks (a one-GPU H200: "invalid device ordinal"), so the test is
    skipped there; the CPU-only CI runs it."""
    if torch.cuda.is_available() and torch.cuda.device_count() < n:
        pytest.skip(f"fake tensors on cuda:0..{n - 1} need {n} real GPUs where CUDA is present "
                    f"(this machine has {torch.cuda.device_count()}); runs on CPU-only machines")
    return list(range(n))


def _group_calls(fake_lib):
    """The calls between yaliGroupStart and yaliGroupEnd, checked to be one group."""
    names = [c[0] for c in fake_lib.calls if c[0] != "yaliCommGetAsyncError"]
    assert names[0] == "yaliGroupStart" and names[-1] == "yaliGroupEnd", names
    return [c for c in fake_lib.calls if c[0] in COLLECTIVE_PARAMS]


def test_single_process_collectives_make_the_c_calls(fake_lib, fake_cuda, quiet_data_ptr):
    sp = _fake_single(3)
    sp.devices = _fake_devices(3)  # distinct GPUs: each rank on its device's current stream
    for comm, d in zip(sp.comms, sp.devices):
        comm._device = d
    x = [torch.empty(4, device=f"cuda:{d}") for d in sp.devices]
    D = yali.DataType

    def launched(call):
        got = _group_calls(fake_lib)
        del fake_lib.calls[:]
        assert [c[0] for c in got] == [call] * 3
        assert [c[1] for c in got] == [c.handle for c in sp.comms]
        assert [c[2]["stream"] for c in got] == [0x7000, 0x7001, 0x7002]
        return [c[2] for c in got]

    outs = [torch.empty(12, device=f"cuda:{d}") for d in sp.devices]
    assert sp.all_gather_into_tensor(outs, x) == outs
    assert {p["sendcount"] for p in launched("yaliAllGather")} == {4}
    assert sp.reduce_scatter_tensor([o[:4] * 0 for o in outs], outs, "avg") is not None
    assert {(p["recvcount"], p["op"]) for p in launched("yaliReduceScatter")} == {(4, 4)}
    sp.broadcast(x, 2)
    assert {(p["count"], p["root"]) for p in launched("yaliBroadcast")} == {(4, 2)}
    sp.reduce(x, 1, "max")
    assert {(p["count"], p["root"], p["op"]) for p in launched("yaliReduce")} == {(4, 1, 2)}
    glist = [torch.empty(2, 2, device="cuda:1") for _ in range(3)]
    assert sp.gather(x, glist, dst=1) is glist
    ps = launched("yaliGather")
    assert [p["recvbuff"] is None for p in ps] == [True, False, True]
    assert {(p["count"], p["root"]) for p in ps} == {(4, 1)}
    sp.scatter(x, torch.empty(12, device="cuda:2"), src=2)
    ps = launched("yaliScatter")
    assert [p["sendbuff"] is None for p in ps] == [True, True, False]
    sp.scatter(x, [torch.empty(4, device="cuda:0") for _ in range(3)], src=0)
    assert [p["sendbuff"] is None for p in launched("yaliScatter")] == [False, True, True]
    a = [torch.empty(6, 2, device=f"cuda:{d}") for d in sp.devices]
    b = [torch.empty(6, 2, device=f"cuda:{d}") for d in sp.devices]
    sp.all_to_all_single(a, b)
    assert {(p["count"], p["datatype"]) for p in launched("yaliAlltoAll")} == {(4, D.Float32)}
    sp.all_reduce([t.to(torch.int8) for t in x], "prod")
    assert {(p["datatype"], p["op"]) for p in launched("yaliAllReduce")} == {(D.Int8, 1)}


def test_single_process_ranks_sharing_a_gpu_get_streams_of_their_own(fake_lib, fake_cuda,
                                                                      quiet_data_ptr):
    """On one stream, a rank's kernel would wait for the next rank's, queued behind it: ranks that
    share a GPU each get a stream, joined to the current stream before and after."""
    sp = _fake_single(3)  # devices [0, 0, 0]
    x = [torch.empty(4, device="cuda:0") for _ in range(3)]
    sp.broadcast(x, 0)
    streams = [p["stream"] for p in fake_lib.launches("yaliBroadcast")]
    assert len(set(streams)) == 3 and 0x7000 not in streams
    current = fake_cuda[0]
    side = sp._side_streams
    assert [s.cuda_stream for s in side] == streams
    assert all(s.waits == [current] for s in side)  # each waits for the caller's work
    assert current.waits == side  # and the caller's stream waits for each
    sp.all_gather_into_tensor([torch.empty(12, device="cuda:0") for _ in range(3)], x)
    assert sp._side_streams is side  # made once


def test_single_process_argument_errors(fake_lib, fake_cuda, quiet_data_ptr):
    sp = _fake_single(2)
    x = [torch.empty(4, device="cuda:0") for _ in range(2)]
    m = "SingleProcessCommunicator"
    cases = [
        (lambda: sp.all_gather_into_tensor([torch.empty(8, device="cuda")] * 2, x[:1]), ValueError,
         [f"{m}.all_gather_into_tensor", "input_tensors has 1 tensors, expected 2"]),
        (lambda: sp.all_gather_into_tensor([torch.empty(7, device="cuda")] * 2, x), ValueError,
         ["output_tensors[0]", "7 elements"]),
        (lambda: sp.reduce_scatter_tensor(
            [t.int() for t in x], [torch.empty(8, dtype=torch.int32, device="cuda")] * 2, "avg"),
         ValueError, [f"{m}.reduce_scatter_tensor", "avg"]),
        (lambda: sp.broadcast(x, 2), ValueError, [f"{m}.broadcast", "src=2"]),
        (lambda: sp.reduce(x, -1), ValueError, ["dst=-1"]),
        (lambda: sp.reduce([x[0], torch.empty(5, device="cuda")], 0), ValueError,
         ["tensors[1]", "must match"]),
        (lambda: sp.gather(x, None, 0), ValueError, [f"{m}.gather", "gather_list", "required"]),
        (lambda: sp.gather(x, torch.empty(7, device="cuda"), 0), ValueError, ["gather_list"]),
        (lambda: sp.scatter(x, [x[0]], 1), ValueError, ["scatter_list", "1 tensors"]),
        (lambda: sp.all_to_all_single(x, [torch.empty(3, device="cuda")] * 2), ValueError,
         ["multiple of the world size"]),
        (lambda: sp.all_to_all_single([torch.empty(4, device="cuda")] * 2,
                                      [torch.empty(4, device="cuda")] * 2, None, [1, 3]),
         ValueError, ["GPU 0 sends 1 rows to GPU 0", "input_split_sizes", "expects 2",
                      "must agree"]),
    ]
    for call, exc, words in cases:
        with pytest.raises(exc) as info:
            call()
        missing = [w for w in words if w not in str(info.value)]
        assert not missing, f"{info.value!r} lacks {missing}"
    assert fake_lib.launches() == []


_SP_CALLS = [
    ("all_gather_into_tensor", lambda sp, x: sp.all_gather_into_tensor(x, x)),
    ("reduce_scatter_tensor", lambda sp, x: sp.reduce_scatter_tensor(x, x)),
    ("broadcast", lambda sp, x: sp.broadcast(x, 0)),
    ("reduce", lambda sp, x: sp.reduce(x, 0)),
    ("gather", lambda sp, x: sp.gather(x, x[0], 0)),
    ("scatter", lambda sp, x: sp.scatter(x, x[0], 0)),
    ("all_to_all_single", lambda sp, x: sp.all_to_all_single(x, x)),
    ("all_to_all_single", lambda sp, x: sp.all_to_all_single(x, x, [1, 1], [1, 1])),
    ("all_to_all_device_counts", lambda sp, x: sp.all_to_all_device_counts(x, x, x)),
    ("expert_dispatch", lambda sp, x: sp.expert_dispatch(x, x, x, 1)),
    ("expert_combine", lambda sp, x: sp.expert_combine(x, x, x, 1)),
]


@pytest.mark.parametrize("method,call", _SP_CALLS,
                         ids=[f"{m}-{i}" for i, (m, _) in enumerate(_SP_CALLS)])
def test_single_process_collectives_raise_before_launching(fake_lib, method, call):
    """Any failed comm stops every collective before a launch on any GPU, before the tensors are
    looked at."""
    sp = _fake_single(2)
    fake_lib.async_errors[sp.comms[1].handle] = (int(yali.Result.Timeout), _TIMEOUT_TEXT)
    with pytest.raises(yali.YaliTimeout) as info:
        call(sp, [object(), object()])
    assert info.value.call == f"SingleProcessCommunicator.{method}"
    assert "rank 1 (cuda:0): yaliCommGetAsyncError" in str(info.value)
    assert fake_lib.launches() == []
    sp.comms = []
    with pytest.raises(yali.YaliInvalidUsage, match="closed"):
        call(sp, [object(), object()])


# ---- The uneven exchange (AlltoAllv): tracing, launch functions, single process ------------------

from test_capi_host import A2AV_PARAMS, A2avFakeLib  # noqa: E402


@pytest.fixture
def a2av_lib(monkeypatch):
    """FakeLib taking the AlltoAllv calls too (test_capi_host.A2avFakeLib)."""
    from conftest import FakeLib

    fake = type("FakeLibA2av", (A2avFakeLib, FakeLib), {})()
    monkeypatch.setattr(yali._capi, "_lib", fake)
    return fake


def test_compile_fullgraph_traces_the_uneven_exchange(fake_mode, comm3):
    """torch.compile(fullgraph=True) through every form of the uneven exchange, the optional count
    outputs given and left out (aot_eager functionalizes them), any dtype."""
    c = comm3

    def f(x, counts):
        a = x.new_empty(9, 5)
        c.all_to_all_single(a, x, [2, 3, 4], [1, 1, 4])
        c.all_to_all_single(a[:6], x, None, [2, 2, 2])
        d = x.new_empty(16, 5)
        out_splits, out_offsets = torch.empty_like(counts), torch.empty_like(counts)
        c.all_to_all_device_counts(d, x, counts, out_splits, out_offsets)
        c.all_to_all_device_counts(d, x, counts)
        c.all_to_all_device_counts(d, x, counts, None, out_offsets)
        e = x.new_empty(32, 5)
        send = counts.repeat(2)
        recv, offs = torch.empty_like(send), counts.new_empty(3)
        c.expert_dispatch(e, x, send, 2, 8, recv, offs)
        c.expert_dispatch(e, x, send, 2, align=8)
        back = torch.empty_like(x)
        c.expert_combine(back, e * 2.0, send, 2, 8)
        b = torch.empty(6, 2, dtype=torch.bool, device=x.device)
        c.all_to_all_single(b, (x[:, :2] > 0), [2, 2, 2], [2, 2, 2])
        return a[:6] + d[:6] + e[:6] + back, out_splits + out_offsets + recv[:3] + offs, b

    for backend in ("eager", "aot_eager"):
        torch._dynamo.reset()
        got, counts, b = torch.compile(f, fullgraph=True, backend=backend)(
            _cuda(6, 5), _cuda(3, dtype=torch.int64))
        assert got.shape == (6, 5) and counts.shape == (3,) and b.dtype == torch.bool
    torch._dynamo.reset()


class _Rows:
    """What the uneven exchange's launch functions read of a CUDA tensor."""

    def __init__(self, ptr, shape, dtype=torch.float32, device=0):
        self._ptr = ptr
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self.device = torch.device("cuda", device)

    def dim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return torch.empty((), dtype=self.dtype).element_size()

    def is_contiguous(self):
        return True

    def is_conj(self):
        return False

    def is_neg(self):
        return False

    def data_ptr(self):
        return self._ptr


def _i64(ptr, n):
    return _Rows(ptr, (n,), torch.int64)


def test_a2av_launch_functions_make_the_c_calls(a2av_lib, monkeypatch, no_stream):
    c = _fake_communicator(monkeypatch, rank=1, n=3)
    h = c.handle
    D = yali.DataType

    def last():
        name, comm, kw = a2av_lib.calls[-1]
        assert comm == h and kw.pop("comm") == h and kw.pop("stream") == 0x5000
        return name, kw

    # Host splits in rows -> counts and packed displacements in elements (rows x row width).
    yt._launch_all_to_all_v("op", h, _Rows(0x200, (4, 2, 2)), _Rows(0x100, (6, 2, 2)), [3, 0, 1],
                            [1, 2, 3])
    assert last() == ("yaliAlltoAllv", dict(
        sendbuff=0x100, sendcounts=[4, 8, 12], sdispls=[0, 4, 12], recvbuff=0x200,
        recvcounts=[12, 0, 4], rdispls=[0, 12, 12], datatype=D.Float32))
    # A dtype YALI has no type for travels as the widest type dividing its size.
    for dtype, code, per in ((torch.bool, D.Uint8, 1), (torch.int16, D.Float16, 1),
                             (torch.complex64, D.Int64, 1), (torch.complex128, D.Int64, 2),
                             (torch.bfloat16, D.Bfloat16, 1)):
        yt._launch_all_to_all_v("op", h, _Rows(0x200, (3, 5), dtype), _Rows(0x100, (3, 5), dtype),
                                [1, 1, 1], [0, 2, 1])
        name, kw = last()
        assert (kw["datatype"], kw["sendcounts"]) == (code, [0, 10 * per, 5 * per]), dtype
    # Device counts: yaliExpertDispatch with one expert per rank, capacity = output rows.
    yt._launch_all_to_all_device_counts("op", h, _Rows(0x200, (10, 3), torch.float16),
                                        _Rows(0x100, (4, 3), torch.float16), _i64(0x300, 3),
                                        _i64(0x400, 3), None)
    assert last() == ("yaliExpertDispatch", dict(
        sendbuff=0x100, sendCounts=0x300, recvbuff=0x200, recvCounts=0x400, expertOffsets=None,
        layout=dict(rowBytes=6, localExperts=1, alignRows=1, capacityRows=10, tokenRows=4)))
    yt._launch_all_to_all_device_counts("op", h, _Rows(0x200, (10,)), _Rows(0x100, (4,)),
                                        _i64(0x300, 3), None, None)
    assert last()[1]["recvCounts"] is None and last_layout(a2av_lib)["rowBytes"] == 4
    yt._launch_expert_dispatch("op", h, _Rows(0x200, (64, 8)), _Rows(0x100, (5, 8)),
                               _i64(0x300, 6), 2, 16, _i64(0x400, 6), _i64(0x500, 3))
    assert last() == ("yaliExpertDispatch", dict(
        sendbuff=0x100, sendCounts=0x300, recvbuff=0x200, recvCounts=0x400, expertOffsets=0x500,
        layout=dict(rowBytes=32, localExperts=2, alignRows=16, capacityRows=64, tokenRows=5)))
    # Combine: the expert-major buffer is the input; its rows are the capacity.
    yt._launch_expert_combine("op", h, _Rows(0x100, (5, 8)), _Rows(0x200, (64, 8)),
                              _i64(0x300, 6), 2, 16)
    assert last() == ("yaliExpertCombine", dict(
        sendbuff=0x200, sendCounts=0x300, recvbuff=0x100,
        layout=dict(rowBytes=32, localExperts=2, alignRows=16, capacityRows=64, tokenRows=5)))
    n_calls = len(a2av_lib.launches())

    x, out = _Rows(0x100, (5, 8)), _Rows(0x200, (64, 8))
    bad = [
        (lambda: yt._launch_all_to_all_v("yali::all_to_all_v", h, out, x, [1, 1], [1, 1, 3]),
         ValueError, "output_split_sizes=\\[1, 1\\]"),
        (lambda: yt._launch_all_to_all_v("yali::all_to_all_v", h, out, x, [64, 0, 0], [1, 1, 1]),
         ValueError, "summing to the first dimension of input \\(5\\)"),
        (lambda: yt._launch_all_to_all_v("yali::all_to_all_v", h, _Rows(0x200, (64, 7)), x,
                                         [64, 0, 0], [5, 0, 0]), ValueError, "rows of shape"),
        (lambda: yt._launch_all_to_all_device_counts("yali::dc", h, out, x, _i64(0x300, 2), None,
                                                     None), ValueError, "input_splits has shape"),
        (lambda: yt._launch_all_to_all_device_counts(
            "yali::dc", h, out, x, _i64(0x300, 3), None, _Rows(0x400, (3,), torch.int32)),
         TypeError, "output_offsets must have dtype torch.int64"),
        (lambda: yt._launch_expert_dispatch("yali::ed", h, out, x, _i64(0x300, 6), 0, 1, None,
                                            None), ValueError, "local_experts=0"),
        (lambda: yt._launch_expert_dispatch("yali::ed", h, out, x, _i64(0x300, 6), 2, 1, None,
                                            _i64(0x500, 2)), ValueError, "expert_offsets"),
        (lambda: yt._launch_expert_combine("yali::ec", h, x, out, _i64(0x300, 6), 2, 0),
         ValueError, "align=0"),
        (lambda: yt._launch_expert_combine("yali::ec", h, x, _Rows(0x200, (64, 8), device=1),
                                           _i64(0x300, 6), 2, 1), ValueError, "cuda:1"),
        (lambda: yt._launch_expert_combine("yali::ec", 0xBAD, x, out, _i64(0x300, 6), 2, 1),
         yali.YaliInvalidUsage, "not a live"),
    ]
    for call, exc, words in bad:
        with pytest.raises(exc, match=words):
            call()
    assert len(a2av_lib.launches()) == n_calls  # refused before the C call


def last_layout(fake):
    return fake.calls[-1][2]["layout"]


_A2AV_LAUNCHES = [
    ("yaliAlltoAllv", lambda h: yt._launch_all_to_all_v(
        "yali::all_to_all_v", h, _Rows(0x200, (4,)), _Rows(0x100, (4,)), [2, 2], [2, 2])),
    ("yaliExpertDispatch", lambda h: yt._launch_all_to_all_device_counts(
        "yali::all_to_all_device_counts", h, _Rows(0x200, (4,)), _Rows(0x100, (4,)),
        _i64(0x300, 2), None, None)),
    ("yaliExpertDispatch", lambda h: yt._launch_expert_dispatch(
        "yali::expert_dispatch", h, _Rows(0x200, (4,)), _Rows(0x100, (4,)), _i64(0x300, 2), 1, 1,
        None, None)),
    ("yaliExpertCombine", lambda h: yt._launch_expert_combine(
        "yali::expert_combine", h, _Rows(0x200, (4,)), _Rows(0x100, (4,)), _i64(0x300, 2), 1, 1)),
]


@pytest.mark.parametrize("call,launch", _A2AV_LAUNCHES,
                         ids=["all_to_all_v", "device_counts", "expert_dispatch", "expert_combine"])
def test_a2av_launch_raises_the_async_error(a2av_lib, monkeypatch, no_stream, call, launch):
    """A count check that failed on the device (capacity exceeded, on any rank) fails the comm on
    every rank: every later operator raises YaliInvalidUsage with its own C call's message."""
    c = _fake_communicator(monkeypatch, rank=0, n=2)
    a2av_lib.record_on_comm = False
    text = "rank 1: alltoallv count check: the rows received exceed the capacity"
    a2av_lib.async_errors[c.handle] = (int(yali.Result.InvalidUsage), text)
    with pytest.raises(yali.YaliInvalidUsage) as info:
        launch(c.handle)
    assert info.value.call == call and info.value.detail == f"{call}: {text}"


def test_source_offsets_keep_the_failure_flag():
    """output_offsets: exclusive prefix sums of the received rows; -1 wherever the failed count
    check left -1 in the counts."""
    counts = torch.tensor([3, 0, 5, 2])
    offsets = torch.empty(4, dtype=torch.int64)
    yt._source_offsets(counts, offsets)
    assert offsets.tolist() == [0, 3, 3, 8]
    yt._source_offsets(torch.full((3,), -1), offsets[:3])
    assert offsets[:3].tolist() == [-1, -1, -1]


def _a2av_group_calls(fake):
    names = [c[0] for c in fake.calls if c[0] != "yaliCommGetAsyncError"]
    assert names[0] == "yaliGroupStart" and names[-1] == "yaliGroupEnd", names
    got = [c for c in fake.calls if c[0] in A2AV_PARAMS]
    del fake.calls[:]
    return got


def test_single_process_uneven_exchange_makes_the_c_calls(a2av_lib, fake_cuda, quiet_data_ptr):
    sp = _fake_single(3)  # devices [0, 0, 0]
    D = yali.DataType
    cu = functools.partial(torch.empty, device="cuda:0")
    # GPU i sends splits[i][j] rows to GPU j; outputs sized by what each receives.
    splits = [[1, 2, 0], [0, 1, 1], [3, 0, 2]]
    recv = [[splits[i][j] for i in range(3)] for j in range(3)]
    ins = [cu(sum(s), 2) for s in splits]
    outs = [cu(sum(r), 2) for r in recv]
    assert sp.all_to_all_single(outs, ins, recv, splits) == outs
    got = _a2av_group_calls(a2av_lib)
    assert [g[1] for g in got] == [c.handle for c in sp.comms]
    assert [g[2]["sendcounts"] for g in got] == [[2, 4, 0], [0, 2, 2], [6, 0, 4]]
    assert [g[2]["rdispls"] for g in got] == [[0, 2, 2], [0, 4, 6], [0, 0, 2]]
    assert {g[2]["datatype"] for g in got} == {D.Float32}
    # One flat list: the same splits on every GPU (and each output's even split when None).
    sq = [cu(6, 2, dtype=torch.complex64) for _ in range(3)]
    sp.all_to_all_single([cu(6, 2, dtype=torch.complex64) for _ in range(3)], sq, None,
                         [2, 2, 2])
    assert {tuple(g[2]["recvcounts"]) for g in _a2av_group_calls(a2av_lib)} == {(4, 4, 4)}
    i64 = functools.partial(cu, dtype=torch.int64)
    # Device counts: per GPU capacity; offsets computed after the group.
    offs = [i64(3) for _ in range(3)]
    sp.all_to_all_device_counts(outs, ins, [i64(3) for _ in range(3)], None, offs)
    got = _a2av_group_calls(a2av_lib)
    assert [g[0] for g in got] == ["yaliExpertDispatch"] * 3
    assert [g[2]["layout"]["capacityRows"] for g in got] == [o.shape[0] for o in outs]
    assert all(g[2]["recvCounts"] is not None for g in got)  # a temporary feeds the offsets
    sp.expert_dispatch(outs, ins, [i64(6) for _ in range(3)], 2, 8)
    got = _a2av_group_calls(a2av_lib)
    assert {(g[2]["layout"]["localExperts"], g[2]["layout"]["alignRows"],
             g[2]["layout"]["rowBytes"]) for g in got} == {(2, 8, 8)}
    sp.expert_combine(ins, outs, [i64(6) for _ in range(3)], 2, 8)
    got = _a2av_group_calls(a2av_lib)
    assert [g[2]["layout"]["capacityRows"] for g in got] == [o.shape[0] for o in outs]

    m = "SingleProcessCommunicator"
    cases = [
        (lambda: sp.all_to_all_single([cu(6, 2)] * 3, ins, [[2, 2, 2]] * 3, splits), ValueError,
         [f"{m}.all_to_all_single", "GPU 0 sends 1 rows to GPU 0", "expects 2", "must agree"]),
        (lambda: sp.all_to_all_single(outs, ins, recv, splits[:2]), ValueError,
         ["input_split_sizes has 2 tensors, expected 3"]),
        (lambda: sp.all_to_all_single(outs, [cu(3, 3)] * 3, recv, splits), ValueError,
         ["rows of shape"]),
        (lambda: sp.all_to_all_single([cu(6, 2)] * 3, [cu(6, 2)] * 2 + [cu(6, 2, dtype=torch.int8)],
                                      None, [2, 2, 2]), TypeError, ["dtype", "must match"]),
        (lambda: sp.all_to_all_device_counts(outs, ins, None), ValueError,
         [f"{m}.all_to_all_device_counts", "input_splits is required"]),
        (lambda: sp.all_to_all_device_counts(outs, ins, [i64(3), i64(3), i64(2)]), ValueError,
         ["input_splits[2] has shape (2,)"]),
        (lambda: sp.all_to_all_device_counts(outs, ins, [i64(3)] * 3, [None, cu(3), None]),
         TypeError, ["output_splits[1] must have dtype torch.int64"]),
        (lambda: sp.expert_dispatch(outs, ins, [i64(6)] * 3, 0), ValueError,
         [f"{m}.expert_dispatch", "local_experts=0"]),
        (lambda: sp.expert_dispatch(outs, ins, [i64(6)] * 3, 2, 1, [i64(6), None, i64(5)]),
         ValueError, ["recv_counts[2] has shape (5,)"]),
        (lambda: sp.expert_combine(ins, outs, [i64(5)] * 3, 2), ValueError,
         [f"{m}.expert_combine", "send_counts[0] has shape (5,)"]),
    ]
    for call, exc, words in cases:
        with pytest.raises(exc) as info:
            call()
        missing = [w for w in words if w not in str(info.value)]
        assert not missing, f"{info.value!r} lacks {missing}"
    assert a2av_lib.launches() == []


# ---- Inside yali.group(): the forms with work of their own after the collective are refused ------
#
# Inside a group a collective is only queued: it is launched at the outermost group end. A copy, an
# offsets computation or a stream join that a method issues right after its collective would then
# run before it, and a temporary the collective reads would be freed before it runs.


def _refused_in_group(call, method):
    """``call`` refused inside a group (YaliInvalidUsage naming ``method``), which then launches none
    of its calls: its end raises the refusal again (NCCL's rule, yali.group_start)."""
    with pytest.raises(yali.YaliInvalidUsage) as at_end:
        with yali.group():
            with pytest.raises(yali.YaliInvalidUsage) as info:
                call()
    assert at_end.value.call == "yaliGroupEnd" and method in str(at_end.value), str(at_end.value)
    assert yali._group_depth() == 0
    text = str(info.value)
    assert info.value.call == method and "yali.group()" in text, text
    return text


def test_single_process_call_failing_on_one_gpu_launches_on_none(fake_lib, fake_cuda, quiet_data_ptr):
    """A SingleProcessCommunicator call groups its per-GPU launches; when one GPU's call fails (its
    comm failed), the group launches nothing (yaliGroupSimulateEnd): before, the other GPUs'
    launches ran at the group's end and waited for the missing peer until YALI_TIMEOUT_MS."""
    sp = _fake_single(3)
    sp.devices = _fake_devices(3)  # distinct GPUs: each rank on its device's current stream
    for comm, d in zip(sp.comms, sp.devices):
        comm._device = d
    x = [torch.empty(4, device=f"cuda:{d}") for d in sp.devices]
    sp.all_reduce(x)  # healthy: launched on all three at the group's end
    assert [c[0] for c in fake_lib.calls if c[0] != "yaliCommGetAsyncError"] == (
        ["yaliGroupStart"] + ["yaliAllReduce"] * 3 + ["yaliGroupEnd"])
    del fake_lib.calls[:]
    # Failed between the method's check of the async errors and the launch (a peer's kernel
    # failed meanwhile): the fake's yaliAllReduce on rank 1 returns the error.
    real_begin = sp._begin
    sp._begin = lambda method: None
    fake_lib.async_errors[sp.comms[1].handle] = (int(yali.Result.RemoteError), "a peer aborted")
    with pytest.raises(yali.YaliRemoteError) as info:
        sp.all_reduce(x)
    assert info.value.call == "yaliAllReduce", str(info.value)
    names = [c[0] for c in fake_lib.calls if c[0] != "yaliCommGetAsyncError"]
    assert names == ["yaliGroupStart", "yaliAllReduce", "yaliAllReduce", "yaliGroupSimulateEnd"], names
    assert yali._group_depth() == 0
    sp._begin = real_begin


def test_communicator_refuses_list_forms_inside_a_group(fake_lib, fake_mode, comm3, op_calls):
    c = comm3  # rank 1 of 3
    x = _cuda(4, 5)
    text = _refused_in_group(lambda: c.gather(x, [_cuda(4, 5) for _ in range(3)], dst=1),
                             "Communicator.gather")
    assert "gather_list" in text and "one tensor" in text, text
    text = _refused_in_group(lambda: c.scatter(x, [_cuda(20) for _ in range(3)], src=1),
                             "Communicator.scatter")
    assert "scatter_list" in text, text
    assert op_calls == []  # nothing queued
    assert [call[0] for call in fake_lib.calls] == ["yaliGroupStart", "yaliGroupSimulateEnd"] * 2
    # The one-tensor forms, and the calls off the root (no list there), are fine.
    with yali.group():
        c.gather(x, _cuda(60), dst=1)
        c.gather(x, None, dst=0)
        c.scatter(x, _cuda(3, 4, 5), src=1)
        c.scatter(x, None, src=2)
    assert [name for name, _ in op_calls] == ["gather", "gather", "scatter", "scatter"]
    # Outside a group the list forms work as before.
    c.gather(x, [_cuda(4, 5) for _ in range(3)], dst=1)
    c.scatter(x, [_cuda(20) for _ in range(3)], src=1)
    assert len(op_calls) == 6


def test_device_count_offsets_are_refused_inside_a_group(a2av_lib, monkeypatch, no_stream):
    """all_to_all_device_counts computes output_offsets on the stream after its launch: refused in a
    group (by the operator's launch, so the method, torch.ops.yali and compiled code alike), before
    the C call. Without output_offsets it is fine."""
    c = _fake_communicator(monkeypatch, rank=1, n=3)
    out, x = _Rows(0x200, (10, 3)), _Rows(0x100, (4, 3))
    text = _refused_in_group(lambda: yt._launch_all_to_all_device_counts(
        "yali::all_to_all_device_counts", c.handle, out, x, _i64(0x300, 3), _i64(0x400, 3),
        _i64(0x500, 3)), "yali::all_to_all_device_counts")
    assert "output_offsets" in text, text
    assert a2av_lib.launches() == []
    with yali.group():
        yt._launch_all_to_all_device_counts("yali::all_to_all_device_counts", c.handle, out, x,
                                            _i64(0x300, 3), _i64(0x400, 3), None)
    assert [call[0] for call in a2av_lib.calls if call[0] != "yaliCommGetAsyncError"][-3:] == [
        "yaliGroupStart", "yaliExpertDispatch", "yaliGroupEnd"]


def test_single_process_refuses_work_after_the_launch_inside_an_outer_group(
        a2av_lib, fake_cuda, quiet_data_ptr):
    """Each call groups its launches itself; nested in an outer yali.group() they wait for the outer
    end, so the forms that do work after their launch are refused there: a list gather_list (copied
    out after), a list scatter_list (its temporary buffer), output_offsets (computed after), and any
    call on ranks that share a GPU (the current stream's join to their side streams)."""
    m = "SingleProcessCommunicator"
    sp = _fake_single(3)
    sp.devices = _fake_devices(3)  # distinct GPUs: no side streams
    for comm, d in zip(sp.comms, sp.devices):
        comm._device = d
    x = [torch.empty(4, device=f"cuda:{d}") for d in sp.devices]
    i64 = [torch.empty(3, dtype=torch.int64, device=f"cuda:{d}") for d in sp.devices]
    rows = [torch.empty(6, 2, device=f"cuda:{d}") for d in sp.devices]
    text = _refused_in_group(lambda: sp.gather(x, [torch.empty(4, device="cuda:1")] * 3, dst=1),
                             f"{m}.gather")
    assert "gather_list" in text, text
    text = _refused_in_group(lambda: sp.scatter(x, [torch.empty(4, device="cuda:0")] * 3, src=0),
                             f"{m}.scatter")
    assert "scatter_list" in text, text
    text = _refused_in_group(lambda: sp.all_to_all_device_counts(rows, rows, i64, None, i64),
                             f"{m}.all_to_all_device_counts")
    assert "output_offsets" in text, text
    assert a2av_lib.launches() == []
    # The other forms nest (launched at the outer end, in call order).
    with yali.group():
        sp.gather(x, torch.empty(12, device="cuda:1"), dst=1)
        sp.broadcast(x, 0)
        sp.all_to_all_device_counts(rows, rows, i64, i64)
    names = [c[0] for c in a2av_lib.calls if c[0] != "yaliCommGetAsyncError"]
    assert names[0] == "yaliGroupStart" and names[-1] == "yaliGroupEnd", names
    assert [n for n in names if not n.startswith("yaliGroup")] == (
        ["yaliGather"] * 3 + ["yaliBroadcast"] * 3 + ["yaliExpertDispatch"] * 3)
    shared = _fake_single(2)  # devices [0, 0]: side streams
    y = [torch.empty(4, device="cuda:0") for _ in range(2)]
    del a2av_lib.calls[:]
    text = _refused_in_group(lambda: shared.broadcast(y, 0), f"{m}.broadcast")
    assert "share a GPU" in text, text
    assert a2av_lib.launches() == []
    shared.broadcast(y, 0)  # outside a group: fine
    assert len(a2av_lib.launches("yaliBroadcast")) == 2


# ---- bool and complex, as torch.distributed's NCCL backend takes them --------------------------
#
# torch (ProcessGroupNCCL.cpp, distributed_c10d.py, 2.11): bool travels as ncclUint8 and a SUM on
# it is run as MAX (AVG: refused); a complex tensor travels as torch.view_as_real of it (its real
# type, twice the elements), and a reduction on it is refused unless it is SUM or AVG (MAX, MIN,
# PRODUCT would act on the real and imaginary parts apart). yali.torch does the same in the launch
# functions (so that torch.ops.yali.* called directly do it too), with PRODUCT on bool run as MIN.

_C32 = getattr(torch, "complex32", None)
_WIRE_CASES = [(torch.bool, "Uint8", 1), (torch.complex64, "Float32", 2),
               (torch.complex128, "Float64", 2)] + ([(_C32, "Float16", 2)] if _C32 else [])


@pytest.mark.parametrize("dtype,wire,per", _WIRE_CASES, ids=lambda v: str(v))
def test_bool_and_complex_reach_the_data_moving_c_calls_as_torch_moves_them(
        fake_lib, monkeypatch, no_stream, dtype, wire, per):
    c = _fake_communicator(monkeypatch, rank=1, n=3)
    h, D = c.handle, yali.DataType
    want = D[wire]

    def last():
        return fake_lib.calls[-1][0], fake_lib.launches()[-1]

    yt._launch_all_gather("op", h, _Duck(0x200, 12, dtype), _Duck(0x100, 4, dtype))
    assert last() == ("yaliAllGather", dict(sendbuff=0x100, recvbuff=0x200, sendcount=4 * per,
                                            datatype=want, comm=h, stream=0x5000))
    yt._launch_broadcast("op", h, _Duck(0x300, 7, dtype), 2)
    assert last() == ("yaliBroadcast", dict(sendbuff=0x300, recvbuff=0x300, count=7 * per,
                                            datatype=want, root=2, comm=h, stream=0x5000))
    yt._launch_gather("op", h, _Duck(0x200, 12, dtype), _Duck(0x100, 4, dtype), 1)
    assert last() == ("yaliGather", dict(sendbuff=0x100, recvbuff=0x200, count=4 * per,
                                         datatype=want, root=1, comm=h, stream=0x5000))
    yt._launch_scatter("op", h, _Duck(0x200, 4, dtype), _Duck(0x100, 12, dtype), 1)
    assert last() == ("yaliScatter", dict(sendbuff=0x100, recvbuff=0x200, count=4 * per,
                                          datatype=want, root=1, comm=h, stream=0x5000))
    yt._launch_all_to_all("op", h, _Duck(0x200, 12, dtype), _Duck(0x100, 12, dtype))
    assert last() == ("yaliAlltoAll", dict(sendbuff=0x100, recvbuff=0x200, count=4 * per,
                                           datatype=want, comm=h, stream=0x5000))
    yt._launch_send("op", h, _Duck(0x100, 5, dtype), 2)
    assert last() == ("yaliSend", dict(sendbuff=0x100, count=5 * per, datatype=want, peer=2,
                                       comm=h, stream=0x5000))
    yt._launch_recv("op", h, _Duck(0x200, 5, dtype), 0)
    assert last() == ("yaliRecv", dict(recvbuff=0x200, count=5 * per, datatype=want, peer=0,
                                       comm=h, stream=0x5000))


def _reduction_launches(h, dtype, op):
    """(C call, launch) of every reduction on ``dtype`` with yali op code ``op``: 4 elements of
    output (12 of input for reduce_scatter)."""
    return [
        ("yaliAllReduce", lambda: yt._launch_all_reduce("yali::all_reduce_", h,
                                                        *(2 * [_Duck(0x100, 4, dtype)]), op)),
        ("yaliReduceScatter", lambda: yt._launch_reduce_scatter(
            "yali::reduce_scatter_tensor", h, _Duck(0x200, 4, dtype), _Duck(0x100, 12, dtype), op)),
        ("yaliReduce", lambda: yt._launch_reduce("yali::reduce_", h, _Duck(0x100, 4, dtype), op,
                                                  0)),
    ]


def test_bool_reductions_run_on_uint8_with_sum_as_max_and_prod_as_min(fake_lib, monkeypatch,
                                                                      no_stream):
    c = _fake_communicator(monkeypatch, rank=1, n=3)
    R, D = yali.RedOp, yali.DataType
    for op, sent in ((R.Sum, R.Max), (R.Prod, R.Min), (R.Max, R.Max), (R.Min, R.Min)):
        for call, launch in _reduction_launches(c.handle, torch.bool, int(op)):
            launch()
            name, params = fake_lib.calls[-1][0], fake_lib.launches()[-1]
            assert name == call
            assert (params["datatype"], params["op"]) == (D.Uint8, sent), (call, op)
            assert params.get("count", params.get("recvcount")) == 4
    n = len(fake_lib.launches())
    for call, launch in _reduction_launches(c.handle, torch.bool, int(R.Avg)):
        with pytest.raises(ValueError, match="avg") as info:
            launch()
        assert "torch.bool" in str(info.value), str(info.value)
    assert len(fake_lib.launches()) == n  # refused before the C call


@pytest.mark.parametrize("dtype,wire,per", _WIRE_CASES[1:], ids=lambda v: str(v))
def test_complex_reductions_are_sum_and_avg_on_the_real_view(fake_lib, monkeypatch, no_stream,
                                                             dtype, wire, per):
    c = _fake_communicator(monkeypatch, rank=1, n=3)
    R, D = yali.RedOp, yali.DataType
    for op in (R.Sum, R.Avg):
        for call, launch in _reduction_launches(c.handle, dtype, int(op)):
            launch()
            name, params = fake_lib.calls[-1][0], fake_lib.launches()[-1]
            assert name == call
            assert (params["datatype"], params["op"]) == (D[wire], op), (call, op)
            assert params.get("count", params.get("recvcount")) == 4 * per
    n = len(fake_lib.launches())
    for op, word in ((R.Max, "max"), (R.Min, "min"), (R.Prod, "prod")):
        for call, launch in _reduction_launches(c.handle, dtype, int(op)):
            with pytest.raises(ValueError) as info:
                launch()
            text = str(info.value)
            assert f"op={word}" in text and "complex" in text and str(dtype) in text, text
    assert len(fake_lib.launches()) == n  # refused before the C call


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_bool_and_complex_methods_and_fake_results(fake_mode, comm3):
    """Every method takes bool and complex tensors (reductions: the ops torch takes); the fake
    implementations give outputs of the input's dtype (a complex result stays complex); in-place
    and out= forms return the tensor they were given."""
    c = comm3
    for dtype, _, _ in _WIRE_CASES:
        x = _cuda(6, 5, dtype=dtype)
        ops = ("sum", "prod", "max", "min") if dtype is torch.bool else ("sum", "avg")
        for op in ops:
            assert c.all_reduce(x, op) is x
            out = _cuda(6, 5, dtype=dtype)
            assert c.all_reduce(x, op, out=out) is out
            r = c.all_reduce_functional(x, op)
            assert (r.shape, r.dtype) == ((6, 5), dtype)
            rs = _cuda(2, 5, dtype=dtype)
            assert c.reduce_scatter_tensor(rs, x, op) is rs
            r = c.reduce_scatter_functional(x, op)
            assert (r.shape, r.dtype) == ((2, 5), dtype)
            assert c.reduce(x, 0, op) is x
        out = _cuda(18, 5, dtype=dtype)
        assert c.all_gather_into_tensor(out, x) is out
        r = c.all_gather_functional(x)
        assert (r.shape, r.dtype) == ((18, 5), dtype)
        assert c.broadcast(x, 2) is x
        g = _cuda(90, dtype=dtype)
        assert c.gather(x, g, dst=1) is g
        assert c.gather(x, [_cuda(30, dtype=dtype) for _ in range(3)], dst=1) is not None
        assert c.scatter(x, _cuda(3, 6, 5, dtype=dtype), src=1) is x
        a = _cuda(6, 5, dtype=dtype)
        assert c.all_to_all_single(a, x) is a
        r = c.all_to_all_functional(x)
        assert (r.shape, r.dtype) == ((6, 5), dtype)


def test_bool_and_complex_refusals_name_the_method_and_the_op(fake_mode, comm3):
    c, R = comm3, torch.distributed.ReduceOp
    b, z = _cuda(6, dtype=torch.bool), _cuda(6, dtype=torch.complex64)
    calls = [
        (lambda: c.all_reduce(b, "avg"), "Communicator.all_reduce", ["op=avg", "torch.bool"]),
        (lambda: c.reduce(b, 0, R.AVG), "Communicator.reduce", ["op=avg", "torch.bool"]),
        (lambda: c.all_reduce(z, R.MAX), "Communicator.all_reduce", ["op=max", "complex"]),
        (lambda: c.all_reduce(z, "min", out=_cuda(6, dtype=torch.complex64)),
         "Communicator.all_reduce", ["op=min", "complex"]),
        (lambda: c.all_reduce_functional(z, "prod"), "Communicator.all_reduce_functional",
         ["op=prod", "complex"]),
        (lambda: c.reduce_scatter_tensor(_cuda(2, dtype=torch.complex64), z, "max"),
         "Communicator.reduce_scatter_tensor", ["op=max", "complex"]),
        (lambda: c.reduce_scatter_functional(z, R.PRODUCT),
         "Communicator.reduce_scatter_functional", ["op=prod", "complex"]),
        (lambda: c.reduce(z, 0, "min"), "Communicator.reduce", ["op=min", "complex"]),
        # The operators themselves (their fake implementations), as torch.compile calls them.
        (lambda: yt._all_reduce_ops.functional(z, c.handle, int(yali.RedOp.Max)),
         "yali::all_reduce", ["op=max", "complex"]),
        (lambda: torch.ops.yali.reduce_(b, c.handle, int(yali.RedOp.Avg), 0), "yali::reduce_",
         ["op=avg", "torch.bool"]),
    ]
    for call, method, words in calls:
        with pytest.raises(ValueError) as info:
            call()
        text = str(info.value)
        assert method in text and all(w in text for w in words), text


def test_compile_fullgraph_traces_bool_and_complex(fake_mode, comm3):
    """aot_eager functionalizes the in-place and out= forms on complex and bool tensors: the results
    keep their dtype."""
    c = comm3

    def f(x, flags):
        y = x.clone()
        c.all_reduce(y, "sum")
        out = torch.empty_like(x)
        c.all_reduce(x, "avg", out=out)
        g = torch.empty(18, 5, dtype=x.dtype, device=x.device)
        c.all_gather_into_tensor(g, x)
        c.broadcast(flags, 0)
        c.all_reduce(flags, "max")
        return y + out + g[:6] + c.all_reduce_functional(x), flags

    for backend in ("eager", "aot_eager"):
        torch._dynamo.reset()
        got, flags = torch.compile(f, fullgraph=True, backend=backend)(
            _cuda(6, 5, dtype=torch.complex64), _cuda(4, dtype=torch.bool))
        assert (got.shape, got.dtype) == ((6, 5), torch.complex64)
        assert flags.dtype == torch.bool
    torch._dynamo.reset()


def test_single_process_bool_and_complex_make_the_c_calls(fake_lib, fake_cuda, quiet_data_ptr):
    sp = _fake_single(3)
    sp.devices = _fake_devices(3)
    for comm, d in zip(sp.comms, sp.devices):
        comm._device = d
    D, R = yali.DataType, yali.RedOp

    def launched(call):
        got = _group_calls(fake_lib)
        del fake_lib.calls[:]
        assert [c[0] for c in got] == [call] * 3
        return {tuple(sorted((k, v) for k, v in c[2].items()
                             if k in ("count", "sendcount", "recvcount", "datatype", "op")))
                for c in got}

    def per_gpu(*shape, dtype):
        return [torch.empty(*shape, dtype=dtype, device=f"cuda:{d}") for d in sp.devices]

    b = per_gpu(6, dtype=torch.bool)
    sp.all_reduce(b, "sum")
    assert launched("yaliAllReduce") == {(("count", 6), ("datatype", D.Uint8), ("op", R.Max))}
    sp.reduce(b, 1, "prod")
    assert launched("yaliReduce") == {(("count", 6), ("datatype", D.Uint8), ("op", R.Min))}
    sp.broadcast(b, 0)
    assert launched("yaliBroadcast") == {(("count", 6), ("datatype", D.Uint8))}
    z = per_gpu(6, dtype=torch.complex128)
    sp.all_reduce(z, "avg")
    assert launched("yaliAllReduce") == {(("count", 12), ("datatype", D.Float64), ("op", R.Avg))}
    sp.reduce_scatter_tensor(per_gpu(2, dtype=torch.complex128), z, "sum")
    assert launched("yaliReduceScatter") == {(("datatype", D.Float64), ("op", R.Sum),
                                              ("recvcount", 4))}
    sp.all_gather_into_tensor(per_gpu(18, dtype=torch.complex128), z)
    assert launched("yaliAllGather") == {(("datatype", D.Float64), ("sendcount", 12))}
    sp.all_to_all_single(per_gpu(6, dtype=torch.complex128), z)
    assert launched("yaliAlltoAll") == {(("count", 4), ("datatype", D.Float64))}
    sp.gather(z, torch.empty(18, dtype=torch.complex128, device="cuda:0"), dst=0)
    assert launched("yaliGather") == {(("count", 12), ("datatype", D.Float64))}
    sp.scatter(z, torch.empty(18, dtype=torch.complex128, device="cuda:2"), src=2)
    assert launched("yaliScatter") == {(("count", 12), ("datatype", D.Float64))}
    for call in (lambda: sp.all_reduce(z, "max"), lambda: sp.reduce(b, 0, "avg")):
        with pytest.raises(ValueError, match="SingleProcessCommunicator"):
            call()
    assert fake_lib.launches() == []


def test_algo_info_asks_for_the_type_and_op_the_call_runs(fake_lib):
    """algo_info of a bool or complex tensor asks yaliAlgoInfo about what the call would launch."""
    comm, D, R = _fake_comm(0, 3), yali.DataType, yali.RedOp
    z = torch.zeros(12, dtype=torch.complex64)
    yt._algo_info(comm, "m", z, "avg", None, "reduce_scatter", 0, 3)
    yt._algo_info(comm, "m", z, "sum", None, "all_gather", 0, 3)
    b = torch.zeros(12, dtype=torch.bool)
    yt._algo_info(comm, "m", b, "sum", None, "reduce", 0, 3)
    got = [(c[2]["count"], c[2]["datatype"], c[2]["op"]) for c in fake_lib.calls
           if c[0] == "yaliAlgoInfo"]
    assert got == [(8, D.Float32, R.Avg), (24, D.Float32, R.Sum), (12, D.Uint8, R.Max)]
    with pytest.raises(ValueError, match="op=max is not supported on complex"):
        yt._algo_info(comm, "Communicator.algo_info", z, "max", None, "reduce", 0, 3)


# ---- Lazy views, and a group's hold on its calls' tensors ----------------------------------------


def test_conjugate_and_negative_views_are_refused(fake_mode, comm3, fake_lib, monkeypatch,
                                                  no_stream):
    """x.conj() of a complex tensor (and a negative view) keeps the original bytes and a bit torch
    applies on reading: the library would move and reduce the bytes, so the result would silently
    be that of x. Refused by the methods (eagerly and in their fakes) and by the launch functions
    (torch.ops.yali called directly), naming the argument, as torch.distributed refuses them."""
    c = comm3
    x = torch.empty(4, dtype=torch.complex64, device="cuda")
    out = torch.empty(12, dtype=torch.complex64, device="cuda")
    with pytest.raises(ValueError, match=r"input_tensor is a conjugate view .*resolve_conj"):
        c.all_gather_into_tensor(out, x.conj())
    with pytest.raises(ValueError, match=r"tensor is a conjugate view"):
        c.all_reduce(x.conj(), out=torch.empty_like(x))
    with pytest.raises(ValueError, match=r"out is a conjugate view"):
        c.all_reduce(x, out=torch.empty_like(x).conj())
    with pytest.raises(ValueError, match=r"conjugate view"):
        c.broadcast(x.conj(), src=0)
    neg = torch._neg_view(torch.empty(4, device="cuda"))
    assert neg.is_neg()
    with pytest.raises(ValueError, match=r"tensor is a negative view, .*resolve_neg"):
        c.all_reduce(neg)
    c.all_gather_into_tensor(out, x.conj().resolve_conj())  # resolved: fine

    class _Conj(_Duck):
        def is_conj(self):
            return True

    h = _fake_communicator(monkeypatch, rank=1, n=3).handle
    with pytest.raises(ValueError, match=r"yali::all_gather_into_tensor: input is a conjugate"):
        yt._launch_all_gather("yali::all_gather_into_tensor", h, _Duck(0x200, 12),
                              _Conj(0x100, 4))
    with pytest.raises(ValueError, match=r"op: out is a conjugate"):
        yt._launch_all_reduce("op", h, _FakeCudaTensor(0x100, 16), _Conj(0x200, 16), 0)
    assert fake_lib.launches() == []


def test_a_group_holds_its_calls_tensors_until_its_end(fake_lib, monkeypatch, no_stream):
    """Inside a group a call only queues; it launches at the outermost end. A temporary the caller
    drops at once (all_reduce(g.to(torch.bfloat16))) must not go back to the caching allocator
    before then, or work queued ahead of the launch could reuse its memory: the group holds every
    tensor of its calls until its outermost end (launched or dropped), then lets go."""
    import weakref

    c = _fake_communicator(monkeypatch, rank=1, n=3)
    h = c.handle

    def queue_in_nested_groups():
        with yali.group():
            src, dst = _Duck(0x100, 4), _Duck(0x200, 12)
            refs = [weakref.ref(src), weakref.ref(dst)]
            yt._launch_all_gather("op", h, dst, src)
            del src, dst
        assert all(r() is not None for r in refs)  # the inner end launches nothing
        return refs

    with yali.group():
        refs = queue_in_nested_groups()
    assert [r() for r in refs] == [None, None]
    # A group whose end launches nothing (a call in it failed: NCCL's rule) lets go too.
    with pytest.raises(yali.YaliInvalidArgument, match="launches nothing"):
        with yali.group():
            refs = queue_in_nested_groups()
            yali._capi._note_group_failure(yali.YaliInvalidArgument(
                yali.Result.InvalidArgument, "op", "a refused call"))
    assert [r() for r in refs] == [None, None]


def test_send_and_recv_in_a_group(fake_lib, monkeypatch, no_stream):
    """Inside yali.group() a rank's sends and receives queue and launch together at the outermost
    end (the library fuses a comm's point-to-point calls there), their tensors held until then;
    a call refused inside the group with a YaliError (on a closed comm, say) makes the group launch
    none of them."""
    import weakref

    c = _fake_communicator(monkeypatch, rank=1, n=3)
    h = c.handle
    with yali.group():
        out, back = _Duck(0x100, 4), _Duck(0x200, 4)
        refs = [weakref.ref(out), weakref.ref(back)]
        yt._launch_send("yali::send", h, out, 2)
        yt._launch_recv("yali::recv_", h, back, 0)
        del out, back
        assert all(r() is not None for r in refs)
    assert [r() for r in refs] == [None, None]
    names = [call[0] for call in fake_lib.calls]
    assert names == ["yaliGroupStart", "yaliSend", "yaliRecv", "yaliGroupEnd"], names
    fake_lib.calls.clear()
    with pytest.raises(yali.YaliInvalidUsage, match="none of the group's calls was launched"):
        with yali.group():
            yt._launch_send("yali::send", h, _Duck(0x100, 4), 2)
            with pytest.raises(yali.YaliInvalidUsage, match="not a live"):
                yt._launch_recv("yali::recv_", 0xBAD, _Duck(0x200, 4), 0)
    assert fake_lib.calls[-1] == ("yaliGroupSimulateEnd",)


def test_a_failed_group_lets_go_of_its_calls_tensors(fake_lib, monkeypatch, no_stream):
    import weakref

    c = _fake_communicator(monkeypatch, rank=1, n=3)
    with pytest.raises(RuntimeError, match="left the block"):
        with yali.group():
            src = _Duck(0x100, 4)
            ref = weakref.ref(src)
            yt._launch_all_reduce("op", c.handle, src, src, 0)
            del src
            assert ref() is not None
            raise RuntimeError("left the block")
    assert ref() is None


def test_tracing_under_torch_before_2_10_warns_once(fake_mode, comm3, monkeypatch):
    """Before torch 2.10, torch.compile may drop a collective whose output this rank never reads
    (has_side_effect is ignored there): the fake implementations, which only tracing runs, say so
    once per process."""
    monkeypatch.setattr(yt, "_OLD_TORCH_COMPILE", True)
    monkeypatch.setattr(yt, "_warned_old_compile", False)
    x = _cuda(6, 5)
    with pytest.warns(RuntimeWarning, match=r"before torch 2\.10, torch\.compile may drop"):
        torch.ops.yali.all_reduce(x, comm3.handle, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.ops.yali.all_reduce(x, comm3.handle, 0)  # once
        torch.ops.yali.all_gather(x, comm3.handle, 3)


def test_single_process_calls_in_an_outer_group_hold_their_tensors(fake_lib, fake_cuda,
                                                                    quiet_data_ptr):
    """A SingleProcessCommunicator call inside the caller's yali.group() launches at the caller's
    outermost end: its tensors (a temporary of the caller's, say) are held until then, as for
    Communicator calls."""
    import weakref

    sp = _fake_single(3)
    sp.devices = _fake_devices(3)  # distinct GPUs: calls may nest in an outer group
    for comm, d in zip(sp.comms, sp.devices):
        comm._device = d
    with yali.group():
        temps = [torch.empty(4, device=f"cuda:{d}") for d in sp.devices]
        refs = [weakref.ref(t) for t in temps]
        sp.all_reduce(temps)
        del temps
        assert all(r() is not None for r in refs)  # the launch waits for this group's end
    assert all(r() is None for r in refs)
