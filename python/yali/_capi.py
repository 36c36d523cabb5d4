"""ctypes binding of the YALI C API (include/yali/yali.h).

Nothing here is compiled against Python or PyTorch: the library is opened with ctypes the first time
a function is called, so ``import yali`` works on a machine with no GPU, no CUDA and no libyali.

Where the library is looked for, in order:
  1. ``$YALI_LIBRARY``: a path to libyali.so (when set, it must exist; nothing else is tried);
  2. the package's own ``yali/lib/libyali.so*`` (what ``pip install .`` ships);
  3. ``<repo>/build/src/libyali.so`` when running from the source tree (``make build``).

This module mirrors the header: the enums (same names without the ``yali`` prefix, same values; the
collectives without their ``yaliColl`` prefix), the structs, one checked wrapper per function,
and the error classes. ``yali/__init__.py`` builds the
Pythonic layer (UniqueId, Comm) on top of it.

Every function of the header is bound when the library is opened; one the library lacks (a build
older than this package) raises YaliLibraryError, naming it, when it is called, so that the others
keep working.
"""

import ctypes
import enum
import functools
import glob
import os
import re
import threading
import warnings
from pathlib import Path

# ---- Constants and enums (values copied from yali.h; tests/python/test_capi_host.py checks them) -

UNIQUE_ID_BYTES = 128
# yaliExpertLayout_t's limits (yali.h, "AlltoAllv: uneven exchange"): localExperts <=
# MAX_LOCAL_EXPERTS and nranks * localExperts <= MAX_EXPERTS.
MAX_LOCAL_EXPERTS = 512
MAX_EXPERTS = 1024
# yali.h, "Point-to-point": at most MAX_P2P_OPS yaliSend/yaliRecv calls per comm in one group.
MAX_P2P_OPS = 960
# The C library this package was written for; yaliGetVersion() reports major*10000+minor*100+patch.
VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH = 0, 1, 0
VERSION_CODE = VERSION_MAJOR * 10000 + VERSION_MINOR * 100 + VERSION_PATCH

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_SIZE_MAX = 2**64 - 1


class Result(enum.IntEnum):
    """yaliResult_t."""

    Success = 0
    UnhandledCudaError = 1
    SystemError = 2
    InternalError = 3
    InvalidArgument = 4
    InvalidUsage = 5
    RemoteError = 6
    InProgress = 7
    Timeout = 8
    NumResults = 9


class DataType(enum.IntEnum):
    """yaliDataType_t: every NCCL type, with NCCL's values. Char, Int, Half, Float and Double are
    aliases, as in the header."""

    Int8 = 0
    Char = 0
    Uint8 = 1
    Int32 = 2
    Int = 2
    Uint32 = 3
    Int64 = 4
    Uint64 = 5
    Float16 = 6
    Half = 6
    Float32 = 7
    Float = 7
    Float64 = 8
    Double = 8
    Bfloat16 = 9
    Float8e4m3 = 10
    Float8e5m2 = 11
    NumTypes = 12


# The types yaliAvg accepts (yali.h: "yaliAvg, which is for the floating types only").
FLOATING_TYPES = frozenset({DataType.Float16, DataType.Float32, DataType.Float64, DataType.Bfloat16,
                            DataType.Float8e4m3, DataType.Float8e5m2})
# Bytes per element of each type.
TYPE_SIZES = {DataType.Int8: 1, DataType.Uint8: 1, DataType.Int32: 4, DataType.Uint32: 4,
              DataType.Int64: 8, DataType.Uint64: 8, DataType.Float16: 2, DataType.Float32: 4,
              DataType.Float64: 8, DataType.Bfloat16: 2, DataType.Float8e4m3: 1,
              DataType.Float8e5m2: 1}


class RedOp(enum.IntEnum):
    """yaliRedOp_t."""

    Sum = 0
    Prod = 1
    Max = 2
    Min = 3
    Avg = 4
    NumOps = 5


class Collective(enum.IntEnum):
    """yaliCollective_t (yaliCollAllReduce -> Collective.AllReduce), for yaliAlgoInfo."""

    AllReduce = 0
    ReduceScatter = 1
    AllGather = 2
    Broadcast = 3
    Reduce = 4
    Gather = 5
    Scatter = 6
    AlltoAll = 7
    AlltoAllv = 8  # yaliAlltoAllv, yaliAlltoAllvDeviceCounts, yaliExpertDispatch/Combine
    NumCollectives = 9


# ---- Structs -------------------------------------------------------------------------------------


class yaliUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class yaliAlgoInfo_t(ctypes.Structure):
    _fields_ = [
        ("algorithm", ctypes.c_char * 32),
        ("ctas", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("chunkBytes", ctypes.c_size_t),
    ]


class yaliExpertLayout_t(ctypes.Structure):
    """The expert-major layout of yaliExpertDispatch/yaliExpertCombine (build it with
    ``expert_layout``, which checks the header's ranges)."""

    _fields_ = [
        ("rowBytes", ctypes.c_size_t),  # bytes per row, >= 1
        ("localExperts", ctypes.c_int),  # E, experts per rank, 1..MAX_LOCAL_EXPERTS
        ("alignRows", ctypes.c_size_t),  # each expert's segment starts at a multiple of this, >= 1
        ("capacityRows", ctypes.c_size_t),  # rows of the expert-major buffer
        ("tokenRows", ctypes.c_size_t),  # rows of the token-ordered buffer (0: not given)
    ]


# ---- Errors --------------------------------------------------------------------------------------


class YaliLibraryError(OSError):
    """libyali.so could not be found or opened. The message lists every place that was tried."""


class YaliError(RuntimeError):
    """A YALI call failed.

    Attributes: ``code`` (a Result), ``call`` (the C function, e.g. "yaliCommInitRank"),
    ``error_string`` (yaliGetErrorString(code)) and ``detail`` (yaliGetLastError: the argument and
    the cause, as the library recorded them).
    """

    def __init__(self, code, call, error_string="", detail=""):
        try:
            code = Result(code)
        except ValueError:
            code = int(code)
        self.code = code
        self.call = call
        self.error_string = error_string
        self.detail = detail
        name = f"yali{code.name}" if isinstance(code, Result) else f"result {int(code)}"
        # The library's detail already starts with the call's name ("yaliCommInitRank: nranks=0
        # ..."); do not repeat it.
        if detail.startswith(call):
            head = detail
        else:
            head = f"{call}: {detail}" if detail else call
        super().__init__(f"{head} [{name}: {error_string or 'error'}]")

    def __reduce__(self):
        return (_rebuilt_error, (int(self.code), self.call, self.error_string, self.detail))


class YaliUnhandledCudaError(YaliError):
    """yaliUnhandledCudaError: a CUDA call failed."""


class YaliSystemError(YaliError):
    """yaliSystemError: an operating-system call failed (sockets, memory)."""


class YaliInternalError(YaliError):
    """yaliInternalError: a bug in YALI."""


class YaliInvalidArgument(YaliError, ValueError):
    """yaliInvalidArgument: a bad value was passed. Also a ValueError."""


class YaliInvalidUsage(YaliError):
    """yaliInvalidUsage: a call that is not allowed now (destroyed or aborted comm, ...)."""


class YaliRemoteError(YaliError):
    """yaliRemoteError: a peer failed or left."""


class YaliInProgress(YaliError):
    """yaliInProgress: reserved."""


class YaliTimeout(YaliError):
    """yaliTimeout: a device-side wait for a peer ran past YALI_TIMEOUT_MS."""


_ERROR_CLASSES = {
    Result.UnhandledCudaError: YaliUnhandledCudaError,
    Result.SystemError: YaliSystemError,
    Result.InternalError: YaliInternalError,
    Result.InvalidArgument: YaliInvalidArgument,
    Result.InvalidUsage: YaliInvalidUsage,
    Result.RemoteError: YaliRemoteError,
    Result.InProgress: YaliInProgress,
    Result.Timeout: YaliTimeout,
}


def _rebuilt_error(code, call, error_string="", detail=""):
    """The YaliError subclass for ``code``, made again from its fields (a copy, an unpickled one)."""
    cls = _ERROR_CLASSES.get(code, YaliError)
    return cls(code, call, error_string, detail)


def _make_error(code, call, error_string="", detail=""):
    """A new failure: the YaliError subclass for ``code``, to be raised. Made while a group is open
    (group_start), it is that group's failure, and the group launches none of its calls."""
    error = _rebuilt_error(code, call, error_string, detail)
    _note_group_failure(error)
    return error


def python_error(code, call, detail):
    """An error found on the Python side before the C call, worded like the library's own."""
    return _make_error(code, call, _error_string_or_blank(code), detail)


def _error_string_or_blank(code):
    try:
        return get_error_string(code)
    except YaliLibraryError:
        return ""


# ---- Locating and opening the library ------------------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_DIR = _PACKAGE_DIR.parent.parent  # python/yali/_capi.py -> <repo>


def _candidates():
    """[(description, path or None)] in search order; path None: nothing there."""
    env = os.environ.get("YALI_LIBRARY")
    if env:
        return [("$YALI_LIBRARY", env)], True
    found = []
    libs = sorted(glob.glob(str(_PACKAGE_DIR / "lib" / "libyali.so*")), key=lambda p: (len(p), p))
    found.append((f"{_PACKAGE_DIR / 'lib' / 'libyali.so*'}", libs[0] if libs else None))
    if (_REPO_DIR / "include" / "yali" / "yali.h").is_file():
        found.append(("source tree build", str(_REPO_DIR / "build" / "src" / "libyali.so")))
    return found, False


def find_library():
    """The path of the libyali.so that would be loaded, or raise YaliLibraryError."""
    cands, from_env = _candidates()
    tried = []
    for desc, path in cands:
        if path and os.path.isfile(path):
            return os.path.abspath(path)
        if from_env:
            tried.append(f"YALI_LIBRARY={path} (no such file)")
        elif path is None:
            tried.append(f"{desc} (no match)")
        else:
            tried.append(f"{path} (no such file)")
    if not from_env:
        tried.insert(0, "YALI_LIBRARY (not set)")
    raise YaliLibraryError(
        "libyali.so not found. Looked in: " + "; ".join(tried) + ". Build it with `make build` "
        "(then it is found in build/src) or `pip install .`, or set YALI_LIBRARY=/path/to/libyali.so."
    )


def _preload_cudart(wanted="libcudart.so.*"):
    """Best effort: load a libcudart that libyali can bind to (torch's pip copy, $CUDA_HOME, ...).

    libyali's RPATH is $ORIGIN only; its libcudart.so.N usually comes from the system loader path.
    When it is not there, a copy already shipped with the nvidia-cuda-runtime wheel or the toolkit
    is loaded globally so that the dynamic loader reuses it (it matches by SONAME). ``wanted``: the
    file name to look for, the SONAME the loader missed when it is known (a torch wheel's
    libcudart.so.12 loads, but does not satisfy a libyali built against libcudart.so.13).
    """
    dirs = []
    try:
        import importlib.util

        for mod in ("nvidia.cuda_runtime", "nvidia.cu13", "nvidia"):
            spec = importlib.util.find_spec(mod)
            if spec and spec.submodule_search_locations:
                for loc in spec.submodule_search_locations:
                    dirs += [os.path.join(loc, "lib"), os.path.join(loc, "cuda_runtime", "lib")]
                    dirs += glob.glob(os.path.join(loc, "cu*", "lib"))
    except Exception:  # noqa: BLE001 (a broken nvidia package must not stop the search)
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(os.path.join(os.environ[var], "lib64"))
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/lib"]
    for d in dirs:
        # wanted + "*": a directory may hold only libcudart.so.13.0.48, whose SONAME is .so.13.
        pattern = wanted if wanted.endswith("*") else wanted + "*"
        for path in sorted(glob.glob(os.path.join(d, pattern)), reverse=True):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return path
            except OSError:
                continue
    return None


# name -> (restype, argtypes). One line per function of the header.
_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_size_t_p = ctypes.POINTER(ctypes.c_size_t)
_PROTOTYPES = {
    "yaliGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
    "yaliGetLastError": (ctypes.c_char_p, [ctypes.c_void_p]),
    "yaliGetVersion": (ctypes.c_int, [_c_int_p]),
    "yaliGetUniqueId": (ctypes.c_int, [ctypes.POINTER(yaliUniqueId)]),
    "yaliCommInitRank": (
        ctypes.c_int,
        [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, yaliUniqueId, ctypes.c_int],
    ),
    "yaliCommInitAll": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, _c_int_p]),
    "yaliCommDestroy": (ctypes.c_int, [ctypes.c_void_p]),
    "yaliCommAbort": (ctypes.c_int, [ctypes.c_void_p]),
    "yaliCommGetAsyncError": (ctypes.c_int, [ctypes.c_void_p, _c_int_p]),
    # For a library that runs its own steps after YALI's (libyali-nccl): no Python wrapper.
    "yaliCommGetFailureFlag": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "yaliCommWatchFailureWord": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
    "yaliCommCount": (ctypes.c_int, [ctypes.c_void_p, _c_int_p]),
    "yaliCommCuDevice": (ctypes.c_int, [ctypes.c_void_p, _c_int_p]),
    "yaliCommUserRank": (ctypes.c_int, [ctypes.c_void_p, _c_int_p]),
    "yaliCommRegister": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # buff
            ctypes.c_size_t,  # size
            ctypes.POINTER(ctypes.c_void_p),  # handle (out)
        ],
    ),
    "yaliCommDeregister": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
    "yaliGroupStart": (ctypes.c_int, []),
    "yaliGroupEnd": (ctypes.c_int, []),
    "yaliGroupSimulateEnd": (ctypes.c_int, []),
    "yaliAllReduce": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff
            ctypes.c_void_p,  # recvbuff
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # op
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliReduceScatter": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff (nranks * recvcount elements)
            ctypes.c_void_p,  # recvbuff
            ctypes.c_size_t,  # recvcount
            ctypes.c_int,  # datatype
            ctypes.c_int,  # op
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliAllGather": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff
            ctypes.c_void_p,  # recvbuff (nranks * sendcount elements)
            ctypes.c_size_t,  # sendcount
            ctypes.c_int,  # datatype
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliBroadcast": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff (read on root only)
            ctypes.c_void_p,  # recvbuff
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # root
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliBcast": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # buff
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # root
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliReduce": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff
            ctypes.c_void_p,  # recvbuff (used on root only)
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # op
            ctypes.c_int,  # root
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliGather": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff (count elements)
            ctypes.c_void_p,  # recvbuff (nranks * count elements, used on root only)
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # root
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliScatter": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff (nranks * count elements, read on root only)
            ctypes.c_void_p,  # recvbuff (count elements)
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # root
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliAlltoAll": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff (nranks * count elements)
            ctypes.c_void_p,  # recvbuff (nranks * count elements)
            ctypes.c_size_t,  # count (per peer)
            ctypes.c_int,  # datatype
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliAlltoAllv": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff
            _c_size_t_p,  # sendcounts (host, nranks entries, elements)
            _c_size_t_p,  # sdispls (host, nranks entries; NULL: packed)
            ctypes.c_void_p,  # recvbuff
            _c_size_t_p,  # recvcounts (host, nranks entries)
            _c_size_t_p,  # rdispls (host, nranks entries; NULL: packed)
            ctypes.c_int,  # datatype
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliAlltoAllvDeviceCounts": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff
            ctypes.c_void_p,  # sendcounts (device int64[nranks], elements)
            ctypes.c_void_p,  # sdispls (device int64[nranks]; NULL: packed)
            ctypes.c_void_p,  # recvbuff
            ctypes.c_size_t,  # recvCapacity (elements)
            ctypes.c_void_p,  # recvcounts (device int64[nranks], out; NULL allowed)
            ctypes.c_void_p,  # rdispls (device int64[nranks], out; NULL allowed)
            ctypes.c_int,  # datatype
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliExpertDispatch": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff (rows sorted by global expert)
            ctypes.c_void_p,  # sendCounts (device int64[nranks * E], rows)
            ctypes.c_void_p,  # recvbuff (expert-major, capacityRows rows)
            ctypes.c_void_p,  # recvCounts (device int64[E * nranks], out; NULL allowed)
            ctypes.c_void_p,  # expertOffsets (device int64[E + 1], out; NULL allowed)
            ctypes.POINTER(yaliExpertLayout_t),  # layout
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliExpertCombine": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff (expert-major, capacityRows rows)
            ctypes.c_void_p,  # sendCounts (the dispatch's)
            ctypes.c_void_p,  # recvbuff (the dispatch's sendbuff layout)
            ctypes.POINTER(yaliExpertLayout_t),  # layout (the dispatch's)
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliSend": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # sendbuff (count elements)
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # peer (a rank of comm; this rank: its recv in the same group)
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliRecv": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # recvbuff (count elements)
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # peer (a rank of comm; this rank: its send in the same group)
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # stream
        ],
    ),
    "yaliAlgoInfo": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # comm
            ctypes.c_int,  # collective
            ctypes.c_void_p,  # sendbuff (NULL: the choice for unregistered buffers)
            ctypes.c_void_p,  # recvbuff (NULL allowed)
            ctypes.c_size_t,  # count, as the collective's own call takes it
            ctypes.c_int,  # datatype
            ctypes.c_int,  # op (ignored by collectives that do not reduce)
            ctypes.c_int,  # root (ignored by collectives without one)
            ctypes.POINTER(yaliAlgoInfo_t),  # info (out)
        ],
    ),
    "yaliAllReduceAlgoInfo": (
        ctypes.c_int,
        [
            ctypes.c_void_p,  # comm
            ctypes.c_void_p,  # sendbuff (NULL: the choice for unregistered buffers)
            ctypes.c_void_p,  # recvbuff (NULL allowed)
            ctypes.c_size_t,  # count
            ctypes.c_int,  # datatype
            ctypes.c_int,  # op
            ctypes.POINTER(yaliAlgoInfo_t),  # info (out)
        ],
    ),
    "yaliCollectiveName": (ctypes.c_char_p, [ctypes.c_int]),
}


