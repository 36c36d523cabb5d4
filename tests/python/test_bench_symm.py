"""Host tests of yali.bench_symm (YALI vs PyTorch symmetric-memory all-reduce): arguments, the
iteration and graph-timing arithmetic, the tables and headers from a hand-written result, and the
driver with the launch faked; no GPU, and no PyTorch except for the one test that checks the torch
ops' schemas (skipped without torch).

    PYTHONPATH=python python3 -m pytest -q tests/python/test_bench_symm.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from yali import bench_symm as bs  # noqa: E402

K, M = 2**10, 2**20


def _row(world, variant, nbytes, time_us=None, correct=True, error=None):
    return {"world_size": world, "variant": variant, "bytes": nbytes, "count": nbytes // 2,
            "dtype": "bf16", "iterations": 50, "time_us": time_us,
            "p50_us": None if time_us is None else time_us * 0.98,
            "p99_us": None if time_us is None else time_us * 1.2,
            "host_us": None if time_us is None else 3.0,
            "correct": None if error else correct, "error": error}


@pytest.fixture
def result():
    """Two world sizes; 2 GPUs: YALI faster at 4K, slower at 256M; 4 GPUs: one-shot missing
    (an op error), a wrong NCCL result, a timeout for YALI."""
    rows = [
        _row(2, "yali", 4 * K, 5.0),
        _row(2, "symm_one_shot", 4 * K, 10.8),
        _row(2, "symm_two_shot", 4 * K, 7.5),
        _row(2, "symm_two_shot+copy", 4 * K, 9.9),
        _row(2, "nccl", 4 * K, 20.0),
        _row(2, "yali", 256 * M, 1000.0),
        _row(2, "symm_one_shot", 256 * M, 1453.0),
        _row(2, "symm_two_shot", 256 * M, 800.0),
        _row(2, "symm_two_shot+copy", 256 * M, 1300.0),
        _row(2, "nccl", 256 * M, 1200.0),
        _row(4, "yali", 4 * K, 8.0),
        _row(4, "symm_one_shot", 4 * K,
             error="RuntimeError: one_shot_all_reduce: input must be | allocated with "
                   "empty_strided_p2p() and a very long tail that is cut"),
        _row(4, "symm_two_shot", 4 * K, 8.9),
        _row(4, "symm_two_shot+copy", 4 * K, 12.0),
        _row(4, "nccl", 4 * K, 30.0, correct=False),
        _row(4, "yali", 1 * M, error="TIMEOUT"),
        _row(4, "symm_two_shot", 1 * M, 13.8),
    ]
    meta = {"dtype": "bf16", "torch": "2.11.0", "timing": "graph", "num_warmup": 10,
            "num_iterations": 50, "num_replays": 5, "variants": list(bs.VARIANTS),
            "symm_backend": "CUDA", "command": "python -m yali.bench_symm"}
    return {"meta": meta, "rows": rows}


def _cells(result, world, nbytes):
    return {r["variant"]: r for r in result["rows"]
            if r["world_size"] == world and r["bytes"] == nbytes}


# ---- Arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text,nbytes", [("4096", 4096), ("4K", 4 * K), ("4k", 4 * K),
                                         ("1M", M), ("256M", 256 * M), ("2G", 2 * 2**30),
                                         ("8KB", 8 * K), (" 64K ", 64 * K)])
def test_parse_size(text, nbytes):
    assert bs.parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["", "K", "1.5M", "-4K", "0", "4T", "abc"])
def test_parse_size_rejects(text):
    with pytest.raises(Exception):
        bs.parse_size(text)


def test_parse_sizes_list():
    assert bs.parse_sizes("4K,1M,,256M") == [4 * K, M, 256 * M]


def test_defaults():
    args = bs.parse_args([])
    assert args.world_sizes == [2, 4]
    assert args.sizes == [4 * K, 64 * K, 256 * K, M, 4 * M, 16 * M, 64 * M, 256 * M]
    assert args.dtype == "bf16"
    assert args.timing == "graph"
    # None: iterations_for picks 50, fewer for large sizes.
    assert args.num_warmup == 10 and args.num_iterations is None and args.num_replays == 5
    assert args.symm_backend is None  # torch's default backend; pinning "CUDA" failed on 2.11
    # Registered YALI buffers: like-for-like with the symm kernels' pre-registered buffer.
    assert args.yali_buffers == "registered"
    assert args.variants == list(bs.VARIANTS)
    assert args.output_dir is None
    assert not args._worker


def test_options():
    args = bs.parse_args(["--world_sizes", "2", "--sizes", "4K,1M", "--dtype", "fp32",
                          "--variants", "yali,symm_two_shot+copy", "--num_iterations", "7",
                          "--timing", "eager", "--num_replays", "3", "--symm_backend", "NVSHMEM"])
    assert args.world_sizes == [2]
    assert args.sizes == [4 * K, M]
    assert args.dtype == "fp32"
    assert args.variants == ["yali", "symm_two_shot+copy"]
    assert args.num_iterations == 7
    assert args.timing == "eager" and args.num_replays == 3
    assert args.symm_backend == "NVSHMEM"
    assert bs.parse_args(["--variants", "symm_one_shot_out"]).variants == ["symm_one_shot_out"]
    assert bs.parse_args(["--yali_buffers", "plain"]).yali_buffers == "plain"


@pytest.mark.parametrize("argv", [["--world_sizes", "1"], ["--world_sizes", "two"],
                                  ["--dtype", "int8"], ["--variants", "yali,gloo"],
                                  ["--num_iterations", "0"], ["--sizes", "6", "--dtype", "fp32"],
                                  ["--sizes", "3"], ["--timing", "host"], ["--num_replays", "0"],
                                  ["--num_warmup", "-1"], ["--yali_buffers", "pinned"]])
def test_bad_arguments(argv):
    with pytest.raises(SystemExit) as e:
        bs.parse_args(argv)
    assert e.value.code == 2


def test_format_size():
    assert [bs.format_size(b) for b in (4 * K, 256 * K, M, 256 * M, 2**30, 1536, 100)] == \
        ["4K", "256K", "1M", "256M", "1G", "1536B", "100B"]


def test_variants_and_run_order_agree():
    assert sorted(bs.RUN_ORDER) == sorted(bs.VARIANTS)
    assert set(bs.PURE_SYMM) < set(bs.VARIANTS)
    assert "symm_two_shot+copy" not in bs.PURE_SYMM  # slower by construction
    assert set(bs.COLUMN_TITLES) == set(bs.VARIANTS)


# ---- Arithmetic ----------------------------------------------------------------------------------


def test_iterations_for():
    # Default: 50 calls up to 64M; above, at most 4G of messages per loop, never fewer than 10.
    assert [bs.iterations_for(b) for b in (4 * K, M, 64 * M, 128 * M, 256 * M, 2**30)] == \
        [50, 50, 50, 32, 16, 10]
    # Asked for: used at every size.
    assert bs.iterations_for(256 * M, 50) == 50
    assert bs.iterations_for(4 * K, 7) == 7


def test_default_run_stays_short():
    """Calls per (variant, size) in graph mode at the default sizes: warmup + check + untimed and
    timed replays. At about the slowest rate measured (~1.1 ms per 256M call at 4 GPUs, ~4.3 ps
    per byte; 10 us at least), none should need more than ~0.3 s of GPU time."""
    args = bs.parse_args([])
    for nbytes in args.sizes:
        n = bs.iterations_for(nbytes, args.num_iterations)
        calls = args.num_warmup + 1 + (1 + args.num_replays) * n
        assert calls * max(nbytes * 4.3e-12, 10e-6) <= 0.3, (nbytes, n)


def test_graph_per_call_us():
    # 5 replays of a 50-call graph in 1.9 ms: 7.6 us per call.
    assert bs.graph_per_call_us(1.9, 5, 50) == pytest.approx(7.6)
    # One replay (the per-replay figures behind p50/p99).
    assert bs.graph_per_call_us(0.38, 1, 50) == pytest.approx(7.6)
    assert bs.graph_per_call_us(16.0, 1, 16) == pytest.approx(1000.0)
    for replays, calls in ((0, 50), (5, 0)):
        with pytest.raises(ValueError):
            bs.graph_per_call_us(1.0, replays, calls)


def test_percentile():
    assert bs.percentile([], 50) is None
    assert bs.percentile([3.0], 99) == 3.0
    assert bs.percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    values = list(range(1, 101))
    assert bs.percentile(values, 99) == pytest.approx(99.01)
    assert bs.percentile(values, 100) == 100


def test_speedup_uses_the_faster_symm_kernel(result):
    cells = _cells(result, 2, 4 * K)
    assert bs.best_symm(cells) == ("symm_two_shot", 7.5)
    assert bs.speedup(cells) == pytest.approx(7.5 / 5.0)
    cells = _cells(result, 2, 256 * M)
    assert bs.speedup(cells) == pytest.approx(800.0 / 1000.0)  # below 1: YALI slower


def test_speedup_ignores_copy_nccl_errors_and_wrong_results(result):
    cells = _cells(result, 4, 4 * K)  # one-shot n/a; copy variant and nccl faster or slower: unused
    assert bs.best_symm(cells) == ("symm_two_shot", 8.9)
    assert bs.speedup(cells) == pytest.approx(8.9 / 8.0)
    cells["symm_two_shot"] = dict(cells["symm_two_shot"], correct=False)
    assert bs.best_symm(cells) == (None, None)
    assert bs.speedup(cells) is None
    # YALI n/a: no speedup.
    assert bs.speedup(_cells(result, 4, M)) is None
    assert bs.speedup({}) is None


# ---- Tables --------------------------------------------------------------------------------------


def test_table_rows(result):
    variants = list(bs.VARIANTS)
    assert bs.table_header(variants) == [
        "size", "yali us", "symm one-shot us", "symm one-shot out us", "symm two-shot us",
        "symm two-shot+copy us", "nccl us", "yali speedup vs best symm", "correct"]
    two = bs.table_rows(result["rows"], 2, variants)
    assert two == [
        ["4K", "5.0", "10.8", "", "7.5", "9.9", "20.0", "1.50x (two_shot)", "ok"],
        ["256M", "1000.0", "1453.0", "", "800.0", "1300.0", "1200.0", "0.80x (two_shot)", "ok"],
    ]
    four = bs.table_rows(result["rows"], 4, variants)
    size, yali, one_shot, _, two_shot, copy, nccl, speed, correct = four[0]
    assert size == "4K" and yali == "8.0" and two_shot == "8.9" and speed == "1.11x (two_shot)"
    assert one_shot.startswith("n/a (RuntimeError: one_shot_all_reduce")
    assert one_shot.endswith("...)") and len(one_shot) == len("n/a ()") + bs._REASON_CHARS
    assert "|" not in one_shot  # would break the markdown table
    assert nccl == "30.0 WRONG"
    assert correct == "FAIL: nccl"
    assert four[1] == ["1M", "n/a (TIMEOUT)", "", "", "13.8", "", "", "", "ok"]


def test_one_shot_out_counts_as_symm(result):
    cells = _cells(result, 2, 4 * K)
    cells["symm_one_shot_out"] = _row(2, "symm_one_shot_out", 4 * K, 6.0)
    assert bs.best_symm(cells) == ("symm_one_shot_out", 6.0)
    line = bs.table_rows(list(cells.values()), 2, list(bs.VARIANTS))[0]
    assert line[-2] == "1.20x (one_shot_out)"  # 6.0 / 5.0


def test_graph_capture_failure_cell():
    row = _row(2, "nccl", 4 * K, error="graph capture: RuntimeError: CUDA error: operation not "
                                       "permitted when stream is capturing")
    cell = bs.table_rows([row], 2, ["nccl"])[0][1]
    assert cell.startswith("n/a (graph capture: RuntimeError") and cell.endswith("...)")


def test_capture_reason_puts_the_body_error_first():
    # As torch.cuda.graph's __exit__ does: capture_end raises while the body's error is handled.
    try:
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        except RuntimeError:
            raise RuntimeError("operation failed due to a previous error during capture")
    except RuntimeError as e:
        reason = bs._capture_reason(e)
    assert reason == ("RuntimeError: CUDA error: operation not permitted when stream is capturing"
                      " (then RuntimeError: operation failed due to a previous error during "
                      "capture)")
    assert bs._capture_reason(ValueError("bad\nmore")) == "ValueError: bad"


def test_table_subset_of_variants(result):
    rows = bs.table_rows(result["rows"], 2, ["symm_two_shot", "nccl"])
    assert bs.table_header(["symm_two_shot", "nccl"]) == [
        "size", "symm two-shot us", "nccl us", "correct"]
    assert rows[0] == ["4K", "7.5", "20.0", "ok"]


def test_correct_column_without_measurements():
    rows = [_row(2, "yali", 4 * K, error="n/a reason")]
    assert bs.table_rows(rows, 2, ["yali"])[0][-1] == "-"


def test_text_table_aligned(result):
    lines = bs.text_table(result["rows"], 2, list(bs.VARIANTS))
    assert len(lines) == 4
    assert len({len(line) for line in lines}) == 1
    assert lines[0].split()[:3] == ["size", "yali", "us"]


def test_markdown(result):
    md = bs.markdown(result)
    assert md.startswith("# AllReduce: YALI vs PyTorch symmetric memory")
    assert "## 2 GPUs" in md and "## 4 GPUs" in md
    assert "pre-registered symmetric buffer (no copy-in counted)" in md
    assert "YALI reads a plain tensor" in md
    assert "yali: out-of-place" in md
    assert "torch 2.11.0" in md
    assert "| 4K | 5.0 | 10.8 |  | 7.5 | 9.9 | 20.0 | 1.50x (two_shot) | ok |" in md
    # Details: p50/p99/host per variant.
    assert "| 4K | yali | 5.0 | 4.90 | 6.00 | 3.00 | 50 | ok |" in md
    assert "| 4K | symm_one_shot | n/a (" in md
    assert "Command: `python -m yali.bench_symm`" in md
    # Every table line has as many cells as its header.
    for block in md.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if lines:
            assert len({ln.count("|") for ln in lines}) == 1, block


def test_header_names_the_timing_mode(result):
    meta = result["meta"]
    first = bs.header_lines(meta)[0]
    assert "timing: graph (50 calls per CUDA graph, 5 timed replays; 10 warmup calls)" in first
    assert "Symmetric-memory backend: CUDA (requested: torch default)" in bs.header_lines(meta)[2]
    eager = bs.header_lines(dict(meta, timing="eager", num_iterations=None))[0]
    assert "timing: eager (50 (fewer for large sizes: at most 4G of messages per loop) " \
        "back-to-back calls; 10 warmup calls)" in eager
    # Results written before --timing existed were eager.
    assert "timing: eager" in bs.header_lines({"dtype": "bf16"})[0]
    md = bs.markdown(result)
    assert "timing: graph" in md
    assert "captured into one CUDA graph" in md and "back-to-back" not in md
    assert "Python dispatch" in bs.note("eager")


def test_yali_buffers_in_the_report(result):
    """Results say whether YALI's buffers were registered; older results (no yali_buffers) were
    plain. The details table carries the algorithm YALI ran."""
    md = bs.markdown(result)
    assert "YALI reads a plain tensor" in md and "buffers plain (--yali_buffers)" in md
    assert "yali and nccl read plain tensors" in md
    result["meta"]["yali_buffers"] = "registered"
    result["rows"][0]["algorithm"] = "direct"
    md = bs.markdown(result)
    assert "YALI reads tensors registered with yaliCommRegister" in md
    assert "buffers registered (--yali_buffers)" in md
    assert "yali reads and writes buffers registered with yaliCommRegister" in md
    assert "YALI reads a plain tensor" not in md and "yali and nccl read plain" not in md
    assert "| size | variant | us/call | p50 us | p99 us | host us/call | N | correct | algorithm |" \
        in md
    assert "| 4K | yali | 5.0 | 4.90 | 6.00 | 3.00 | 50 | ok | direct |" in md
    assert "| 4K | nccl | 20.0 | 19.60 | 24.00 | 3.00 | 50 | ok |  |" in md
    assert bs.note("graph", "registered") != bs.note("graph", "plain")


def test_summary_line(result):
    line = bs.summary_line(result["rows"])
    assert line.startswith("yali faster than best symm at 2/3 points")
    assert "lowest 0.80x at 2 GPUs 256M" in line
    assert "wrong results: 1" in line and "n/a: 2" in line


def test_write_outputs(tmp_path, result):
    out = bs.write_outputs(result, tmp_path / "o")
    assert json.loads((out / "results.json").read_text()) == result
    assert (out / "results.md").read_text() == bs.markdown(result)


# ---- Without torch, and the torch ops -----------------------------------------------------------


def _run(code_or_args, **kw):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "python") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *code_or_args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=kw.get("cwd"))


def test_import_and_tables_need_no_torch():
    # A meta-path hook makes `import torch` fail, as on a machine without PyTorch.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch blocked by the test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from yali import bench_symm as bs\n"
        "rows = [{'world_size': 2, 'variant': 'yali', 'bytes': 4096, 'time_us': 5.0,\n"
        "         'correct': True, 'error': None}]\n"
        "print(bs.markdown({'meta': {'dtype': 'bf16'}, 'rows': rows}))\n"
        "assert 'torch' not in sys.modules\n"
    )
    res = _run(["-c", code])
    assert res.returncode == 0, res.stderr
    assert "| 4K | 5.0 |" in res.stdout


def test_help(tmp_path):
    res = _run(["-m", "yali.bench_symm", "--help"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for flag in ("--world_sizes", "--sizes", "--dtype", "--num_warmup", "--num_iterations",
                 "--output_dir", "--timeout", "--variants", "--timing", "--num_replays",
                 "--symm_backend", "symm_one_shot_out", "--yali_buffers", "yaliCommRegister"):
        assert flag in res.stdout
    assert "--_worker" not in res.stdout


def test_torch_symm_mem_op_schemas():
    """The three symmetric-memory ops the benchmark calls, with the arguments it passes. The
    schemas are registered unconditionally (also in CPU-only builds), so no GPU is needed."""
    torch = pytest.importorskip("torch")
    ns = torch.ops.symm_mem
    try:
        one_shot = str(ns.one_shot_all_reduce.default._schema)
        two_shot = str(ns.two_shot_all_reduce_.default._schema)
    except (AttributeError, RuntimeError) as e:
        pytest.skip(f"torch {torch.__version__} has no symm_mem all-reduce ops: {e}")
    assert one_shot.startswith(
        "symm_mem::one_shot_all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor")
    assert two_shot.startswith(
        "symm_mem::two_shot_all_reduce_(Tensor(a!) input, str reduce_op, str group_name)")
    if hasattr(ns, "one_shot_all_reduce_out"):  # symm_one_shot_out is n/a without it
        assert str(ns.one_shot_all_reduce_out.default._schema).startswith(
            "symm_mem::one_shot_all_reduce_out(Tensor input, str reduce_op, str group_name, "
            "Tensor(a!) out)")
    import torch.distributed._symmetric_memory as symm_mem

    assert callable(symm_mem.empty) and callable(symm_mem.rendezvous)


# ---- Driver, with the process launch faked -------------------------------------------------------


def test_main_fills_what_a_timed_out_group_did_not_save(tmp_path, monkeypatch, capsys):
    """World 2 saves every row; world 4 times out after its first row: the rest become
    "n/a (TIMEOUT)", the outputs are written and the exit status says something failed."""
    from yali import _launch, bench_backends

    launched = []

    def fake_launch(cmd, world, *, timeout, env, echo_rank):
        launched.append((world, env, cmd))
        result_file = cmd[cmd.index("--result_file") + 1]
        sizes = bs.parse_sizes(cmd[cmd.index("--sizes") + 1])
        variants = cmd[cmd.index("--variants") + 1].split(",")
        rows = [_row(world, v, b, 10.0) for v in variants for b in sizes]
        if world == 4:
            rows = rows[:1]
        Path(result_file).write_text(json.dumps({"rows": rows, "meta": {"torch": "2.11.0"}}))
        ranks = [_launch.RankResult(r, 0 if world == 2 else None, "") for r in range(world)]
        return _launch.LaunchResult(ranks, timed_out=world == 4, elapsed=1.0)

    monkeypatch.setattr(bench_backends, "_gpu_count", lambda: 4)
    monkeypatch.setattr(_launch, "launch", fake_launch)
    rc = bs.main(["--sizes", "4K,1M", "--variants", "yali,symm_two_shot", "--output_dir",
                  str(tmp_path)])
    assert rc == 1
    assert [w for w, _, _ in launched] == [2, 4]
    for _, env, cmd in launched:
        for key, value in _launch.NVLS_OFF_ENV.items():
            assert env[key] == value
        # The workers get the defaults as the driver saw them: graph timing, iterations left to
        # iterations_for, no backend pinned.
        assert cmd[cmd.index("--timing") + 1] == "graph"
        assert cmd[cmd.index("--num_replays") + 1] == "5"
        assert "--num_iterations" not in cmd and "--symm_backend" not in cmd
        assert cmd[cmd.index("--yali_buffers") + 1] == "registered"
        worker = bs.parse_args(cmd[cmd.index("--_worker"):])
        assert worker._worker and worker.timing == "graph" and worker.num_iterations is None
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["meta"]["torch"] == "2.11.0"
    assert doc["meta"]["timing"] == "graph" and doc["meta"]["num_replays"] == 5
    assert doc["meta"]["child_env"] == _launch.NVLS_OFF_ENV
    assert doc["meta"]["yali_buffers"] == "registered"
    assert "yali buffers registered" in doc["meta"]["note"] or \
        "registered with yaliCommRegister" in doc["meta"]["note"]
    rows4 = [r for r in doc["rows"] if r["world_size"] == 4]
    assert len(rows4) == 4
    assert sum(r["error"] == "TIMEOUT" for r in rows4) == 3
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith(
        "yali faster than best symm at 0/2 points (lowest 1.00x at 2 GPUs 4K)")
    assert "1 process group(s) failed" in out
    assert "; yali buffers registered" in out.rstrip().splitlines()[-1]
    assert "timing: graph" in out


def test_main_passes_flags_and_reports_a_stopped_world(tmp_path, monkeypatch, capsys):
    """--timing eager, --num_iterations and --symm_backend reach the workers; a worker that stopped
    on a broken CUDA context (every row saved, meta["stopped"], exit 3) is a failed group."""
    from yali import _launch, bench_backends

    cmds = []

    def fake_launch(cmd, world, *, timeout, env, echo_rank):
        cmds.append(cmd)
        result_file = cmd[cmd.index("--result_file") + 1]
        why = "CUDA context unusable after nccl 4K: y"
        rows = [_row(world, "nccl", 4 * K, error="graph replay: x"),
                _row(world, "yali", 4 * K, error="not run: " + why)]
        Path(result_file).write_text(json.dumps({"rows": rows, "meta": {"stopped": why}}))
        ranks = [_launch.RankResult(r, 3, "") for r in range(world)]
        return _launch.LaunchResult(ranks, timed_out=False, elapsed=1.0)

    monkeypatch.setattr(bench_backends, "_gpu_count", lambda: 2)
    monkeypatch.setattr(_launch, "launch", fake_launch)
    rc = bs.main(["--sizes", "4K", "--variants", "yali,nccl", "--timing", "eager",
                  "--num_iterations", "20", "--symm_backend", "NVSHMEM", "--yali_buffers", "plain",
                  "--output_dir", str(tmp_path)])
    assert rc == 1
    (cmd,) = cmds
    worker = bs.parse_args(cmd[cmd.index("--_worker"):])
    assert (worker.timing, worker.num_iterations, worker.symm_backend) == ("eager", 20, "NVSHMEM")
    assert worker.yali_buffers == "plain"
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["meta"]["stopped"] == {
        "2": "CUDA context unusable after nccl 4K: y"}
    assert doc["meta"]["symm_backend_requested"] == "NVSHMEM"
    assert doc["meta"]["yali_buffers"] == "plain"
    assert len(doc["rows"]) == 2  # nothing filled in twice
    captured = capsys.readouterr()
    assert "[x2] stopped: CUDA context unusable" in captured.err
    assert "1 process group(s) failed" in captured.out
    assert "timing: eager" in captured.out


def test_main_without_gpus(monkeypatch, capsys):
    from yali import bench_backends

    monkeypatch.setattr(bench_backends, "_gpu_count", lambda: 0)
    assert bs.main([]) == 2
    assert "nothing to run" in capsys.readouterr().out
