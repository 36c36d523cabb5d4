"""PyTorch integration: YALI collectives on torch tensors.

``Communicator(group=None)``
    One process per GPU. Built from a torch.distributed process group (default WORLD): rank 0 of the
    group creates the unique id and the group carries it to the others. Lives on the rank's current
    CUDA device. ``all_reduce(tensor, op="sum", out=None)``.

``SingleProcessCommunicator(devices=None)``
    One process driving several GPUs (yaliCommInitAll). ``all_reduce(tensors, op="sum", outs=None)``.

Zero-copy: ``empty_registered(shape, dtype)`` on either communicator allocates tensors registered
with yaliCommRegister (collective: every rank calls it in the same order with the same shape). An
all_reduce whose input and output both lie in registered memory on every rank, at the same offset
(the tensors themselves, or the same views of them), runs a zero-copy algorithm:
``twoshot_direct`` (the reduced shards are written straight into every rank's output, from
YALI_TWOSHOT_DIRECT_MIN_BYTES up; a registered output suffices) or ``direct`` (inputs read and outputs
written over NVLink, off unless YALI_DIRECT_MIN_BYTES is set). ``register(tensor)`` registers an existing tensor's whole storage;
``deregister(tensor_or_registration)`` ends a registration (local, bounded); ``close()`` ends them all.
``algo_info(tensor, out=...)`` tells which algorithm a call would run.

Every collective is a custom operator (``torch.ops.yali.*``) with a fake implementation, so that
``torch.compile(fullgraph=True)`` traces through it without a graph break; it launches on torch's
current stream, never synchronizes and allocates only in the functional form, so it can be captured
in a CUDA graph. For a collective ``X`` there are three operators:

    yali::X_(Tensor(a!) tensor, int comm, int op) -> ()               in place
    yali::X_out(Tensor tensor, Tensor(a!) out, int comm, int op) -> ()  into ``out``
    yali::X(Tensor tensor, int comm, int op) -> Tensor                functional (a new tensor)

``comm`` is the yaliComm_t as an int (``Communicator.handle``), ``op`` a yali.RedOp value.

Failures, and CUDA graphs. A failure seen on the device (a peer that did not arrive within
YALI_TIMEOUT_MS, a peer's abort, ranks that disagree about registered buffers) becomes the comm's
asynchronous error, on every rank (a rank that took no part in the failed call learns of it at its
next launch, whose output is then not to be trusted). From then on every eager call raises it
before launching anything: YaliTimeout, YaliRemoteError or YaliInvalidUsage, with the library's
message; the comm can only be aborted (``abort()``). A CUDA graph replay never passes through the
host API, so nothing raises there: the YALI collectives of a replay that runs after the failure
write NaN (all-ones bytes) into their outputs. After replaying a graph that contains YALI
collectives, call ``comm.check_async_error()`` (alias ``comm.check()``; a host-memory read, about
1 us, no synchronization) once the replay's work has finished (after a synchronization, such as
``loss.item()``) and before trusting its outputs (stepping the optimizer on the gradients, saving a
checkpoint); a check made before that finish sees only failures of earlier work. Or let
``replay(graph, comm, synchronize=True)`` do both::

    graph.replay()
    loss_value = static_loss.item()  # waits for the replay
    comm.check()                     # raises YaliTimeout/YaliRemoteError/... if a collective failed

This module is ``yali.torch``; the ``import torch`` below is an absolute import and gets PyTorch.
"""

try:
    import torch
    import torch.distributed as dist
except ImportError as _e:  # pragma: no cover - exercised by tests/python/test_capi_host.py
    raise ImportError(
        "yali.torch needs PyTorch (torch >= 2.4), which could not be imported: "
        f"{_e}. Install it (e.g. pip install 'yali[torch]'), or use the torch-free API in `yali`."
    ) from _e

if not (hasattr(torch, "library") and hasattr(torch.library, "custom_op")
        and hasattr(torch.library, "register_fake")):
    raise ImportError(
        f"yali.torch needs torch >= 2.4 (torch.library.custom_op); found torch {torch.__version__}"
    )

import yali
from yali import _capi
from yali._capi import DataType, RedOp

__all__ = ["Communicator", "SingleProcessCommunicator", "DTYPES", "OPS", "replay"]

