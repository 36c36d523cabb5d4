"""bench_backends' drop-in backend (nccl+yali), with the process launch faked: no GPU, no torch."""

import json
from pathlib import Path

import pytest


def _fake_launch(launched):
    from yali import _launch

    def fake(cmd, world, *, timeout, env, echo_rank):
        launched.append((world, env, cmd))
        result_file = cmd[cmd.index("--result_file") + 1]
        Path(result_file).write_text(json.dumps([]))
        return _launch.LaunchResult([_launch.RankResult(r, 0, "") for r in range(world)], timed_out=False,
                                    elapsed=0.1)

    return fake


def test_nccl_plus_yali_preloads_the_shim_first(tmp_path, monkeypatch):
    from yali import _launch, bench_backends

    shim = tmp_path / "libyali-nccl.so"
    shim.write_bytes(b"")
    monkeypatch.setenv("YALI_NCCL_SHIM", str(shim))
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    launched = []
    monkeypatch.setattr(_launch, "launch", _fake_launch(launched))
    monkeypatch.setattr(bench_backends, "_gpu_count", lambda: 2)
    bench_backends.main(["--backend", "nccl+yali", "--world_size", "2", "--data_size_mb", "1",
                         "--output_dir", str(tmp_path / "out")])
    (world, env, cmd), = launched
    assert world == 2
    assert env["LD_PRELOAD"].split(":") == [str(shim), "/opt/other.so"]
    assert cmd[cmd.index("--backend") + 1] == "nccl+yali"


@pytest.mark.parametrize("backend", ["nccl", "yali"])
def test_other_backends_preload_nothing(tmp_path, monkeypatch, backend):
    from yali import _launch, bench_backends

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    launched = []
    monkeypatch.setattr(_launch, "launch", _fake_launch(launched))
    monkeypatch.setattr(bench_backends, "_gpu_count", lambda: 2)
    bench_backends.main(["--backend", backend, "--world_size", "2", "--data_size_mb", "1",
                         "--output_dir", str(tmp_path / "out")])
    (_, env, _), = launched
    assert "LD_PRELOAD" not in env


def test_nccl_plus_yali_without_the_shim_is_an_error_row(tmp_path, monkeypatch):
    from yali import _launch, bench_backends

    monkeypatch.setenv("YALI_NCCL_SHIM", str(tmp_path / "missing.so"))
    launched = []
    monkeypatch.setattr(_launch, "launch", _fake_launch(launched))
    monkeypatch.setattr(bench_backends, "_gpu_count", lambda: 2)
    bench_backends.main(["--backend", "nccl+yali", "--world_size", "2", "--data_size_mb", "1",
                         "--output_dir", str(tmp_path / "out")])
    assert launched == []
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    assert [(r["backend"], r["correct"]) for r in rows] == [("nccl+yali", "NO LIBYALI-NCCL")]
