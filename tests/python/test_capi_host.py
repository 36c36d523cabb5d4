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


def _header_enum(text, typedef, prefix="yali"):
    """{name without ``prefix`` (else without "yali"): value} of ``typedef enum {...} <typedef>;``."""
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
        name = "yali" + em.group(1)
        name = name[len(prefix):] if name.startswith(prefix) else em.group(1)
        out[name] = int(em.group(2))
    assert out, f"{typedef} has no enumerators"
    return out


def _header_define(text, name):
    m = re.search(r"#define\s+" + name + r"\s+(\d+)", text)
    assert m, f"#define {name} not found"
    return int(m.group(1))


@pytest.mark.parametrize(
    "typedef,pyenum,prefix",
    [("yaliResult_t", yali.Result, "yali"), ("yaliDataType_t", yali.DataType, "yali"),
     ("yaliRedOp_t", yali.RedOp, "yali"), ("yaliCollective_t", yali.Collective, "yaliColl")],
)
def test_enums_match_header(header_text, typedef, pyenum, prefix):
    """Every enumerator, aliases included (yaliHalf, yaliChar, ...): same names, same values."""
    header = _header_enum(header_text, typedef, prefix)
    python = {name: int(member) for name, member in pyenum.__members__.items()}
    assert python == header, f"{pyenum.__name__} differs from {typedef} in yali.h"


def test_type_tables_cover_every_type():
    types = {t for t in yali.DataType if t != yali.DataType.NumTypes}
    assert set(_capi.TYPE_SIZES) == types
    assert {int(t) for t in types} == set(range(int(yali.DataType.NumTypes)))
    floating = {yali.DataType.Float16, yali.DataType.Bfloat16, yali.DataType.Float32,
                yali.DataType.Float64, yali.DataType.Float8e4m3, yali.DataType.Float8e5m2}
    assert _capi.FLOATING_TYPES == floating  # yali.h: yaliAvg is for these only
    sizes = {"Int8": 1, "Uint8": 1, "Int32": 4, "Uint32": 4, "Int64": 8, "Uint64": 8,
             "Float16": 2, "Bfloat16": 2, "Float32": 4, "Float64": 8, "Float8e4m3": 1,
             "Float8e5m2": 1}
    assert {t.name: n for t, n in _capi.TYPE_SIZES.items()} == sizes


def test_constants_match_header(header_text):
    assert yali.UNIQUE_ID_BYTES == _header_define(header_text, "YALI_UNIQUE_ID_BYTES")
    major = _header_define(header_text, "YALI_MAJOR")
    minor = _header_define(header_text, "YALI_MINOR")
    patch = _header_define(header_text, "YALI_PATCH")
    assert (_capi.VERSION_MAJOR, _capi.VERSION_MINOR, _capi.VERSION_PATCH) == (major, minor, patch)
    assert yali.__version__ == f"{major}.{minor}.{patch}"
    assert ctypes.sizeof(_capi.yaliUniqueId) == yali.UNIQUE_ID_BYTES
    assert yali.MAX_LOCAL_EXPERTS == _header_define(header_text, "YALI_MAX_LOCAL_EXPERTS")
    assert yali.MAX_EXPERTS == _header_define(header_text, "YALI_MAX_EXPERTS")
    assert (_capi.MAX_LOCAL_EXPERTS, _capi.MAX_EXPERTS) == (yali.MAX_LOCAL_EXPERTS,
                                                            yali.MAX_EXPERTS)
    assert yali.MAX_P2P_OPS == _capi.MAX_P2P_OPS == _header_define(header_text, "YALI_MAX_P2P_OPS")


def _header_struct(text, typedef):
    """[(C type, field name)] of ``typedef struct {...} <typedef>;``, in order."""
    m = re.search(r"typedef\s+struct\s*\{(?P<body>[^}]*)\}\s*" + re.escape(typedef) + r"\s*;", text)
    assert m, f"typedef struct {typedef} not found in yali.h"
    body = re.sub(r"/\*.*?\*/", "", m.group("body"), flags=re.S)
    fields = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if decl:
            fm = re.fullmatch(r"(?P<type>[\w\s]+?)\s+(?P<name>\w+)(?P<array>\[\w+\])?", decl)
            assert fm, f"cannot parse field {decl!r} of {typedef}"
            fields.append((fm.group("type") + (fm.group("array") or ""), fm.group("name")))
    return fields


_FIELD_TYPES = {"size_t": ctypes.c_size_t, "int": ctypes.c_int}


def test_expert_layout_struct_matches_header(header_text):
    """yaliExpertLayout_t: the header's fields, in its order, with its types; the C layout on LP64
    (size_t, int padded to 8, size_t, size_t, size_t)."""
    header = _header_struct(header_text, "yaliExpertLayout_t")
    assert [name for _, name in header] == ["rowBytes", "localExperts", "alignRows", "capacityRows",
                                            "tokenRows"]
    fields = _capi.yaliExpertLayout_t._fields_
    assert [name for name, _ in fields] == [name for _, name in header]
    for (ctype, name), (_, pytype) in zip(header, fields):
        assert pytype is _FIELD_TYPES[ctype], f"{name}: yali.h {ctype}, ctypes {pytype}"
    L = _capi.yaliExpertLayout_t
    assert ctypes.sizeof(L) == 5 * ctypes.sizeof(ctypes.c_size_t)
    assert [getattr(L, n).offset for n, _ in fields] == [0, 8, 16, 24, 32]
    assert _capi.yaliExpertLayout_t(1, 2, 3, 4).capacityRows == 4


def test_every_header_function_is_bound(header_text):
    declared = set(re.findall(r"YALI_API\s+[\w\s\*]+?\b(yali\w+)\s*\(", header_text))
    assert declared, "no YALI_API functions found in yali.h"
    assert declared == set(_capi._PROTOTYPES), "functions in yali.h vs the ctypes prototypes"


_HEADER_PROTO = re.compile(
    r"YALI_API\s+(?P<ret>[\w\s\*]+?)\b(?P<name>yali\w+)\s*\((?P<params>[^)]*)\)\s*;")
_INT_LIKE = {"int", "yaliResult_t", "yaliDataType_t", "yaliRedOp_t", "yaliCollective_t"}
_PTR_LIKE = {"yaliComm_t", "cudaStream_t"}


def _header_kind(ctype):
    """'ptr', 'size_t', 'int' or 'uid' for a C type from yali.h (a parameter or return type)."""
    t = " ".join(ctype.replace("const", " ").split())
    if "*" in t or t in _PTR_LIKE:
        return "ptr"
    if t == "size_t":
        return "size_t"
    if t in _INT_LIKE:
        return "int"
    if t == "yaliUniqueId":
        return "uid"
    raise AssertionError(f"test does not know the C type {ctype!r}")


def _ctypes_kind(ct):
    if ct in (ctypes.c_void_p, ctypes.c_char_p) or (
            isinstance(ct, type) and issubclass(ct, ctypes._Pointer)):
        return "ptr"
    if ct is ctypes.c_size_t:
        return "size_t"
    if ct is ctypes.c_int:
        return "int"
    if ct is _capi.yaliUniqueId:
        return "uid"
    raise AssertionError(f"unexpected ctypes type {ct!r}")


def _header_declarations(text):
    """{name: (return type, [(parameter type, parameter name)])} of every YALI_API function."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = {}
    for m in _HEADER_PROTO.finditer(text):
        params = " ".join(m.group("params").split())
        decl = []
        if params not in ("", "void"):
            for param in params.split(","):
                # An array parameter (size_t sendcounts[]) is a pointer.
                param = re.sub(r"\b(\w+)\s*\[\s*\]\s*$", r"* \1", param)
                # Every parameter in yali.h is named: split the type from the name.
                pm = re.fullmatch(r"\s*(?P<type>.*?[\w\*])\s*\b(?P<name>\w+)\s*", param)
                assert pm, f"cannot parse parameter {param!r} of {m.group('name')}"
                decl.append((pm.group("type"), pm.group("name")))
        out[m.group("name")] = (m.group("ret"), decl)
    return out


def _header_prototypes(text):
    """{name: (return kind, [parameter kinds])} of every YALI_API function in yali.h."""
    return {name: (_header_kind(ret), [_header_kind(t) for t, _ in params])
            for name, (ret, params) in _header_declarations(text).items()}


def test_prototypes_match_header_signatures(header_text):
    """Every ctypes prototype has the header's parameter count and kinds (pointer, size_t, int,
    struct) and return kind: catches a signature that changed in yali.h (such as
    yaliAllReduceAlgoInfo gaining its buffers) but not here."""
    header = _header_prototypes(header_text)
    assert set(header) == set(_capi._PROTOTYPES)
    wrong = []
    for name, (ret, params) in sorted(header.items()):
        restype, argtypes = _capi._PROTOTYPES[name]
        got = (_ctypes_kind(restype), [_ctypes_kind(a) for a in argtypes])
        if got != (ret, params):
            wrong.append(f"{name}: header {(ret, params)}, ctypes {got}")
    assert not wrong, "\n".join(wrong)


def test_every_prototype_has_the_headers_argument_count(header_text):
    """One line per function: a ctypes declaration with exactly the header's number of arguments
    (a call with too few or too many would pass garbage to C)."""
    header = _header_declarations(header_text)
    assert len(header) >= 27, sorted(header)  # the NCCL 2.28 set and YALI's own calls
    for name, (_, params) in header.items():
        assert name in _capi._PROTOTYPES, f"{name} has no ctypes declaration"
        _, argtypes = _capi._PROTOTYPES[name]
        assert len(argtypes) == len(params), (
            f"{name}: yali.h has {len(params)} parameters {[n for _, n in params]}, ctypes "
            f"{len(argtypes)}")


def test_collective_parameters_match_header(header_text):
    """conftest.FakeLib records the collectives' calls by parameter name: its table must be the
    header's, names and order."""
    from conftest import COLLECTIVE_PARAMS

    header = _header_declarations(header_text)
    for name, params in COLLECTIVE_PARAMS.items():
        assert tuple(n for _, n in header[name][1]) == params, name
    collectives = {"yaliAllReduce", "yaliReduceScatter", "yaliAllGather", "yaliBroadcast",
                   "yaliBcast", "yaliReduce", "yaliGather", "yaliScatter", "yaliAlltoAll"}
    assert set(COLLECTIVE_PARAMS) == collectives