# torch dtype -> yaliDataType_t value.
DTYPES = {
    torch.float32: int(DataType.Float32),
    torch.float16: int(DataType.Float16),
    torch.bfloat16: int(DataType.Bfloat16),
}
_DTYPE_TUPLE = tuple(DTYPES)

# op name -> yaliRedOp_t value.
OPS = {"sum": int(RedOp.Sum), "prod": int(RedOp.Prod), "max": int(RedOp.Max),
       "min": int(RedOp.Min), "avg": int(RedOp.Avg)}
_OP_ALIASES = {"product": int(RedOp.Prod), "mean": int(RedOp.Avg)}
_TORCH_OPS = (("SUM", RedOp.Sum), ("PRODUCT", RedOp.Prod), ("MAX", RedOp.Max),
              ("MIN", RedOp.Min), ("AVG", RedOp.Avg))

_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
if _is_compiling is None:  # pragma: no cover (torch 2.4 has it; kept for safety)
    _is_compiling = torch._dynamo.is_compiling


def _op_code(op, method):
    """yaliRedOp_t value of ``op``: "sum"/"prod"/"max"/"min"/"avg", a yali.RedOp, or
    torch.distributed.ReduceOp.SUM/PRODUCT/MAX/MIN/AVG."""
    if isinstance(op, str):
        code = OPS.get(op.lower(), _OP_ALIASES.get(op.lower()))
    elif type(op) is int or isinstance(op, RedOp):  # not int subclasses such as torch's enums
        code = int(op) if 0 <= op < int(RedOp.NumOps) else None
    else:
        code = None
        for name, value in _TORCH_OPS:
            member = getattr(dist.ReduceOp, name, None)
            if member is not None and op == member:
                code = int(value)
                break
    if code is None:
        raise ValueError(
            f"{method}: op={op!r} is not supported; use 'sum', 'prod', 'max', 'min', 'avg' "
            "or torch.distributed.ReduceOp.SUM/PRODUCT/MAX/MIN/AVG"
        )
    return code


def _device_index(device, method):
    """A CUDA device ordinal from an int, "cuda:1" or a torch.device."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"{method}: device must be a CUDA device, got {device!r}")
    return d.index if d.index is not None else torch.cuda.current_device()


def _check_tensor(method, name, t, device_index):
    """The checks every collective argument passes; errors name the method and the argument."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{method}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ValueError(f"{method}: {name} must be a CUDA tensor, got one on {t.device}")
    if device_index is not None and t.device.index != device_index:
        raise ValueError(
            f"{method}: {name} is on {t.device} but the communicator is on cuda:{device_index}"
        )
    if t.dtype not in _DTYPE_TUPLE:
        raise TypeError(
            f"{method}: {name} has dtype {t.dtype}; supported: float32, float16, bfloat16"
        )
    if not t.is_contiguous():
        raise ValueError(
            f"{method}: {name} must be contiguous (got shape {tuple(t.shape)}, strides "
            f"{t.stride()}); pass t.contiguous()"
        )


def _check_out(method, tensor, out, out_name="out", tensor_name="tensor"):
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{method}: {out_name} must be a torch.Tensor, got {type(out).__name__}")
    if out.shape != tensor.shape:
        raise ValueError(
            f"{method}: {out_name} has shape {tuple(out.shape)}, {tensor_name} has "
            f"{tuple(tensor.shape)}; they must match"
        )
    if out.dtype != tensor.dtype:
        raise TypeError(
            f"{method}: {out_name} has dtype {out.dtype}, {tensor_name} has {tensor.dtype}; "
            "they must match"
        )
    if out.device != tensor.device:
        raise ValueError(
            f"{method}: {out_name} is on {out.device}, {tensor_name} on {tensor.device}; "
            "they must match"
        )
    if not out.is_contiguous():
        raise ValueError(f"{method}: {out_name} must be contiguous")
    if out.numel() and out.data_ptr() != tensor.data_ptr():
        a, b = tensor.data_ptr(), out.data_ptr()
        nbytes = tensor.numel() * tensor.element_size()
        if a < b + nbytes and b < a + nbytes:
            raise ValueError(
                f"{method}: {out_name} partly overlaps {tensor_name}; use the same tensor "
                "(in place) or disjoint memory"
            )


# ---- Live communicators, by handle (what the custom ops receive) --------------------------------