class _Library:
    """The opened libyali and its typed functions (attributes named as in the header)."""

    def __init__(self, path):
        self.path = path
        try:
            self.cdll = ctypes.CDLL(path)
        except OSError as first:
            # The loader names the SONAME it could not find ("libcudart.so.13: cannot open ...").
            missing = re.search(r"libcudart\.so\.\d+", str(first))
            cudart = _preload_cudart(missing.group(0) if missing else "libcudart.so.*")
            try:
                self.cdll = ctypes.CDLL(path)
            except OSError as second:
                raise YaliLibraryError(
                    f"cannot open {path}: {second}"
                    + ("" if cudart else " (no libcudart.so found to preload either)")
                ) from first
        # A function the library lacks is not an error until it is called (__getattr__): a build
        # older than this package still serves every call it has.
        self.missing = []
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(self.cdll, name)
            except AttributeError:
                self.missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        v = ctypes.c_int(0)
        self.yaliGetVersion(ctypes.byref(v))
        self.version = v.value
        if self.version // 10000 != VERSION_MAJOR or (self.version // 100) % 100 != VERSION_MINOR:
            warnings.warn(
                f"{path} is libyali version code {self.version}; this Python package expects "
                f"{VERSION_CODE}",
                RuntimeWarning,
                stacklevel=3,
            )

    def __getattr__(self, name):
        # Only reached for names __init__ did not bind: a function of the header this library
        # lacks, or no function at all.
        if name in _PROTOTYPES:
            raise YaliLibraryError(
                f"{self.path} lacks {name}: it is older or newer than this Python package "
                f"(written for libyali {VERSION_MAJOR}.{VERSION_MINOR}.{VERSION_PATCH}); rebuild it"
            )
        raise AttributeError(name)


