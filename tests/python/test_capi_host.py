"""Host tests of the Python binding: no GPU, no PyTorch needed (CI runs these).

    cd /work/main && YALI_LIBRARY=build/src/libyali.so PYTHONPATH=python python3 -m pytest tests/python/test_capi_host.py

Tests that call _require_lib() need libyali: skipped when it cannot be found, failed
when YALI_REQUIRE_LIB=1.
"""

import ctypes
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import yali
from yali import _capi

REPO = Path(__file__).resolve().parents[2]


def _require_lib():
    """The opened libyali's path; skip without it, or fail when YALI_REQUIRE_LIB=1 (CI)."""
    try:
        return _capi.lib().path
    except _capi.YaliLibraryError as e:
        if os.environ.get("YALI_REQUIRE_LIB") == "1":
            pytest.fail(f"YALI_REQUIRE_LIB=1 and libyali is unusable: {e}", pytrace=False)
        pytest.skip(f"libyali not available (set YALI_LIBRARY or build it): {e}")


def _run_python(code, env_update=None, env_remove=()):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(yali.__file__).resolve().parent.parent) + os.pathsep + env.get(
        "PYTHONPATH", "")
    for k in env_remove:
        env.pop(k, None)
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


# ---- Header parsing ------------------------------------------------------------------------------


def _header_enum(text, typedef):
    """{name without the yali prefix: value} of ``typedef enum {...} <typedef>;``."""
    m = re.search(r"typedef\s+enum\s*\{(?P<body>[^}]*)\}\s*" + re.escape(typedef) + r"\s*;", text)
    assert m, f"typedef enum {typedef} not found in yali.h"
    body = re.sub(r"/\*.*?\*/", "", m.group("body"), flags=re.S)
    body = re.sub(r"//[^\n]*", "", body)
    out = {}
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        em = re.fullmatch(r"yali(\w+)\s*=\s*(\d+)", item)
        assert em, f"cannot parse enumerator {item!r} of {typedef} (give every one a value)"
        out[em.group(1)] = int(em.group(2))
    assert out, f"{typedef} has no enumerators"
    return out


def _header_define(text, name):
    m = re.search(r"#define\s+" + name + r"\s+(\d+)", text)
    assert m, f"#define {name} not found"
    return int(m.group(1))


@pytest.mark.parametrize(
    "typedef,pyenum",
    [("yaliResult_t", yali.Result), ("yaliDataType_t", yali.DataType), ("yaliRedOp_t", yali.RedOp)],
)
def test_enums_match_header(header_text, typedef, pyenum):
    header = _header_enum(header_text, typedef)
    python = {name: int(member) for name, member in pyenum.__members__.items()}
    assert python == header, f"{pyenum.__name__} differs from {typedef} in yali.h"


def test_constants_match_header(header_text):
    assert yali.UNIQUE_ID_BYTES == _header_define(header_text, "YALI_UNIQUE_ID_BYTES")
    major = _header_define(header_text, "YALI_MAJOR")
    minor = _header_define(header_text, "YALI_MINOR")
    patch = _header_define(header_text, "YALI_PATCH")
    assert (_capi.VERSION_MAJOR, _capi.VERSION_MINOR, _capi.VERSION_PATCH) == (major, minor, patch)
    assert yali.__version__ == f"{major}.{minor}.{patch}"
    assert ctypes.sizeof(_capi.yaliUniqueId) == yali.UNIQUE_ID_BYTES


def test_every_header_function_is_bound(header_text):
    declared = set(re.findall(r"YALI_API\s+[\w\s\*]+?\b(yali\w+)\s*\(", header_text))
    assert declared, "no YALI_API functions found in yali.h"
    assert declared == set(_capi._PROTOTYPES), "functions in yali.h vs the ctypes prototypes"


def test_pyproject_version_matches():
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    assert m and m.group(1) == yali.__version__


# ---- Import without GPU, torch or library --------------------------------------------------------


def test_import_is_light():
    r = _run_python(
        "import sys, yali; "
        "heavy = [m for m in ('torch', 'numpy', 'yali.sweep', 'yali.report', 'yali.hw', "
        "'yali.torch', 'yali.bench_backends') if m in sys.modules]; "
        "assert yali._capi._lib is None, 'library opened at import'; "
        "print('HEAVY', heavy)"
    )
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout, r.stdout


def test_missing_library_raises_clear_error_on_first_call():
    r = _run_python(
        "import yali\n"
        "try:\n"
        "    yali.get_unique_id()\n"
        "except yali.YaliLibraryError as e:\n"
        "    print('ERR', e)\n",
        env_update={"YALI_LIBRARY": "/nonexistent/dir/libyali.so"},
    )
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout, r.stdout
    assert "/nonexistent/dir/libyali.so" in r.stdout and "YALI_LIBRARY" in r.stdout, r.stdout


def test_yali_torch_without_torch_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    monkeypatch.delitem(sys.modules, "yali.torch", raising=False)
    with pytest.raises(ImportError) as info:
        import yali.torch  # noqa: F401
    msg = str(info.value)
    assert "torch" in msg.lower() and "yali.torch" in msg, msg
    sys.modules.pop("yali.torch", None)


def test_unique_id_value_type():
    uid = yali.UniqueId(bytes(range(128)))
    assert bytes(uid) == bytes(range(128))
    assert pickle.loads(pickle.dumps(uid)) == uid
    assert hash(uid) == hash(yali.UniqueId(bytes(range(128))))
    with pytest.raises(ValueError):
        yali.UniqueId(b"short")