# handle -> yali.Comm. Lets the operators turn an int back into a comm, refuse a closed one instead
# of passing a dangling pointer to C, and lets fake implementations check the device.
_LIVE = {}


def _live_comm(opname, handle):
    comm = _LIVE.get(handle)
    if comm is None:
        raise _capi.python_error(
            yali.Result.InvalidUsage,
            opname,
            f"comm={handle:#x} is not a live YALI communicator (closed, or never created here)",
        )
    return comm


def _dtype_code(opname, name, t):
    code = DTYPES.get(t.dtype)
    if code is None:
        raise TypeError(f"{opname}: {name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
    return code


# ---- Custom operators ----------------------------------------------------------------------------


def _same_shape(tensor, comm):
    return torch.empty_like(tensor, memory_format=torch.contiguous_format)


def _launch_all_reduce(opname, handle, src, dst, op):
    comm = _live_comm(opname, handle)
    if src.device.type != "cuda" or src.device.index != comm.device:
        raise ValueError(f"{opname}: tensor is on {src.device}, the comm on cuda:{comm.device}")
    if not (src.is_contiguous() and dst.is_contiguous()):
        raise ValueError(f"{opname}: tensors must be contiguous")
    if dst is not src and (dst.numel() != src.numel() or dst.dtype != src.dtype
                           or dst.device != src.device):
        raise ValueError(f"{opname}: out ({tuple(dst.shape)} {dst.dtype} {dst.device}) does not "
                         f"match tensor ({tuple(src.shape)} {src.dtype} {src.device})")
    stream = torch.cuda.current_stream(src.device).cuda_stream
    # yaliAllReduce reads the comm's asynchronous error (a host-mapped word) before anything else is
    # done: a failed comm raises here (YaliTimeout, YaliRemoteError, ...) with the library's message
    # and nothing is launched, so no separate check is needed on this path.
    _capi.all_reduce(src.data_ptr(), dst.data_ptr(), src.numel(), _dtype_code(opname, "tensor", src),
                     op, handle, stream)


def _fake_check(opname, handle, t, name="tensor"):
    comm = _LIVE.get(handle) if isinstance(handle, int) else None
    _check_tensor(opname, name, t, comm.device if comm is not None else None)


class _CollectiveOps:
    """The three operators of one collective (see the module docstring)."""

    def __init__(self, inplace, out, functional):
        self.inplace = inplace
        self.out = out
        self.functional = functional


def _define_collective(name, launch, out_like):
    """Registers yali::<name>_, yali::<name>_out and yali::<name> over ``launch(opname, comm, src,
    dst, op)``; ``out_like(tensor, comm)`` allocates the functional form's result (and is its fake).
    Adding a collective: a C wrapper in _capi, a launch function, one call here, one method."""
    qual = f"yali::{name}"

    @torch.library.custom_op(qual + "_", mutates_args=("tensor",), device_types="cuda")
    def inplace(tensor: torch.Tensor, comm: int, op: int) -> None:
        launch(qual + "_", comm, tensor, tensor, op)

    @inplace.register_fake
    def _inplace_fake(tensor, comm, op):
        _fake_check(qual + "_", comm, tensor)

    @torch.library.custom_op(qual + "_out", mutates_args=("out",), device_types="cuda")
    def out_variant(tensor: torch.Tensor, out: torch.Tensor, comm: int, op: int) -> None:
        launch(qual + "_out", comm, tensor, out, op)

    @out_variant.register_fake
    def _out_fake(tensor, out, comm, op):
        _fake_check(qual + "_out", comm, tensor)
        _fake_check(qual + "_out", comm, out, "out")

    @torch.library.custom_op(qual, mutates_args=(), device_types="cuda")
    def functional(tensor: torch.Tensor, comm: int, op: int) -> torch.Tensor:
        result = out_like(tensor, comm)
        launch(qual, comm, tensor, result, op)
        return result

    @functional.register_fake
    def _functional_fake(tensor, comm, op):
        _fake_check(qual, comm, tensor)
        return out_like(tensor, comm)

    ns = torch.ops.yali
    return _CollectiveOps(
        getattr(ns, name + "_").default, getattr(ns, name + "_out").default, getattr(ns, name).default
    )


_all_reduce_ops = _define_collective("all_reduce", _launch_all_reduce, _same_shape)


# ---- Registered memory ---------------------------------------------------------------------------


def _storage_ptr(t):
    return t.untyped_storage().data_ptr()


def _empty_on(shape, dtype, dev, method):
    if dtype not in _DTYPE_TUPLE:
        raise TypeError(f"{method}: dtype {dtype} is not supported; float32, float16, bfloat16")
    return torch.empty(shape, dtype=dtype, device=torch.device("cuda", dev))


def _find_registration(regs, x, method):
    """The live Registration in ``regs`` that is ``x``, or that holds tensor ``x`` (for a list of
    tensors, x[0]): the one that starts at its storage, else one that contains its data."""
    if isinstance(x, yali.Registration):
        return x
    t = x[0] if isinstance(x, (list, tuple)) and x else x
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{method}: expected a tensor or a yali.Registration, got {type(x).__name__}")
    live = [r for r in regs if not r.closed]
    # Device pointers are unique across GPUs (unified addressing): any comm's range may match.
    storage = _storage_ptr(t)
    for r in live:
        if storage in r.ptrs:
            return r
    for r in live:
        if any(r.contains(t.data_ptr(), 1, i) for i in range(len(r.ptrs))):
            return r
    raise ValueError(f"{method}: this tensor's storage is not registered on this communicator")


def _info_ptr(t):
    """A tensor's data_ptr for yaliAllReduceAlgoInfo; None (NULL) unless it is a CUDA tensor."""
    return t.data_ptr() if isinstance(t, torch.Tensor) and t.device.type == "cuda" else None


# ---- Communicators -------------------------------------------------------------------------------


class Communicator(yali._ClosingContext):
    """A YALI communicator over the ranks of a torch.distributed process group, one GPU each.

    ``group``: a ProcessGroup (default WORLD; any backend: the group only carries the unique id).
    ``device``: this rank's GPU (default: torch.cuda.current_device()).
    Creating it is collective over the group, and so is ``close()``.
    """

    def __init__(self, group=None, device=None):
        method = "Communicator"
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                f"{method}: torch.distributed is not initialized; call "
                "torch.distributed.init_process_group first (or use SingleProcessCommunicator)"
            )
        if not torch.cuda.is_available():
            raise RuntimeError(f"{method}: CUDA is not available")
        self.group = dist.group.WORLD if group is None else group
        rank = dist.get_rank(self.group)
        size = dist.get_world_size(self.group)
        if rank < 0:
            raise ValueError(f"{method}: this process is not a member of group {self.group}")
        dev = torch.cuda.current_device() if device is None else _device_index(device, method)
        self._comm = None
        with torch.cuda.device(dev):
            # Rank 0 sends the id, or its error so that the others fail instead of waiting.
            payload = [None]
            if rank == 0:
                try:
                    payload[0] = bytes(yali.get_unique_id())
                except Exception as e:  # noqa: BLE001 (re-raised on every rank below)
                    payload[0] = f"{type(e).__name__}: {e}"
            src = 0 if self.group is dist.group.WORLD else dist.get_global_rank(self.group, 0)
            dist.broadcast_object_list(payload, src=src, group=self.group)
            if not isinstance(payload[0], bytes):
                raise RuntimeError(f"{method}: rank 0 could not create the unique id: {payload[0]}")
            comm = yali.Comm.init_rank(size, yali.UniqueId(payload[0]), rank)
        if comm.device != dev or comm.rank != rank or comm.size != size:
            comm.abort()
            raise RuntimeError(
                f"{method}: the comm reports rank {comm.rank}/{comm.size} on cuda:{comm.device}; "
                f"expected {rank}/{size} on cuda:{dev}"
            )
        self._comm = comm
        self._handle = comm.handle
        self.rank = rank
        self.world_size = size
        self.device = torch.device("cuda", dev)
        self._device_index = dev
        _LIVE[self._handle] = comm

    # -- properties

    @property
    def handle(self):
        """The yaliComm_t as an int (what the torch.ops.yali operators take)."""
        if self._comm is None:
            raise _capi.python_error(
                yali.Result.InvalidUsage, "Communicator", "this communicator is closed"
            )
        return self._handle

    @property
    def comm(self):
        """The low-level yali.Comm."""
        return self._comm

    @property
    def closed(self):
        return self._comm is None

    # -- collectives

    def all_reduce(self, tensor, op="sum", out=None):
        """All-reduce ``tensor`` across the group: in place (returns ``tensor``), or into ``out``
        (returns ``out``). On torch's current stream; no host synchronization.

        Raises the comm's asynchronous error (YaliTimeout, ...) once a collective has failed, before
        launching. Captured in a CUDA graph, it is not checked at replay: see
        ``check_async_error``."""
        method = "Communicator.all_reduce"
        code = _op_code(op, method)
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "tensor", tensor, self._device_index)
            if out is not None and out is not tensor:
                _check_out(method, tensor, out)
        if out is None or out is tensor:
            _all_reduce_ops.inplace(tensor, handle, code)
            return tensor
        _all_reduce_ops.out(tensor, out, handle, code)
        return out

    def all_reduce_functional(self, tensor, op="sum"):
        """All-reduce into a new tensor (``tensor`` is unchanged). Errors as ``all_reduce``."""
        method = "Communicator.all_reduce_functional"
        code = _op_code(op, method)
        handle = self.handle
        if not _is_compiling():
            _check_tensor(method, "tensor", tensor, self._device_index)
        return _all_reduce_ops.functional(tensor, handle, code)

    def algo_info(self, tensor, op="sum", out=None):
        """What ``all_reduce(tensor, op, out)`` would run (a yali.AlgoInfo): the buffers are passed,
        so registered tensors show the zero-copy algorithms. Launches nothing."""
        return self._comm_or_raise().all_reduce_algo_info(
            tensor.numel(), DTYPES[tensor.dtype], _op_code(op, "Communicator.algo_info"),
            send_ptr=_info_ptr(tensor), recv_ptr=_info_ptr(tensor if out is None else out))

    # -- registered memory (zero-copy)

    def register(self, tensor, nbytes=None):
        """yaliCommRegister of ``tensor``'s whole untyped storage (or of ``nbytes`` bytes from its
        data_ptr()). Collective over the group: same order and size on every rank. Returns a
        yali.Registration (``deregister()``; usable in a ``with`` block); ``close()`` ends it."""
        method = "Communicator.register"
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{method}: tensor must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.device != self.device:
            raise ValueError(f"{method}: tensor is on {tensor.device}, the comm on {self.device}")
        return self._comm_or_raise().register(tensor, nbytes)

    def empty_registered(self, shape, dtype=torch.float32):
        """A new uninitialized tensor on this rank's GPU, registered (collective: every rank calls
        it in the same order with the same shape and dtype). all_reduce on it (in place, or with a
        registered ``out``) runs zero-copy. It stays registered until ``deregister(tensor)`` or
        ``close()``."""
        t = _empty_on(shape, dtype, self._device_index, "Communicator.empty_registered")
        self.register(t)
        return t

    def deregister(self, tensor_or_registration):
        """yaliCommDeregister (collective) of a Registration, or of the registration holding a
        tensor's storage (from ``empty_registered`` or ``register``)."""
        comm = self._comm_or_raise()
        _find_registration(comm.registrations, tensor_or_registration,
                           "Communicator.deregister").deregister()

    # -- life cycle

    def check_async_error(self):
        """Raise the YaliError subclass of the error a device-side operation hit, here or on a peer
        (YaliTimeout, YaliRemoteError, YaliInvalidUsage), with the library's message; return None
        while the comm is healthy. A host-memory read (about 1 us); it does not synchronize.

        Eager collectives raise that error themselves; a replayed CUDA graph does not (its YALI
        collectives write NaN into their outputs once the comm has failed). After replaying a
        graph, call this once the replay's work has finished and before trusting its outputs."""
        self._comm_or_raise().check_async_error()

    check = check_async_error  # reads well in a training loop: comm.check()

    def close(self):
        """yaliCommDestroy (collective over the group). Idempotent."""
        comm = self._release()
        if comm is not None:
            comm.destroy()

    def abort(self):
        """yaliCommAbort: frees without waiting for peers. Idempotent."""
        comm = self._release()
        if comm is not None:
            comm.abort()

    def _comm_or_raise(self):
        self.handle  # noqa: B018 (raises when closed)
        return self._comm

    def _devices(self):
        return [self._device_index]

    def _release(self):
        comm, self._comm = self._comm, None
        if comm is not None:
            _LIVE.pop(self._handle, None)
        return comm

    def __repr__(self):
        state = "closed" if self._comm is None else "open"
        return f"<yali.torch.Communicator rank {self.rank}/{self.world_size} {self.device} {state}>"


