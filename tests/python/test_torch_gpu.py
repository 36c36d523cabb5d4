"""GPU tests of yali.torch: one process per GPU (2 and 4 ranks) and the single-process form.

    cd /work/main && YALI_LIBRARY=build/src/libyali.so PYTHONPATH=python python3 -m pytest tests/python/test_torch_gpu.py -v

Skipped, with the reason, without PyTorch >= 2.4, CUDA or enough GPUs; failed when libyali is
missing and YALI_REQUIRE_LIB=1. To keep the run short every world size runs ONE job (this file
started as a script, one process per rank, bounded by YALI_TEST_TIMEOUT seconds, default 900) that
does all the checks and writes one JSON line per check; the tests below read them by section. A
hang kills the job and fails the sections it did not finish.

What is checked, YALI result against a float64 reference (every rank's input gathered through
NCCL, reduced in rank order) with dtype tolerances, and bitwise equality across ranks:
  eager   fp32/fp16/bf16 x sum/prod/max/min/avg x 1, 7, 1023, 65537, 1_000_003 elements x in place,
          out=, functional; max/min must be exact; NCCL's own error is reported beside
  slices  x[3:] of a larger tensor in place, out= into a slice, guards around them untouched, 2-D
  errors  argument checks name the method and the argument; the comm still works afterwards
  graph   torch.cuda.graph capture once, replay 4 times with new inputs (out=, in place, functional)
  compile torch.compile(fullgraph=True), backend inductor and aot_eager; torch.library.opcheck
  single  SingleProcessCommunicator over 2 and 4 GPUs
  registered  (a second Communicator made with YALI_DIRECT_MIN_BYTES=-1) empty_registered and
          register: algo_info reports "direct" for registered input and output (in place, out of
          place, views at the same offset, the low-level Comm call with pointers) and not for
          NULL, plain or partly registered buffers; results exact/in tolerance and bitwise equal
          across ranks at every dtype, op and size; a CUDA graph of a registered call; deregister
  single_registered  the same with SingleProcessCommunicator (register_all on every comm)

Failures (the "faults" jobs; they need ONE GPU, which their 3 ranks share: YALI_ALLOW_SHARED_GPU=1,
YALI_TIMEOUT_MS=4000, so that a timeout costs 4 s; bounded by YALI_TEST_FAULT_TIMEOUT, default 300):
  faults_single  SingleProcessCommunicator over devices [0, 0, 0], each rank on a stream of its own:
          ranks 0 and 1 call an all_reduce that rank 2 never joins; both report yaliTimeout, rank 2's
          next call fails (raises, or launches and sets the async error); then check_async_error,
          check, all_reduce, the custom ops and the low-level call raise YaliTimeout with the
          library's message; a CUDA graph captured before the failure and replayed after it leaves
          NaN (all-ones bytes) in its output; replay() raises before replaying; after abort() a
          replay does nothing
  timeout  the same with Communicator, one process per rank (a gloo group carries the unique id)
  remote_abort  rank 0 aborts; the others' next call fails with yaliRemoteError, later calls and
          check() raise YaliRemoteError; close() after the failure returns promptly
  freed_registered  a registered tensor stays alive while registered (torch API); memory registered
          by pointer, freed (del, torch.cuda.empty_cache) and allocated again at the same address:
          an all_reduce on it is right or raises YaliInvalidUsage on every rank, never a wrong
          result; then close()
"""

import contextlib
import datetime
import functools
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
if importlib.util.find_spec("yali") is None:
    sys.path.insert(0, str(REPO / "python"))

try:
    import torch
except ImportError:
    torch = None

import yali  # noqa: E402
from yali import _capi, _launch  # noqa: E402

WORLD_SIZES = (2, 4)
# YALI_TEST_SECTIONS=registered,single_registered: run only those sections (to iterate quickly;
# the tests of the other sections then fail as unfinished, so select the matching tests with -k).
_SECTIONS = {x.strip() for x in os.environ.get("YALI_TEST_SECTIONS", "").split(",") if x.strip()}


def _want(section):
    return not _SECTIONS or section in _SECTIONS
JOB_TIMEOUT = float(os.environ.get("YALI_TEST_TIMEOUT", "900"))
FAULT_JOB_TIMEOUT = float(os.environ.get("YALI_TEST_FAULT_TIMEOUT", "300"))
# The fault jobs' ranks share one GPU; a device wait gives up after 4 s instead of the default (a
# rank's first kernels in a process that shares the GPU with two others can take a second or two).
FAULT_ENV = {"YALI_ALLOW_SHARED_GPU": "1", "YALI_TIMEOUT_MS": "4000"}
_MULTI_KINDS = ("multi", "faults_multi")
OPS = ("sum", "prod", "max", "min", "avg")
SIZES = (1, 7, 1023, 65537, 1_000_003)

# ---- Skips ---------------------------------------------------------------------------------------


def _torch_version_ok():
    try:
        major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    except ValueError:
        return True
    return (major, minor) >= (2, 4)


def _require_gpus(n):
    if torch is None:
        pytest.skip("PyTorch is not installed")
    if not _torch_version_ok():
        pytest.skip(f"yali.torch needs torch >= 2.4, found {torch.__version__}")
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    have = torch.cuda.device_count()
    if have < n:
        pytest.skip(f"needs {n} GPUs, {have} visible")
    try:
        return _capi.lib().path
    except _capi.YaliLibraryError as e:
        if os.environ.get("YALI_REQUIRE_LIB") == "1":
            pytest.fail(f"YALI_REQUIRE_LIB=1 and libyali is unusable: {e}", pytrace=False)
        pytest.skip(f"libyali not available: {e}")


# ---- Jobs ----------------------------------------------------------------------------------------


class _Job:
    def __init__(self, result, records, nranks):
        self.result = result
        self.records = records
        self.nranks = nranks

    def check_section(self, section):
        recs = [r for r in self.records if r["section"] == section]
        done = {r["rank"] for r in recs if r["case"] == "__done__"}
        checks = [r for r in recs if r["case"] != "__done__"]
        failures = [r for r in checks if not r["ok"]]
        lines = [f"rank {r['rank']} {r['case']}: {r['detail']}" for r in failures[:40]]
        if len(failures) > 40:
            lines.append(f"... and {len(failures) - 40} more")
        if failures:
            pytest.fail(f"{len(failures)} of {len(checks)} checks failed in section '{section}':\n"
                        + "\n".join(lines), pytrace=False)
        missing = sorted(set(range(self.nranks)) - done)
        if missing:
            pytest.fail(f"section '{section}' did not finish on rank(s) {missing} "
                        f"({len(checks)} checks recorded):\n{self.result.summary()}", pytrace=False)
        assert checks, f"section '{section}' recorded no checks"
        return checks