def test_register_and_algo_info_prototypes():
    restype, argtypes = _capi._PROTOTYPES["yaliCommRegister"]
    assert restype is ctypes.c_int
    assert argtypes[:3] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    assert argtypes[3]._type_ is ctypes.c_void_p  # void** handle
    assert _capi._PROTOTYPES["yaliCommDeregister"] == (ctypes.c_int,
                                                       [ctypes.c_void_p, ctypes.c_void_p])
    restype, argtypes = _capi._PROTOTYPES["yaliAllReduceAlgoInfo"]
    assert argtypes[:4] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    assert argtypes[6]._type_ is _capi.yaliAlgoInfo_t
    restype, argtypes = _capi._PROTOTYPES["yaliAlgoInfo"]
    assert argtypes[:5] == [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_size_t]
    assert argtypes[5:8] == [ctypes.c_int] * 3 and argtypes[8]._type_ is _capi.yaliAlgoInfo_t
    assert _capi._PROTOTYPES["yaliCollectiveName"] == (ctypes.c_char_p, [ctypes.c_int])


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
    for bad in ("bool", "complex64", "float8_e4m3fnuz", np.bool_):
        with pytest.raises(yali.YaliInvalidArgument, match="not supported") as info:
            yali.as_datatype(bad, "yaliAllGather")
        assert info.value.call == "yaliAllGather" and "float8_e5m2" in str(info.value)
    with pytest.raises(yali.YaliInvalidArgument, match="op"):
        yali.as_redop("xor")


def test_every_type_by_name():
    """Each type by the header's name (aliases too), numpy's dtype and scalar type, and the usual
    short forms."""
    import numpy as np

    D = yali.DataType
    for name, member in D.__members__.items():
        if member != D.NumTypes:
            assert yali.as_datatype(name.lower()) == member, name
    numpy_names = {"int8": D.Int8, "uint8": D.Uint8, "int32": D.Int32, "uint32": D.Uint32,
                   "int64": D.Int64, "uint64": D.Uint64, "float16": D.Float16,
                   "float32": D.Float32, "float64": D.Float64}
    for name, member in numpy_names.items():
        assert yali.as_datatype(np.dtype(name)) == member, name
        assert yali.as_datatype(getattr(np, name)) == member, name
        assert yali.as_datatype("torch." + name) == member, name  # str(torch.<dtype>)
    short = {"i8": D.Int8, "u8": D.Uint8, "i32": D.Int32, "u32": D.Uint32, "i64": D.Int64,
             "u64": D.Uint64, "fp16": D.Float16, "bf16": D.Bfloat16, "fp32": D.Float32,
             "fp64": D.Float64, "double": D.Float64, "half": D.Float16, "char": D.Int8,
             "int": D.Int32, "float8_e4m3fn": D.Float8e4m3, "torch.float8_e4m3fn": D.Float8e4m3,
             "fp8_e4m3": D.Float8e4m3, "e5m2": D.Float8e5m2, "torch.float8_e5m2": D.Float8e5m2,
             "torch.bfloat16": D.Bfloat16}
    for name, member in short.items():
        assert yali.as_datatype(name) == member, name
    assert yali.as_datatype(7) == 7 and yali.as_datatype(99) == 99  # ints: the library judges


def test_collective_names():
    C = yali.Collective
    assert yali.as_collective("allreduce") == C.AllReduce
    assert yali.as_collective("all_gather_into_tensor") == C.AllGather
    assert yali.as_collective("reduce_scatter_tensor") == C.ReduceScatter
    assert yali.as_collective("all_to_all_single") == C.AlltoAll
    assert yali.as_collective("BROADCAST") == C.Broadcast
    assert yali.as_collective(C.Gather) == C.Gather and yali.as_collective(6) == 6
    for c in C:
        if c != C.NumCollectives:  # yaliCollectiveName's spelling is accepted back
            assert yali.as_collective(c.name.lower()) == c
    with pytest.raises(yali.YaliInvalidArgument, match="collective") as info:
        yali.as_collective("allgatherv")
    assert info.value.call == "yaliAlgoInfo"


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


def test_group_depth_is_counted_per_thread(fake_lib, monkeypatch):
    """yali keeps its own count of the open groups of each thread (as the library does), so that
    the torch layer can refuse the forms that do work of their own after a collective: inside a
    group that work would run before the collective, launched only at the outermost group end."""
    import threading

    seen = []

    def other_thread():
        seen.append(yali._group_depth())

    assert yali._group_depth() == 0
    with yali.group():
        assert yali._group_depth() == 1
        yali.group_start()
        assert yali._group_depth() == 2
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        yali.group_end()
        assert yali._group_depth() == 1
    assert yali._group_depth() == 0 and seen == [0]
    assert [c[0] for c in fake_lib.calls] == ["yaliGroupStart"] * 2 + ["yaliGroupEnd"] * 2

    # A failed yaliGroupEnd has still closed the group (its launches failed at its end).
    monkeypatch.setattr(fake_lib, "yaliGroupEnd", lambda: int(yali.Result.InvalidArgument),
                        raising=False)
    yali.group_start()
    with pytest.raises(yali.YaliInvalidArgument):
        yali.group_end()
    assert yali._group_depth() == 0
    # A yaliGroupStart the library refused opened nothing.
    monkeypatch.setattr(fake_lib, "yaliGroupStart", lambda: int(yali.Result.InvalidUsage),
                        raising=False)
    with pytest.raises(yali.YaliInvalidUsage):
        yali.group_start()
    assert yali._group_depth() == 0


class _ProgramError(Exception):
    """An exception of the program's own, leaving a ``with yali.group()`` block."""


def test_a_group_with_a_failed_call_launches_nothing(fake_lib):
    """NCCL's rule: a collective that fails at its call inside a group makes the outermost group
    end launch none of the group's calls (yaliGroupSimulateEnd) and report the failure, also when
    the program caught it at the call. (Before, yaliGroupEnd launched the calls the library had
    accepted: peers waited for this rank's missing call until YALI_TIMEOUT_MS.)"""
    ok, bad = _fake_comm(0), _fake_comm(1)
    fake_lib.async_errors[bad.handle] = (int(yali.Result.Timeout), _TIMEOUT_TEXT)
    yali.group_start()
    ok.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
    with pytest.raises(yali.YaliTimeout):
        bad.all_gather(0x10000, 0x20000, 16, "float32", 0)
    ok.broadcast(0x10000, 0x10000, 16, "float32", 0, 0)  # queued, and dropped with the rest
    with pytest.raises(yali.YaliTimeout) as info:
        yali.group_end()
    e = info.value
    assert e.call == "yaliGroupEnd" and "yaliAllGather failed inside the group" in str(e), str(e)
    assert "none of the group's calls was launched" in str(e)
    names = [c[0] for c in fake_lib.calls if c[0] != "yaliCommGetAsyncError"]
    assert names == ["yaliGroupStart", "yaliAllReduce", "yaliAllGather", "yaliBroadcast",
                     "yaliGroupSimulateEnd"], names
    assert yali._group_depth() == 0
    # The next group is a new one: launched at its end.
    del fake_lib.calls[:]
    with yali.group():
        ok.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
    assert [c[0] for c in fake_lib.calls] == ["yaliGroupStart", "yaliAllReduce", "yaliGroupEnd"]


def test_a_failed_call_in_an_inner_group_drops_the_outermost(fake_lib):
    """The inner end only closes its level (nothing launches there); the outermost end drops every
    call of the group, the inner group's included, and raises."""
    ok, bad = _fake_comm(0), _fake_comm(1)
    fake_lib.async_errors[bad.handle] = (int(yali.Result.RemoteError), "a peer aborted")
    with pytest.raises(yali.YaliRemoteError) as info:
        with yali.group():
            ok.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
            with yali.group():
                try:
                    bad.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
                except yali.YaliRemoteError:
                    pass  # caught at the call: the group still launches nothing
            ok.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
    assert info.value.call == "yaliGroupEnd"
    names = [c[0] for c in fake_lib.calls if c[0].startswith("yaliGroup")]
    assert names == ["yaliGroupStart", "yaliGroupStart", "yaliGroupSimulateEnd",
                     "yaliGroupSimulateEnd"], names
    assert yali._group_depth() == 0


