"""YALI: collective communication among the GPUs of one machine over NVLink.

The Python layer over the C library (``include/yali/yali.h``), through ctypes: importing it needs no
GPU, no CUDA and no PyTorch; libyali.so is opened on the first call (see ``yali._capi`` for where it
is looked for, and ``yali.library_path()``).

Low level (plain pointers as ints, any CUDA array library)::

    uid = yali.get_unique_id()                   # on one rank; send bytes(uid) to the others
    comm = yali.Comm.init_rank(nranks, uid, rank)  # on the current CUDA device
    comm.all_reduce(send_ptr, recv_ptr, count, "float32", "sum", stream_ptr)
    comm.all_gather(send_ptr, recv_ptr, send_count, "bfloat16", stream_ptr)
    comm.destroy()

``yali.Comm`` has one method per C collective, with the C call's arguments in its order (counts in
elements, as in yali.h): all_reduce, reduce_scatter, all_gather, broadcast, bcast, reduce, gather,
scatter, all_to_all, and the uneven exchange (AlltoAllv): all_to_all_v (host counts),
all_to_all_v_device_counts, expert_dispatch and expert_combine (device counts; ExpertLayout); and
point-to-point ``send``/``recv`` (NCCL's ncclSend/ncclRecv; a rank's sends and receives that must
progress together go in one ``with yali.group():``).
``algo_info`` says what a collective would run. The torch.distributed-shaped
methods (all_gather_into_tensor, reduce_scatter_tensor, ...) are on ``yali.torch.Communicator``.

Registered buffers (zero-copy: ``twoshot_direct`` writes the reduced shards straight into every
rank's registered output; the ``*_direct`` exchanges write every piece straight into its
receiver's registered output)::

    with comm.register(send_ptr, nbytes), comm.register(recv_ptr, nbytes):  # collective
        comm.all_reduce(send_ptr, recv_ptr, count, "float32")
    # torch: comm.register(tensor) registers the tensor's whole storage

PyTorch: ``yali.torch`` (Communicator, SingleProcessCommunicator, torch.compile custom ops).
Submodules ``torch``, ``sweep``, ``report``, ``hw``, ``bench_backends`` are imported on first use.
"""

import contextlib
import importlib
import warnings
from typing import NamedTuple

from . import _capi
from ._capi import (
    MAX_EXPERTS,
    MAX_LOCAL_EXPERTS,
    MAX_P2P_OPS,
    UNIQUE_ID_BYTES,
    Collective,
    DataType,
    RedOp,
    Result,
    YaliError,
    YaliInProgress,
    YaliInternalError,
    YaliInvalidArgument,
    YaliInvalidUsage,
    YaliLibraryError,
    YaliRemoteError,
    YaliSystemError,
    YaliTimeout,
    YaliUnhandledCudaError,
    library_path,
)

__version__ = "0.1.0"

__all__ = [
    "MAX_EXPERTS",
    "MAX_LOCAL_EXPERTS",
    "MAX_P2P_OPS",
    "UNIQUE_ID_BYTES",
    "AlgoInfo",
    "Collective",
    "Comm",
    "DataType",
    "ExpertLayout",
    "Registration",
    "RedOp",
    "Result",
    "UniqueId",
    "YaliError",
    "YaliInProgress",
    "YaliInternalError",
    "YaliInvalidArgument",
    "YaliInvalidUsage",
    "YaliLibraryError",
    "YaliRemoteError",
    "YaliSystemError",
    "YaliTimeout",
    "YaliUnhandledCudaError",
    "as_collective",
    "as_datatype",
    "as_redop",
    "collective_name",
    "get_error_string",
    "get_last_error",
    "get_unique_id",
    "get_version",
    "group",
    "group_end",
    "group_start",
    "library_path",
    "register_all",
]

_LAZY_SUBMODULES = ("torch", "sweep", "report", "hw", "bench_backends")


def __getattr__(name):
    # `yali.torch` etc. without importing torch (or anything heavy) at `import yali`.
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- Errors and version --------------------------------------------------------------------------


def get_error_string(code):
    """yaliGetErrorString: the fixed description of a Result code."""
    return _capi.get_error_string(code)


def get_last_error(comm=None):
    """yaliGetLastError: the last failure of ``comm`` (a Comm), or of the calling thread."""
    return _capi.get_last_error(comm.handle if comm is not None else None)


def get_version():
    """The YALI_VERSION_CODE of the loaded library (major*10000 + minor*100 + patch)."""
    return _capi.get_version()


# ---- Enum conversions ----------------------------------------------------------------------------

# Names accepted for each type: the header's (yaliInt8 -> "int8", aliases included: "char", "int",
# "half", "float", "double"), numpy's and torch's dtype names, and the usual short forms.
_DTYPE_NAMES = {name.lower(): member for name, member in DataType.__members__.items()
                if member != DataType.NumTypes}
_DTYPE_NAMES.update({
    "i8": DataType.Int8,
    "u8": DataType.Uint8,
    "i32": DataType.Int32,
    "u32": DataType.Uint32,
    "i64": DataType.Int64,
    "u64": DataType.Uint64,
    "fp32": DataType.Float32,
    "f32": DataType.Float32,
    "fp16": DataType.Float16,
    "f16": DataType.Float16,
    "fp64": DataType.Float64,
    "f64": DataType.Float64,
    "bf16": DataType.Bfloat16,
    # torch.float8_e4m3fn / ml_dtypes.float8_e4m3fn: the OCP E4M3 type NCCL and YALI use.
    "float8_e4m3fn": DataType.Float8e4m3,
    "float8_e4m3": DataType.Float8e4m3,
    "fp8_e4m3": DataType.Float8e4m3,
    "e4m3": DataType.Float8e4m3,
    "float8_e5m2": DataType.Float8e5m2,
    "fp8_e5m2": DataType.Float8e5m2,
    "e5m2": DataType.Float8e5m2,
})

