"""Start one process per rank on this machine and wait for them, bounded in time.

Used by ``yali.bench_backends`` and the GPU tests. Each rank gets the torch.distributed environment
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port),
NVLink multicast turned off (NVLS_OFF_ENV, overwriting what the caller had), and ``yali`` importable.
Every rank runs in its own session so that a hang is ended by killing its whole process group.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# NVLink multicast (NVLS) must stay off on the shared machines.
NVLS_OFF_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(extra=None):
    """os.environ + NVLS off + ``yali`` importable (+ ``extra``)."""
    env = dict(os.environ)
    env.update(NVLS_OFF_ENV)
    path = env.get("PYTHONPATH", "")
    if _PACKAGE_PARENT not in path.split(os.pathsep):
        env["PYTHONPATH"] = _PACKAGE_PARENT + (os.pathsep + path if path else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    env.update(NVLS_OFF_ENV)  # always wins
    return env


class RankResult:
    def __init__(self, rank, returncode, output):
        self.rank = rank
        self.returncode = returncode  # None: killed by us
        self.output = output


class LaunchResult:
    """What ``launch`` saw: per-rank exit codes and output, whether it ran past its time."""

    def __init__(self, ranks, timed_out, elapsed, reason=""):
        self.ranks = ranks
        self.timed_out = timed_out
        self.elapsed = elapsed
        self.reason = reason

    @property
    def ok(self):
        return not self.timed_out and all(r.returncode == 0 for r in self.ranks)

    def summary(self, tail_chars=3000):
        lines = [
            f"{len(self.ranks)} rank(s), {self.elapsed:.1f} s"
            + (f", {self.reason}" if self.reason else "")
        ]
        for r in self.ranks:
            rc = "killed" if r.returncode is None else f"exit {r.returncode}"
            lines.append(f"--- rank {r.rank}: {rc}")
            out = r.output or ""
            if len(out) > tail_chars:
                out = "...\n" + out[-tail_chars:]
            lines.append(out.rstrip())
        return "\n".join(lines)


def _kill_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def launch(args, world_size, *, timeout, env=None, peer_grace=30.0, echo_rank=None, cwd=None,
           python=None):
    """Run ``python *args`` as ``world_size`` ranks; return a LaunchResult.

    ``timeout``: seconds for the whole group; past it every rank is killed (timed_out=True).
    ``peer_grace``: once a rank fails, how long the others get before they are killed (they may be
    waiting for it in a collective). ``echo_rank``: that rank's output goes to this process's
    stdout instead of being captured. ``env``: extra variables for every rank.
    """
    python = python or sys.executable
    common = base_env(env)
    common["MASTER_ADDR"] = "127.0.0.1"
    common["MASTER_PORT"] = str(free_port())
    common["WORLD_SIZE"] = str(world_size)
    common["LOCAL_WORLD_SIZE"] = str(world_size)
    procs, files = [], []
    start = time.monotonic()
    try:
        for rank in range(world_size):
            renv = dict(common, RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0")
            if rank == echo_rank:
                f, stdout = None, None
            else:
                f = tempfile.TemporaryFile(mode="w+b")
                stdout = f
            files.append(f)
            procs.append(
                subprocess.Popen(
                    [python, *args],
                    env=renv,
                    cwd=cwd,
                    stdout=stdout,
                    stderr=subprocess.STDOUT if stdout is not None else None,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        deadline = start + timeout
        timed_out, reason, first_failure = False, "", None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if failed and first_failure is None:
                first_failure = now
            if now >= deadline:
                timed_out = True
                reason = f"timed out after {timeout:.0f} s; killed the ranks still running"
                break
            if first_failure is not None and now - first_failure >= peer_grace:
                reason = (f"rank {failed[0]} failed; killed the ranks still running "
                          f"{peer_grace:.0f} s later")
                break
            time.sleep(0.05)
        killed = set()
        for i, p in enumerate(procs):
            if p.poll() is None:
                killed.add(i)
                _kill_group(p, signal.SIGTERM)
        t_end = time.monotonic() + 5
        while any(p.poll() is None for p in procs) and time.monotonic() < t_end:
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                _kill_group(p, signal.SIGKILL)
            p.wait()
            # What a rank left behind in its session (compile workers, ...) goes too.
            _kill_group(p, signal.SIGKILL)
        ranks = []
        for i, (p, f) in enumerate(zip(procs, files)):
            out = ""
            if f is not None:
                f.seek(0)
                out = f.read().decode("utf-8", "replace")
            ranks.append(RankResult(i, None if i in killed else p.returncode, out))
        return LaunchResult(ranks, timed_out, time.monotonic() - start, reason)
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_group(p, signal.SIGKILL)
                p.wait()
        for f in files:
            if f is not None:
                f.close()