@functools.lru_cache(maxsize=None)
def _run_job(kind, n, lib_path):
    out_dir = tempfile.mkdtemp(prefix=f"yali_torch_gpu_{kind}{n}_")
    try:
        args = [str(HERE), "--worker", kind, "--out", out_dir, "--ndev", str(n)]
        env = {"YALI_LIBRARY": lib_path, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
        timeout = JOB_TIMEOUT
        if kind.startswith("faults"):
            env.update(FAULT_ENV)
            timeout = FAULT_JOB_TIMEOUT
        world = n if kind in _MULTI_KINDS else 1
        res = _launch.launch(args, world, timeout=timeout, env=env, peer_grace=60)
        records = []
        for path in sorted(Path(out_dir).glob("rank*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass  # a line cut short by a kill
        return _Job(res, records, world)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _multi(ws):
    return _run_job("multi", ws, _require_gpus(ws))


def _single(n):
    return _run_job("single", n, _require_gpus(n))


_ws = pytest.mark.parametrize("ws", WORLD_SIZES, ids=[f"{w}ranks" for w in WORLD_SIZES])


@_ws
def test_all_reduce_eager(ws):
    _multi(ws).check_section("eager")


@_ws
def test_all_reduce_slices(ws):
    _multi(ws).check_section("slices")


@_ws
def test_argument_errors(ws):
    _multi(ws).check_section("errors")


@_ws
def test_cuda_graph_capture_replay(ws):
    _multi(ws).check_section("graph")


@_ws
@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_torch_compile_fullgraph(ws, backend):
    _multi(ws).check_section(f"compile_{backend}")


@_ws
def test_custom_op_opcheck(ws):
    _multi(ws).check_section("opcheck")


@_ws
def test_job_exits_cleanly(ws):
    job = _multi(ws)
    assert job.result.ok, "the job did not exit cleanly (close/destroy included):\n" + \
        job.result.summary()


@_ws
def test_registered_all_reduce(ws):
    _multi(ws).check_section("registered")


@pytest.mark.parametrize("n", WORLD_SIZES, ids=[f"{n}gpus" for n in WORLD_SIZES])
def test_single_process(n):
    job = _single(n)
    job.check_section("single")
    assert job.result.ok, job.result.summary()


@pytest.mark.parametrize("n", WORLD_SIZES, ids=[f"{n}gpus" for n in WORLD_SIZES])
def test_single_process_registered(n):
    _single(n).check_section("single_registered")


def _faults(kind):
    """The fault jobs run on one GPU (more are fine), shared by 3 ranks: two that wait in the call
    that fails and report it, one that misses it."""
    return _run_job(kind, 3, _require_gpus(1))


def test_async_error_single_process():
    """SingleProcessCommunicator: a timeout reaches every comm and every entry point; graph replays
    after it write NaN; replay() and check_async_error() raise."""
    job = _faults("faults_single")
    job.check_section("faults_single")
    assert job.result.ok, job.result.summary()


def test_async_error_after_timeout():
    _faults("faults_multi").check_section("timeout")


def test_async_error_after_peer_abort():
    _faults("faults_multi").check_section("remote_abort")


def test_registered_storage_freed_while_registered():
    checks = _faults("faults_multi").check_section("freed_registered")
    freed = [r for r in checks if r["case"].startswith("all_reduce on memory freed")]
    if freed and all(_NOT_REUSED in r["detail"] for r in freed):
        pytest.skip("CUDA gave no rank the freed address again: nothing was checked")


def test_faults_job_exits_cleanly():
    job = _faults("faults_multi")
    assert job.result.ok, "the fault job did not exit cleanly:\n" + job.result.summary()


def test_ops_registered_and_op_names():
    if torch is None:
        pytest.skip("PyTorch is not installed")
    if not _torch_version_ok():
        pytest.skip(f"yali.torch needs torch >= 2.4, found {torch.__version__}")
    import torch.distributed as dist

    import yali.torch as yt

    # torch prints alias sets numbered ("Tensor(a0!)") in some versions and bare ("Tensor(a!)") in
    # others.
    for name, schema_part in (("all_reduce_", r"Tensor\(a\d*!\) tensor"), ("all_reduce_out", r"Tensor\(a\d*!\) out"),
                              ("all_reduce", r"-> Tensor")):
        op = getattr(torch.ops.yali, name).default
        assert re.search(schema_part, str(op._schema)), str(op._schema)
    assert yt._op_code("sum", "m") == 0 and yt._op_code("AVG", "m") == 4
    assert yt._op_code(dist.ReduceOp.MAX, "m") == 2
    assert yt._op_code(dist.ReduceOp.PRODUCT, "m") == 1
    assert yt._op_code(dist.ReduceOp.AVG, "m") == 4
    with pytest.raises(ValueError, match="op="):
        yt._op_code("xor", "Communicator.all_reduce")


# ==== Worker side (this file run as a script, one process per rank) ==============================

_TOL = {}  # dtype -> (rtol, atol), filled in the worker (needs torch)


class _Recorder:
    """One JSON line per check, flushed, so that a killed job still tells what it did."""

    def __init__(self, out_dir, rank):
        self.rank = rank
        self.section = None
        self.f = open(Path(out_dir) / f"rank{rank}.jsonl", "a")

    def record(self, case, ok, detail=""):
        self.f.write(json.dumps({"rank": self.rank, "section": self.section, "case": case,
                                 "ok": bool(ok), "detail": str(detail)[:2000]}) + "\n")
        self.f.flush()

    def check(self, case, fn, *args):
        """fn(*args) -> list of problems (empty: pass). An exception is a failure."""
        try:
            problems = fn(*args)
        except Exception:  # noqa: BLE001
            self.record(case, False, traceback.format_exc(limit=6))
            return
        self.record(case, not problems, "; ".join(problems) if problems else "")

    @contextlib.contextmanager
    def in_section(self, name):
        self.section = name
        print(f"[rank {self.rank}] section {name}", flush=True)
        try:
            yield
        except Exception:  # noqa: BLE001
            self.record("__section__", False, traceback.format_exc(limit=8))
        finally:
            self.record("__done__", True)


def _make_input(n, dtype, op, seed, device):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    if op == "prod":  # products of values near 1 stay in range for every dtype
        x = torch.rand(n, generator=g, device=device, dtype=torch.float32) + 0.5
    else:
        x = torch.randn(n, generator=g, device=device, dtype=torch.float32)
    return x.to(dtype)


def _reduce64(parts, op):
    """float64 reduction of ``parts`` in list (rank) order."""
    acc = parts[0].double()
    for p in parts[1:]:
        p = p.double()
        if op in ("sum", "avg"):
            acc = acc + p
        elif op == "prod":
            acc = acc * p
        elif op == "max":
            acc = torch.maximum(acc, p)
        else:
            acc = torch.minimum(acc, p)
    return acc / len(parts) if op == "avg" else acc


def _gather(x):
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return parts


def _reference(x, op):
    return _reduce64(_gather(x), op)


def _compare(got, ref64, dtype, op, what="result"):
    """Problems of ``got`` against the float64 reference (exact for max/min)."""
    got = got.reshape(-1)
    ref64 = ref64.reshape(-1)
    if op in ("max", "min"):
        want = ref64.to(dtype)
        if torch.equal(got.view(torch.uint8) if got.numel() else got,
                       want.view(torch.uint8) if want.numel() else want):
            return []
        bad = (got != want).nonzero()
        i = int(bad[0]) if len(bad) else 0
        return [f"{what}: {len(bad)}/{got.numel()} elements differ from the exact {op}; first at "
                f"{i}: got {got[i].item()!r}, want {want[i].item()!r}"]
    rtol, atol = _TOL[dtype]
    err = (got.double() - ref64).abs()
    bound = atol + rtol * ref64.abs()
    bad = ~(err <= bound)  # NaN counts as bad
    if not bool(bad.any()):
        return []
    idx = bad.nonzero()
    i = int(idx[0])
    return [f"{what}: {len(idx)}/{got.numel()} elements out of tolerance (rtol {rtol}, atol {atol}); "
            f"first at {i}: got {got[i].item()!r}, ref {ref64[i].item()!r}; max err "
            f"{float(err.nan_to_num(float('inf')).max()):.3g}"]


def _max_err(got, ref64):
    return float((got.double().reshape(-1) - ref64.reshape(-1)).abs().max()) if got.numel() else 0.0


def _same_on_all_ranks(y, what="result"):
    """Problems if ``y`` is not bitwise identical on every rank (gathered through NCCL)."""
    parts = _gather(y)
    mine = parts[0].reshape(-1).view(torch.uint8) if y.numel() else parts[0]
    bad = [r for r, p in enumerate(parts[1:], 1)
           if not torch.equal(p.reshape(-1).view(torch.uint8) if y.numel() else p, mine)]
    return [f"{what} differs bitwise between rank 0 and rank(s) {bad}"] if bad else []


def _torch_op(op):
    import torch.distributed as dist

    return {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}[op]


def _section_eager(rec, comm, rank, dev):
    import torch.distributed as dist

    case_no = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for op in OPS:
            for n in SIZES:
                for mode in ("inplace", "out", "functional"):
                    case_no += 1
                    seed = 7919 * case_no + rank

                    def run(dtype=dtype, op=op, n=n, mode=mode, seed=seed):
                        x = _make_input(n, dtype, op, seed, dev)
                        keep = x.clone()
                        ref = _reference(x, op)
                        if mode == "inplace":
                            y = x
                            r = comm.all_reduce(y, op=op)
                        elif mode == "out":
                            y = torch.full_like(x, float("nan"))
                            r = comm.all_reduce(x, op=op, out=y)
                        else:
                            y = r = comm.all_reduce_functional(x, op=op)
                        torch.cuda.synchronize()
                        problems = [] if r is y else ["the returned tensor is not the result"]
                        if mode != "inplace" and not torch.equal(x, keep):
                            problems.append("the input changed")
                        problems += _compare(y, ref, dtype, op)
                        problems += _same_on_all_ranks(y)
                        nccl = keep.clone()
                        dist.all_reduce(nccl, op=_torch_op(op))
                        torch.cuda.synchronize()
                        if not problems and rank == 0 and n == SIZES[-1]:
                            print(f"  {dtype} {op} n={n} {mode}: yali max err {_max_err(y, ref):.3g}, "
                                  f"nccl max err {_max_err(nccl, ref):.3g}", flush=True)
                        return problems

                    rec.check(f"{str(dtype)[6:]} {op} n={n} {mode}", run)


def _section_slices(rec, comm, rank, dev):
    case_no = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for op in ("sum", "max", "avg"):
            for n in SIZES:
                case_no += 1
                seed = 104729 * case_no + rank

                def run(dtype=dtype, op=op, n=n, seed=seed):
                    problems = []
                    # In place on x[3:] of a larger tensor.
                    base = _make_input(n + 3, dtype, op, seed, dev)
                    guard = base[:3].clone()
                    x = base[3:]
                    ref = _reference(x, op)
                    comm.all_reduce(x, op=op)
                    # Out of place: from src_base[5:] into out_base[1:1+n].
                    src_base = _make_input(n + 5, dtype, op, seed + 1, dev)
                    src = src_base[5:]
                    src_keep = src_base.clone()
                    out_base = torch.full((n + 4,), 7.0, dtype=dtype, device=dev)
                    out = out_base[1:1 + n]
                    ref2 = _reference(src, op)
                    comm.all_reduce(src, op=op, out=out)
                    torch.cuda.synchronize()
                    problems += _compare(x, ref, dtype, op, "x[3:] in place")
                    if not torch.equal(base[:3], guard):
                        problems.append("in place on x[3:] wrote before the slice")
                    problems += _compare(out, ref2, dtype, op, "out slice")
                    if not (bool((out_base[:1] == 7).all()) and bool((out_base[1 + n:] == 7).all())):
                        problems.append("out= into a slice wrote outside it")
                    if not torch.equal(src_base, src_keep):
                        problems.append("the out-of-place input changed")
                    problems += _same_on_all_ranks(x, "x[3:]")
                    problems += _same_on_all_ranks(out, "out slice")
                    return problems

                rec.check(f"{str(dtype)[6:]} {op} n={n} slices", run)

    def two_d():
        x = _make_input(3 * 5, torch.float32, "sum", 99 + rank, dev).view(3, 5)
        ref = _reference(x, "sum")
        y = comm.all_reduce_functional(x)
        comm.all_reduce(x)
        torch.cuda.synchronize()
        problems = [] if y.shape == (3, 5) else [f"functional result has shape {tuple(y.shape)}"]
        return problems + _compare(x, ref, torch.float32, "sum", "2-D in place") + \
            _compare(y, ref, torch.float32, "sum", "2-D functional")

    rec.check("2-D tensor", two_d)

    def empty():
        x = torch.empty(0, device=dev)
        comm.all_reduce(x)
        y = comm.all_reduce_functional(x)
        torch.cuda.synchronize()
        return [] if y.numel() == 0 else ["empty result not empty"]

    rec.check("0 elements", empty)


def _expect_error(method, words, fn):
    try:
        fn()
    except (TypeError, ValueError, yali.YaliError) as e:
        msg = str(e)
        missing = [w for w in [method, *words] if w not in msg]
        return [f"message {msg!r} lacks {missing}"] if missing else []
    return [f"no error raised (expected one naming {words})"]


def _section_errors(rec, comm, rank, dev):
    m = "Communicator.all_reduce"
    good = torch.ones(8, device=dev)
    rec.check("cpu tensor", _expect_error, m, ["tensor", "CUDA"],
              lambda: comm.all_reduce(torch.ones(8)))
    if torch.cuda.device_count() > 1:
        other = torch.device("cuda", (dev.index + 1) % torch.cuda.device_count())
        rec.check("tensor on another GPU", _expect_error, m, ["tensor", str(other)],
                  lambda: comm.all_reduce(torch.ones(8, device=other)))
    rec.check("non-contiguous", _expect_error, m, ["tensor", "contiguous"],
              lambda: comm.all_reduce(torch.ones(16, device=dev)[::2]))
    rec.check("float64", _expect_error, m, ["tensor", "dtype"],
              lambda: comm.all_reduce(torch.ones(8, device=dev, dtype=torch.float64)))
    rec.check("int32", _expect_error, m, ["tensor", "dtype"],
              lambda: comm.all_reduce(torch.ones(8, device=dev, dtype=torch.int32)))
    rec.check("out shape", _expect_error, m, ["out", "shape"],
              lambda: comm.all_reduce(good, out=torch.empty(9, device=dev)))
    rec.check("out dtype", _expect_error, m, ["out", "dtype"],
              lambda: comm.all_reduce(good, out=torch.empty(8, device=dev, dtype=torch.float16)))
    rec.check("out on cpu", _expect_error, m, ["out"],
              lambda: comm.all_reduce(good, out=torch.empty(8)))
    rec.check("out overlaps", _expect_error, m, ["out", "overlap"], lambda: _overlap_call(comm, dev))
    rec.check("bad op", _expect_error, m, ["op"], lambda: comm.all_reduce(good, op="xor"))
    rec.check("functional cpu", _expect_error, "Communicator.all_reduce_functional", ["tensor"],
              lambda: comm.all_reduce_functional(torch.ones(8)))
    rec.check("stale handle", _expect_error, "yali::all_reduce_", ["not a live"],
              lambda: torch.ops.yali.all_reduce_(good, 12345, 0))

    def still_works():
        x = _make_input(1000, torch.float32, "sum", 5 + rank, dev)
        ref = _reference(x, "sum")
        comm.all_reduce(x)
        torch.cuda.synchronize()
        comm.check_async_error()
        return _compare(x, ref, torch.float32, "sum")

    rec.check("comm works after the errors", still_works)


def _overlap_call(comm, dev):
    buf = torch.ones(16, device=dev)
    comm.all_reduce(buf[:8], out=buf[4:12])


def _section_graph(rec, comm, rank, dev):
    n, nb = 65537, 1023
    x = torch.zeros(n, device=dev)
    y = torch.empty_like(x)
    buf = torch.empty_like(x)
    xb = torch.zeros(nb, device=dev, dtype=torch.bfloat16)

    def body():
        comm.all_reduce(x, op="sum", out=y)
        buf.copy_(x)
        comm.all_reduce(buf, op="max")
        z = comm.all_reduce_functional(x, op="avg")
        comm.all_reduce(xb, op="sum")
        return z

    # Warm up on a side stream (as torch recommends before capture), then capture once.
    s = torch.cuda.Stream(device=dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream(dev).wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        z = body()
    torch.cuda.synchronize()
    rec.record("capture", True)
    for it in range(4):
        def run(it=it):
            new_x = _make_input(n, torch.float32, "sum", 1000 * it + rank, dev)
            new_xb = _make_input(nb, torch.bfloat16, "sum", 1000 * it + 500 + rank, dev)
            ref_sum, ref_max = _reference(new_x, "sum"), _reference(new_x, "max")
            ref_avg, ref_b = _reference(new_x, "avg"), _reference(new_xb, "sum")
            x.copy_(new_x)
            xb.copy_(new_xb)
            g.replay()
            torch.cuda.synchronize()
            return (_compare(y, ref_sum, torch.float32, "sum", "out= sum")
                    + _compare(buf, ref_max, torch.float32, "max", "in place max")
                    + _compare(z, ref_avg, torch.float32, "avg", "functional avg")
                    + _compare(xb, ref_b, torch.bfloat16, "sum", "bf16 in place sum")
                    + _same_on_all_ranks(y, "out= sum") + _same_on_all_ranks(z, "functional avg"))

        rec.check(f"replay {it}", run)


def _section_compile(rec, comm, rank, dev, backend):
    import torch.distributed as dist

    torch._dynamo.reset()

    def f(x):
        y = x * 2.0
        comm.all_reduce(y)  # in place on an intermediate
        z = comm.all_reduce_functional(y + 1.0, op="max")
        out = torch.empty_like(x)
        comm.all_reduce(z, op="avg", out=out)
        return out * 0.5 + y

    def f_eager_nccl(x):
        y = x * 2.0
        dist.all_reduce(y)
        z = y + 1.0
        dist.all_reduce(z, op=dist.ReduceOp.MAX)
        dist.all_reduce(z, op=dist.ReduceOp.AVG)
        return z * 0.5 + y

    cf = torch.compile(f, fullgraph=True, backend=backend)
    for trial, n in enumerate((4099, 4099, 8191)):
        def run(trial=trial, n=n):
            x = _make_input(n, torch.float32, "sum", 31 * trial + rank, dev)
            expected = f_eager_nccl(x.clone())
            got = cf(x)
            torch.cuda.synchronize()
            problems = []
            tol = 1e-4 * (1 + expected.abs())
            if not bool(((got - expected).abs() <= tol).all()):
                problems.append(f"compiled result differs from eager NCCL: max diff "
                                f"{float((got - expected).abs().max()):.3g}")
            return problems + _same_on_all_ranks(got, "compiled result")

        rec.check(f"f n={n} call {trial}", run)

    def g(x):
        comm.all_reduce(x, op="sum")  # mutates a graph input
        return x + 0.0

    cg = torch.compile(g, fullgraph=True, backend=backend)

    def run_input_mutation():
        x = _make_input(1023, torch.float32, "sum", 77 + rank, dev)
        ref = _reference(x, "sum")
        r = cg(x)
        torch.cuda.synchronize()
        return _compare(x, ref, torch.float32, "sum", "mutated input") + \
            _compare(r, ref, torch.float32, "sum", "returned value")

    rec.check("input mutation", run_input_mutation)
    torch._dynamo.reset()


def _section_opcheck(rec, comm, rank, dev):
    ops = torch.ops.yali
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    h = comm.handle

    def one(op, args):
        torch.library.opcheck(op, args, test_utils=utils)
        torch.cuda.synchronize()
        return []

    x = _make_input(257, torch.float32, "sum", rank, dev)
    rec.check("opcheck all_reduce_", one, ops.all_reduce_.default, (x.clone(), h, 0))
    rec.check("opcheck all_reduce_out", one, ops.all_reduce_out.default,
              (x.clone(), torch.empty_like(x), h, 2))
    rec.check("opcheck all_reduce", one, ops.all_reduce.default, (x.clone(), h, 4))


def _direct_problems(what, info, want_direct=True):
    if (info.algorithm == "direct") == want_direct:
        return []
    return [f"{what}: algo_info reports {info.algorithm!r}, expected "
            + ("'direct'" if want_direct else "not 'direct'")]


_REG_N = SIZES[-1] + 8  # elements of fp32 in each registered buffer (room for an offset view)


def _section_registered(rec, comm, rank, dev):
    """``comm`` was created with YALI_DIRECT_MIN_BYTES=-1: registered buffers go direct at every
    size."""
    a = comm.empty_registered(_REG_N, torch.float32)  # inputs live here
    b = comm.empty_registered(_REG_N, torch.float32)  # outputs
    plain = torch.empty(_REG_N, device=dev)

    def registrations():
        regs = comm.comm.registrations
        if len(regs) != 2:
            return [f"{len(regs)} registrations on the comm, expected 2"]
        problems = []
        for r, t in zip(regs, (a, b)):
            st = t.untyped_storage()
            if (r.ptr, r.nbytes) != (st.data_ptr(), st.nbytes()):
                problems.append(f"registration {r!r} is not the storage of the tensor "
                                f"({st.data_ptr():#x}, {st.nbytes()})")
        return problems

    rec.check("empty_registered registers the whole storage", registrations)

    def algo_info():
        n = 4096
        problems = []
        problems += _direct_problems("out of place", comm.algo_info(a[:n], out=b[:n]))
        problems += _direct_problems("in place", comm.algo_info(a[:n]))
        problems += _direct_problems("views at offset 16",
                                     comm.algo_info(a[16:16 + n], out=b[16:16 + n]))
        problems += _direct_problems("bf16 views", comm.algo_info(a.view(torch.bfloat16)[:n],
                                                                  out=b.view(torch.bfloat16)[:n]))
        problems += _direct_problems(
            "Comm.all_reduce_algo_info with tensors",
            comm.comm.all_reduce_algo_info(n, "float32", "sum", send_ptr=a, recv_ptr=b))
        problems += _direct_problems(
            "Comm.all_reduce_algo_info with pointers",
            comm.comm.all_reduce_algo_info(n, "float32", "sum", send_ptr=a.data_ptr(),
                                           recv_ptr=b.data_ptr() + 64))
        problems += _direct_problems("NULL buffers", comm.comm.all_reduce_algo_info(n), False)
        problems += _direct_problems("send only", comm.comm.all_reduce_algo_info(
            n, send_ptr=a.data_ptr()), False)
        problems += _direct_problems("plain out", comm.algo_info(a[:n], out=plain[:n]), False)
        problems += _direct_problems("plain input", comm.algo_info(plain[:n], out=b[:n]), False)
        problems += _direct_problems("plain in place", comm.algo_info(plain[:n]), False)
        past = a.data_ptr() + (_REG_N - n + 1) * 4  # runs 4 bytes past the registration
        problems += _direct_problems("past the end", comm.comm.all_reduce_algo_info(
            n, send_ptr=past, recv_ptr=past), False)
        return problems

    rec.check("algo_info", algo_info)

    case_no = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        av, bv = a.view(dtype), b.view(dtype)
        for op in ("sum", "avg", "max", "prod"):
            for n in SIZES:
                for mode in ("out", "inplace", "offset", "plain_out"):
                    case_no += 1
                    seed = 15485863 + 7919 * case_no + rank

                    def run(dtype=dtype, op=op, n=n, mode=mode, seed=seed, av=av, bv=bv):
                        off = 3 if mode == "offset" else 0  # elements, the same on every rank
                        x = av[off:off + n]
                        x.copy_(_make_input(n, dtype, op, seed, dev))
                        keep = x.clone()
                        ref = _reference(keep, op)
                        if mode == "inplace":
                            y = x
                        elif mode == "plain_out":
                            y = torch.full((n,), float("nan"), dtype=dtype, device=dev)
                        else:
                            y = bv[off:off + n]
                            y.fill_(float("nan"))
                        info = comm.algo_info(x, op=op, out=y)
                        r = comm.all_reduce(x, op=op, out=None if y is x else y)
                        torch.cuda.synchronize()
                        comm.check_async_error()
                        problems = _direct_problems(mode, info, mode != "plain_out")
                        if r is not y:
                            problems.append("the returned tensor is not the result")
                        if y is not x and not torch.equal(x, keep):
                            problems.append("the input changed")
                        problems += _compare(y, ref, dtype, op)
                        problems += _same_on_all_ranks(y)
                        return problems

                    rec.check(f"{str(dtype)[6:]} {op} n={n} {mode}", run)

    def guards():
        # A direct call on a view writes only that view of the registered output.
        n = 1000
        b.fill_(7.0)
        x = a[100:100 + n]
        x.copy_(_make_input(n, torch.float32, "sum", 3 + rank, dev))
        ref = _reference(x, "sum")
        comm.all_reduce(x, out=b[100:100 + n])
        torch.cuda.synchronize()
        problems = _compare(b[100:100 + n], ref, torch.float32, "sum", "view")
        if not (bool((b[:100] == 7).all()) and bool((b[100 + n:] == 7).all())):
            problems.append("the direct call wrote outside its output view")
        return problems

    rec.check("writes only its view", guards)

    def graph():
        n = 65537
        x, y = a[:n], b[:n]
        s = torch.cuda.Stream(device=dev)
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(s):
            comm.all_reduce(x, out=y)
        torch.cuda.current_stream(dev).wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            comm.all_reduce(x, out=y)
        problems = []
        for it in range(3):
            new_x = _make_input(n, torch.float32, "sum", 2000 * it + rank, dev)
            ref = _reference(new_x, "sum")
            x.copy_(new_x)
            g.replay()
            torch.cuda.synchronize()
            problems += _compare(y, ref, torch.float32, "sum", f"replay {it}")
            problems += _same_on_all_ranks(y, f"replay {it}")
        return problems

    rec.check("CUDA graph of a registered call", graph)

    rec.check("register a CPU tensor", _expect_error, "Communicator.register", ["tensor"],
              lambda: comm.register(torch.ones(8)))
    rec.check("deregister an unregistered tensor", _expect_error, "Communicator.deregister",
              ["not registered"], lambda: comm.deregister(plain))

    def register_existing():
        t = torch.empty(4096, device=dev)
        with comm.register(t) as reg:
            problems = _direct_problems("registered tensor in place", comm.algo_info(t[:1024]))
            t.copy_(_make_input(4096, torch.float32, "sum", 11 + rank, dev))
            ref = _reference(t, "sum")
            comm.all_reduce(t)
            torch.cuda.synchronize()
            problems += _compare(t, ref, torch.float32, "sum", "registered in place")
        if not reg.closed:
            problems.append("leaving the with block did not deregister")
        problems += _direct_problems("after deregistration", comm.algo_info(t), False)
        return problems

    rec.check("register an existing tensor (with block)", register_existing)

    def deregister():
        comm.deregister(a)
        comm.deregister(b)
        problems = []
        if comm.comm.registrations:
            problems.append(f"still registered: {comm.comm.registrations}")
        problems += _direct_problems("after deregister", comm.algo_info(a[:4096], out=b[:4096]),
                                     False)
        x = a[:4096]
        x.copy_(_make_input(4096, torch.float32, "sum", 13 + rank, dev))
        ref = _reference(x, "sum")
        comm.all_reduce(x, out=b[:4096])
        torch.cuda.synchronize()
        return problems + _compare(b[:4096], ref, torch.float32, "sum", "after deregister")

    rec.check("deregister", deregister)


def _worker_multi(out_dir):
    import torch.distributed as dist

    import yali.torch as yt

    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    _TOL.update({torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 1e-3),
                 torch.bfloat16: (1.6e-2, 1e-2)})
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=300))
    rec = _Recorder(out_dir, rank)
    comm = yt.Communicator()
    assert comm.rank == rank and comm.world_size == dist.get_world_size() and comm.device == dev
    sections = [("eager", _section_eager), ("slices", _section_slices),
                ("errors", _section_errors), ("graph", _section_graph)]
    sections += [(f"compile_{backend}", functools.partial(_section_compile, backend=backend))
                 for backend in ("inductor", "aot_eager")]
    sections += [("opcheck", _section_opcheck)]
    for name, section in sections:
        if _want(name):
            with rec.in_section(name):
                section(rec, comm, rank, dev)
    # Registered buffers, on a comm of their own made with direct at every size (the variable is
    # read when a comm is created, the same on every rank).
    comm_direct = None
    if _want("registered"):
        os.environ["YALI_DIRECT_MIN_BYTES"] = "-1"
        comm_direct = yt.Communicator()
        os.environ.pop("YALI_DIRECT_MIN_BYTES")
        with rec.in_section("registered"):
            _section_registered(rec, comm_direct, rank, dev)
    torch.cuda.synchronize()
    dist.barrier()
    if comm_direct is not None:
        comm_direct.close()
    comm.close()
    dist.destroy_process_group()
    return 0


def _worker_single(out_dir, ndev):
    import yali.torch as yt

    _TOL.update({torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 1e-3),
                 torch.bfloat16: (1.6e-2, 1e-2)})
    rec = _Recorder(out_dir, 0)
    devs = [torch.device("cuda", i) for i in range(ndev)]

    def sync():
        for d in devs:
            torch.cuda.synchronize(d)

    if _want("single"):
        with rec.in_section("single"), yt.SingleProcessCommunicator(list(range(ndev))) as sp:
            _section_single(rec, sp, devs, sync, ndev)
    if _want("single_registered"):
        os.environ["YALI_DIRECT_MIN_BYTES"] = "-1"
        try:
            sp = yt.SingleProcessCommunicator(list(range(ndev)))
        finally:
            os.environ.pop("YALI_DIRECT_MIN_BYTES")
        with rec.in_section("single_registered"), sp:
            _section_single_registered(rec, sp, devs, sync)
    return 0