def test_a_group_block_left_by_an_exception_launches_nothing(fake_lib):
    """An exception leaving ``with yali.group()`` (the program's own, or a refusal) drops the group
    and goes on unchanged; launching the calls queued before it would run part of the group."""
    comm = _fake_comm(0)

    with pytest.raises(_ProgramError):
        with yali.group():
            comm.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
            raise _ProgramError()
    assert [c[0] for c in fake_lib.calls] == ["yaliGroupStart", "yaliAllReduce", "yaliGroupSimulateEnd"]
    assert yali._group_depth() == 0
    # A refusal on the Python side (the count) is a failed call too.
    del fake_lib.calls[:]
    yali.group_start()
    with pytest.raises(yali.YaliInvalidArgument):
        comm.all_reduce(0x10000, 0x10000, -1, "float32", "sum", 0)
    with pytest.raises(yali.YaliInvalidArgument) as info:
        yali.group_end()
    assert info.value.call == "yaliGroupEnd"
    assert [c[0] for c in fake_lib.calls] == ["yaliGroupStart", "yaliGroupSimulateEnd"]


def test_a_refusal_made_before_the_library_is_called_fails_the_group_too(fake_lib):
    """yali.Comm's own checks (a dtype name, avg on an integer type) refuse a call before the library
    sees it: inside a group that is a failed call like any other (review of d5bdf6b: such a group
    still launched the calls queued before)."""
    comm = _fake_comm(0)
    for bad in (lambda: comm.all_reduce(0x10000, 0x10000, 16, "nope", "sum", 0),
                lambda: comm.all_reduce(0x10000, 0x10000, 16, "int32", "avg", 0)):
        del fake_lib.calls[:]
        yali.group_start()
        comm.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
        with pytest.raises(yali.YaliError):
            bad()
        with pytest.raises(yali.YaliError) as info:
            yali.group_end()
        assert info.value.call == "yaliGroupEnd"
        assert [c[0] for c in fake_lib.calls] == ["yaliGroupStart", "yaliAllReduce", "yaliGroupSimulateEnd"]
        assert yali._group_depth() == 0


def test_a_library_without_simulate_end_still_closes_the_group(fake_lib, monkeypatch):
    """A libyali older than yaliGroupSimulateEnd: the failed group is ended with yaliGroupEnd (with a
    warning), so the library's group is closed with the Python count (review of d5bdf6b: the
    missing function raised, the library's group stayed open and every later call queued in it)."""
    monkeypatch.setattr(fake_lib, "missing", ["yaliGroupSimulateEnd"], raising=False)
    comm = _fake_comm(0)

    with pytest.warns(RuntimeWarning, match="lacks yaliGroupSimulateEnd"):
        with pytest.raises(_ProgramError):
            with yali.group():
                comm.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
                raise _ProgramError()
    assert [c[0] for c in fake_lib.calls] == ["yaliGroupStart", "yaliAllReduce", "yaliGroupEnd"]
    assert yali._group_depth() == 0


def test_a_group_block_keeps_its_exception_when_the_end_fails(fake_lib, monkeypatch):
    """The exception that left ``with yali.group()`` goes on even when ending the group fails
    (a warning says so), and the count is closed."""
    monkeypatch.setattr(fake_lib, "yaliGroupSimulateEnd", lambda: int(yali.Result.InternalError),
                        raising=False)

    with pytest.warns(RuntimeWarning, match="_ProgramError left failed too"):
        with pytest.raises(_ProgramError):
            with yali.group():
                raise _ProgramError()
    assert yali._group_depth() == 0


def test_a_copied_error_does_not_fail_the_group(fake_lib):
    """Copying or unpickling a YaliError inside a group (a framework that logs errors does) is no
    new failure: the group launches as usual."""
    import copy
    import pickle

    comm = _fake_comm(0)
    error = _capi.python_error(int(yali.Result.InvalidArgument), "yaliAllReduce", "an old failure")
    with yali.group():
        comm.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
        copied = copy.copy(error)
        unpickled = pickle.loads(pickle.dumps(error))
    assert type(copied) is type(error) and str(unpickled) == str(error)
    assert [c[0] for c in fake_lib.calls] == ["yaliGroupStart", "yaliAllReduce", "yaliGroupEnd"]


def test_library_path():
    path = _require_lib()
    assert os.path.samefile(yali.library_path(), path)


# ---- Registered buffers: the Python side, with the C calls faked (no library needed) -------------


class _FakeStorage:
    def __init__(self, ptr, nbytes):
        self._ptr, self._nbytes = ptr, nbytes

    def data_ptr(self):
        return self._ptr

    def nbytes(self):
        return self._nbytes


class _FakeTensor:
    """What _as_span reads of a torch tensor: a view at +offset of a storage."""

    def __init__(self, base, storage_nbytes, offset=0):
        self._storage = _FakeStorage(base, storage_nbytes)
        self._offset = offset

    def data_ptr(self):
        return self._storage.data_ptr() + self._offset

    def untyped_storage(self):
        return self._storage