_OP_NAMES = {
    "sum": RedOp.Sum,
    "prod": RedOp.Prod,
    "product": RedOp.Prod,
    "max": RedOp.Max,
    "min": RedOp.Min,
    "avg": RedOp.Avg,
    "mean": RedOp.Avg,
}


def as_datatype(dtype, call="yaliAllReduce"):
    """A DataType from a DataType/int, a name ("float32", "bf16", ...), a numpy or torch dtype.

    Plain ints go through unchanged so that the C library judges them.
    """
    if type(dtype) is int or isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type):  # numpy scalar types: np.float16
        name = dtype.__name__
    else:  # numpy dtypes have .name; torch dtypes print as "torch.float32"
        name = getattr(dtype, "name", None)
        if not isinstance(name, str):
            name = str(dtype)
    key = name.lower()
    if key.startswith("torch."):
        key = key[len("torch.") :]
    if key in _DTYPE_NAMES:
        return _DTYPE_NAMES[key]
    raise _capi.python_error(
        Result.InvalidArgument,
        call,
        f"datatype {dtype!r} is not supported (int8, uint8, int32, uint32, int64, uint64, float16, "
        "bfloat16, float32, float64, float8_e4m3fn, float8_e5m2)",
    )


def as_redop(op, call="yaliAllReduce"):
    """A RedOp from a RedOp/int, a name ("sum", "prod", "max", "min", "avg") or anything whose
    ``.name`` is one of those (torch.distributed.ReduceOp.SUM, ...)."""
    if type(op) is int or isinstance(op, RedOp):
        return op
    name = op if isinstance(op, str) else getattr(op, "name", None)
    if isinstance(name, str) and name.lower() in _OP_NAMES:
        return _OP_NAMES[name.lower()]
    raise _capi.python_error(
        Result.InvalidArgument, call, f"op {op!r} is not supported (sum, prod, max, min or avg)"
    )


def _check_op_for_type(op, dtype, call):
    """Refuses yaliAvg on a non-floating type as the library does (yaliInvalidArgument), before
    the call, with a message naming both. Plain ints that are not known values are left to the
    library."""
    try:
        op, dtype = RedOp(op), DataType(dtype)
    except ValueError:
        return
    if op == RedOp.Avg and dtype in _capi.TYPE_SIZES and dtype not in _capi.FLOATING_TYPES:
        raise _capi.python_error(
            Result.InvalidArgument,
            call,
            f"op=avg is for floating types only (float16, bfloat16, float32, float64, fp8); "
            f"datatype is {dtype.name.lower()}: use sum and divide",
        )


_COLLECTIVE_NAMES = {
    "allreduce": Collective.AllReduce,
    "all_reduce": Collective.AllReduce,
    "reducescatter": Collective.ReduceScatter,
    "reduce_scatter": Collective.ReduceScatter,
    "reduce_scatter_tensor": Collective.ReduceScatter,
    "allgather": Collective.AllGather,
    "all_gather": Collective.AllGather,
    "all_gather_into_tensor": Collective.AllGather,
    "broadcast": Collective.Broadcast,
    "bcast": Collective.Broadcast,
    "reduce": Collective.Reduce,
    "gather": Collective.Gather,
    "scatter": Collective.Scatter,
    "alltoall": Collective.AlltoAll,
    "all_to_all": Collective.AlltoAll,
    "all_to_all_single": Collective.AlltoAll,
    "alltoallv": Collective.AlltoAllv,
    "all_to_all_v": Collective.AlltoAllv,
    "all_to_all_v_device_counts": Collective.AlltoAllv,
    "all_to_all_device_counts": Collective.AlltoAllv,
    "expert_dispatch": Collective.AlltoAllv,
    "expert_combine": Collective.AlltoAllv,
}


def as_collective(collective, call="yaliAlgoInfo"):
    """A Collective from a Collective/int, or a name: yaliCollectiveName's ("allreduce",
    "reducescatter", ...), the Python methods' ("all_reduce", "all_gather_into_tensor", ...; the
    four forms of the uneven exchange, "all_to_all_v" ... "expert_combine", are AlltoAllv)."""
    if type(collective) is int or isinstance(collective, Collective):
        return collective
    if isinstance(collective, str) and collective.lower() in _COLLECTIVE_NAMES:
        return _COLLECTIVE_NAMES[collective.lower()]
    raise _capi.python_error(
        Result.InvalidArgument, call,
        f"collective {collective!r} is not known (allreduce, reducescatter, allgather, broadcast, "
        "reduce, gather, scatter, alltoall, alltoallv)",
    )


def collective_name(collective):
    """yaliCollectiveName: the library's name of a collective ("allreduce", ...), or "unknown"."""
    return _capi.collective_name(as_collective(collective, "yaliCollectiveName"))


# ---- Unique id -----------------------------------------------------------------------------------


class UniqueId:
    """The 128 bytes that identify one communicator while it is created (yaliUniqueId).

    ``bytes(uid)`` gives them; ``UniqueId(data)`` takes them back. Picklable.
    """

    __slots__ = ("_data",)

    def __init__(self, data):
        data = bytes(data)
        if len(data) != UNIQUE_ID_BYTES:
            raise ValueError(f"UniqueId needs {UNIQUE_ID_BYTES} bytes, got {len(data)}")
        self._data = data

    def __bytes__(self):
        return self._data

    def __eq__(self, other):
        return isinstance(other, UniqueId) and other._data == self._data

    def __hash__(self):
        return hash(self._data)

    def __reduce__(self):
        return (UniqueId, (self._data,))

    def __repr__(self):
        return f"UniqueId({self._data[:8].hex()}...)"