_lib = None
_lib_lock = threading.Lock()


def lib():
    """The loaded library (opened on first use). Raises YaliLibraryError with the places tried."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = _Library(find_library())
    return _lib


def library_path():
    """The path of the loaded library, or of the one that would be loaded, or None."""
    if _lib is not None:
        return _lib.path
    try:
        return find_library()
    except YaliLibraryError:
        return None


# ---- Checked wrappers ----------------------------------------------------------------------------


def _text(raw):
    return raw.decode("utf-8", "replace") if raw else ""


def get_error_string(code):
    """yaliGetErrorString(code): the fixed description of a result code."""
    return _text(lib().yaliGetErrorString(int(code)))


def get_last_error(comm_handle=None):
    """yaliGetLastError(comm): the detail of the last failure (the thread's when comm is None)."""
    return _text(lib().yaliGetLastError(comm_handle))


def _failure_detail(comm_handle):
    """The message of the call that just failed: the calling thread's last error, which every
    failing call sets (yaliGetLastError(NULL)); the comm's only when the thread has none. The comm's
    record is kept for later readers (yaliGetLastError(comm)) and may be older: an earlier failure,
    possibly an unrelated one, of another call on that comm."""
    detail = get_last_error(None)
    if not detail and comm_handle:
        detail = get_last_error(comm_handle)
    return detail


def check(code, call, comm_handle=None):
    """Raise the YaliError subclass for ``code`` unless it is yaliSuccess.

    The detail is the message of the call that failed (_failure_detail): the thread's last error,
    else the comm's.
    """
    if code == 0:
        return
    raise _make_error(code, call, get_error_string(code), _failure_detail(comm_handle))


def _as_integer(value, call, name):
    """``value`` as a Python int (anything with __index__, not a bool), or YaliInvalidArgument."""
    if isinstance(value, bool):  # bool has __index__ too: refused here, before it
        raise python_error(Result.InvalidArgument, call, f"{name} must be an int, got bool")
    if not isinstance(value, int):
        try:
            value = value.__index__()
        except (AttributeError, TypeError):
            raise python_error(
                Result.InvalidArgument, call, f"{name} must be an int, got {type(value).__name__}"
            ) from None
    return value


def as_c_int(value, call, name):
    """``value`` as a C int, or YaliInvalidArgument naming ``call`` and ``name``."""
    value = _as_integer(value, call, name)
    if not _INT_MIN <= value <= _INT_MAX:
        raise python_error(Result.InvalidArgument, call, f"{name}={value} does not fit a C int")
    return int(value)


def as_size_t(value, call, name):
    """``value`` as a size_t (an int >= 0), or YaliInvalidArgument."""
    value = _as_integer(value, call, name)
    if not 0 <= value <= _SIZE_MAX:
        raise python_error(Result.InvalidArgument, call, f"{name}={value} must be >= 0")
    return int(value)


def get_version():
    """yaliGetVersion(): the YALI_VERSION_CODE of the loaded library."""
    v = ctypes.c_int(0)
    check(lib().yaliGetVersion(ctypes.byref(v)), "yaliGetVersion")
    return v.value


def get_unique_id():
    """yaliGetUniqueId(): 128 bytes."""
    uid = yaliUniqueId()
    check(lib().yaliGetUniqueId(ctypes.byref(uid)), "yaliGetUniqueId")
    return ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES)