def _section_single(rec, sp, devs, sync, ndev):
    case_no = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for op in OPS:
            for n in (1, 7, 65537, 1_000_003):
                for mode in ("inplace", "out"):
                    case_no += 1

                    def run(dtype=dtype, op=op, n=n, mode=mode, c=case_no):
                        xs = [_make_input(n, dtype, op, 7919 * c + i, d) for i, d in enumerate(devs)]
                        ref = _reduce64([x.to(devs[0]) for x in xs], op)
                        if mode == "inplace":
                            ys = xs
                            r = sp.all_reduce(xs, op=op)
                        else:
                            ys = [torch.full_like(x, float("nan")) for x in xs]
                            r = sp.all_reduce(xs, op=op, outs=ys)
                        sync()
                        problems = [] if all(a is b for a, b in zip(r, ys)) else ["wrong return"]
                        problems += _compare(ys[0], ref, dtype, op, "GPU 0")
                        first = ys[0].reshape(-1).view(torch.uint8) if n else ys[0]
                        for i, y in enumerate(ys[1:], 1):
                            yi = y.to(devs[0]).reshape(-1)
                            if not torch.equal(yi.view(torch.uint8) if n else yi, first):
                                problems.append(f"GPU {i} differs bitwise from GPU 0")
                        return problems

                    rec.check(f"{str(dtype)[6:]} {op} n={n} {mode}", run)
    m = "SingleProcessCommunicator.all_reduce"
    rec.check("wrong count", _expect_error, m, ["tensors"],
              lambda: sp.all_reduce([torch.ones(4, device=devs[0])]))
    rec.check("wrong device", _expect_error, m, ["tensors[1]"],
              lambda: sp.all_reduce([torch.ones(4, device=devs[0])] * ndev))


