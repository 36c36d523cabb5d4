"""Shared setup for the Python tests.

``yali`` is imported from the environment (pip install, or PYTHONPATH=python); failing that, from
this checkout's python/ directory. libyali is located as ``yali`` does (YALI_LIBRARY, the package,
build/src); tests that need it skip without it, or fail when YALI_REQUIRE_LIB=1 (CI sets it).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

if importlib.util.find_spec("yali") is None:
    sys.path.insert(0, str(REPO / "python"))


@pytest.fixture(scope="session")
def header_text():
    return (REPO / "include" / "yali" / "yali.h").read_text()


# The parameters of the collectives in yali.h, in order (test_capi_host.py checks them against the
# header): FakeLib records every call as {parameter: value}.
COLLECTIVE_PARAMS = {
    "yaliAllReduce": ("sendbuff", "recvbuff", "count", "datatype", "op", "comm", "stream"),
    "yaliReduceScatter": ("sendbuff", "recvbuff", "recvcount", "datatype", "op", "comm", "stream"),
    "yaliAllGather": ("sendbuff", "recvbuff", "sendcount", "datatype", "comm", "stream"),
    "yaliBroadcast": ("sendbuff", "recvbuff", "count", "datatype", "root", "comm", "stream"),
    "yaliBcast": ("buff", "count", "datatype", "root", "comm", "stream"),
    "yaliReduce": ("sendbuff", "recvbuff", "count", "datatype", "op", "root", "comm", "stream"),
    "yaliGather": ("sendbuff", "recvbuff", "count", "datatype", "root", "comm", "stream"),
    "yaliScatter": ("sendbuff", "recvbuff", "count", "datatype", "root", "comm", "stream"),
    "yaliAlltoAll": ("sendbuff", "recvbuff", "count", "datatype", "comm", "stream"),
}

# The point-to-point calls' parameters in yali.h, in order (test_capi_host.py checks them against
# the header): FakeLib records them as it records the collectives.
P2P_PARAMS = {
    "yaliSend": ("sendbuff", "count", "datatype", "peer", "comm", "stream"),
    "yaliRecv": ("recvbuff", "count", "datatype", "peer", "comm", "stream"),
}


class FakeLib:
    """Stands in for ``yali._capi.lib()`` on the error paths, no GPU or libyali needed: the messages
    and results are set by the test, the calls are recorded.

    ``thread_error``: what yaliGetLastError(NULL) returns. ``comm_errors[handle]``: what
    yaliGetLastError(comm) returns for a known comm (the thread's for any other handle, as the
    library does). ``async_errors[handle]``: (code, message) of a comm's asynchronous failure:
    yaliCommGetAsyncError reports the code and records ``"yaliCommGetAsyncError: " + message`` as
    the last error; a collective (yaliAllReduce, yaliAllGather, ... : COLLECTIVE_PARAMS) or a
    point-to-point call (yaliSend, yaliRecv: P2P_PARAMS) on that comm returns the code and records
    its own message (``"yaliAllGather: " + message``), launching nothing. Where a failure is
    recorded, as the library does, unless a test says otherwise: ``record_on_thread`` (the thread's
    last error), ``record_on_comm`` (the comm's, for a handle in ``comm_errors``).

    ``calls``: ("yaliCommGetAsyncError", comm), (collective, or yaliSend/yaliRecv, comm,
    {parameter: value}), ("yaliGroupStart",), ("yaliGroupEnd",), ("yaliGroupSimulateEnd",),
    ("yaliAlgoInfo", comm, {...}).
    """

    path = "<fake libyali>"

    def __init__(self):
        self.thread_error = ""
        self.comm_errors = {}
        self.async_errors = {}
        self.record_on_thread = True
        self.record_on_comm = True
        self.calls = []
        self.algo_info_result = (b"fake_algo", 4, 256, 65536)

    def _fail(self, handle, message):
        if self.record_on_thread:
            self.thread_error = message
        if self.record_on_comm and handle in self.comm_errors:
            self.comm_errors[handle] = message

    def yaliGetErrorString(self, code):
        return f"error string {int(code)}".encode()

    def yaliGetLastError(self, comm):
        text = self.comm_errors.get(comm, self.thread_error) if comm else self.thread_error
        return text.encode()

    def yaliCommGetAsyncError(self, comm, async_error):
        self.calls.append(("yaliCommGetAsyncError", comm))
        code, message = self.async_errors.get(comm, (0, ""))
        async_error._obj.value = code  # a ctypes.byref(c_int)
        if code:
            self._fail(comm, "yaliCommGetAsyncError: " + message)
        return 0

    def yaliGroupStart(self):
        self.calls.append(("yaliGroupStart",))
        return 0

    def yaliGroupEnd(self):
        self.calls.append(("yaliGroupEnd",))
        return 0

    def yaliGroupSimulateEnd(self):
        self.calls.append(("yaliGroupSimulateEnd",))
        return 0

    def yaliAlgoInfo(self, comm, collective, sendbuff, recvbuff, count, datatype, op, root, info):
        self.calls.append(("yaliAlgoInfo", comm, dict(
            collective=collective, sendbuff=sendbuff, recvbuff=recvbuff, count=count,
            datatype=datatype, op=op, root=root)))
        algo, ctas, threads, chunk = self.algo_info_result
        obj = info._obj  # a ctypes.byref(yaliAlgoInfo_t)
        obj.algorithm, obj.ctas, obj.threads, obj.chunkBytes = algo, ctas, threads, chunk
        return 0

    def yaliCollectiveName(self, collective):
        names = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "gather",
                 "scatter", "alltoall", "alltoallv")
        return (names[collective] if 0 <= collective < len(names) else "unknown").encode()

    # The recorded calls: their parameter names (None: not one of them), and what is recorded of
    # an argument. A subclass adds calls by extending both (test_capi_host.A2avFakeLib).
    def _call_params(self, name):
        return COLLECTIVE_PARAMS.get(name) or P2P_PARAMS.get(name)

    def _recorded(self, name, param, value):
        return value

    def __getattr__(self, name):
        params = self._call_params(name)
        if params is None:
            raise AttributeError(name)

        def collective(*args):
            assert len(args) == len(params), f"{name} takes {len(params)} arguments, got {len(args)}"
            kw = {p: self._recorded(name, p, a) for p, a in zip(params, args)}
            comm = kw["comm"]
            self.calls.append((name, comm, kw))
            code, message = self.async_errors.get(comm, (0, ""))
            if code:
                self._fail(comm, f"{name}: " + message)
            return code

        return collective

    def launches(self, name=None):
        """The recorded collective calls ({parameter: value}), of ``name`` only if given."""
        return [c[2] for c in self.calls
                if self._call_params(c[0]) is not None and (name is None or c[0] == name)]


@pytest.fixture
def fake_lib(monkeypatch):
    """A FakeLib in place of the loaded library (yali._capi._lib) for the test's duration."""
    from yali import _capi

    fake = FakeLib()
    monkeypatch.setattr(_capi, "_lib", fake)
    return fake