def comm_init_rank(nranks, uid_bytes, rank):
    """yaliCommInitRank on the current CUDA device; returns the handle (an int)."""
    call = "yaliCommInitRank"
    nranks = as_c_int(nranks, call, "nranks")
    rank = as_c_int(rank, call, "rank")
    uid_bytes = bytes(uid_bytes)
    if len(uid_bytes) != UNIQUE_ID_BYTES:  # memmove would read past a shorter one
        raise python_error(Result.InvalidArgument, call,
                           f"{call}: the unique id has {len(uid_bytes)} bytes; a yaliUniqueId has "
                           f"{UNIQUE_ID_BYTES}")
    uid = yaliUniqueId()
    ctypes.memmove(ctypes.addressof(uid), uid_bytes, UNIQUE_ID_BYTES)
    handle = ctypes.c_void_p(None)
    check(lib().yaliCommInitRank(ctypes.byref(handle), nranks, uid, rank), call)
    return handle.value


def comm_init_all(devices):
    """yaliCommInitAll; ``devices`` a list of ints, or an int (devices 0..n-1, devlist NULL)."""
    call = "yaliCommInitAll"
    if isinstance(devices, int) and not isinstance(devices, bool):
        ndev, devlist = as_c_int(devices, call, "ndev"), None
    else:
        devs = [as_c_int(d, call, "devlist[%d]" % i) for i, d in enumerate(devices)]
        ndev = len(devs)
        devlist = (ctypes.c_int * max(ndev, 1))(*devs)
    handles = (ctypes.c_void_p * max(ndev, 1))()
    check(lib().yaliCommInitAll(handles, ndev, devlist), call)
    return [handles[i] for i in range(ndev)]


def comm_destroy(handle):
    # The comm may be gone after a failure: read the thread's error, not the comm's.
    check(lib().yaliCommDestroy(handle), "yaliCommDestroy")


def comm_abort(handle):
    check(lib().yaliCommAbort(handle), "yaliCommAbort")


def comm_get_async_error(handle):
    """yaliCommGetAsyncError: Result.Success, or the error a device-side operation of the comm hit
    (also one a peer hit: every rank learns of it). A read of host-mapped memory: no
    synchronization, about a microsecond."""
    err = ctypes.c_int(0)
    check(lib().yaliCommGetAsyncError(handle, ctypes.byref(err)), "yaliCommGetAsyncError", handle)
    try:
        return Result(err.value)
    except ValueError:
        return err.value


_ASYNC_CALL = "yaliCommGetAsyncError"


def _async_detail(handle):
    """The message of a comm's asynchronous failure. yaliCommGetAsyncError records it, as its own
    failure ("yaliCommGetAsyncError: an earlier operation on this comm failed on the device: ..."),
    for the calling thread and the comm. Should the thread's text name another call (a library that
    did not record it there), that text is an unrelated earlier failure of this thread: the comm's
    record, which holds asynchronous failures, is used instead."""
    thread = get_last_error(None)
    if thread.startswith(_ASYNC_CALL):
        return thread
    return get_last_error(handle) or thread


def check_async_error(handle, call=_ASYNC_CALL, where=""):
    """Raise the YaliError subclass of the comm's asynchronous error (YaliTimeout, YaliRemoteError,
    YaliInvalidUsage, ...) with the library's message, if it has one; return None otherwise.

    ``call`` names what raises (a method such as "SingleProcessCommunicator.all_reduce"; default
    the C call); ``where`` (e.g. "rank 1") goes before the library's message. Costs one
    yaliCommGetAsyncError (a host-memory read)."""
    code = comm_get_async_error(handle)
    if code == Result.Success:
        return
    detail = _async_detail(handle)
    if where:
        detail = f"{where}: {detail}" if detail else where
    raise _make_error(code, call, get_error_string(code), detail)


def _comm_int_query(fn_name, handle):
    out = ctypes.c_int(-1)
    check(getattr(lib(), fn_name)(handle, ctypes.byref(out)), fn_name, handle)
    return out.value


def comm_count(handle):
    return _comm_int_query("yaliCommCount", handle)


def comm_cu_device(handle):
    return _comm_int_query("yaliCommCuDevice", handle)


def comm_user_rank(handle):
    return _comm_int_query("yaliCommUserRank", handle)


def comm_register(handle, ptr, size):
    """yaliCommRegister(comm, ptr, size) -> the registration handle (an int, never 0).
    Collective: every rank, same order, same size."""
    call = "yaliCommRegister"
    size = as_size_t(size, call, "size")
    reg = ctypes.c_void_p(None)
    check(lib().yaliCommRegister(handle, ptr, size, ctypes.byref(reg)), call, handle)
    return reg.value


def comm_deregister(handle, reg_handle):
    """yaliCommDeregister(comm, handle). Collective, like yaliCommRegister."""
    check(lib().yaliCommDeregister(handle, reg_handle), "yaliCommDeregister", handle)


# This thread's groups (yaliGroupStart/End nest; the library counts them per thread too):
#   depth    how many are open;
#   failure  the first failure while they are open: a YaliError raised by any call (the library's
#            refusal, or one made on the Python side before the library was called: yali.Comm's
#            and yali.torch's checks), any exception of a collective's binding below, or the
#            exception that left a yali.group() block; None when none.
# NCCL's rule, which the groups opened here keep: a group in which a call failed launches none of
# its calls at its outermost end, which reports the failure (ncclGroupEnd returns it). The C
# library itself launches the calls it accepted (yali.h: Groups, a rule libyali-nccl relies on
# to run a refused call another way in the same group), so that end is yaliGroupSimulateEnd here:
# it closes the group and launches nothing. Without it, a SingleProcessCommunicator call refused
# on one GPU would launch on the others and wait for the missing rank until YALI_TIMEOUT_MS.
_group = threading.local()


def group_depth():
    return getattr(_group, "depth", 0)


