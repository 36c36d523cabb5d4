#!/usr/bin/env python3
"""Before/after table of gpu_check.sh's abperf stage: time per call (us) of YALI in two builds,
run alternately, from ab_<base|new>_<e|g>_g<ranks>_r<rep>.json under the directory given."""
import collections
import glob
import json
import re
import sys


def main(out, sizes=(4096, 65536, 1048576, 16777216, 67108864)):
    rows = collections.defaultdict(dict)
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
    reps = sorted(reps)
    print("| timing | ranks | size | " + " | ".join(f"before r{r}" for r in reps) + " | " +
          " | ".join(f"after r{r}" for r in reps) + " | after / before |")
    print("| --- " * (4 + 2 * len(reps)) + "|")
    for (mode, g, b), d in sorted(rows.items()):
        if b not in sizes:
            continue
        before = [d.get(("base", r)) for r in reps]
        after = [d.get(("new", r)) for r in reps]
        if None in before + after:
            continue
        ratio = (sum(after) / len(after)) / (sum(before) / len(before))
        size = f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"
        print(f"| {'graph' if mode == 'g' else 'eager'} | {g} | {size} | " +
              " | ".join(f"{v:.2f}" for v in before) + " | " + " | ".join(f"{v:.2f}" for v in after) +
              f" | {ratio:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