class _FakeCai:
    def __init__(self, ptr, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


def _fake_comm(i=0, n=2):
    c = object.__new__(yali.Comm)
    c._handle = 0x1000 + i
    c._registrations = []
    c._rank, c._size, c._device = i, n, i
    return c


@pytest.fixture
def fake_c(monkeypatch):
    """Records the register/deregister/destroy calls; comm_register returns 0xA000 + n."""
    calls = []

    def register(handle, ptr, size):
        calls.append(("register", handle, ptr, size))
        return 0xA000 + len(calls)

    monkeypatch.setattr(_capi, "comm_register", register)
    monkeypatch.setattr(_capi, "comm_deregister",
                        lambda handle, reg: calls.append(("deregister", handle, reg)))
    monkeypatch.setattr(_capi, "comm_destroy", lambda handle: calls.append(("destroy", handle)))
    monkeypatch.setattr(_capi, "comm_abort", lambda handle: calls.append(("abort", handle)))
    return calls


def test_register_span_rules():
    span = yali._as_span
    call = "yaliCommRegister"
    # A tensor: its whole storage (a view at +64 still registers from the storage's start).
    assert span(_FakeTensor(0x10000, 4096, offset=64), None, call)[:2] == (0x10000, 4096)
    # A tensor with nbytes: from its data_ptr.
    assert span(_FakeTensor(0x10000, 4096, offset=64), 128, call)[:2] == (0x10040, 128)
    # A pointer needs nbytes.
    assert span(0x20000, 256, call) == (0x20000, 256, None)
    with pytest.raises(yali.YaliInvalidArgument, match="nbytes is required"):
        span(0x20000, None, call)
    # __cuda_array_interface__: shape x itemsize when contiguous.
    assert span(_FakeCai(0x30000, (4, 8), "<f2"), None, call)[:2] == (0x30000, 64)
    with pytest.raises(yali.YaliInvalidArgument, match="strided"):
        span(_FakeCai(0x30000, (4, 8), strides=(64, 4)), None, call)
    for bad in (None, True, "0x1000", 1.5):
        with pytest.raises(yali.YaliInvalidArgument) as info:
            span(bad, 16, call)
        assert info.value.call == call
    with pytest.raises(yali.YaliInvalidArgument, match="nbytes"):
        span(0x20000, -1, call)


def test_comm_register_and_deregister(fake_c):
    comm = _fake_comm()
    t = _FakeTensor(0x10000, 4096, offset=256)
    reg = comm.register(t)
    assert fake_c == [("register", 0x1000, 0x10000, 4096)]
    assert (reg.ptr, reg.nbytes, reg.handle, reg.comms) == (0x10000, 4096, 0xA001, [comm])
    assert comm.registrations == [reg] and not reg.closed
    assert reg._keepalive == [t]  # the tensor stays alive while registered
    assert reg.contains(t.data_ptr(), 1024) and not reg.contains(0x10000, 4097)
    with reg:
        pass
    assert fake_c[-1] == ("deregister", 0x1000, 0xA001)
    assert reg.closed and comm.registrations == [] and reg._keepalive == []
    reg.deregister()  # idempotent
    assert len(fake_c) == 2
    assert "deregistered" in repr(reg)

    # An exception inside `with` leaves it registered (no collective call on an error path).
    reg2 = comm.register(0x50000, 512)
    with pytest.raises(KeyError):
        with reg2:
            raise KeyError("boom")
    assert not reg2.closed and fake_c[-1][0] == "register"
    # Comm.deregister takes the Registration or its raw handle.
    h2 = reg2.handle
    comm.deregister(h2)
    assert reg2.closed and fake_c[-1] == ("deregister", 0x1000, h2)
    with pytest.raises(yali.YaliInvalidArgument, match="Registration"):
        comm.deregister("nope")
    other = _fake_comm(1)
    reg3 = other.register(0x60000, 16)
    with pytest.raises(yali.YaliInvalidArgument, match="not made on this communicator"):
        comm.deregister(reg3)


def test_destroy_and_abort_release_registrations(fake_c):
    comm = _fake_comm()
    reg = comm.register(_FakeTensor(0x10000, 64))
    comm.destroy()
    assert fake_c[-1] == ("destroy", 0x1000)
    assert reg.closed and reg._keepalive == []
    reg.deregister()  # nothing to do: the library ended it with the comm
    assert fake_c[-1] == ("destroy", 0x1000)
    comm2 = _fake_comm(1)
    reg2 = comm2.register(0x70000, 64)
    comm2.abort()
    assert reg2.closed and fake_c[-1] == ("abort", 0x1001)


def test_register_all(fake_c):
    comms = [_fake_comm(i, 3) for i in range(3)]
    bufs = [_FakeTensor(0x10000 * (i + 1), 1024) for i in range(3)]
    reg = yali.register_all(comms, bufs)
    assert [c[1:] for c in fake_c] == [(0x1000 + i, 0x10000 * (i + 1), 1024) for i in range(3)]
    assert reg.ptrs == [0x10000, 0x20000, 0x30000] and reg.nbytes == 1024
    assert len(reg.handles) == 3 and all(c.registrations == [reg] for c in comms)
    with pytest.raises(AttributeError, match="handles"):
        reg.handle  # noqa: B018 (spans 3 comms)
    reg.deregister()
    assert [c[:2] for c in fake_c[3:]] == [("deregister", 0x1000 + i) for i in range(3)]
    assert all(c.registrations == [] for c in comms)
    # Destroying one comm releases only its part.
    reg = yali.register_all(comms, bufs)
    comms[0].destroy()
    assert reg.comms == comms[1:]
    del fake_c[:]
    reg.deregister()
    assert [c[:2] for c in fake_c] == [("deregister", 0x1001), ("deregister", 0x1002)]


def test_register_all_errors_and_rollback(fake_c, monkeypatch):
    comms = [_fake_comm(i, 3) for i in range(3)]
    with pytest.raises(yali.YaliInvalidArgument, match="one buffer per comm"):
        yali.register_all(comms, [0x1000], 64)
    with pytest.raises(yali.YaliInvalidArgument, match="same size"):
        yali.register_all(comms[:2], [_FakeTensor(0x1000, 64), _FakeTensor(0x2000, 128)])
    assert fake_c == []

    real = _capi.comm_register

    def second_fails(handle, ptr, size):
        if handle == 0x1001:
            fake_c.append(("register-failed", handle, ptr, size))
            raise _capi._make_error(4, "yaliCommRegister", "invalid argument",
                                    "yaliCommRegister: buff=0x2000 is host memory")
        return real(handle, ptr, size)

    monkeypatch.setattr(_capi, "comm_register", second_fails)
    with pytest.raises(yali.YaliInvalidArgument, match="host memory"):
        yali.register_all(comms, [0x1000, 0x2000, 0x3000], 64)
    # Every comm was still called (registrations pair by call order), then the two made undone.
    assert [c[:2] for c in fake_c] == [("register", 0x1000), ("register-failed", 0x1001),
                                       ("register", 0x1002), ("deregister", 0x1000),
                                       ("deregister", 0x1002)]
    assert all(c.registrations == [] for c in comms)


def test_algo_info_passes_buffers(monkeypatch):
    seen = []
    monkeypatch.setattr(_capi, "all_reduce_algo_info",
                        lambda *a: seen.append(a) or ("direct", 8, 512, 0))
    comm = _fake_comm()
    info = comm.all_reduce_algo_info(1024)
    assert info == yali.AlgoInfo("direct", 8, 512, 0) and info.algorithm == "direct"
    assert seen[-1] == (0x1000, None, None, 1024, yali.DataType.Float32, yali.RedOp.Sum)
    t = _FakeTensor(0x10000, 4096, offset=8)
    comm.all_reduce_algo_info(16, "bf16", "max", send_ptr=t, recv_ptr=0x20000)
    assert seen[-1] == (0x1000, 0x10008, 0x20000, 16, yali.DataType.Bfloat16, yali.RedOp.Max)
    comm.all_reduce_algo_info(16, recv_ptr=_FakeCai(0x30000, (16,)))
    assert seen[-1][1:3] == (None, 0x30000)


# ---- Registered buffers against the library (no GPU: NULL comms) ---------------------------------


def test_register_null_comm_is_invalid_argument():
    _require_lib()
    lib = _capi.lib()
    handle = ctypes.c_void_p(None)
    code = lib.yaliCommRegister(None, None, 4096, ctypes.byref(handle))
    assert code == yali.Result.InvalidArgument, f"yaliCommRegister(NULL) returned {code}"
    assert "yaliCommRegister" in yali.get_last_error()
    assert handle.value is None
    code = lib.yaliCommDeregister(None, None)
    assert code == yali.Result.InvalidArgument, f"yaliCommDeregister(NULL) returned {code}"
    assert "yaliCommDeregister" in yali.get_last_error()
    # Through the checked wrappers: the error names the call and carries yaliGetLastError's text.
    with pytest.raises(yali.YaliInvalidArgument) as info:
        _capi.comm_register(None, 0x1000, 4096)
    assert info.value.call == "yaliCommRegister" and "yaliCommRegister" in info.value.detail
    with pytest.raises(yali.YaliInvalidArgument) as info:
        _capi.comm_deregister(None, 0x1000)
    assert info.value.call == "yaliCommDeregister" and info.value.detail


def test_algo_info_null_comm_is_invalid_argument():
    _require_lib()
    lib = _capi.lib()
    info = _capi.yaliAlgoInfo_t()
    code = lib.yaliAllReduceAlgoInfo(None, None, None, 1024, int(yali.DataType.Float32),
                                     int(yali.RedOp.Sum), ctypes.byref(info))
    assert code == yali.Result.InvalidArgument, f"yaliAllReduceAlgoInfo(NULL) returned {code}"
    assert "yaliAllReduceAlgoInfo" in yali.get_last_error()
    with pytest.raises(yali.YaliInvalidArgument) as e:
        _capi.all_reduce_algo_info(None, None, None, 1024, int(yali.DataType.Float32),
                                   int(yali.RedOp.Sum))
    assert e.value.call == "yaliAllReduceAlgoInfo"
    with pytest.raises(yali.YaliInvalidArgument, match="count"):
        _capi.all_reduce_algo_info(None, None, None, -1, 7, 0)


# ---- Error detail and asynchronous errors (the library faked: conftest.FakeLib) ------------------

_TIMEOUT_TEXT = ("an earlier operation on this comm failed on the device: a device-side wait for a "
                 "peer timed out")


def test_check_detail_is_the_failing_calls_message(fake_lib):
    """check() reports the message of the call that just failed (the thread's last error), not the
    comm's record, which can hold an older, unrelated failure."""
    fake_lib.comm_errors[0x1000] = "yaliCommRegister: buff=0x10 is host memory"  # long ago
    fake_lib.thread_error = "yaliCommCount: count is NULL"  # the call that just failed
    with pytest.raises(yali.YaliInvalidArgument) as info:
        _capi.check(int(yali.Result.InvalidArgument), "yaliCommCount", 0x1000)
    e = info.value
    assert e.detail == "yaliCommCount: count is NULL", str(e)
    assert "host memory" not in str(e)
    assert e.error_string == "error string 4"
    # The comm's record only when the thread has none.
    fake_lib.thread_error = ""
    with pytest.raises(yali.YaliInvalidUsage) as info:
        _capi.check(int(yali.Result.InvalidUsage), "yaliCommCount", 0x1000)
    assert info.value.detail == "yaliCommRegister: buff=0x10 is host memory"
    _capi.check(0, "yaliCommCount", 0x1000)  # success raises nothing


def test_failed_comm_all_reduce_raises_with_its_own_message(fake_lib):
    """yaliAllReduce on a failed comm returns the asynchronous error: the wrapper raises its
    subclass with yaliAllReduce's message, not the comm's older record."""
    comm = _fake_comm()
    fake_lib.comm_errors[comm.handle] = "yaliCommRegister: an old, unrelated failure"
    fake_lib.record_on_comm = False  # the comm's record keeps the old text
    fake_lib.async_errors[comm.handle] = (int(yali.Result.Timeout), _TIMEOUT_TEXT)
    with pytest.raises(yali.YaliTimeout) as info:
        comm.all_reduce(0x10000, 0x10000, 16, "float32", "sum", 0)
    e = info.value
    assert e.code == yali.Result.Timeout and e.call == "yaliAllReduce"
    assert e.detail == "yaliAllReduce: " + _TIMEOUT_TEXT, str(e)
    assert str(e).startswith("yaliAllReduce: an earlier operation") and "yaliTimeout" in str(e)


@pytest.mark.parametrize("code,cls", [(yali.Result.Timeout, yali.YaliTimeout),
                                      (yali.Result.RemoteError, yali.YaliRemoteError),
                                      (yali.Result.InvalidUsage, yali.YaliInvalidUsage)])
def test_check_async_error_raises_the_subclass_with_the_message(fake_lib, code, cls):
    comm = _fake_comm()
    assert comm.get_async_error() == yali.Result.Success
    comm.check_async_error()  # healthy: nothing raised
    fake_lib.comm_errors[comm.handle] = "yaliCommUserRank: an old, unrelated failure"
    fake_lib.async_errors[comm.handle] = (int(code), "the device failed this way")
    assert comm.get_async_error() == code
    with pytest.raises(cls) as info:
        comm.check_async_error()
    e = info.value
    assert e.code == code and e.call == "yaliCommGetAsyncError"
    assert e.detail == "yaliCommGetAsyncError: the device failed this way", str(e)
    # The low-level helper names the caller and the rank when asked.
    with pytest.raises(cls) as info:
        _capi.check_async_error(comm.handle, "SingleProcessCommunicator.all_reduce", "rank 1")
    assert str(info.value).startswith(
        "SingleProcessCommunicator.all_reduce: rank 1: yaliCommGetAsyncError: the device failed")


def test_async_detail_skips_a_stale_thread_message(fake_lib):
    """If yaliCommGetAsyncError left the thread's last error alone, that text belongs to an earlier,
    unrelated call: the comm's record (which holds asynchronous failures) is reported instead."""
    comm = _fake_comm()
    fake_lib.async_errors[comm.handle] = (int(yali.Result.RemoteError), "unused")
    fake_lib.record_on_thread = fake_lib.record_on_comm = False
    fake_lib.thread_error = "yaliCommInitRank: nranks=0 must be >= 1"
    fake_lib.comm_errors[comm.handle] = "yaliAllReduce: a peer aborted the communicator"
    with pytest.raises(yali.YaliRemoteError) as info:
        comm.check_async_error()
    assert info.value.detail == "yaliAllReduce: a peer aborted the communicator"


def test_async_error_null_comm_is_invalid_argument():
    _require_lib()
    with pytest.raises(yali.YaliInvalidArgument) as info:
        _capi.comm_get_async_error(None)
    assert info.value.call == "yaliCommGetAsyncError" and "comm" in info.value.detail
    with pytest.raises(yali.YaliInvalidArgument):
        _capi.check_async_error(None)


def test_check_reports_the_latest_failure_of_the_thread():
    """Against the library: two failures in a row; each error carries its own call's message."""
    _require_lib()
    with pytest.raises(yali.YaliInvalidArgument) as first:
        _capi.comm_register(None, 0x1000, 4096)
    with pytest.raises(yali.YaliInvalidArgument) as second:
        _capi.comm_user_rank(0xDEAD000)  # not a comm: refused before it is dereferenced
    assert "yaliCommRegister" in first.value.detail
    assert second.value.detail.startswith("yaliCommUserRank"), second.value.detail
    assert "yaliCommRegister" not in second.value.detail


# ---- The collectives of yali.Comm, with the library faked (conftest.FakeLib) ---------------------

_D, _R = yali.DataType, yali.RedOp


class _Stream:
    cuda_stream = 0x5000  # what yali._as_stream reads of a torch.cuda.Stream


# (method, args, kwargs, C call, the C call's parameters as they must arrive). Pointers, dtype/op
# names, roots, streams: every argument converted and in its place.
_COMM_CALLS = [
    ("all_reduce", (0x100, 0x200, 5, "int64", "max", 0x77), {}, "yaliAllReduce",
     dict(sendbuff=0x100, recvbuff=0x200, count=5, datatype=_D.Int64, op=_R.Max, stream=0x77)),
    ("reduce_scatter", (0x100, 0x200, 3), dict(dtype="bf16", op="avg", stream_ptr=_Stream()),
     "yaliReduceScatter", dict(sendbuff=0x100, recvbuff=0x200, recvcount=3, datatype=_D.Bfloat16,
                              op=_R.Avg, stream=0x5000)),
    ("all_gather", (0x100, 0x200, 4, "uint8"), {}, "yaliAllGather",
     dict(sendbuff=0x100, recvbuff=0x200, sendcount=4, datatype=_D.Uint8, stream=None)),
    ("broadcast", (0x100, 0x100, 9, "float8_e4m3fn", 1, 0x77), {}, "yaliBroadcast",
     dict(sendbuff=0x100, recvbuff=0x100, count=9, datatype=_D.Float8e4m3, root=1, stream=0x77)),
    ("broadcast", (None, 0x200, 9), dict(dtype=_D.Float64, root=0), "yaliBroadcast",
     dict(sendbuff=None, recvbuff=0x200, count=9, datatype=_D.Float64, root=0, stream=None)),
    ("bcast", (0x300, 2, "int32", 1), {}, "yaliBcast",
     dict(buff=0x300, count=2, datatype=_D.Int32, root=1, stream=None)),
    ("reduce", (0x100, None, 6, "uint64", "prod", 1), {}, "yaliReduce",
     dict(sendbuff=0x100, recvbuff=None, count=6, datatype=_D.Uint64, op=_R.Prod, root=1,
          stream=None)),
    ("gather", (0x100, 0x200, 7, "fp8_e5m2", 0, 0x77), {}, "yaliGather",
     dict(sendbuff=0x100, recvbuff=0x200, count=7, datatype=_D.Float8e5m2, root=0, stream=0x77)),
    ("scatter", (None, 0x200, 7), dict(dtype="int8", root=1), "yaliScatter",
     dict(sendbuff=None, recvbuff=0x200, count=7, datatype=_D.Int8, root=1, stream=None)),
    ("all_to_all", (0x100, 0x200, 8, "uint32", 0x77), {}, "yaliAlltoAll",
     dict(sendbuff=0x100, recvbuff=0x200, count=8, datatype=_D.Uint32, stream=0x77)),
    ("send", (0x100, 8, "bf16", 1, 0x77), {}, "yaliSend",
     dict(sendbuff=0x100, count=8, datatype=_D.Bfloat16, peer=1, stream=0x77)),
    ("send", (0x100, 0, _D.Int64, 0), dict(stream_ptr=_Stream()), "yaliSend",
     dict(sendbuff=0x100, count=0, datatype=_D.Int64, peer=0, stream=0x5000)),
    ("recv", (0x200, 8, "float8_e4m3fn", 0), {}, "yaliRecv",
     dict(recvbuff=0x200, count=8, datatype=_D.Float8e4m3, peer=0, stream=None)),
    ("recv", (None, 3), dict(dtype="uint8", peer=1, stream_ptr=0x77), "yaliRecv",
     dict(recvbuff=None, count=3, datatype=_D.Uint8, peer=1, stream=0x77)),
]


@pytest.mark.parametrize("method,args,kwargs,call,want", _COMM_CALLS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(_COMM_CALLS)])
def test_comm_collective_arguments(fake_lib, method, args, kwargs, call, want):
    comm = _fake_comm()
    assert getattr(comm, method)(*args, **kwargs) is None  # enqueued; nothing to return
    launches = fake_lib.launches()
    assert len(launches) == 1 and fake_lib.calls[-1][0] == call
    got = launches[0]
    assert got.pop("comm") == comm.handle
    assert got == want


