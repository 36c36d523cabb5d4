"""YALI: collective communication among the GPUs of one machine over NVLink.

The Python layer over the C library (``include/yali/yali.h``), through ctypes: importing it needs no
GPU, no CUDA and no PyTorch; libyali.so is opened on the first call (see ``yali._capi`` for where it
is looked for, and ``yali.library_path()``).

Low level (plain pointers as ints, any CUDA array library)::

    uid = yali.get_unique_id()                   # on one rank; send bytes(uid) to the others
    comm = yali.Comm.init_rank(nranks, uid, rank)  # on the current CUDA device
    comm.all_reduce(send_ptr, recv_ptr, count, "float32", "sum", stream_ptr)
    comm.destroy()

PyTorch: ``yali.torch`` (Communicator, SingleProcessCommunicator, torch.compile custom ops).
Submodules ``torch``, ``sweep``, ``report``, ``hw``, ``bench_backends`` are imported on first use.
"""

import contextlib
import importlib
from typing import NamedTuple

from . import _capi
from ._capi import (
    UNIQUE_ID_BYTES,
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
    "UNIQUE_ID_BYTES",
    "AlgoInfo",
    "Comm",
    "DataType",
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
    "as_datatype",
    "as_redop",
    "get_error_string",
    "get_last_error",
    "get_unique_id",
    "get_version",
    "group",
    "group_end",
    "group_start",
    "library_path",
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

_DTYPE_NAMES = {
    "float32": DataType.Float32,
    "float": DataType.Float32,
    "fp32": DataType.Float32,
    "f32": DataType.Float32,
    "float16": DataType.Float16,
    "half": DataType.Float16,
    "fp16": DataType.Float16,
    "f16": DataType.Float16,
    "bfloat16": DataType.Bfloat16,
    "bf16": DataType.Bfloat16,
}

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
        f"datatype {dtype!r} is not supported (float32, float16 or bfloat16)",
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


def group_start():
    """yaliGroupStart (NCCL compatibility: YALI never needs grouping; only nesting is checked)."""
    _capi.group_start()


def group_end():
    """yaliGroupEnd."""
    _capi.group_end()


@contextlib.contextmanager
def group():
    """``with yali.group(): ...``: yaliGroupStart / yaliGroupEnd around the block."""
    group_start()
    try:
        yield
    finally:
        group_end()


# ---- Communicator --------------------------------------------------------------------------------


class AlgoInfo(NamedTuple):
    """What yaliAllReduce would run (yaliAllReduceAlgoInfo)."""

    algorithm: str
    ctas: int
    threads: int
    chunk_bytes: int


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


class _ClosingContext:
    """``with`` support shared by the communicator classes (here and in yali.torch): a normal exit
    closes the communicator; an exit by exception aborts it, since its peers may be gone and a
    collective close could wait for them."""

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

    ``destroy()`` is collective (every rank calls it); leaving a ``with`` block destroys the comm,
    or aborts it when the block raised (peers may never reach their destroy).
    Not destroyed on garbage collection: a collective call must not happen at an arbitrary time.
    """

    def __init__(self, handle):
        if not handle:
            raise ValueError("Comm needs a non-NULL yaliComm_t; use Comm.init_rank or Comm.init_all")
        self._handle = int(handle)
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

    def all_reduce(self, send_ptr, recv_ptr, count, dtype=DataType.Float32, op=RedOp.Sum,
                   stream_ptr=None):
        """yaliAllReduce: ``count`` elements from ``send_ptr`` into ``recv_ptr`` (the same pointer:
        in place), enqueued on ``stream_ptr`` (None: the legacy default stream). Does not
        synchronize. dtype: DataType or "float32"/"float16"/"bfloat16"; op: RedOp or
        "sum"/"prod"/"max"/"min"/"avg"."""
        call = "yaliAllReduce"
        _capi.all_reduce(
            _as_ptr(send_ptr, call, "sendbuff"),
            _as_ptr(recv_ptr, call, "recvbuff"),
            count,
            as_datatype(dtype, call),
            as_redop(op, call),
            self.handle,
            _as_stream(stream_ptr, call),
        )

    def all_reduce_algo_info(self, count, dtype=DataType.Float32, op=RedOp.Sum):
        """yaliAllReduceAlgoInfo: the algorithm yaliAllReduce would run. Launches nothing."""
        call = "yaliAllReduceAlgoInfo"
        return AlgoInfo(
            *_capi.all_reduce_algo_info(
                self.handle, count, as_datatype(dtype, call), as_redop(op, call)
            )
        )

    # -- errors and life cycle

    def get_async_error(self):
        """yaliCommGetAsyncError: Result.Success or the error a device-side operation hit."""
        return _capi.comm_get_async_error(self.handle)

    def check_async_error(self):
        """Raise the YaliError for this comm's asynchronous error, if any."""
        code = self.get_async_error()
        if code != Result.Success:
            detail = _capi.get_last_error(self.handle)
            raise _capi._make_error(code, "yaliCommGetAsyncError", get_error_string(code), detail)

    def last_error(self):
        """yaliGetLastError(comm)."""
        return _capi.get_last_error(self.handle)

    def destroy(self):
        """yaliCommDestroy (collective). Idempotent."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        _capi.comm_destroy(handle)

    def abort(self):
        """yaliCommAbort: frees without waiting for peers. Idempotent."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        _capi.comm_abort(handle)

    close = destroy  # the name _ClosingContext (and torch-side code) uses

    def __repr__(self):
        state = "closed" if self._handle is None else f"0x{self._handle:x}"
        return f"<yali.Comm rank {self._rank}/{self._size} cuda:{self._device} {state}>"