def _section_single_registered(rec, sp, devs, sync):
    A = sp.empty_registered(_REG_N, torch.float32)
    B = sp.empty_registered(_REG_N, torch.float32)

    def algo_info():
        n = 4096
        problems = []
        for i, info in enumerate(sp.algo_info([x[:n] for x in A], outs=[y[:n] for y in B])):
            problems += _direct_problems(f"GPU {i} out of place", info)
        for i, info in enumerate(sp.algo_info([x[8:8 + n] for x in A])):
            problems += _direct_problems(f"GPU {i} in place at offset 8", info)
        plain = [torch.empty(n, device=d) for d in devs]
        for i, info in enumerate(sp.algo_info(plain)):
            problems += _direct_problems(f"GPU {i} plain", info, False)
        regs = [c.registrations for c in sp.comms]
        if any(len(r) != 2 for r in regs) or any(r != regs[0] for r in regs):
            problems.append(f"registrations per comm: {regs}")
        return problems

    rec.check("algo_info", algo_info)

    case_no = 0
    for dtype in (torch.float32, torch.bfloat16):
        for op in ("sum", "max", "avg"):
            for n in (1, 7, 65537, SIZES[-1]):
                for mode in ("inplace", "out"):
                    case_no += 1

                    def run(dtype=dtype, op=op, n=n, mode=mode, c=case_no):
                        xs = [t.view(dtype)[:n] for t in A]
                        for i, (x, d) in enumerate(zip(xs, devs)):
                            x.copy_(_make_input(n, dtype, op, 104729 * c + i, d))
                        keep = [x.clone() for x in xs]
                        ref = _reduce64([x.to(devs[0]) for x in keep], op)
                        ys = xs if mode == "inplace" else [t.view(dtype)[:n] for t in B]
                        problems = []
                        for i, info in enumerate(sp.algo_info(xs, op=op, outs=ys)):
                            problems += _direct_problems(f"GPU {i}", info)
                        sp.all_reduce(xs, op=op, outs=None if mode == "inplace" else ys)
                        sync()
                        for comm in sp.comms:
                            comm.check_async_error()
                        problems += _compare(ys[0], ref, dtype, op, "GPU 0")
                        first = ys[0].reshape(-1).view(torch.uint8)
                        for i, y in enumerate(ys[1:], 1):
                            if not torch.equal(y.to(devs[0]).reshape(-1).view(torch.uint8), first):
                                problems.append(f"GPU {i} differs bitwise from GPU 0")
                        if mode == "out" and not all(torch.equal(x, k) for x, k in zip(xs, keep)):
                            problems.append("the input changed")
                        return problems

                    rec.check(f"{str(dtype)[6:]} {op} n={n} {mode}", run)

    def deregister():
        sp.deregister(A)
        sp.deregister(B[0])  # the first tensor names the registration too
        problems = [f"comm {i} still has {c.registrations}" for i, c in enumerate(sp.comms)
                    if c.registrations]
        for i, info in enumerate(sp.algo_info([x[:4096] for x in A], outs=[y[:4096] for y in B])):
            problems += _direct_problems(f"GPU {i} after deregister", info, False)
        ts = [torch.empty(1024, device=d) for d in devs]
        with sp.register(ts) as reg:
            for i, info in enumerate(sp.algo_info(ts)):
                problems += _direct_problems(f"GPU {i} register(existing)", info)
        if not reg.closed:
            problems.append("leaving the with block did not deregister")
        return problems

    rec.check("deregister", deregister)