def test_comm_collectives_take_tensors_and_arrays(fake_lib):
    comm = _fake_comm()
    comm.all_gather(_FakeTensor(0x10000, 64, offset=16), _FakeCai(0x30000, (8,)), 2, "float32")
    got = fake_lib.launches("yaliAllGather")[-1]
    assert (got["sendbuff"], got["recvbuff"]) == (0x10010, 0x30000)


@pytest.mark.parametrize("method,args", [
    ("all_reduce", (0x100, 0x100, 4, "int32", "avg")),
    ("reduce_scatter", (0x100, 0x200, 4, "uint8", "avg")),
    ("reduce", (0x100, 0x100, 4, "int64", "avg", 0)),
])
def test_comm_avg_on_integers_is_refused_before_the_call(fake_lib, method, args):
    comm = _fake_comm()
    with pytest.raises(yali.YaliInvalidArgument, match="avg is for floating types") as info:
        getattr(comm, method)(*args)
    assert info.value.call == "yali" + {"all_reduce": "AllReduce", "reduce_scatter":
                                        "ReduceScatter", "reduce": "Reduce"}[method]
    assert "int" in str(info.value)
    assert fake_lib.launches() == []


def test_comm_argument_errors_name_the_call_and_argument(fake_lib):
    comm = _fake_comm()
    with pytest.raises(yali.YaliInvalidArgument, match="recvcount") as info:
        comm.reduce_scatter(0x100, 0x200, -1)
    assert info.value.call == "yaliReduceScatter"
    with pytest.raises(yali.YaliInvalidArgument, match="root") as info:
        comm.broadcast(0x100, 0x100, 4, "float32", 2**40)
    assert info.value.call == "yaliBroadcast"
    with pytest.raises(yali.YaliInvalidArgument, match="sendbuff") as info:
        comm.gather("not a pointer", 0x100, 4)
    assert info.value.call == "yaliGather"
    with pytest.raises(yali.YaliInvalidArgument, match="datatype") as info:
        comm.all_to_all(0x100, 0x200, 4, "complex64")
    assert info.value.call == "yaliAlltoAll"
    with pytest.raises(yali.YaliInvalidArgument, match="stream") as info:
        comm.scatter(0x100, 0x200, 4, "float32", 0, "stream?")
    assert info.value.call == "yaliScatter"
    assert fake_lib.launches() == []


