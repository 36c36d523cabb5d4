"""Runs yali-hw (bench/hw), the hardware baseline the report's SoL% columns are measured against.

    python3 -m yali.hw --build build --output output/hw     # writes yali-hw.json and yali-hw.txt

Standard library only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Dict, List, Optional

# Where the build puts yali-hw (bench/hw/CMakeLists.txt), most likely first.
HW_CANDIDATES = ("bench/hw/yali-hw", "bench/yali-hw", "yali-hw")

# NVLink multicast stays off on shared machines; every child process gets these.
CHILD_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(CHILD_ENV)
    if extra:
        env.update(extra)
    return env


def find_binary(build: str, candidates=HW_CANDIDATES) -> Optional[str]:
    for rel in candidates:
        p = os.path.join(build, rel)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return os.path.abspath(p)
    return None


def command(binary: str, json_path: str, nbytes: Optional[str] = None,
            max_seconds: Optional[float] = None) -> List[str]:
    cmd = [binary, "--json", json_path]
    if nbytes:
        cmd += ["--bytes", str(nbytes)]
    if max_seconds:
        cmd += ["--max-seconds", f"{max_seconds:g}"]
    return cmd


def run(build: str, out_dir: str, nbytes: Optional[str] = None, timeout: float = 600.0,
        dry_run: bool = False) -> Dict[str, object]:
    """Runs yali-hw into out_dir (yali-hw.json, yali-hw.txt). Returns
    {"status": "ok"|"missing"|"failed"|"timeout"|"dry-run", "command": str, "json": path|None}."""
    binary = find_binary(build)
    json_path = os.path.join(out_dir, "yali-hw.json")
    shown = binary or os.path.join(build, HW_CANDIDATES[0])
    # yali-hw stops measuring new pairs at --max-seconds; leave it room to finish the last one.
    cmd = command(shown, json_path, nbytes, max_seconds=max(10.0, timeout * 0.8))
    text = " ".join(cmd)
    if dry_run:
        return {"status": "dry-run", "command": text, "json": None}
    if binary is None:
        return {"status": "missing", "command": text, "json": None}
    os.makedirs(out_dir, exist_ok=True)
    log_path = os.path.join(out_dir, "yali-hw.txt")
    with open(log_path, "w") as log:
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(),
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "command": text, "json": None}
    if rc != 0 or not os.path.exists(json_path):
        return {"status": "failed", "command": text, "json": None, "returncode": rc}
    return {"status": "ok", "command": text, "json": json_path}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m yali.hw", description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--output", default="output/hw-baseline")
    ap.add_argument("--bytes", help="bytes per transfer (yali-hw --bytes; default 1G)")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    res = run(args.build, args.output, args.bytes, args.timeout)
    if res["status"] == "missing":
        print(f"yali-hw not found under {args.build} (build it: make build)", file=sys.stderr)
        return 1
    if res["status"] != "ok":
        print(f"yali-hw {res['status']}: {res['command']}", file=sys.stderr)
        return 1
    with open(os.path.join(args.output, "yali-hw.txt")) as f:
        sys.stdout.write(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