# ---- Failures (the "faults" jobs: ranks sharing one GPU, YALI_TIMEOUT_MS=4000) -------------------
#
# A rank learns of a failure from its own device's record (yali.h, "Failures"): the ranks waiting in
# the call that failed (the survivors) report it within about YALI_TIMEOUT_MS; a rank that took no
# part (the one that never arrived, or an idle peer of a rank that aborted) learns of it at its next
# launch at the latest, whose output is then not to be trusted (the async error says so). The
# sections check exactly that, and that nothing is ever silently wrong.

_FAULT_N = 4096


def _rank_input(n, rank, dev):
    """Small integers, different on every rank: fp32 sums of them are exact."""
    return (torch.arange(n, device=dev) % 97 + rank + 1).float()


def _rank_sum(n, ws, dev):
    return sum(_rank_input(n, r, dev) for r in range(ws))


def _exact(got, want, what):
    if torch.equal(got, want):
        return []
    bad = (got != want).nonzero()
    i = int(bad[0]) if len(bad) else 0
    return [f"{what}: {len(bad)}/{got.numel()} elements wrong; first at {i}: got "
            f"{got.reshape(-1)[i].item()!r}, want {want.reshape(-1)[i].item()!r}"]


def _all_ones(y, what):
    """A collective that ran on a failed comm must leave all-ones bytes (NaN) in its output."""
    problems = []
    if not bool(torch.isnan(y).all()):
        problems.append(f"{what}: {int((~torch.isnan(y)).sum())}/{y.numel()} elements are not NaN "
                        f"(first values {y.reshape(-1)[:4].tolist()}): stale or computed data")
    elif not bool((y.view(torch.uint8) == 0xFF).all()):
        problems.append(f"{what}: NaN, but not all-ones bytes")
    return problems