def test_enum_conversions():
    import numpy as np

    assert yali.as_datatype("float32") == yali.DataType.Float32
    assert yali.as_datatype("bf16") == yali.DataType.Bfloat16
    assert yali.as_datatype(np.float16) == yali.DataType.Float16
    assert yali.as_datatype(np.dtype("float32")) == yali.DataType.Float32
    assert yali.as_redop("avg") == yali.RedOp.Avg
    assert yali.as_redop(yali.RedOp.Max) == yali.RedOp.Max
    with pytest.raises(yali.YaliInvalidArgument, match="float64"):
        yali.as_datatype("float64")
    with pytest.raises(yali.YaliInvalidArgument, match="op"):
        yali.as_redop("xor")


def test_error_pickles():
    e = _capi._make_error(4, "yaliCommInitRank", "invalid argument", "yaliCommInitRank: nranks=0")
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is yali.YaliInvalidArgument and isinstance(e2, ValueError)
    assert (e2.code, e2.call, e2.detail) == (yali.Result.InvalidArgument, e.call, e.detail)
    assert str(e2) == str(e)


# ---- Against the library -------------------------------------------------------------------------


def test_version(header_text):
    _require_lib()
    assert yali.get_version() == (
        _header_define(header_text, "YALI_MAJOR") * 10000
        + _header_define(header_text, "YALI_MINOR") * 100
        + _header_define(header_text, "YALI_PATCH")
    )


def test_error_strings():
    _require_lib()
    texts = {}
    for code in yali.Result:
        if code == yali.Result.NumResults:
            continue
        s = yali.get_error_string(code)
        assert isinstance(s, str) and s.strip(), f"empty error string for {code!r}"
        texts[code] = s
    errors = [s for c, s in texts.items() if c != yali.Result.Success]
    assert len(set(errors)) == len(errors), f"error strings repeat: {texts}"
    assert yali.get_error_string(1000)  # never NULL, even for an unknown code


def test_unique_ids():
    _require_lib()
    a, b = yali.get_unique_id(), yali.get_unique_id()
    assert isinstance(a, yali.UniqueId) and len(bytes(a)) == yali.UNIQUE_ID_BYTES == 128
    assert a != b, "two yaliGetUniqueId calls gave the same id"
    assert bytes(a) != bytes(128)


def _init_rank_error(nranks, uid, rank):
    with pytest.raises(yali.YaliInvalidArgument) as info:
        comm = yali.Comm.init_rank(nranks, uid, rank)
        comm.abort()  # pragma: no cover (only when the call wrongly succeeded)
    e = info.value
    assert e.code == yali.Result.InvalidArgument
    assert e.call == "yaliCommInitRank"
    assert e.error_string == yali.get_error_string(yali.Result.InvalidArgument)
    return e, str(e)


@pytest.mark.parametrize("nranks", [0, -1])
def test_init_rank_bad_nranks(nranks):
    _require_lib()
    e, msg = _init_rank_error(nranks, yali.get_unique_id(), 0)
    assert "yaliCommInitRank" in msg and "nranks" in msg, msg
    assert e.detail, "yaliGetLastError gave no detail"


@pytest.mark.parametrize("rank", [5, 2, -1])
def test_init_rank_bad_rank(rank):
    _require_lib()
    _, msg = _init_rank_error(2, yali.get_unique_id(), rank)
    assert "yaliCommInitRank" in msg and re.search(r"\brank\b", msg), msg


def test_init_rank_zero_unique_id():
    _require_lib()
    _, msg = _init_rank_error(2, yali.UniqueId(bytes(128)), 0)
    assert "yaliCommInitRank" in msg, msg


def test_init_rank_int_overflow_is_invalid_argument():
    _require_lib()
    _, msg = _init_rank_error(2**40, yali.get_unique_id(), 0)
    assert "nranks" in msg


def test_init_all_bad_ndev():
    _require_lib()
    with pytest.raises(yali.YaliInvalidArgument) as info:
        yali.Comm.init_all([])
    assert "yaliCommInitAll" in str(info.value)


def test_null_comm_calls_are_invalid_argument():
    _require_lib()
    lib = _capi.lib()
    out = ctypes.c_int(0)
    for name in ("yaliCommCount", "yaliCommCuDevice", "yaliCommUserRank"):
        code = getattr(lib, name)(None, ctypes.byref(out))
        assert code == yali.Result.InvalidArgument, f"{name}(NULL) returned {code}"
        detail = yali.get_last_error()
        assert name in detail and "comm" in detail, f"{name}(NULL): last error {detail!r}"
        with pytest.raises(yali.YaliInvalidArgument):
            _capi.check(code, name)
    code = lib.yaliAllReduce(None, None, 0, int(yali.DataType.Float32), int(yali.RedOp.Sum), None,
                             None)
    assert code == yali.Result.InvalidArgument
    assert "yaliAllReduce" in yali.get_last_error()


def test_group_nesting():
    _require_lib()
    with yali.group():
        with yali.group():
            pass
    with pytest.raises(yali.YaliError) as info:
        yali.group_end()
    assert info.value.call == "yaliGroupEnd"


def test_library_path():
    path = _require_lib()
    assert os.path.samefile(yali.library_path(), path)