@pytest.mark.parametrize("method,args,call", [
    ("all_reduce", (0x100, 0x100, 4), "yaliAllReduce"),
    ("reduce_scatter", (0x100, 0x200, 4), "yaliReduceScatter"),
    ("all_gather", (0x100, 0x200, 4), "yaliAllGather"),
    ("broadcast", (0x100, 0x100, 4), "yaliBroadcast"),
    ("bcast", (0x100, 4), "yaliBcast"),
    ("reduce", (0x100, 0x100, 4), "yaliReduce"),
    ("gather", (0x100, 0x200, 4), "yaliGather"),
    ("scatter", (0x100, 0x200, 4), "yaliScatter"),
    ("all_to_all", (0x100, 0x200, 4), "yaliAlltoAll"),
    ("send", (0x100, 4, "float32", 1), "yaliSend"),
    ("recv", (0x200, 4, "float32", 1), "yaliRecv"),
])
def test_failed_comm_collectives_raise_with_their_own_message(fake_lib, method, args, call):
    """Every collective on a failed comm returns the asynchronous error (yali.h: "every later call
    returns it"): the wrapper raises its subclass with that call's message."""
    comm = _fake_comm()
    fake_lib.comm_errors[comm.handle] = "yaliCommRegister: an old, unrelated failure"
    fake_lib.record_on_comm = False
    fake_lib.async_errors[comm.handle] = (int(yali.Result.RemoteError), "a peer aborted")
    with pytest.raises(yali.YaliRemoteError) as info:
        getattr(comm, method)(*args)
    e = info.value
    assert e.call == call and e.detail == f"{call}: a peer aborted", str(e)


def test_comm_algo_info(fake_lib):
    comm = _fake_comm()
    info = comm.algo_info("reduce_scatter", 128, "bf16", "max", send_ptr=0x100, recv_ptr=0x200)
    assert info == yali.AlgoInfo("fake_algo", 4, 256, 65536)
    assert fake_lib.calls[-1] == ("yaliAlgoInfo", comm.handle, dict(
        collective=yali.Collective.ReduceScatter, sendbuff=0x100, recvbuff=0x200, count=128,
        datatype=_D.Bfloat16, op=_R.Max, root=0))
    comm.algo_info(yali.Collective.Gather, 16, "int8", root=1)
    got = fake_lib.calls[-1][2]
    assert (got["collective"], got["root"], got["sendbuff"], got["recvbuff"]) == (
        yali.Collective.Gather, 1, None, None)
    with pytest.raises(yali.YaliInvalidArgument, match="collective"):
        comm.algo_info("allgatherv", 16)
    assert yali.collective_name("all_to_all_single") == "alltoall"
    assert yali.collective_name(yali.Collective.ReduceScatter) == "reducescatter"
    assert yali.collective_name(42) == "unknown"


# ---- Point-to-point (yaliSend, yaliRecv): the prototypes, yali.Comm with the library faked -------


def test_p2p_parameters_match_header(header_text):
    """conftest.FakeLib records yaliSend/yaliRecv by parameter name: its table must be the
    header's, names and order."""
    from conftest import P2P_PARAMS

    header = _header_declarations(header_text)
    assert set(P2P_PARAMS) == {"yaliSend", "yaliRecv"}
    for name, params in P2P_PARAMS.items():
        assert tuple(n for _, n in header[name][1]) == params, name


def test_p2p_prototypes():
    want = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
            ctypes.c_void_p]  # buffer, count, datatype, peer, comm, stream
    for name in ("yaliSend", "yaliRecv"):
        assert _capi._PROTOTYPES[name] == (ctypes.c_int, want), name


@pytest.mark.parametrize("method,call,buffer", [("send", "yaliSend", "sendbuff"),
                                                ("recv", "yaliRecv", "recvbuff")])
def test_comm_p2p_argument_errors_name_the_call_and_argument(fake_lib, method, call, buffer):
    """Refused before the library is called (YaliInvalidArgument, a ValueError too), naming the C
    call and the argument: a peer that is not an int (a bool neither) or does not fit a C int, a
    negative count, a type with no yaliDataType_t, a buffer or stream that is not a pointer."""
    comm = _fake_comm(0, 2)
    fn = getattr(comm, method)
    cases = [
        (lambda: fn(0x100, 4, "float32", "1"), ["peer must be an int", "str"]),
        (lambda: fn(0x100, 4, "float32", 1.0), ["peer must be an int", "float"]),
        (lambda: fn(0x100, 4, "float32", None), ["peer must be an int", "NoneType"]),
        (lambda: fn(0x100, 4, "float32", True), ["peer must be an int", "bool"]),
        (lambda: fn(0x100, 4, "float32", 2**40), ["peer=1099511627776", "C int"]),
        (lambda: fn(0x100, -1, "float32", 1), ["count=-1", ">= 0"]),
        (lambda: fn(0x100, 4, "complex64", 1), ["datatype", "complex64"]),
        (lambda: fn("not a pointer", 4, "float32", 1), [buffer, "pointer"]),
        (lambda: fn(0x100, 4, "float32", 1, "stream?"), ["stream"]),
    ]
    for bad, words in cases:
        with pytest.raises(yali.YaliInvalidArgument) as info:
            bad()
        assert isinstance(info.value, ValueError)
        assert info.value.call == call, str(info.value)
        assert str(info.value).startswith(call), str(info.value)
        missing = [w for w in words if w not in str(info.value)]
        assert not missing, f"{info.value} lacks {missing}"
    assert fake_lib.launches() == []


def test_p2p_calls_in_a_group(fake_lib):
    """Inside yali.group() the calls only queue (the library launches them at the end); one refused
    there fails the group, which then launches none of its calls (NCCL's rule), naming it."""
    comm = _fake_comm(0, 2)
    with yali.group():
        comm.send(0x100, 4, "float32", 1)
        comm.recv(0x200, 4, "float32", 1)
        comm.send(0x300, 4, "float32", 0)  # to this rank: its recv in the same group
        comm.recv(0x400, 4, "float32", 0)
    assert [c[0] for c in fake_lib.calls] == ["yaliGroupStart", "yaliSend", "yaliRecv", "yaliSend",
                                              "yaliRecv", "yaliGroupEnd"]
    assert [(k.get("sendbuff", k.get("recvbuff")), k["peer"]) for k in fake_lib.launches()] == [
        (0x100, 1), (0x200, 1), (0x300, 0), (0x400, 0)]
    fake_lib.calls.clear()
    with pytest.raises(yali.YaliInvalidArgument, match="none of the group's calls") as info:
        with yali.group():
            comm.send(0x100, 4, "float32", 1)
            with pytest.raises(yali.YaliInvalidArgument, match="peer must be an int"):
                comm.recv(0x200, 4, "float32", "one")
    assert info.value.call == "yaliGroupEnd" and "yaliRecv failed inside the group" in str(
        info.value)
    assert fake_lib.calls[-1] == ("yaliGroupSimulateEnd",)


# ---- The collectives against the library (no GPU: NULL comms) ------------------------------------


@pytest.mark.parametrize("name,args", [
    ("yaliReduceScatter", (None, None, 0, 7, 0, None, None)),
    ("yaliAllGather", (None, None, 0, 7, None, None)),
    ("yaliBroadcast", (None, None, 0, 7, 0, None, None)),
    ("yaliBcast", (None, 0, 7, 0, None, None)),
    ("yaliReduce", (None, None, 0, 7, 0, 0, None, None)),
    ("yaliGather", (None, None, 0, 7, 0, None, None)),
    ("yaliScatter", (None, None, 0, 7, 0, None, None)),
    ("yaliAlltoAll", (None, None, 0, 7, None, None)),
])
def test_null_comm_collectives_are_invalid_argument(name, args):
    _require_lib()
    code = getattr(_capi.lib(), name)(*args)
    assert code == yali.Result.InvalidArgument, f"{name}(comm=NULL) returned {code}"
    assert name in yali.get_last_error()


@pytest.mark.parametrize("wrapper,call", [(_capi.send, "yaliSend"), (_capi.recv, "yaliRecv")])
def test_null_comm_p2p_calls_are_invalid_argument(wrapper, call):
    """Against the library (fails on a missing symbol until the library has the calls): a NULL or
    unknown comm is refused, naming the call, through the ctypes function and the wrapper; a bad
    peer type is refused by the wrapper before the library is called."""
    _require_lib()
    lib = _capi.lib()
    assert call not in lib.missing, f"{lib.path} lacks {call}"
    code = getattr(lib, call)(None, 0, int(yali.DataType.Float32), 0, None, None)
    assert code == yali.Result.InvalidArgument, f"{call}(comm=NULL) returned {code}"
    assert call in yali.get_last_error() and "comm" in yali.get_last_error()
    for handle, words in ((None, "comm is NULL"), (0xDEAD000, "not a communicator")):
        with pytest.raises(yali.YaliInvalidArgument) as info:
            wrapper(0x1000, 4, int(yali.DataType.Float32), 1, handle, None)
        e = info.value
        assert e.call == call and e.detail.startswith(call) and words in e.detail, str(e)
    for peer, words in (("1", "got str"), (1.5, "got float"), (2**31, "does not fit a C int")):
        with pytest.raises(yali.YaliInvalidArgument) as info:
            wrapper(0x1000, 4, int(yali.DataType.Float32), peer, None, None)
        e = info.value
        assert e.call == call and "peer" in str(e) and words in str(e), str(e)
        assert e.error_string == yali.get_error_string(yali.Result.InvalidArgument)


