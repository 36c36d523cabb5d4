#!/usr/bin/env python3
"""Table of gpu_check.sh's dropinperf stage: nccl-tests run on plain NCCL and through libyali-nccl
(the drop-in), alternately, one rank per GPU. Reads dropinperf_<plain|yali>_<tag>_<test>_r<rep>.log
under the directory given and prints, per test and size, each library's out-of-place time per call
(us, the median over the repetitions, as nccl-tests printed it), plain / drop-in (above 1: the
drop-in is faster), both busBW (GB/s), and the rows whose #wrong was not 0.

nccl-tests' result row, counted from its end (hypercube's rows lack the redop field):
  ... time algbw busbw #wrong | time algbw busbw #wrong   (out-of-place | in-place)
"""
import collections
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perf_tables import human  # noqa: E402  (sizes as perf_tables.py writes them: 8K, 2M, ...)


def rows_of(path):
    """{size_bytes: (oop_time_us, oop_busbw, wrong_rows)} of one nccl-tests log."""
    out = {}
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) < 12 or not f[0].isdigit() or not re.fullmatch(r"\d+|N/A", f[-1]):
            continue
        try:
            t, bus = float(f[-8]), float(f[-6])
        except ValueError:
            continue
        wrong = sum(1 for w in (f[-5], f[-1]) if w not in ("0", "N/A"))
        out[int(f[0])] = (t, bus, wrong)
    return out


def main(out):
    # runs[(tag, test)][lib] = [rows of rep 1, rows of rep 2, ...]
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in sorted(glob.glob(out + "/dropinperf_*_r*.log")):
        m = re.search(r"dropinperf_(plain|yali)_([A-Za-z0-9]+)_(\w+?)_r(\d+)\.log$", path)
        if m:
            lib, tag, test, _ = m.groups()
            runs[(tag, test)][lib].append(rows_of(path))
    wrong_total = 0
    for (tag, test), by_lib in sorted(runs.items()):
        print(f"\n{test} ({tag}): out-of-place time per call (us), median of "
              f"{len(by_lib['plain'])} plain and {len(by_lib['yali'])} drop-in runs")
        print("| size | NCCL us | drop-in us | NCCL / drop-in | NCCL busBW | drop-in busBW |")
        print("| --- | --- | --- | --- | --- | --- |")
        sizes = sorted(set().union(*[set(r) for reps in by_lib.values() for r in reps]))
        for size in sizes:
            cells = {}
            for lib in ("plain", "yali"):
                got = [r[size] for r in by_lib[lib] if size in r]
                wrong_total += sum(g[2] for g in got)
                if got:
                    cells[lib] = (statistics.median(g[0] for g in got), statistics.median(g[1] for g in got))
            if len(cells) < 2:
                continue
            (tp, bp), (ty, by) = cells["plain"], cells["yali"]
            ratio = f"{tp / ty:.2f}" if ty > 0 else "-"
            print(f"| {human(size)} | {tp:.1f} | {ty:.1f} | {ratio} | {bp:.1f} | {by:.1f} |")
    print(f"\nrows with #wrong > 0 (either library, out-of-place or in-place): {wrong_total}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
