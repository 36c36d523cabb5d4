"""Host tests of yali-run (python/yali/run.py): no GPU, no libyali, no PyTorch; the exec is faked.

    PYTHONPATH=python python3 -m pytest tests/python/test_run_host.py
"""

import os

import pytest

from yali import run


@pytest.fixture
def execs(monkeypatch):
    """os.execvpe recorded instead of run: (file, args, env) per call."""
    calls = []
    monkeypatch.setattr(os, "execvpe", lambda file, args, env: calls.append((file, args, env)))
    return calls


def _shim(directory):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / run.LIBRARY_NAME
    path.write_bytes(b"")
    return str(path)


def test_preloads_the_library_first(tmp_path, monkeypatch, execs):
    shim = _shim(tmp_path / "lib")
    monkeypatch.setenv("YALI_NCCL_SHIM", shim)
    monkeypatch.setenv("LD_PRELOAD", "/opt/a.so /opt/b.so:" + shim)
    assert run.main(["prog", "--flag"]) == 0  # the faked exec returned
    ((file, args, env),) = execs
    assert file == "prog" and args == ["prog", "--flag"]
    assert env["LD_PRELOAD"] == f"{shim}:/opt/a.so:/opt/b.so"


@pytest.mark.parametrize("directory", ["d ir", "d:ir"])
def test_refuses_a_library_path_the_loader_would_split(tmp_path, monkeypatch, execs, capsys,
                                                       directory):
    """ld.so splits LD_PRELOAD at spaces and colons: such a path would not be preloaded, and the
    program would run on plain NCCL without a word. yali-run says so and exits 1 instead."""
    shim = _shim(tmp_path / directory)
    monkeypatch.setenv("YALI_NCCL_SHIM", shim)
    assert run.main(["prog"]) == 1
    assert execs == []
    err = capsys.readouterr().err
    assert err.startswith("yali-run: ") and shim in err and "LD_PRELOAD" in err, err
    # Where it is can still be asked.
    assert run.main(["--print-library"]) == 0
    assert capsys.readouterr().out.strip() == shim