def test_collective_name_and_algo_info_against_the_library():
    _require_lib()
    names = {yali.Collective.AllReduce: "allreduce", yali.Collective.ReduceScatter: "reducescatter",
             yali.Collective.AllGather: "allgather", yali.Collective.Broadcast: "broadcast",
             yali.Collective.Reduce: "reduce", yali.Collective.Gather: "gather",
             yali.Collective.Scatter: "scatter", yali.Collective.AlltoAll: "alltoall"}
    for c, name in names.items():
        assert yali.collective_name(c) == name
    assert yali.collective_name(yali.Collective.NumCollectives) == "unknown"
    assert yali.collective_name(-1) == "unknown"
    with pytest.raises(yali.YaliInvalidArgument) as e:
        _capi.algo_info(None, int(yali.Collective.AllGather), None, None, 16,
                        int(yali.DataType.Float32), 0, 0)
    assert e.value.call == "yaliAlgoInfo" and "yaliAlgoInfo" in e.value.detail


# ---- The uneven exchange (AlltoAllv): yali.Comm with the library faked, then the library ---------

# The parameters of the four calls in yali.h, in order (test_a2av_parameters_match_header checks
# them): A2avFakeLib records every call as {parameter: value}.
A2AV_PARAMS = {
    "yaliAlltoAllv": ("sendbuff", "sendcounts", "sdispls", "recvbuff", "recvcounts", "rdispls",
                      "datatype", "comm", "stream"),
    "yaliAlltoAllvDeviceCounts": ("sendbuff", "sendcounts", "sdispls", "recvbuff", "recvCapacity",
                                  "recvcounts", "rdispls", "datatype", "comm", "stream"),
    "yaliExpertDispatch": ("sendbuff", "sendCounts", "recvbuff", "recvCounts", "expertOffsets",
                           "layout", "comm", "stream"),
    "yaliExpertCombine": ("sendbuff", "sendCounts", "recvbuff", "layout", "comm", "stream"),
}


def _a2av_value(name, value):
    """What a test compares of one argument: host arrays as lists (None: NULL), the layout as a
    dict of its fields."""
    if name in ("sendcounts", "sdispls", "recvcounts", "rdispls") and not isinstance(value, int):
        return None if value is None else list(value)
    if name == "layout":
        lay = value._obj  # a ctypes.byref(yaliExpertLayout_t)
        return {f: getattr(lay, f) for f, _ in lay._fields_}
    return value


class A2avFakeLib:
    """conftest.FakeLib that also takes the four AlltoAllv calls, recorded in ``calls`` as (name,
    comm, {parameter: value}) with _a2av_value's conversions; on a comm with an asynchronous error
    they fail as FakeLib's collectives do. (A mixin over FakeLib, made by a2av_fake_lib.)"""

    def _call_params(self, name):
        return A2AV_PARAMS.get(name) or super()._call_params(name)

    def _recorded(self, name, param, value):
        return _a2av_value(param, value) if name in A2AV_PARAMS else value


@pytest.fixture
def a2av_lib(monkeypatch):
    """fake_lib's FakeLib, taking the AlltoAllv calls too, in place of the loaded library."""
    from conftest import FakeLib

    fake = type("FakeLibA2av", (A2avFakeLib, FakeLib), {})()
    monkeypatch.setattr(_capi, "_lib", fake)
    return fake


def test_a2av_parameters_match_header(header_text):
    header = _header_declarations(header_text)
    for name, params in A2AV_PARAMS.items():
        assert tuple(n for _, n in header[name][1]) == params, name


def test_a2av_prototypes():
    size_t_p = ctypes.POINTER(ctypes.c_size_t)
    _, argtypes = _capi._PROTOTYPES["yaliAlltoAllv"]
    assert [argtypes[i] for i in (1, 2, 4, 5)] == [size_t_p] * 4  # the host arrays
    assert argtypes[6] is ctypes.c_int
    _, argtypes = _capi._PROTOTYPES["yaliAlltoAllvDeviceCounts"]
    assert argtypes[4] is ctypes.c_size_t and argtypes[7] is ctypes.c_int
    assert all(argtypes[i] is ctypes.c_void_p for i in (0, 1, 2, 3, 5, 6, 8, 9))
    for name, at in (("yaliExpertDispatch", 5), ("yaliExpertCombine", 3)):
        _, argtypes = _capi._PROTOTYPES[name]
        assert argtypes[at]._type_ is _capi.yaliExpertLayout_t, name
        assert all(a is ctypes.c_void_p for i, a in enumerate(argtypes) if i != at), name


def test_comm_all_to_all_v_arguments(a2av_lib):
    comm = _fake_comm(1, 3)
    comm.all_to_all_v(0x100, [1, 0, 5], None, 0x200, (2, 2, 2), [0, 4, 2], "bf16", _Stream())
    assert a2av_lib.calls[-1] == ("yaliAlltoAllv", comm.handle, dict(
        sendbuff=0x100, sendcounts=[1, 0, 5], sdispls=None, recvbuff=0x200, recvcounts=[2, 2, 2],
        rdispls=[0, 4, 2], datatype=_D.Bfloat16, comm=comm.handle, stream=0x5000))
    comm.all_to_all_v(_FakeTensor(0x10000, 64, 8), range(3), [0, 0, 1], _FakeCai(0x30000, (3,)),
                      iter([0, 1, 2]), None)
    got = a2av_lib.launches("yaliAlltoAllv")[-1]
    assert (got["sendbuff"], got["recvbuff"], got["sendcounts"], got["recvcounts"]) == (
        0x10008, 0x30000, [0, 1, 2], [0, 1, 2])
    assert (got["datatype"], got["stream"]) == (_D.Float32, None)


def test_comm_all_to_all_v_argument_errors(a2av_lib):
    """The host arrays are read for nranks entries by the library: any other length, a negative
    entry or a non-sequence is refused before the call, naming the argument."""
    comm = _fake_comm(0, 2)
    cases = [
        (lambda: comm.all_to_all_v(0x100, [1, 2, 3], None, 0x200, [1, 2], None),
         ["sendcounts has 3 entries", "must have 2"]),
        (lambda: comm.all_to_all_v(0x100, [1, 2], None, 0x200, [1], None),
         ["recvcounts has 1 entries"]),
        (lambda: comm.all_to_all_v(0x100, [1, 2], [0], 0x200, [1, 2], None), ["sdispls"]),
        (lambda: comm.all_to_all_v(0x100, [1, 2], None, 0x200, [1, 2], [0, 1, 2]), ["rdispls"]),
        (lambda: comm.all_to_all_v(0x100, [1, -2], None, 0x200, [1, 2], None),
         ["sendcounts[1]=-2", ">= 0"]),
        (lambda: comm.all_to_all_v(0x100, [1, 2], None, 0x200, [1, 2.5], None),
         ["recvcounts[1]", "int"]),
        (lambda: comm.all_to_all_v(0x100, 7, None, 0x200, [1, 2], None),
         ["sendcounts", "sequence of ints"]),
        (lambda: comm.all_to_all_v(0x100, [1, 2], None, 0x200, None, None),
         ["recvcounts are required"]),
        (lambda: comm.all_to_all_v(0x100, [1, 2], None, 0x200, [1, 2], None, "complex64"),
         ["datatype"]),
        (lambda: comm.all_to_all_v("p", [1, 2], None, 0x200, [1, 2], None), ["sendbuff"]),
    ]
    for call, words in cases:
        with pytest.raises(yali.YaliInvalidArgument) as info:
            call()
        assert info.value.call == "yaliAlltoAllv"
        missing = [w for w in words if w not in str(info.value)]
        assert not missing, f"{info.value} lacks {missing}"
    assert a2av_lib.launches() == []


