#!/usr/bin/env python3
"""Before/after table of gpu_check.sh's abperf stage: time per call (us) of YALI in two builds,
run alternately, from ab_<base|new>_<e|g>_g<ranks>_r<rep>.json under the directory given; then,
where the JSON has it (yali-perf from 2026-11-29 on, eager timing), the host's issue time per call
of the same runs ("host issue": the slowest process's time to issue the timed calls)."""
import collections
import glob
import json
import re
import sys


def main(out, sizes=(4096, 65536, 1048576, 16777216, 67108864)):
    rows = collections.defaultdict(dict)
    host = collections.defaultdict(dict)
    reps = set()
    for f in sorted(glob.glob(out + "/ab_*.json")):
        m = re.search(r"ab_(base|new)_(e|g)_g(\d+)_r(\d+)\.json$", f)
        if not m:
            continue
        which, mode, g, rep = m.groups()
        reps.add(rep)
        for r in json.load(open(f))["results"]:
            if r.get("placement", "out-of-place") == "out-of-place":
                rows[(mode, int(g), r["bytes"])][(which, rep)] = r["time_us"]
                if r.get("host_issue_us") is not None:
                    host[("host issue", int(g), r["bytes"])][(which, rep)] = r["host_issue_us"]
    reps = sorted(reps)
    table(rows, reps, sizes)
    if host:
        print()
        table(host, reps, sizes)


def table(rows, reps, sizes):
    print("| timing | ranks | size | " + " | ".join(f"before r{r}" for r in reps) + " | " +
          " | ".join(f"after r{r}" for r in reps) + " | after / before |")
    print("| --- " * (4 + 2 * len(reps)) + "|")
    for (mode, g, b), d in sorted(rows.items()):
        if b not in sizes:
            continue
        before = [d.get(("base", r)) for r in reps]
        after = [d.get(("new", r)) for r in reps]
        if None in after:
            continue
        # A base too old to record a figure (host issue time) shows "-", without a ratio.
        ratio = "-" if None in before else f"{(sum(after) / len(after)) / (sum(before) / len(before)):.3f}"
        size = f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"
        label = {"g": "graph", "e": "eager"}.get(mode, mode)
        cell = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"| {label} | {g} | {size} | " + " | ".join(cell(v) for v in before) + " | " +
              " | ".join(cell(v) for v in after) + f" | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1])