def _note_group_failure(error):
    """Makes `error` the open group's failure, unless it has one (or no group is open)."""
    if group_depth() > 0 and getattr(_group, "failure", None) is None:
        _group.failure = error


def group_start():
    check(lib().yaliGroupStart(), "yaliGroupStart")
    if group_depth() == 0:
        _group.failure = None
        _group.kept = []
    _group.depth = group_depth() + 1


def keep_for_group(objects):
    """Inside an open group, holds ``objects`` (the tensors of a call queued in it; None entries
    skipped) until the outermost group end. The call launches only there: a temporary the caller
    dropped at once (``all_reduce(g.to(torch.bfloat16))``) would otherwise go back to torch's
    caching allocator, which may give its memory to work the stream runs before the group's
    launch. Released after that end has queued the launches, or dropped them (stream order then
    protects the memory, as for any tensor freed after its last use was queued)."""
    if group_depth() > 0:
        _group.kept.extend(o for o in objects if o is not None)


def _drop_function():
    """yaliGroupSimulateEnd, or, from a libyali older than it, yaliGroupEnd (with a warning): the
    group must be closed at the library's level either way, or the thread's later calls would all
    queue in it."""
    library = lib()
    if "yaliGroupSimulateEnd" not in getattr(library, "missing", ()):
        return library.yaliGroupSimulateEnd, "yaliGroupSimulateEnd"
    warnings.warn(
        f"{library.path} lacks yaliGroupSimulateEnd (it is older than this Python package): a group "
        "in which a call failed is ended with yaliGroupEnd, which launches the calls the library "
        "accepted", RuntimeWarning, stacklevel=4)
    return library.yaliGroupEnd, "yaliGroupEnd"


def group_end(dropped_by=None):
    """Ends this thread's innermost group. ``dropped_by``: the exception leaving a yali.group()
    block, which drops the group as a failed call does (the caller lets it go on)."""
    depth = group_depth()
    if dropped_by is not None:
        _note_group_failure(dropped_by)
    failure = getattr(_group, "failure", None) if depth > 0 else None
    if failure is None:
        end, name = lib().yaliGroupEnd, "yaliGroupEnd"
    else:
        end, name = _drop_function()
    try:
        check(end(), name)
    finally:
        # The library closes the group even when a launch at its end fails; a group end without a
        # group start is refused there and leaves the count at 0 here.
        if depth > 0:
            _group.depth = depth - 1
            if depth == 1:
                _group.failure = None  # and its traceback's frames
                _group.kept = []  # keep_for_group: the launches are queued (or dropped)
    if failure is not None and depth == 1 and dropped_by is None:
        what = failure.call if isinstance(failure, YaliError) else type(failure).__name__
        raise python_error(
            failure.code if isinstance(failure, YaliError) else Result.InvalidUsage, "yaliGroupEnd",
            f"yaliGroupEnd: none of the group's calls was launched: {what} failed inside the group "
            f"({failure}), and a group with a failed call launches nothing (NCCL's rule)") from failure


def _collective(fn):
    """A collective's (or point-to-point call's) binding: any exception it raises inside a group is
    the group's failure (a YaliError is one already: _make_error)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            _note_group_failure(e)
            raise
    return call


# The collectives' wrappers (and yaliSend/yaliRecv's) take plain ints (pointers or None, counts,
# enum values, ranks, handle, stream) in the C call's order, and raise the YaliError subclass of a
# failure with the library's message.
# A comm whose asynchronous error is set makes every one of them raise it, launching nothing
# (yali.h: "Failures").


def _check_launch(call, handle, code):
    if code:
        check(code, call, handle)


@_collective
def all_reduce(send_ptr, recv_ptr, count, datatype, op, handle, stream):
    """yaliAllReduce."""
    call = "yaliAllReduce"
    _check_launch(call, handle, lib().yaliAllReduce(
        send_ptr,
        recv_ptr,
        as_size_t(count, call, "count"),
        as_c_int(datatype, call, "datatype"),
        as_c_int(op, call, "op"),
        handle,
        stream,
    ))


@_collective
def reduce_scatter(send_ptr, recv_ptr, recv_count, datatype, op, handle, stream):
    """yaliReduceScatter: ``recv_count`` elements per rank; send holds nranks * recv_count."""
    call = "yaliReduceScatter"
    _check_launch(call, handle, lib().yaliReduceScatter(
        send_ptr, recv_ptr, as_size_t(recv_count, call, "recvcount"),
        as_c_int(datatype, call, "datatype"), as_c_int(op, call, "op"), handle, stream))


@_collective
def all_gather(send_ptr, recv_ptr, send_count, datatype, handle, stream):
    """yaliAllGather: ``send_count`` elements per rank; recv holds nranks * send_count."""
    call = "yaliAllGather"
    _check_launch(call, handle, lib().yaliAllGather(
        send_ptr, recv_ptr, as_size_t(send_count, call, "sendcount"),
        as_c_int(datatype, call, "datatype"), handle, stream))


@_collective
def broadcast(send_ptr, recv_ptr, count, datatype, root, handle, stream):
    """yaliBroadcast (send_ptr is read on root only)."""
    call = "yaliBroadcast"
    _check_launch(call, handle, lib().yaliBroadcast(
        send_ptr, recv_ptr, as_size_t(count, call, "count"), as_c_int(datatype, call, "datatype"),
        as_c_int(root, call, "root"), handle, stream))


@_collective
def bcast(ptr, count, datatype, root, handle, stream):
    """yaliBcast: yaliBroadcast in place."""
    call = "yaliBcast"
    _check_launch(call, handle, lib().yaliBcast(
        ptr, as_size_t(count, call, "count"), as_c_int(datatype, call, "datatype"),
        as_c_int(root, call, "root"), handle, stream))


@_collective
def reduce(send_ptr, recv_ptr, count, datatype, op, root, handle, stream):
    """yaliReduce (recv_ptr is used on root only; None elsewhere is fine)."""
    call = "yaliReduce"
    _check_launch(call, handle, lib().yaliReduce(
        send_ptr, recv_ptr, as_size_t(count, call, "count"), as_c_int(datatype, call, "datatype"),
        as_c_int(op, call, "op"), as_c_int(root, call, "root"), handle, stream))


@_collective
def gather(send_ptr, recv_ptr, count, datatype, root, handle, stream):
    """yaliGather: ``count`` elements per rank into root's recv (nranks * count; None elsewhere)."""
    call = "yaliGather"
    _check_launch(call, handle, lib().yaliGather(
        send_ptr, recv_ptr, as_size_t(count, call, "count"), as_c_int(datatype, call, "datatype"),
        as_c_int(root, call, "root"), handle, stream))


