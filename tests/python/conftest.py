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


class FakeLib:
    """Stands in for ``yali._capi.lib()`` on the error paths, no GPU or libyali needed: the messages
    and results are set by the test, the calls are recorded.

    ``thread_error``: what yaliGetLastError(NULL) returns. ``comm_errors[handle]``: what
    yaliGetLastError(comm) returns for a known comm (the thread's for any other handle, as the
    library does). ``async_errors[handle]``: (code, message) of a comm's asynchronous failure:
    yaliCommGetAsyncError reports the code and records ``"yaliCommGetAsyncError: " + message`` as
    the last error; yaliAllReduce on that comm returns the code and records its own message
    (``"yaliAllReduce: " + message``), launching nothing. Where a failure is recorded, as the
    library does, unless a test says otherwise: ``record_on_thread`` (the thread's last error),
    ``record_on_comm`` (the comm's, for a handle in ``comm_errors``).
    """

    path = "<fake libyali>"

    def __init__(self):
        self.thread_error = ""
        self.comm_errors = {}
        self.async_errors = {}
        self.record_on_thread = True
        self.record_on_comm = True
        self.calls = []

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

    def yaliAllReduce(self, send, recv, count, datatype, op, comm, stream):
        self.calls.append(("yaliAllReduce", comm, send, recv, count))
        code, message = self.async_errors.get(comm, (0, ""))
        if code:
            self._fail(comm, "yaliAllReduce: " + message)
        return code


@pytest.fixture
def fake_lib(monkeypatch):
    """A FakeLib in place of the loaded library (yali._capi._lib) for the test's duration."""
    from yali import _capi

    fake = FakeLib()
    monkeypatch.setattr(_capi, "_lib", fake)
    return fake