class SingleProcessCommunicator(yali._ClosingContext):
    """One process, several GPUs: rank i on ``devices[i]`` (default: every visible GPU)."""

    def __init__(self, devices=None):
        method = "SingleProcessCommunicator"
        if not torch.cuda.is_available():
            raise RuntimeError(f"{method}: CUDA is not available")
        if devices is None:
            devices = range(torch.cuda.device_count())
        self.devices = [_device_index(d, method) for d in devices]
        self.comms = yali.Comm.init_all(self.devices)
        for c in self.comms:
            _LIVE[c.handle] = c

    @property
    def world_size(self):
        return len(self.devices)

    @property
    def closed(self):
        return not self.comms

    def all_reduce(self, tensors, op="sum", outs=None):
        """All-reduce ``tensors[i]`` (on ``devices[i]``) in place, or into ``outs[i]``; each on its
        device's current stream. Returns the list of results.

        Once a collective has failed (any comm's asynchronous error), raises it (YaliTimeout, ...)
        before launching on any GPU. Captured in a CUDA graph, it is not checked at replay: see
        ``check_async_error``."""
        method = "SingleProcessCommunicator.all_reduce"
        code = _op_code(op, method)
        if not self.comms:
            raise _capi.python_error(yali.Result.InvalidUsage, method, "this communicator is closed")
        # Every comm before any launch: a launch on a healthy comm whose peer has failed would only
        # wait for it until YALI_TIMEOUT_MS.
        self._check_async_errors(method)
        tensors = list(tensors)
        n = len(self.devices)
        if len(tensors) != n:
            raise ValueError(f"{method}: tensors has {len(tensors)} tensors, expected {n} (one per GPU)")
        for i, t in enumerate(tensors):
            _check_tensor(method, f"tensors[{i}]", t, self.devices[i])
            if i and (t.shape != tensors[0].shape or t.dtype != tensors[0].dtype):
                raise ValueError(
                    f"{method}: tensors[{i}] is {tuple(t.shape)} {t.dtype}, tensors[0] is "
                    f"{tuple(tensors[0].shape)} {tensors[0].dtype}; they must match"
                )
        if outs is None:
            outs = tensors
        else:
            outs = list(outs)
            if len(outs) != n:
                raise ValueError(f"{method}: outs has {len(outs)} tensors, expected {n}")
            for i, (t, o) in enumerate(zip(tensors, outs)):
                if o is not t:
                    _check_out(method, t, o, f"outs[{i}]", f"tensors[{i}]")
        dtype = DTYPES[tensors[0].dtype]
        count = tensors[0].numel()
        # One thread issues every rank's call inside a group: the kernels launch at its end, all
        # of them before this thread launches anything else (yali.h: Groups).
        with yali.group():
            for dev, comm, t, o in zip(self.devices, self.comms, tensors, outs):
                with torch.cuda.device(dev):
                    stream = torch.cuda.current_stream(dev).cuda_stream
                    _capi.all_reduce(t.data_ptr(), o.data_ptr(), count, dtype, code, comm.handle,
                                     stream)
        return outs

    def algo_info(self, tensors, op="sum", outs=None):
        """What ``all_reduce(tensors, op, outs)`` would run on each GPU: a list of yali.AlgoInfo.
        Launches nothing."""
        code = _op_code(op, "SingleProcessCommunicator.algo_info")
        tensors = list(tensors)
        outs = tensors if outs is None else list(outs)
        return [c.all_reduce_algo_info(t.numel(), DTYPES[t.dtype], code, send_ptr=_info_ptr(t),
                                       recv_ptr=_info_ptr(o))
                for c, t, o in zip(self._open_comms("algo_info"), tensors, outs)]

    def register(self, tensors, nbytes=None):
        """yaliCommRegister of ``tensors[i]``'s whole storage (or ``nbytes`` from its data_ptr())
        on comm i, for every GPU (yali.register_all). Returns one yali.Registration."""
        method = "SingleProcessCommunicator.register"
        comms = self._open_comms("register")
        tensors = list(tensors)
        if len(tensors) != len(comms):
            raise ValueError(f"{method}: tensors has {len(tensors)} tensors, expected "
                             f"{len(comms)} (one per GPU)")
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor) or t.device != torch.device("cuda", self.devices[i]):
                raise ValueError(f"{method}: tensors[{i}] must be a tensor on cuda:{self.devices[i]}")
        return yali.register_all(comms, tensors, nbytes)

    def empty_registered(self, shape, dtype=torch.float32):
        """One new uninitialized tensor per GPU (``[t0, t1, ...]``), registered on every comm.
        all_reduce on them (in place, or into registered ``outs``) runs zero-copy. They stay
        registered until ``deregister(tensors)`` or ``close()``."""
        ts = [_empty_on(shape, dtype, d, "SingleProcessCommunicator.empty_registered")
              for d in self.devices]
        self.register(ts)
        return ts

    def deregister(self, tensors_or_registration):
        """yaliCommDeregister on every comm, of a Registration or of the one holding the tensors
        (a list from ``empty_registered``, or its first tensor)."""
        comms = self._open_comms("deregister")
        _find_registration(comms[0].registrations, tensors_or_registration,
                           "SingleProcessCommunicator.deregister").deregister()

    def _open_comms(self, what):
        if not self.comms:
            raise _capi.python_error(yali.Result.InvalidUsage,
                                     f"SingleProcessCommunicator.{what}", "this communicator is closed")
        return self.comms

    def _check_async_errors(self, call):
        for i, c in enumerate(self.comms):
            _capi.check_async_error(c.handle, call, f"rank {i} (cuda:{self.devices[i]})")

    def _devices(self):
        return list(self.devices)

    def check_async_error(self):
        """Raise the YaliError subclass of the first comm's asynchronous error (YaliTimeout,
        YaliRemoteError, YaliInvalidUsage), naming the rank, with the library's message; return
        None while every comm is healthy. One host-memory read per comm; does not synchronize.

        Eager collectives raise that error themselves; a replayed CUDA graph does not (its YALI
        collectives write NaN into their outputs once a comm has failed). After replaying a graph,
        call this once the replay's work has finished and before trusting its outputs."""
        self._open_comms("check_async_error")
        self._check_async_errors("SingleProcessCommunicator.check_async_error")

    check = check_async_error  # reads well in a training loop: sp.check()

    def close(self):
        """Destroys every comm. Idempotent."""
        self._end(lambda c: c.destroy())

    def abort(self):
        """Aborts every comm (yaliCommAbort: prompt, waits for no peer), also after one of them
        failed to. Idempotent."""
        self._end(lambda c: c.abort())

    def _end(self, end):
        """Ends every comm with ``end`` (destroy or abort), each even after another failed to;
        then raises the first error."""
        comms, self.comms = self.comms, []
        errors = []
        for c in comms:
            _LIVE.pop(c.handle, None)
        for c in comms:
            try:
                end(c)
            except yali.YaliError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def __repr__(self):
        return f"<yali.torch.SingleProcessCommunicator devices={self.devices}>"


# ---- CUDA graphs ---------------------------------------------------------------------------------


def replay(graph, *comms, synchronize=False):
    """Replay ``graph`` (a torch.cuda.CUDAGraph holding YALI collectives) guarded by ``comms``
    (the Communicators / SingleProcessCommunicators, or yali.Comm, whose collectives it holds).

    A replay never passes through YALI's host API: after a failure its collectives write NaN into
    their outputs and raise nothing. This first raises any comm's asynchronous error
    (``check_async_error``), so that a failure of earlier work stops the loop before another replay;
    then replays on the current stream. With ``synchronize=True`` it then waits for the comms' GPUs
    (torch.cuda.synchronize) and checks again, so that on return the replay's outputs can be
    trusted; without it, check after your own synchronization (``comm.check()``)."""
    if not comms:
        raise TypeError("yali.torch.replay: name the communicators the graph uses, "
                        "replay(graph, comm, ...)")
    for c in comms:
        c.check_async_error()
    graph.replay()
    if synchronize:
        devices = []
        for c in comms:
            devs = c._devices() if hasattr(c, "_devices") else [c.device]
            devices += [d for d in devs if d not in devices]
        for d in devices:
            torch.cuda.synchronize(d)
        for c in comms:
            c.check_async_error()