def test_comm_device_count_forms_arguments(a2av_lib):
    comm = _fake_comm(0, 2)
    counts = _FakeTensor(0x40000, 16)
    comm.all_to_all_v_device_counts(0x100, counts, None, 0x200, 77, 0x300, None, "int64", 0x77)
    assert a2av_lib.calls[-1][2] == dict(
        sendbuff=0x100, sendcounts=0x40000, sdispls=None, recvbuff=0x200, recvCapacity=77,
        recvcounts=0x300, rdispls=None, datatype=_D.Int64, comm=comm.handle, stream=0x77)
    comm.expert_dispatch(0x100, counts, 0x200, None, 0x500, yali.ExpertLayout(4096, 8, 16, 1000),
                         0x77)
    assert a2av_lib.calls[-1][2] == dict(
        sendbuff=0x100, sendCounts=0x40000, recvbuff=0x200, recvCounts=None, expertOffsets=0x500,
        layout=dict(rowBytes=4096, localExperts=8, alignRows=16, capacityRows=1000, tokenRows=0),
        comm=comm.handle, stream=0x77)
    # The layout as a plain tuple in ExpertLayout's order, or the C struct itself.
    comm.expert_combine(0x200, counts, 0x100, (4096, 8, 16, 1000))
    assert a2av_lib.calls[-1][2] == dict(
        sendbuff=0x200, sendCounts=0x40000, recvbuff=0x100,
        layout=dict(rowBytes=4096, localExperts=8, alignRows=16, capacityRows=1000, tokenRows=0),
        comm=comm.handle, stream=None)
    comm.expert_combine(0x200, counts, 0x100, _capi.yaliExpertLayout_t(2, 1, 1, 0))
    assert a2av_lib.calls[-1][2]["layout"] == dict(rowBytes=2, localExperts=1, alignRows=1,
                                                   capacityRows=0, tokenRows=0)
    # The token side's rows, when given (the torch layer always gives them).
    comm.expert_combine(0x200, counts, 0x100, yali.ExpertLayout(4096, 8, 16, 1000, 77))
    assert a2av_lib.calls[-1][2]["layout"]["tokenRows"] == 77


@pytest.mark.parametrize("layout,words", [
    ((0, 1, 1, 8), ["layout.rowBytes=0", ">= 1"]),
    ((64, 0, 1, 8), ["layout.localExperts=0", "1..512", "YALI_MAX_LOCAL_EXPERTS"]),
    ((64, 513, 1, 8), ["layout.localExperts=513"]),
    ((64, 257, 1, 8), ["257 x nranks (4) = 1028", "at most 1024", "YALI_MAX_EXPERTS"]),
    ((64, 2, 0, 8), ["layout.alignRows=0"]),
    ((64, 2, 1, -1), ["layout.capacityRows=-1"]),
    ((64, 2**31, 1, 8), ["layout.localExperts", "C int"]),
    ((64, 2, 1), ["ExpertLayout(row_bytes, local_experts, align_rows, capacity_rows)"]),
    ("layout", ["ExpertLayout"]),
])
def test_comm_expert_layout_errors(a2av_lib, layout, words):
    """The layout's ranges (yali.h) are checked before the call, naming the field; YALI_MAX_EXPERTS
    counts every rank's experts (nranks 4 here)."""
    comm = _fake_comm(0, 4)
    for method, call in ((lambda: comm.expert_dispatch(0x1, 0x2, 0x3, None, None, layout),
                          "yaliExpertDispatch"),
                         (lambda: comm.expert_combine(0x1, 0x2, 0x3, layout), "yaliExpertCombine")):
        with pytest.raises(yali.YaliInvalidArgument) as info:
            method()
        assert info.value.call == call
        missing = [w for w in words if w not in str(info.value)]
        assert not missing, f"{info.value} lacks {missing}"
    assert a2av_lib.launches() == []


@pytest.mark.parametrize("method,args,call", [
    ("all_to_all_v", (0x100, [1, 1], None, 0x200, [1, 1], None), "yaliAlltoAllv"),
    ("all_to_all_v_device_counts", (0x100, 0x300, None, 0x200, 8), "yaliAlltoAllvDeviceCounts"),
    ("expert_dispatch", (0x100, 0x300, 0x200, None, None, (4, 1, 1, 8)), "yaliExpertDispatch"),
    ("expert_combine", (0x200, 0x300, 0x100, (4, 1, 1, 8)), "yaliExpertCombine"),
])
def test_failed_comm_a2av_raises_with_its_own_message(a2av_lib, method, args, call):
    """A comm whose count check failed on the device (yaliInvalidUsage on every rank) refuses every
    later call with its own message."""
    comm = _fake_comm()
    a2av_lib.comm_errors[comm.handle] = "yaliCommRegister: an old, unrelated failure"
    a2av_lib.record_on_comm = False
    text = "rank 1: alltoallv count check: the rows received exceed the capacity"
    a2av_lib.async_errors[comm.handle] = (int(yali.Result.InvalidUsage), text)
    with pytest.raises(yali.YaliInvalidUsage) as info:
        getattr(comm, method)(*args)
    e = info.value
    assert e.call == call and e.detail == f"{call}: {text}", str(e)


def test_alltoallv_collective_names():
    C = yali.Collective
    assert C.AlltoAllv == 8 and C.NumCollectives == 9
    for name in ("alltoallv", "all_to_all_v", "all_to_all_device_counts", "expert_dispatch",
                 "expert_combine"):
        assert yali.as_collective(name) == C.AlltoAllv, name


def test_a_missing_function_fails_when_called_not_when_opened():
    """A library older than the package opens and serves what it has; a function it lacks raises
    YaliLibraryError naming it, when called."""
    lib = object.__new__(_capi._Library)
    lib.path, lib.missing = "/x/libyali.so", ["yaliExpertDispatch"]
    with pytest.raises(yali.YaliLibraryError, match="/x/libyali.so lacks yaliExpertDispatch"):
        lib.yaliExpertDispatch  # noqa: B018
    with pytest.raises(AttributeError):
        lib.notAYaliFunction  # noqa: B018


def test_real_library_binds_the_a2av_calls_lazily():
    """Against the library: every other call works whether or not it has the AlltoAllv calls; the
    calls it lacks (a build older than the header) raise YaliLibraryError naming them."""
    _require_lib()
    lib = _capi.lib()
    assert yali.get_error_string(yali.Result.Success)  # the library serves its other calls
    for name in A2AV_PARAMS:
        if name in lib.missing:
            with pytest.raises(yali.YaliLibraryError, match=name):
                getattr(lib, name)
        else:
            assert callable(getattr(lib, name))


def test_null_comm_a2av_calls_are_invalid_argument():
    """Against the library (fails on a missing symbol until the library has the calls)."""
    _require_lib()
    lib = _capi.lib()
    arr = (ctypes.c_size_t * 2)(0, 0)
    layout = _capi.yaliExpertLayout_t(4, 1, 1, 0)
    calls = {
        "yaliAlltoAllv": (None, arr, None, None, arr, None, int(yali.DataType.Float32), None, None),
        "yaliAlltoAllvDeviceCounts": (None, None, None, None, 0, None, None,
                                      int(yali.DataType.Float32), None, None),
        "yaliExpertDispatch": (None, None, None, None, None, ctypes.byref(layout), None, None),
        "yaliExpertCombine": (None, None, None, ctypes.byref(layout), None, None),
    }
    for name, args in calls.items():
        code = getattr(lib, name)(*args)
        assert code == yali.Result.InvalidArgument, f"{name}(comm=NULL) returned {code}"
        assert name in yali.get_last_error()
    assert yali.collective_name(yali.Collective.AlltoAllv) == "alltoallv"
    assert yali.collective_name(yali.Collective.NumCollectives) == "unknown"


def test_comm_init_rank_refuses_a_unique_id_of_another_length(fake_lib):
    """The binding copies UNIQUE_ID_BYTES out of the id it is given: a shorter one was over-read
    (and a longer one cut) before the check; now it is refused before the library is called."""
    for uid in (b"x", bytes(_capi.UNIQUE_ID_BYTES - 1), bytes(_capi.UNIQUE_ID_BYTES + 1)):
        with pytest.raises(yali.YaliInvalidArgument, match=rf"the unique id has {len(uid)} bytes"):
            _capi.comm_init_rank(2, uid, 0)
    assert not [c for c in fake_lib.calls if c[0] == "yaliCommInitRank"]


def test_a_missing_libcudart_is_preloaded_by_the_soname_the_loader_names(tmp_path, monkeypatch):
    """libyali built against libcudart.so.13 next to torch's libcudart.so.12: the .12 copy loads
    but does not satisfy libyali; the preload looks for the SONAME the loader's error names (it
    took the first libcudart it could load, so libyali failed to open where it could have)."""
    cu12, cu13 = tmp_path / "cu12", tmp_path / "cu13"
    for d, name in ((cu12, "libcudart.so.12"), (cu13, "libcudart.so.13")):
        d.mkdir()
        (d / name).write_bytes(b"")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    opened, preloaded = [], []

    def fake_cdll(path, mode=0):
        if str(path).endswith("libyali.so"):
            opened.append(path)
            if not any(p.endswith(".so.13") for p in preloaded):
                raise OSError("libcudart.so.13: cannot open shared object file: No such file")
            raise OSError("stop here")  # opened: the test ends before the prototypes
        preloaded.append(str(path))
        return object()

    import importlib.util

    real_glob = _capi.glob.glob
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # no nvidia wheels
    monkeypatch.setattr(_capi.ctypes, "CDLL", fake_cdll)
    monkeypatch.setattr(_capi.glob, "glob", lambda pattern: real_glob(
        pattern.replace("/usr/local/cuda/lib64", str(cu12)).replace("/usr/local/cuda/lib", str(cu13))))
    with pytest.raises(yali.YaliLibraryError, match="stop here"):
        _capi._Library("/x/libyali.so")
    assert preloaded == [str(cu13 / "libcudart.so.13")], preloaded