def _raises(cls, fn, *words):
    """Problems unless fn() raises ``cls`` with ``words`` (and a detail from the library)."""
    try:
        fn()
    except cls as e:
        msg = str(e)
        missing = [w for w in words if w not in msg]
        problems = [f"{type(e).__name__} {msg!r} lacks {missing}"] if missing else []
        if not getattr(e, "detail", ""):
            problems.append(f"{type(e).__name__} {msg!r} has no detail from the library")
        return problems
    except Exception as e:  # noqa: BLE001
        return [f"raised {type(e).__name__} ({e}), expected {cls.__name__}"]
    return [f"raised nothing, expected {cls.__name__}"]


def _wait_async(comm, seconds):
    """A yali.Comm's async error, polled until it is set or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        code = comm.get_async_error()
        if code != yali.Result.Success or time.monotonic() >= deadline:
            return code
        time.sleep(0.01)


def _line_up():
    """Every rank's work so far done, then a barrier: a rank's first call must not wait for a peer
    still busy with its own first kernels (the timeout is short)."""
    import torch.distributed as dist

    torch.cuda.synchronize()
    dist.barrier()


def _timed(limit_s, what, fn):
    """Problems if fn() takes limit_s or more; a YaliError from it is accepted (the comm failed)."""
    t0 = time.monotonic()
    try:
        fn()
    except yali.YaliError:
        pass
    dt = time.monotonic() - t0
    return [f"{what} took {dt:.1f} s"] if dt >= limit_s else []


def _next_call_fails(rec, case, fn, comm, cls, out):
    """Records whether the next call of a rank that has not seen its comm's failure yet fails: it
    raises ``cls``, or it launches, finds the failure on the device and sets the async error (its
    output is unspecified; the note says whether it was NaN). Never a result that looks valid."""
    code = {yali.YaliTimeout: yali.Result.Timeout, yali.YaliRemoteError: yali.Result.RemoteError,
            yali.YaliInvalidUsage: yali.Result.InvalidUsage}[cls]
    problems, note = [], ""
    try:
        fn()
        torch.cuda.synchronize()
        got = _wait_async(comm, 30)
        if got != code:
            problems.append(f"the call raised nothing and the async error is {got!r}, expected "
                            f"{code!r}")
        else:
            nan = bool(torch.isnan(out).all())
            note = "launched; the device found the failure and set the async error; output " + (
                "NaN" if nan else "not NaN (unspecified)")
    except cls:
        note = f"raised {cls.__name__} at the call"
    except Exception as e:  # noqa: BLE001
        problems.append(f"raised {type(e).__name__} ({e}), expected {cls.__name__}")
    rec.record(case, not problems, "; ".join(problems) if problems else note)


def _section_faults_single(rec, dev, ws):
    import yali.torch as yt

    n = _FAULT_N
    sp = yt.SingleProcessCommunicator([dev.index] * ws)  # YALI_ALLOW_SHARED_GPU=1 (FAULT_ENV)
    # Ranks sharing a GPU need streams of their own to run together, so the launches go through the
    # low-level yali.Comm (SingleProcessCommunicator.all_reduce uses the device's current stream).
    streams = [torch.cuda.Stream(device=dev) for _ in range(ws)]
    xs = [_rank_input(n, i, dev) for i in range(ws)]
    keep = [x.clone() for x in xs]
    ys = [torch.empty_like(x) for x in xs]
    want = _rank_sum(n, ws, dev)
    torch.cuda.synchronize()
    late = ws - 1  # the rank that misses the call that fails

    def launch(i):
        with torch.cuda.stream(streams[i]):
            sp.comms[i].all_reduce(xs[i], ys[i], n, "float32", "sum", streams[i])

    def fill(value):
        for y in ys:
            y.fill_(value)
        torch.cuda.synchronize()

    def replay_all():
        for g, s in zip(graphs, streams):
            with torch.cuda.stream(s):
                g.replay()
        torch.cuda.synchronize()

    def eager():
        fill(7.0)
        with yali.group():  # one thread driving several ranks groups their calls (yali.h)
            for i in range(ws):
                launch(i)
        torch.cuda.synchronize()
        sp.check_async_error()
        sp.check()
        return sum((_exact(y, want, f"rank {i}") for i, y in enumerate(ys)), [])

    rec.check("eager all_reduce on a shared GPU", eager)

    graphs = []
    for i in range(ws):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=streams[i], capture_error_mode="thread_local"):
            sp.comms[i].all_reduce(xs[i], ys[i], n, "float32", "sum", streams[i])
        graphs.append(g)

    def replay_healthy():
        fill(7.0)
        replay_all()
        sp.check()
        return sum((_exact(y, want, f"rank {i} replay") for i, y in enumerate(ys)), [])

    rec.check("graph replay before the failure", replay_healthy)

    def fail():
        t0 = time.monotonic()
        with yali.group():
            for i in range(ws):
                if i != late:  # rank `late` never arrives
                    launch(i)
        torch.cuda.synchronize()
        dt = time.monotonic() - t0
        codes = [_wait_async(c, 30) for c in sp.comms[:late]]
        problems = [f"rank {i} reports {code!r}, expected Result.Timeout"
                    for i, code in enumerate(codes) if code != yali.Result.Timeout]
        if dt > 30:
            problems.append(f"the call took {dt:.1f} s with YALI_TIMEOUT_MS=4000")
        return problems

    rec.check(f"a call without rank {late} times out; every other rank reports yaliTimeout", fail)
    fill(7.0)
    _next_call_fails(rec, f"rank {late}'s next call fails", lambda: launch(late), sp.comms[late],
                     yali.YaliTimeout, ys[late])
    m = "SingleProcessCommunicator"
    rec.check("check_async_error raises YaliTimeout", _raises, yali.YaliTimeout,
              sp.check_async_error, f"{m}.check_async_error", "rank 0", "yaliTimeout")
    rec.check("check() raises YaliTimeout", _raises, yali.YaliTimeout, sp.check, "rank 0")

    def all_reduce_raises():
        problems = _raises(yali.YaliTimeout, lambda: sp.all_reduce(xs), f"{m}.all_reduce")
        torch.cuda.synchronize()
        return problems + sum((_exact(x, k, "input after the refused call")
                               for x, k in zip(xs, keep)), [])

    rec.check("SingleProcessCommunicator.all_reduce raises YaliTimeout", all_reduce_raises)
    ops = torch.ops.yali
    for i in (0, late):
        h = sp.comms[i].handle
        rec.check(f"torch.ops.yali.all_reduce_ raises YaliTimeout (rank {i})", _raises,
                  yali.YaliTimeout, lambda h=h, i=i: ops.all_reduce_(xs[i], h, 0), "yaliAllReduce")
        rec.check(f"torch.ops.yali.all_reduce_out raises YaliTimeout (rank {i})", _raises,
                  yali.YaliTimeout, lambda h=h, i=i: ops.all_reduce_out(xs[i], ys[i], h, 0),
                  "yaliAllReduce")
        rec.check(f"torch.ops.yali.all_reduce raises YaliTimeout (rank {i})", _raises,
                  yali.YaliTimeout, lambda h=h, i=i: ops.all_reduce(xs[i], h, 0), "yaliAllReduce")

    def low_level():
        try:
            sp.comms[0].all_reduce(xs[0], ys[0], n, "float32", "sum", streams[0])
        except yali.YaliTimeout as e:
            # The message of the call that failed (the thread's), not an older one of the comm.
            return [] if e.detail.startswith("yaliAllReduce") else [
                f"detail {e.detail!r} is not yaliAllReduce's"]
        return ["yali.Comm.all_reduce raised no YaliTimeout"]

    rec.check("yali.Comm.all_reduce raises YaliTimeout with its own message", low_level)

    def replay_after_failure():
        fill(7.0)
        replay_all()
        problems = sum((_all_ones(y, f"rank {i}") for i, y in enumerate(ys)), [])
        return problems + _raises(yali.YaliTimeout, sp.check, "rank")

    rec.check("a graph replayed after the failure writes NaN; check() raises", replay_after_failure)

    def guarded_replay():
        fill(5.0)
        problems = _raises(yali.YaliTimeout, lambda: yt.replay(graphs[0], sp))
        torch.cuda.synchronize()
        if not bool((ys[0] == 5).all()):
            problems.append("yali.torch.replay replayed the graph of a failed comm")
        return problems

    rec.check("yali.torch.replay raises before replaying", guarded_replay)
    rec.check("abort() after the failure is prompt", _timed, 10, "abort", sp.abort)

    def replay_after_abort():
        fill(3.0)
        replay_all()
        return sum((_exact(y, torch.full_like(y, 3.0), f"rank {i} after abort")
                    for i, y in enumerate(ys)), [])

    rec.check("a graph replayed after abort does nothing", replay_after_abort)


def _worker_faults_single(out_dir, ndev):
    rec = _Recorder(out_dir, 0)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    if _want("faults_single"):
        with rec.in_section("faults_single"):
            _section_faults_single(rec, dev, ndev)
    return 0


def _section_remote_abort(rec, rank, ws, dev):
    import torch.distributed as dist

    import yali.torch as yt

    comm = yt.Communicator(device=dev)
    n = _FAULT_N
    x = _rank_input(n, rank, dev)
    _line_up()

    def works():
        comm.all_reduce(x)
        torch.cuda.synchronize()
        comm.check()
        return _exact(x, _rank_sum(n, ws, dev), "before the abort")

    rec.check("all_reduce before the abort", works)
    dist.barrier()
    if rank == 0:
        rec.check("rank 0 aborts promptly", _timed, 10, "abort", comm.abort)
    dist.barrier()
    if rank != 0:
        code = _wait_async(comm.comm, 5)
        rec.record("an idle peer's view of the abort", code in (yali.Result.Success,
                                                                 yali.Result.RemoteError),
                   f"async error {code!r} within 5 s (Success: it learns at its next launch)")
        y = torch.full((n,), 7.0, device=dev)
        _next_call_fails(rec, "the next all_reduce fails with yaliRemoteError",
                         lambda: comm.all_reduce(_rank_input(n, rank, dev), out=y), comm.comm,
                         yali.YaliRemoteError, y)
        rec.check("check_async_error raises YaliRemoteError", _raises, yali.YaliRemoteError,
                  comm.check_async_error, "yaliRemoteError")
        rec.check("check() raises YaliRemoteError", _raises, yali.YaliRemoteError, comm.check)
        x = _rank_input(n, rank, dev)
        rec.check("all_reduce raises YaliRemoteError", _raises, yali.YaliRemoteError,
                  lambda: comm.all_reduce(x), "yaliAllReduce")
        rec.check("all_reduce_functional raises YaliRemoteError", _raises, yali.YaliRemoteError,
                  lambda: comm.all_reduce_functional(x))
        rec.check("close() after the failure is local and prompt", _timed, 10, "close",
                  comm.close)
    dist.barrier()


_NOT_REUSED = "NOT reused (nothing was checked)"


def _section_freed_registered(rec, rank, ws, dev):
    import gc
    import weakref

    import torch.distributed as dist

    import yali.torch as yt

    comm = yt.Communicator(device=dev)
    # 16 MiB: above the caching allocator's 10 MiB, a tensor gets a cudaMalloc segment of its own,
    # which torch.cuda.empty_cache() gives back (cudaFree) once the tensor is gone.
    n = 4 << 20
    want = _rank_sum(n, ws, dev)
    src = _rank_input(n, rank, dev)  # made now, so that no other allocation follows the freed one

    def keepalive():
        t = comm.empty_registered(n)
        ref = weakref.ref(t)
        del t
        gc.collect()
        t = ref()
        if t is None:
            return ["a tensor from empty_registered was freed while registered"]
        comm.deregister(t)
        return []

    rec.check("the torch API keeps a registered tensor alive", keepalive)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()

    t = torch.empty(n, device=dev)
    ptr = t.data_ptr()
    # By pointer: this registration, unlike register(tensor), does not keep the tensor alive.
    comm.comm.register(ptr, n * 4)

    def registered():
        t.copy_(src)
        comm.all_reduce(t)
        torch.cuda.synchronize()
        comm.check()
        return _exact(t, want, "registered all_reduce")

    _line_up()
    rec.check("registered all_reduce", registered)
    del t
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the registered memory goes back to CUDA (cudaFree)
    dist.barrier()

    # CUDA usually hands the freed range out again at once; keep the misses until it does.
    misses = []
    u = torch.empty(n, device=dev)
    while u.data_ptr() != ptr and len(misses) < 16:
        misses.append(u)
        u = torch.empty(n, device=dev)
    reused = u.data_ptr() == ptr
    u.copy_(src)
    torch.cuda.synchronize()
    outcome, detail = "", ""
    try:
        comm.all_reduce(u)
        torch.cuda.synchronize()
        code = _wait_async(comm.comm, 0)
        if code == yali.Result.Success:
            outcome = "correct" if torch.equal(u, want) else "WRONG RESULT"
            detail = "" if outcome == "correct" else _exact(u, want, "result")[0]
        else:
            try:
                comm.check_async_error()
            except yali.YaliError as e:
                outcome, detail = type(e).__name__, str(e)
    except yali.YaliError as e:
        outcome, detail = type(e).__name__, str(e)
    outcomes = [None] * ws
    dist.all_gather_object(outcomes, outcome)
    problems = []
    if outcome not in ("correct", "YaliInvalidUsage"):
        problems.append(f"{outcome}: {detail}")
    elif outcome == "YaliInvalidUsage" and "freed" not in detail:
        problems.append(f"the YaliInvalidUsage does not say the memory was freed: {detail}")
    if len(set(outcomes)) != 1:
        problems.append(f"the ranks disagree: {outcomes}")
    note = (f"address {'reused' if reused else _NOT_REUSED} after {len(misses)} other "
            f"allocations; outcome {outcome}")
    rec.record("all_reduce on memory freed while registered, then allocated again",
               not problems, "; ".join(problems + [note]) if problems else note)
    rec.check("close() after it is prompt", _timed, 10, "close", comm.close)
    dist.barrier()


def _section_timeout(rec, rank, ws, dev):
    import torch.distributed as dist

    import yali.torch as yt

    comm = yt.Communicator(device=dev)
    n = _FAULT_N
    x = _rank_input(n, rank, dev)
    keep = x.clone()
    y = torch.empty_like(x)
    want = _rank_sum(n, ws, dev)
    late = ws - 1  # the rank that misses the call that fails
    y.fill_(7.0)
    _line_up()

    def eager():
        comm.all_reduce(x, out=y)
        torch.cuda.synchronize()
        comm.check()
        return _exact(y, want, "eager")

    rec.check("eager all_reduce", eager)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        comm.all_reduce(x, out=y)

    def replay_healthy():
        y.fill_(7.0)
        g.replay()
        torch.cuda.synchronize()
        comm.check()
        return _exact(y, want, "replay")

    rec.check("graph replay before the failure", replay_healthy)
    dist.barrier()
    if rank != late:
        def fail():
            t0 = time.monotonic()
            z = _rank_input(n, rank, dev)
            comm.all_reduce(z)  # rank `late` never arrives
            torch.cuda.synchronize()
            code = _wait_async(comm.comm, 30)
            dt = time.monotonic() - t0
            problems = [] if code == yali.Result.Timeout else [
                f"async error {code!r}, expected Timeout"]
            return problems + ([f"took {dt:.1f} s with YALI_TIMEOUT_MS=4000"] if dt > 30 else [])

        rec.check(f"a call without rank {late} times out; this rank reports yaliTimeout", fail)
    dist.barrier()
    if rank == late:
        y.fill_(7.0)
        _next_call_fails(rec, "the next all_reduce of the rank that missed the call fails",
                         lambda: comm.all_reduce(x, out=y), comm.comm, yali.YaliTimeout, y)
    dist.barrier()
    rec.check("check_async_error raises YaliTimeout", _raises, yali.YaliTimeout,
              comm.check_async_error, "yaliTimeout")
    rec.check("check() raises YaliTimeout", _raises, yali.YaliTimeout, comm.check)

    def all_reduce_raises():
        problems = _raises(yali.YaliTimeout, lambda: comm.all_reduce(x), "yaliAllReduce")
        problems += _raises(yali.YaliTimeout, lambda: comm.all_reduce(x, out=y), "yaliAllReduce")
        problems += _raises(yali.YaliTimeout, lambda: comm.all_reduce_functional(x),
                            "yaliAllReduce")
        problems += _raises(yali.YaliTimeout, lambda: torch.ops.yali.all_reduce_(x, comm.handle, 0),
                            "yaliAllReduce")
        torch.cuda.synchronize()
        return problems + _exact(x, keep, "the input after the refused calls")

    rec.check("all_reduce, out=, functional and the custom op raise YaliTimeout",
              all_reduce_raises)

    def replay_after_failure():
        y.fill_(7.0)
        g.replay()
        torch.cuda.synchronize()
        return _all_ones(y, "output") + _raises(yali.YaliTimeout, comm.check)

    rec.check("a graph replayed after the failure writes NaN; check() raises", replay_after_failure)

    def guarded_replay():
        y.fill_(5.0)
        problems = _raises(yali.YaliTimeout, lambda: yt.replay(g, comm, synchronize=True))
        torch.cuda.synchronize()
        if not bool((y == 5).all()):
            problems.append("yali.torch.replay replayed the graph of a failed comm")
        return problems

    rec.check("yali.torch.replay raises before replaying", guarded_replay)
    rec.check("abort() after the failure is prompt", _timed, 10, "abort", comm.abort)

    def replay_after_abort():
        y.fill_(3.0)
        g.replay()
        torch.cuda.synchronize()
        return _exact(y, torch.full_like(y, 3.0), "after abort")

    rec.check("a graph replayed after abort does nothing", replay_after_abort)
    dist.barrier()


def _worker_faults_multi(out_dir):
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    ws = int(os.environ["WORLD_SIZE"])
    # Every rank on GPU 0 when there is one (YALI_ALLOW_SHARED_GPU=1). The group is gloo: it only
    # carries the unique id, the barriers and the outcomes (NCCL refuses two ranks on one GPU).
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    _rank_input(_FAULT_N, rank, dev).sum().item()  # torch's first kernels, before any timed wait
    rec = _Recorder(out_dir, rank)
    # The timeout last: its replay after abort is the riskiest step for the process.
    for name, section in (("remote_abort", _section_remote_abort),
                          ("freed_registered", _section_freed_registered),
                          ("timeout", _section_timeout)):
        if _want(name):
            with rec.in_section(name):
                section(rec, rank, ws, dev)
    dist.destroy_process_group()
    return 0


def _worker_main(argv):
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--worker", choices=("multi", "single", "faults_single", "faults_multi"),
                   required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ndev", type=int, default=2)
    a = p.parse_args(argv)
    if a.worker == "multi":
        return _worker_multi(a.out)
    if a.worker == "faults_single":
        return _worker_faults_single(a.out, a.ndev)
    if a.worker == "faults_multi":
        return _worker_faults_multi(a.out)
    return _worker_single(a.out, a.ndev)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