@_collective
def scatter(send_ptr, recv_ptr, count, datatype, root, handle, stream):
    """yaliScatter: root's send (nranks * count; None elsewhere) into every rank's recv (count)."""
    call = "yaliScatter"
    _check_launch(call, handle, lib().yaliScatter(
        send_ptr, recv_ptr, as_size_t(count, call, "count"), as_c_int(datatype, call, "datatype"),
        as_c_int(root, call, "root"), handle, stream))


@_collective
def all_to_all(send_ptr, recv_ptr, count, datatype, handle, stream):
    """yaliAlltoAll: ``count`` elements to each peer; both buffers hold nranks * count."""
    call = "yaliAlltoAll"
    _check_launch(call, handle, lib().yaliAlltoAll(
        send_ptr, recv_ptr, as_size_t(count, call, "count"), as_c_int(datatype, call, "datatype"),
        handle, stream))


@_collective
def send(send_ptr, count, datatype, peer, handle, stream):
    """yaliSend (NCCL's ncclSend): ``count`` elements from ``send_ptr`` to rank ``peer``, matched
    with the peer's k-th yaliRecv from this rank (the same bytes). Inside a group, every
    point-to-point call of a comm runs in one launch at the group's end; a send to this rank needs
    its recv in the same group."""
    call = "yaliSend"
    _check_launch(call, handle, lib().yaliSend(
        send_ptr, as_size_t(count, call, "count"), as_c_int(datatype, call, "datatype"),
        as_c_int(peer, call, "peer"), handle, stream))


@_collective
def recv(recv_ptr, count, datatype, peer, handle, stream):
    """yaliRecv (NCCL's ncclRecv): ``count`` elements from rank ``peer`` into ``recv_ptr``, matched
    with the peer's k-th yaliSend to this rank (the same bytes)."""
    call = "yaliRecv"
    _check_launch(call, handle, lib().yaliRecv(
        recv_ptr, as_size_t(count, call, "count"), as_c_int(datatype, call, "datatype"),
        as_c_int(peer, call, "peer"), handle, stream))


def _int_list(values, call, name):
    """``values`` (a sequence of ints) as a list, or YaliInvalidArgument naming ``name``."""
    try:
        return list(values)
    except TypeError:
        raise python_error(
            Result.InvalidArgument, call,
            f"{name} must be a sequence of ints, got {type(values).__name__}") from None


def _size_t_array(values, call, name, length):
    """A host size_t[length] from a sequence of ``length`` ints >= 0 (None stays None: NULL), or
    YaliInvalidArgument naming ``name`` or ``name[i]``."""
    if values is None:
        return None
    values = _int_list(values, call, name)
    if len(values) != length:
        raise python_error(Result.InvalidArgument, call,
                           f"{name} has {len(values)} entries; it must have {length} (nranks)")
    return (ctypes.c_size_t * max(length, 1))(
        *[as_size_t(v, call, f"{name}[{i}]") for i, v in enumerate(values)])


@_collective
def all_to_all_v(send_ptr, send_counts, send_displs, recv_ptr, recv_counts, recv_displs, datatype,
                 handle, stream, nranks=None):
    """yaliAlltoAllv: counts and displacements are host sequences of ints >= 0, in elements
    (``send_displs``/``recv_displs`` None: packed). The library reads nranks entries of each, so
    each must have ``nranks`` entries (the comm's size; without it, as many as send_counts)."""
    call = "yaliAlltoAllv"
    if send_counts is None or recv_counts is None:
        raise python_error(Result.InvalidArgument, call,
                           "sendcounts and recvcounts are required (nranks ints each)")
    send_counts = _int_list(send_counts, call, "sendcounts")
    n = len(send_counts) if nranks is None else nranks
    _check_launch(call, handle, lib().yaliAlltoAllv(
        send_ptr, _size_t_array(send_counts, call, "sendcounts", n),
        _size_t_array(send_displs, call, "sdispls", n), recv_ptr,
        _size_t_array(recv_counts, call, "recvcounts", n),
        _size_t_array(recv_displs, call, "rdispls", n), as_c_int(datatype, call, "datatype"),
        handle, stream))


@_collective
def all_to_all_v_device_counts(send_ptr, send_counts_ptr, send_displs_ptr, recv_ptr, recv_capacity,
                               recv_counts_ptr, recv_displs_ptr, datatype, handle, stream):
    """yaliAlltoAllvDeviceCounts: the counts are device pointers (int64[nranks], elements);
    ``send_displs_ptr``, ``recv_counts_ptr`` and ``recv_displs_ptr`` may be None."""
    call = "yaliAlltoAllvDeviceCounts"
    _check_launch(call, handle, lib().yaliAlltoAllvDeviceCounts(
        send_ptr, send_counts_ptr, send_displs_ptr, recv_ptr,
        as_size_t(recv_capacity, call, "recvCapacity"), recv_counts_ptr, recv_displs_ptr,
        as_c_int(datatype, call, "datatype"), handle, stream))