def get_unique_id():
    """yaliGetUniqueId: a new UniqueId. Call on one rank, hand the same bytes to all."""
    return UniqueId(_capi.get_unique_id())


# ---- Groups --------------------------------------------------------------------------------------


# The groups this thread has open through group_start (_capi.group_depth; the library counts them
# per thread too). The torch layer reads it to refuse the forms that do work of their own after a
# collective (a copy out of an internal buffer, an offsets computation): inside a group that work
# would run before the collective, which is launched only at the outermost group end.
def _group_depth():
    """How many groups this thread has open (0: none), through group_start/group()."""
    return _capi.group_depth()


def group_start():
    """yaliGroupStart: NCCL's meaning. Collectives are checked when called and launched at the
    outermost group end; one thread driving several GPUs groups the per-GPU calls of a collective.
    Inside a group, a collective's output is not written before that end.

    NCCL's rule for failures, kept by the groups opened here: when a call inside the group raises
    a YaliError (a collective's bad arguments, refused here or by the library, a failed comm), the
    outermost group end launches none of the group's calls and raises that failure again (as
    ncclGroupEnd returns it), also when the program caught it at the call. (The C library's
    yaliGroupEnd launches the calls it accepted: yali.h, Groups.)"""
    _capi.group_start()


def group_end():
    """yaliGroupEnd: launches the group's collectives, in call order (none of them when one failed
    at its call: group_start)."""
    _capi.group_end()


@contextlib.contextmanager
def group():
    """``with yali.group(): ...``: yaliGroupStart / yaliGroupEnd around the block. A block left by
    an exception launches nothing of the group (as a failed call inside it: group_start), and the
    exception goes on."""
    group_start()
    try:
        yield
    except BaseException as e:
        try:
            _capi.group_end(dropped_by=e)
        except Exception as end_error:  # noqa: BLE001 - the block's exception is the one to raise
            warnings.warn(f"yali.group(): ending the group that {type(e).__name__} left failed too: "
                          f"{end_error}", RuntimeWarning, stacklevel=3)
        raise
    group_end()


# ---- Communicator --------------------------------------------------------------------------------


class AlgoInfo(NamedTuple):
    """What a collective would run (yaliAlgoInfo, yaliAllReduceAlgoInfo)."""

    algorithm: str
    ctas: int
    threads: int
    chunk_bytes: int


class ExpertLayout(NamedTuple):
    """yaliExpertLayout_t: the expert-major layout of ``Comm.expert_dispatch``/``expert_combine``.

    ``row_bytes``: bytes per row (hidden size x element size), >= 1; ``local_experts``: experts per
    rank, 1..MAX_LOCAL_EXPERTS, with nranks * local_experts <= MAX_EXPERTS; ``align_rows``: each
    expert's segment starts at a multiple of this many rows (>= 1; the padding rows are not
    written); ``capacity_rows``: rows the expert-major buffer holds (the dispatch's output, the
    combine's input); ``token_rows``: rows the token-ordered buffer holds (the dispatch's input, the
    combine's output), 0 when not given."""

    row_bytes: int
    local_experts: int
    align_rows: int
    capacity_rows: int
    token_rows: int = 0


def _as_layout(layout, call, nranks):
    """A checked yaliExpertLayout_t from an ExpertLayout, a 4-tuple in its order, or a
    yaliExpertLayout_t."""
    if isinstance(layout, _capi.yaliExpertLayout_t):
        fields = (layout.rowBytes, layout.localExperts, layout.alignRows, layout.capacityRows,
                  layout.tokenRows)
    else:
        try:
            fields = tuple(layout)
        except TypeError:
            fields = ()
        if len(fields) == 4:
            fields += (0,)
        if len(fields) != 5:
            raise _capi.python_error(
                Result.InvalidArgument, call,
                "layout must be a yali.ExpertLayout(row_bytes, local_experts, align_rows, "
                f"capacity_rows), got {layout!r}")
    return _capi.expert_layout(*fields[:4], call=call, nranks=nranks, token_rows=fields[4])


def _as_ptr(value, call, name):
    """A device pointer as an int: an int, None (NULL), an object with data_ptr() (torch) or
    __cuda_array_interface__ (CuPy, Numba)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if hasattr(value, "data_ptr"):
        return value.data_ptr()
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return cai["data"][0]
    raise _capi.python_error(
        Result.InvalidArgument, call, f"{name} must be a pointer (int), got {type(value).__name__}"
    )


def _as_stream(value, call):
    """A cudaStream_t as an int: an int, None (the legacy default stream), an object with
    .cuda_stream (torch.cuda.Stream) or .ptr (CuPy)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    for attr in ("cuda_stream", "ptr"):
        if hasattr(value, attr):
            return int(getattr(value, attr))
    raise _capi.python_error(
        Result.InvalidArgument, call, f"stream must be a cudaStream_t (int), got {type(value).__name__}"
    )