def expert_layout(row_bytes, local_experts, align_rows, capacity_rows, call="yaliExpertDispatch",
                  nranks=None, token_rows=0):
    """A yaliExpertLayout_t, refused (YaliInvalidArgument naming ``call`` and the field) outside the
    header's ranges: rowBytes >= 1, localExperts in 1..MAX_LOCAL_EXPERTS (and, given ``nranks``,
    nranks * localExperts <= MAX_EXPERTS), alignRows >= 1, capacityRows >= 0; tokenRows: the rows of
    the token-ordered buffer (0: not given)."""
    row_bytes = as_size_t(row_bytes, call, "layout.rowBytes")
    local_experts = as_c_int(local_experts, call, "layout.localExperts")
    align_rows = as_size_t(align_rows, call, "layout.alignRows")
    capacity_rows = as_size_t(capacity_rows, call, "layout.capacityRows")
    token_rows = as_size_t(token_rows, call, "layout.tokenRows")
    if row_bytes < 1:
        raise python_error(Result.InvalidArgument, call, "layout.rowBytes=0 must be >= 1")
    if not 1 <= local_experts <= MAX_LOCAL_EXPERTS:
        raise python_error(
            Result.InvalidArgument, call,
            f"layout.localExperts={local_experts} must be in 1..{MAX_LOCAL_EXPERTS} "
            "(YALI_MAX_LOCAL_EXPERTS)")
    if nranks is not None and nranks * local_experts > MAX_EXPERTS:
        raise python_error(
            Result.InvalidArgument, call,
            f"layout.localExperts={local_experts} x nranks ({nranks}) = {nranks * local_experts} "
            f"experts; at most {MAX_EXPERTS} (YALI_MAX_EXPERTS)")
    if align_rows < 1:
        raise python_error(Result.InvalidArgument, call, "layout.alignRows=0 must be >= 1")
    return yaliExpertLayout_t(row_bytes, local_experts, align_rows, capacity_rows, token_rows)


def _as_layout(layout, call):
    if not isinstance(layout, yaliExpertLayout_t):
        raise python_error(
            Result.InvalidArgument, call,
            f"layout must be a yaliExpertLayout_t (expert_layout()), got {type(layout).__name__}")
    return ctypes.byref(layout)


@_collective
def expert_dispatch(send_ptr, send_counts_ptr, recv_ptr, recv_counts_ptr, expert_offsets_ptr,
                    layout, handle, stream):
    """yaliExpertDispatch: ``layout`` a yaliExpertLayout_t (expert_layout()); the counts are device
    pointers (int64), the two outputs may be None."""
    call = "yaliExpertDispatch"
    _check_launch(call, handle, lib().yaliExpertDispatch(
        send_ptr, send_counts_ptr, recv_ptr, recv_counts_ptr, expert_offsets_ptr,
        _as_layout(layout, call), handle, stream))


@_collective
def expert_combine(send_ptr, send_counts_ptr, recv_ptr, layout, handle, stream):
    """yaliExpertCombine: the dispatch's ``send_counts_ptr`` and ``layout``, unchanged."""
    call = "yaliExpertCombine"
    _check_launch(call, handle, lib().yaliExpertCombine(
        send_ptr, send_counts_ptr, recv_ptr, _as_layout(layout, call), handle, stream))


def all_reduce_algo_info(handle, send_ptr, recv_ptr, count, datatype, op):
    """yaliAllReduceAlgoInfo -> (algorithm, ctas, threads, chunk_bytes). ``send_ptr``/``recv_ptr``:
    ints or None (NULL: the choice for unregistered buffers)."""
    call = "yaliAllReduceAlgoInfo"
    info = yaliAlgoInfo_t()
    check(
        lib().yaliAllReduceAlgoInfo(
            handle,
            send_ptr,
            recv_ptr,
            as_size_t(count, call, "count"),
            as_c_int(datatype, call, "datatype"),
            as_c_int(op, call, "op"),
            ctypes.byref(info),
        ),
        call,
        handle,
    )
    return (_text(info.algorithm), info.ctas, info.threads, info.chunkBytes)


def algo_info(handle, collective, send_ptr, recv_ptr, count, datatype, op, root):
    """yaliAlgoInfo -> (algorithm, ctas, threads, chunk_bytes) of ``collective`` (a Collective
    value). ``count``, ``op`` and ``root`` as that collective's own call takes them."""
    call = "yaliAlgoInfo"
    info = yaliAlgoInfo_t()
    check(
        lib().yaliAlgoInfo(
            handle,
            as_c_int(collective, call, "collective"),
            send_ptr,
            recv_ptr,
            as_size_t(count, call, "count"),
            as_c_int(datatype, call, "datatype"),
            as_c_int(op, call, "op"),
            as_c_int(root, call, "root"),
            ctypes.byref(info),
        ),
        call,
        handle,
    )
    return (_text(info.algorithm), info.ctas, info.threads, info.chunkBytes)


def collective_name(collective):
    """yaliCollectiveName: "allreduce", "reducescatter", ..., or "unknown"."""
    return _text(lib().yaliCollectiveName(as_c_int(collective, "yaliCollectiveName", "collective")))


# ---- CUDA runtime helpers (through libyali's own libcudart: no torch needed) ---------------------


def _cuda_check(rc, call):
    if rc != 0:
        fn = lib().cdll.cudaGetErrorString
        fn.restype, fn.argtypes = ctypes.c_char_p, [ctypes.c_int]
        raise python_error(Result.UnhandledCudaError, call, f"CUDA error {rc}: {_text(fn(rc))}")


def cuda_get_device():
    dev = ctypes.c_int(-1)
    _cuda_check(lib().cdll.cudaGetDevice(ctypes.byref(dev)), "cudaGetDevice")
    return dev.value


def cuda_set_device(device):
    _cuda_check(lib().cdll.cudaSetDevice(ctypes.c_int(device)), f"cudaSetDevice({device})")


def cuda_device_count():
    n = ctypes.c_int(0)
    _cuda_check(lib().cdll.cudaGetDeviceCount(ctypes.byref(n)), "cudaGetDeviceCount")
    return n.value