def _as_span(buf, nbytes, call):
    """(pointer, size in bytes, object to keep alive) of the memory to register.

    - a torch tensor, nbytes None: its whole untyped storage (storage.data_ptr(), storage.nbytes()),
      so that every view of that storage lies inside the registration;
    - a torch tensor with nbytes: ``nbytes`` bytes from tensor.data_ptr();
    - an object with __cuda_array_interface__ (CuPy, Numba): its data pointer and, with nbytes None,
      shape x itemsize (contiguous arrays only);
    - an int (a device pointer): nbytes is required.
    """
    if nbytes is not None:
        nbytes = _capi.as_size_t(nbytes, call, "nbytes")
    if buf is None or isinstance(buf, bool):
        raise _capi.python_error(
            Result.InvalidArgument, call, f"buff must be a device pointer or tensor, got {buf!r}"
        )
    if isinstance(buf, int):
        if nbytes is None:
            raise _capi.python_error(
                Result.InvalidArgument, call, "nbytes is required when buff is a pointer (int)"
            )
        return buf, nbytes, None
    if hasattr(buf, "data_ptr"):
        if nbytes is not None:
            return buf.data_ptr(), nbytes, buf
        storage = getattr(buf, "untyped_storage", None)
        if storage is not None:
            st = storage()
            return st.data_ptr(), st.nbytes(), buf
        size = getattr(buf, "nbytes", None)
        if isinstance(size, int):
            return buf.data_ptr(), size, buf
        raise _capi.python_error(
            Result.InvalidArgument, call, f"nbytes is required for a {type(buf).__name__}"
        )
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is not None:
        ptr = cai["data"][0]
        if nbytes is None:
            if cai.get("strides") is not None:
                raise _capi.python_error(
                    Result.InvalidArgument, call,
                    "nbytes is required for a strided __cuda_array_interface__ array",
                )
            nbytes = int(cai["typestr"][2:])
            for dim in cai["shape"]:
                nbytes *= int(dim)
        return ptr, nbytes, buf
    raise _capi.python_error(
        Result.InvalidArgument,
        call,
        f"buff must be a device pointer (int) or a tensor, got {type(buf).__name__}",
    )


class Registration:
    """Device memory registered with yaliCommRegister on one comm (``Comm.register``) or on every
    comm of a single process (``yali.register_all``).

    While it lasts, a collective whose output lies inside corresponding registrations on every rank
    may take a zero-copy algorithm: AllReduce's ``twoshot_direct`` (the output at the same byte
    offset on every rank, from YALI_TWOSHOT_DIRECT_MIN_BYTES up), or the ``*_direct`` algorithms of
    AllGather, Broadcast, Scatter and AlltoAll (any offsets, from their YALI_*_DIRECT_MIN_BYTES
    up); see ``Comm.algo_info``.

    ``deregister()`` (yaliCommDeregister) is local: it waits, bounded by YALI_TIMEOUT_MS, for this
    rank's calls on the comm, never for peers; every rank should deregister before freeing the
    memory. Idempotent. ``with`` support: a normal exit deregisters; an exit by exception does not
    (the comm's destroy or abort ends it then). Not deregistered on garbage collection.

    The registered object (tensor, array) is referenced until deregistration, so that its memory
    stays allocated as the library requires.

    Attributes: ``ptrs``, ``nbytes`` (per comm, the same size everywhere), ``comms``; for one comm,
    ``ptr`` and ``handle`` (the registration handle as an int).
    """

    def __init__(self, entries, nbytes, keepalive=()):
        # entries: [(Comm, registration handle, pointer)]
        self._entries = list(entries)
        self.nbytes = nbytes
        self._keepalive = list(keepalive)
        for comm, _, _ in self._entries:
            comm._registrations.append(self)

    @property
    def comms(self):
        return [c for c, _, _ in self._entries]

    @property
    def ptrs(self):
        return [p for _, _, p in self._entries]

    @property
    def handles(self):
        return [h for _, h, _ in self._entries]

    @property
    def ptr(self):
        return self._only("ptr")[2]

    @property
    def handle(self):
        return self._only("handle")[1]

    def _only(self, what):
        if len(self._entries) != 1:
            raise AttributeError(
                f"Registration.{what}: this registration spans {len(self._entries)} comms; "
                f"use .{what}s"
            )
        return self._entries[0]

    @property
    def closed(self):
        """True once deregistered (or its comms destroyed/aborted)."""
        return not self._entries

    def contains(self, ptr, nbytes=0, index=0):
        """Whether [ptr, ptr + nbytes) lies inside the registered range on comm ``index``."""
        if self.closed:
            return False
        base = self._entries[index][2]
        return base <= ptr and ptr + nbytes <= base + self.nbytes

    def deregister(self):
        """yaliCommDeregister on every comm of this registration (local, bounded). Idempotent;
        does nothing once its comms were destroyed or aborted."""
        entries, self._entries = self._entries, []
        first = None
        for comm, reg, _ in entries:
            _forget(comm, self)
            if comm.closed:
                continue
            try:
                _capi.comm_deregister(comm.handle, reg)
            except YaliError as e:
                first = first or e
        self._keepalive = []  # only now may the memory be freed
        if first is not None:
            raise first

    def _released(self, comm):
        """Called by ``comm`` being destroyed or aborted: the library ends its registrations."""
        self._entries = [e for e in self._entries if e[0] is not comm]
        if not self._entries:
            self._keepalive = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.deregister()
        return False

    def __repr__(self):
        if self.closed:
            return "<yali.Registration deregistered>"
        where = ", ".join(f"cuda:{c.device} 0x{p:x}" for c, _, p in self._entries)
        return f"<yali.Registration {self.nbytes} bytes at {where}>"


def _forget(comm, registration):
    try:
        comm._registrations.remove(registration)
    except ValueError:
        pass


def register_all(comms, buffers, nbytes=None):
    """yaliCommRegister on every comm of one process (from ``Comm.init_all``): ``buffers[i]`` (a
    tensor, array or pointer on comms[i]'s GPU, see ``Comm.register``) on ``comms[i]``, in a loop.
    Returns one Registration spanning them all. If a comm's registration fails, the others are
    still called (registrations pair up by call order on each comm), those that succeeded are
    deregistered (best effort), and the first error is raised."""
    call = "yaliCommRegister"
    comms, buffers = list(comms), list(buffers)
    if len(comms) != len(buffers) or not comms:
        raise _capi.python_error(
            Result.InvalidArgument,
            call,
            f"register_all needs one buffer per comm: {len(buffers)} buffers, {len(comms)} comms",
        )
    spans = [_as_span(b, nbytes, call) for b in buffers]
    sizes = {n for _, n, _ in spans}
    if len(sizes) != 1:
        raise _capi.python_error(
            Result.InvalidArgument,
            call,
            f"the buffers must have the same size on every comm, got {[n for _, n, _ in spans]}",
        )
    # Every comm is called even after one fails: the library numbers registrations per comm, and
    # the k-th of each comm must stay paired with the k-th of the others.
    done, first = [], None
    for comm, (ptr, size, _) in zip(comms, spans):
        try:
            done.append((comm, _capi.comm_register(comm.handle, ptr, size), ptr))
        except YaliError as e:
            first = first or e
    if first is not None:
        for comm, reg, _ in done:
            try:
                _capi.comm_deregister(comm.handle, reg)
            except YaliError:
                pass
        raise first
    return Registration(done, sizes.pop(), [k for _, _, k in spans if k is not None])


class _ClosingContext:
    """``with`` support shared by the communicator classes (here and in yali.torch): a normal exit
    closes the communicator; an exit by exception aborts it, which returns at once whatever the
    peers and the GPU are doing."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


class Comm(_ClosingContext):
    """One rank's communicator (yaliComm_t). Create with ``Comm.init_rank`` or ``Comm.init_all``.

    ``destroy()`` is local: it waits, bounded by YALI_TIMEOUT_MS, for this rank's calls on the comm,
    never for peers. Leaving a ``with`` block destroys the comm, or aborts it when the block raised.
    Not destroyed on garbage collection: the wait must not happen at an arbitrary time.
    """

    def __init__(self, handle):
        if not handle:
            raise ValueError("Comm needs a non-NULL yaliComm_t; use Comm.init_rank or Comm.init_all")
        self._handle = int(handle)
        self._registrations = []  # live Registration objects on this comm
        self._rank = _capi.comm_user_rank(self._handle)
        self._size = _capi.comm_count(self._handle)
        self._device = _capi.comm_cu_device(self._handle)

    # -- creation

    @classmethod
    def init_rank(cls, nranks, uid, rank, device=None):
        """yaliCommInitRank: rank ``rank`` of ``nranks``, on the current CUDA device (or on
        ``device``, made current for the call). Blocks until every rank has called it."""
        if not isinstance(uid, UniqueId):
            uid = UniqueId(uid)
        if device is None:
            return cls(_capi.comm_init_rank(nranks, bytes(uid), rank))
        prev = _capi.cuda_get_device()
        _capi.cuda_set_device(device)
        try:
            return cls(_capi.comm_init_rank(nranks, bytes(uid), rank))
        finally:
            _capi.cuda_set_device(prev)

    @classmethod
    def init_all(cls, devices=None):
        """yaliCommInitAll: one comm per device, rank i on devices[i]. ``devices``: a list of
        device ordinals, an int n (devices 0..n-1), or None (every visible device)."""
        if devices is None:
            devices = _capi.cuda_device_count()
        return [cls(h) for h in _capi.comm_init_all(devices)]

    # -- properties

    @property
    def handle(self):
        """The yaliComm_t as an int. Raises YaliInvalidUsage once destroyed or aborted."""
        if self._handle is None:
            raise _capi.python_error(
                Result.InvalidUsage, "yali.Comm", "this communicator was destroyed or aborted"
            )
        return self._handle

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return self._size

    @property
    def device(self):
        """The CUDA device ordinal of this rank."""
        return self._device

    @property
    def closed(self):
        return self._handle is None

    # -- collectives
    #
    # One method per C collective, arguments in the C call's order (yali.h), counts in elements.
    # Pointers: ints, None (NULL), tensors (data_ptr()) or __cuda_array_interface__ arrays. dtype: a
    # DataType, an int, or a name ("float32", "bf16", "int64", "float8_e4m3fn", ...; see
    # as_datatype); op: a RedOp or "sum"/"prod"/"max"/"min"/"avg" (avg only for floating types);
    # root: a rank of this comm. Each call is enqueued on ``stream_ptr`` (an int, a torch.cuda.Stream
    # or a CuPy stream; None: the legacy default stream) and does not synchronize. Every rank makes
    # the same call (collective, count, type, op, root) in the same order. The library checks the
    # buffers (device memory of this comm's GPU, overlaps) and raises YaliInvalidArgument naming the
    # argument; a failed comm raises its asynchronous error (YaliTimeout, ...) and launches nothing.

    def _args(self, call, dtype, op=None):
        dt = as_datatype(dtype, call)
        if op is None:
            return dt, None
        op = as_redop(op, call)
        _check_op_for_type(op, dt, call)
        return dt, op

    def all_reduce(self, send_ptr, recv_ptr, count, dtype=DataType.Float32, op=RedOp.Sum,
                   stream_ptr=None):
        """yaliAllReduce: ``count`` elements from ``send_ptr``, reduced across the ranks, into
        ``recv_ptr`` on every rank (the same pointer: in place)."""
        call = "yaliAllReduce"
        dt, op = self._args(call, dtype, op)
        _capi.all_reduce(_as_ptr(send_ptr, call, "sendbuff"), _as_ptr(recv_ptr, call, "recvbuff"),
                         count, dt, op, self.handle, _as_stream(stream_ptr, call))

    def reduce_scatter(self, send_ptr, recv_ptr, recv_count, dtype=DataType.Float32, op=RedOp.Sum,
                       stream_ptr=None):
        """yaliReduceScatter: ``send_ptr`` holds size * recv_count elements on every rank; rank i's
        ``recv_ptr`` (recv_count elements) gets block i of their reduction. In place when
        recv_ptr == send_ptr + rank * recv_count elements."""
        call = "yaliReduceScatter"
        dt, op = self._args(call, dtype, op)
        _capi.reduce_scatter(_as_ptr(send_ptr, call, "sendbuff"),
                             _as_ptr(recv_ptr, call, "recvbuff"), recv_count, dt, op, self.handle,
                             _as_stream(stream_ptr, call))

    def all_gather(self, send_ptr, recv_ptr, send_count, dtype=DataType.Float32, stream_ptr=None):
        """yaliAllGather: ``recv_ptr`` (size * send_count elements) gets rank i's ``send_ptr``
        (send_count elements) at element offset i * send_count, on every rank. In place when
        send_ptr == recv_ptr + rank * send_count elements."""
        call = "yaliAllGather"
        dt, _ = self._args(call, dtype)
        _capi.all_gather(_as_ptr(send_ptr, call, "sendbuff"), _as_ptr(recv_ptr, call, "recvbuff"),
                         send_count, dt, self.handle, _as_stream(stream_ptr, call))

    def broadcast(self, send_ptr, recv_ptr, count, dtype=DataType.Float32, root=0,
                  stream_ptr=None):
        """yaliBroadcast: every rank's ``recv_ptr`` gets root's ``send_ptr`` (``count`` elements);
        send_ptr is read on root only (None elsewhere is fine). In place when they are equal."""
        call = "yaliBroadcast"
        dt, _ = self._args(call, dtype)
        _capi.broadcast(_as_ptr(send_ptr, call, "sendbuff"), _as_ptr(recv_ptr, call, "recvbuff"),
                        count, dt, root, self.handle, _as_stream(stream_ptr, call))

    def bcast(self, ptr, count, dtype=DataType.Float32, root=0, stream_ptr=None):
        """yaliBcast: broadcast in place, root's ``ptr`` into every rank's ``ptr``."""
        call = "yaliBcast"
        dt, _ = self._args(call, dtype)
        _capi.bcast(_as_ptr(ptr, call, "buff"), count, dt, root, self.handle,
                    _as_stream(stream_ptr, call))

    def reduce(self, send_ptr, recv_ptr, count, dtype=DataType.Float32, op=RedOp.Sum, root=0,
               stream_ptr=None):
        """yaliReduce: root's ``recv_ptr`` gets the reduction of every rank's ``send_ptr``
        (``count`` elements); recv_ptr is used on root only (None elsewhere is fine). In place
        when they are equal."""
        call = "yaliReduce"
        dt, op = self._args(call, dtype, op)
        _capi.reduce(_as_ptr(send_ptr, call, "sendbuff"), _as_ptr(recv_ptr, call, "recvbuff"),
                     count, dt, op, root, self.handle, _as_stream(stream_ptr, call))

    def gather(self, send_ptr, recv_ptr, count, dtype=DataType.Float32, root=0, stream_ptr=None):
        """yaliGather: root's ``recv_ptr`` (size * count elements) gets rank i's ``send_ptr``
        (``count`` elements) at element offset i * count; recv_ptr is used on root only (None
        elsewhere is fine). In place when, on root, send_ptr == recv_ptr + root * count."""
        call = "yaliGather"
        dt, _ = self._args(call, dtype)
        _capi.gather(_as_ptr(send_ptr, call, "sendbuff"), _as_ptr(recv_ptr, call, "recvbuff"),
                     count, dt, root, self.handle, _as_stream(stream_ptr, call))

    def scatter(self, send_ptr, recv_ptr, count, dtype=DataType.Float32, root=0, stream_ptr=None):
        """yaliScatter: rank i's ``recv_ptr`` (``count`` elements) gets root's ``send_ptr`` at
        element offset i * count; send_ptr (size * count elements) is read on root only (None
        elsewhere is fine). In place when, on root, recv_ptr == send_ptr + root * count."""
        call = "yaliScatter"
        dt, _ = self._args(call, dtype)
        _capi.scatter(_as_ptr(send_ptr, call, "sendbuff"), _as_ptr(recv_ptr, call, "recvbuff"),
                      count, dt, root, self.handle, _as_stream(stream_ptr, call))

    def all_to_all(self, send_ptr, recv_ptr, count, dtype=DataType.Float32, stream_ptr=None):
        """yaliAlltoAll: rank i sends send_ptr + j * count (``count`` elements) to rank j, which
        places it at recv_ptr + i * count. Both buffers hold size * count elements; never in
        place (they must not overlap)."""
        call = "yaliAlltoAll"
        dt, _ = self._args(call, dtype)
        _capi.all_to_all(_as_ptr(send_ptr, call, "sendbuff"), _as_ptr(recv_ptr, call, "recvbuff"),
                         count, dt, self.handle, _as_stream(stream_ptr, call))

    # -- point-to-point (yali.h, "Point-to-point": NCCL's ncclSend and ncclRecv)
    #
    # Only the two ranks take part. The k-th send from rank a to rank b is matched with b's k-th
    # recv from a; both move the same bytes (count x the type's size; the types may differ: checked
    # on the device, where a difference fails the comm on both ranks). Outside a group each call is
    # a launch of its own; a send ends once its data is in the peer's rings (one larger than them
    # waits for the peer's recv), so a rank's sends
    # and receives that must progress together (a ring shift, a pipeline exchange) go in one
    # ``with yali.group():``, which runs every point-to-point call of the comm in one launch at its
    # end (at most MAX_P2P_OPS per comm). A send to this rank needs its recv in the same group (a
    # local copy); the library refuses it elsewhere (YaliInvalidUsage). count 0 moves nothing.

    def send(self, send_ptr, count, dtype, peer, stream_ptr=None):
        """yaliSend: ``count`` elements of ``dtype`` from ``send_ptr`` to rank ``peer``, into the
        buffer of its matching ``recv``. Arguments as the collectives take them; ``peer`` a rank of
        this comm (the library refuses one out of range, naming it)."""
        call = "yaliSend"
        dt, _ = self._args(call, dtype)
        _capi.send(_as_ptr(send_ptr, call, "sendbuff"), count, dt, peer, self.handle,
                   _as_stream(stream_ptr, call))

    def recv(self, recv_ptr, count, dtype, peer, stream_ptr=None):
        """yaliRecv: ``count`` elements of ``dtype`` into ``recv_ptr`` from rank ``peer``'s matching
        ``send`` (the same bytes). Arguments as for ``send``."""
        call = "yaliRecv"
        dt, _ = self._args(call, dtype)
        _capi.recv(_as_ptr(recv_ptr, call, "recvbuff"), count, dt, peer, self.handle,
                   _as_stream(stream_ptr, call))

    # The uneven exchange (yali.h, "AlltoAllv"): never in place; rows move as bytes. A count check
    # that fails on the device (a capacity exceeded, counts that disagree between ranks, a
    # negative count) writes nothing into the receive buffer, leaves -1 in every count output of
    # the rank that failed and fails the comm on every rank (YaliInvalidUsage, from
    # check_async_error() and from every later call).

    def all_to_all_v(self, send_ptr, send_counts, send_displs, recv_ptr, recv_counts, recv_displs,
                     dtype=DataType.Float32, stream_ptr=None):
        """yaliAlltoAllv, with host counts (MPI's and torch's semantics): this rank sends
        ``send_counts[j]`` elements from send_ptr + send_displs[j] to rank j, which places them at
        recv_ptr + recv_displs[i] (i: this rank) and must expect them: its recv_counts[i] equals
        them. ``send_counts``/``recv_counts``: sequences of ``size`` ints, in elements;
        ``send_displs``/``recv_displs``: the same, or None (packed: the prefix sums of the
        counts). Read on the host during the call: a captured CUDA graph keeps them."""
        call = "yaliAlltoAllv"
        dt, _ = self._args(call, dtype)
        _capi.all_to_all_v(_as_ptr(send_ptr, call, "sendbuff"), send_counts, send_displs,
                           _as_ptr(recv_ptr, call, "recvbuff"), recv_counts, recv_displs, dt,
                           self.handle, _as_stream(stream_ptr, call), nranks=self._size)

    def all_to_all_v_device_counts(self, send_ptr, send_counts, send_displs, recv_ptr,
                                   recv_capacity, recv_counts=None, recv_displs=None,
                                   dtype=DataType.Float32, stream_ptr=None):
        """yaliAlltoAllvDeviceCounts: ``send_counts`` (and ``send_displs``, or None: packed) are
        device int64[size] arrays in elements, written by an earlier kernel on the stream; no host
        round trip, so a graph replays with whatever counts each step writes. What this rank
        receives is packed in source-rank order into ``recv_ptr`` (at most ``recv_capacity``
        elements); ``recv_counts``/``recv_displs`` (device int64[size], or None) receive the
        elements from each rank and where they start."""
        call = "yaliAlltoAllvDeviceCounts"
        dt, _ = self._args(call, dtype)
        _capi.all_to_all_v_device_counts(
            _as_ptr(send_ptr, call, "sendbuff"), _as_ptr(send_counts, call, "sendcounts"),
            _as_ptr(send_displs, call, "sdispls"), _as_ptr(recv_ptr, call, "recvbuff"),
            recv_capacity, _as_ptr(recv_counts, call, "recvcounts"),
            _as_ptr(recv_displs, call, "rdispls"), dt, self.handle, _as_stream(stream_ptr, call))

    def expert_dispatch(self, send_ptr, send_counts, recv_ptr, recv_counts, expert_offsets, layout,
                        stream_ptr=None):
        """yaliExpertDispatch: E = layout.local_experts experts per rank, global expert
        g = d * E + e being local expert e of rank d. ``send_counts``: device int64[size * E],
        rows for each global expert; ``send_ptr``: those rows sorted by global expert. ``recv_ptr``
        (layout.capacity_rows rows) gets, expert-major, every rank's rows for this rank's experts:
        local expert 0's segment (rank 0's rows, rank 1's, ...), then local expert 1's at the next
        multiple of layout.align_rows, and so on. ``recv_counts`` (device int64[E * size],
        [e * size + s]: rows of local expert e from rank s) and ``expert_offsets`` (int64[E + 1],
        each segment's first row and, last, the rows used) may be None. ``layout``: an
        ExpertLayout (or a 4-tuple in its order, or a yaliExpertLayout_t)."""
        call = "yaliExpertDispatch"
        lay = _as_layout(layout, call, self._size)
        _capi.expert_dispatch(
            _as_ptr(send_ptr, call, "sendbuff"), _as_ptr(send_counts, call, "sendCounts"),
            _as_ptr(recv_ptr, call, "recvbuff"), _as_ptr(recv_counts, call, "recvCounts"),
            _as_ptr(expert_offsets, call, "expertOffsets"), lay, self.handle,
            _as_stream(stream_ptr, call))

    def expert_combine(self, send_ptr, send_counts, recv_ptr, layout, stream_ptr=None):
        """yaliExpertCombine, the dispatch's inverse: every row of ``send_ptr`` (in the dispatch's
        receive layout, e.g. the experts' outputs) goes back to the rank and row it came from, so
        ``recv_ptr`` ends up in the dispatch's send layout. ``send_counts`` and ``layout``: the
        dispatch's, unchanged."""
        call = "yaliExpertCombine"
        lay = _as_layout(layout, call, self._size)
        _capi.expert_combine(
            _as_ptr(send_ptr, call, "sendbuff"), _as_ptr(send_counts, call, "sendCounts"),
            _as_ptr(recv_ptr, call, "recvbuff"), lay, self.handle, _as_stream(stream_ptr, call))

    def algo_info(self, collective, count, dtype=DataType.Float32, op=RedOp.Sum, root=0,
                  send_ptr=None, recv_ptr=None):
        """yaliAlgoInfo: what ``collective`` (a Collective, or a name: "allreduce"/"all_reduce",
        "reducescatter", "allgather", "broadcast", "reduce", "gather", "scatter", "alltoall")
        would run on this comm. ``count``, ``op`` and ``root`` as that collective's own method
        takes them (op is ignored by collectives that do not reduce, root by those without one).
        ``send_ptr``/``recv_ptr``: the call's buffers, which matter when they are registered; None
        (the default) passes NULL: the choice for unregistered buffers. Launches nothing."""
        call = "yaliAlgoInfo"
        return AlgoInfo(
            *_capi.algo_info(
                self.handle,
                as_collective(collective, call),
                _as_ptr(send_ptr, call, "sendbuff"),
                _as_ptr(recv_ptr, call, "recvbuff"),
                count,
                as_datatype(dtype, call),
                as_redop(op, call),
                root,
            )
        )

    def all_reduce_algo_info(self, count, dtype=DataType.Float32, op=RedOp.Sum, send_ptr=None,
                             recv_ptr=None):
        """yaliAllReduceAlgoInfo: the algorithm yaliAllReduce would run. Launches nothing.

        ``send_ptr``/``recv_ptr`` (pointers or tensors, as for ``all_reduce``; the same one twice
        for in place): the buffers of the call, which matter when they are registered (the
        zero-copy algorithms). None (the default) passes NULL: the choice for unregistered
        buffers."""
        call = "yaliAllReduceAlgoInfo"
        return AlgoInfo(
            *_capi.all_reduce_algo_info(
                self.handle,
                _as_ptr(send_ptr, call, "sendbuff"),
                _as_ptr(recv_ptr, call, "recvbuff"),
                count,
                as_datatype(dtype, call),
                as_redop(op, call),
            )
        )

    # -- registered buffers

    def register(self, buff, nbytes=None):
        """yaliCommRegister: maps device memory of this comm's GPU into every peer, so that
        collectives whose buffers lie inside it (on every rank, at the same offset) can run
        zero-copy. Collective: every rank calls it, in the same order, with the same size.

        ``buff``: a torch tensor (``nbytes`` None: its whole untyped storage, from
        ``untyped_storage().data_ptr()`` for ``untyped_storage().nbytes()`` bytes, so that every view
        of it qualifies; with ``nbytes``: that many bytes from ``data_ptr()``), an object with
        __cuda_array_interface__ (shape x itemsize unless ``nbytes``), or a pointer (int; ``nbytes``
        required). The memory must be shareable by CUDA IPC (from cudaMalloc: torch's caching
        allocator qualifies, except with expandable_segments). Returns a Registration
        (``deregister()``, or use it in a ``with`` block)."""
        call = "yaliCommRegister"
        ptr, size, keep = _as_span(buff, nbytes, call)
        reg = _capi.comm_register(self.handle, ptr, size)
        return Registration([(self, reg, ptr)], size, [keep] if keep is not None else [])

    def deregister(self, registration):
        """yaliCommDeregister (local, bounded): ends a Registration made by ``register`` (or, given
        a raw registration handle as an int, the registration it names)."""
        call = "yaliCommDeregister"
        if isinstance(registration, int) and not isinstance(registration, bool):
            for r in self._registrations:
                if len(r.comms) == 1 and r.handle == registration:
                    registration = r
                    break
            else:
                _capi.comm_deregister(self.handle, registration)
                return
        if not isinstance(registration, Registration):
            raise _capi.python_error(
                Result.InvalidArgument,
                call,
                f"handle must be a yali.Registration or an int, got {type(registration).__name__}",
            )
        if not registration.closed and self not in registration.comms:
            raise _capi.python_error(
                Result.InvalidArgument, call, f"{registration!r} was not made on this communicator"
            )
        registration.deregister()

    @property
    def registrations(self):
        """The live Registrations on this comm, oldest first."""
        return list(self._registrations)

    # -- errors and life cycle

    def get_async_error(self):
        """yaliCommGetAsyncError: Result.Success or the error a device-side operation hit (here or
        on a peer: every rank learns of it). A host-memory read; does not synchronize."""
        return _capi.comm_get_async_error(self.handle)

    def check_async_error(self):
        """Raise the YaliError subclass of this comm's asynchronous error (YaliTimeout,
        YaliRemoteError, YaliInvalidUsage, ...) with the library's message, if it has one.

        Eager calls on a failed comm raise it themselves; work that does not pass through the host
        API (a CUDA graph replay) does not: its collectives write NaN (all-ones bytes) into their
        outputs. Call this after such work has finished and before trusting its outputs."""
        _capi.check_async_error(self.handle)

    def last_error(self):
        """yaliGetLastError(comm)."""
        return _capi.get_last_error(self.handle)

    def destroy(self):
        """yaliCommDestroy (local, bounded by YALI_TIMEOUT_MS). Idempotent."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        try:
            _capi.comm_destroy(handle)
        finally:
            # After the call: the registered memory (kept alive by the Registrations) must stay
            # allocated until the library has let go of it.
            self._release_registrations()

    def abort(self):
        """yaliCommAbort: frees without waiting for peers. Idempotent."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        try:
            _capi.comm_abort(handle)
        finally:
            # After the call: the registered memory (kept alive by the Registrations) must stay
            # allocated until the library has let go of it.
            self._release_registrations()

    def _release_registrations(self):
        regs, self._registrations = self._registrations, []
        for r in regs:
            r._released(self)

    close = destroy  # the name _ClosingContext (and torch-side code) uses

    def __repr__(self):
        state = "closed" if self._handle is None else f"0x{self._handle:x}"
        return f"<yali.Comm rank {self._rank}/{self._size} cuda:{self._device} {state}>"
