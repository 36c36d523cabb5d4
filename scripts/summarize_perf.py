#!/usr/bin/env python3
"""Prints a compact YALI-vs-NCCL table from yali-perf JSON files (out-of-place results).

Results of several collectives (yali-perf -C) get one table per collective (and root); files from
before -C hold AllReduce only and print as they always did.

With --variants, the files are var_<name>_np<N>.json from gpu_check.sh's variants stage: one table
per world size, a busBW column (GB/s) per variant, #wrong summed over all of them."""
import json
import os
import re
import sys


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


# yali-perf -C's order.
COLLS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "gather", "scatter",
         "alltoall", "rs_ag", "sendrecv")


def coll_order(key):
    base = key.split(" ")[0]
    return (COLLS.index(base) if base in COLLS else len(COLLS), key)


def coll_key(r):
    """The result's collective, with its root where it has one: 'allreduce', 'broadcast root 1'."""
    coll = r.get("collective") or "allreduce"
    return coll if r.get("root") is None else f"{coll} root {r['root']}"


def main(paths):
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        rows = {}
        for r in doc["results"]:
            if r["placement"] != "out-of-place":
                continue
            rows.setdefault(coll_key(r), {}).setdefault((r["dtype"], r["bytes"]), {})[r["impl"]] = r
        colls = sorted(rows, key=coll_order) or ["allreduce"]
        for coll in colls:
            head = "" if colls == ["allreduce"] else f" collective={coll}"
            print(f"\n{path.split('/')[-1]}: nranks={doc['nranks']} mode={doc['launch_mode']} "
                  f"timing={doc['timing']}{head}")
            print_table(rows.get(coll, {}))


def print_table(rows):
    print(f"{'dtype':>8} {'size':>6} {'yali_us':>9} {'nccl_us':>9} {'ratio':>6} {'yali_bw':>8} {'nccl_bw':>8} "
          f"{'p99/p50':>7} {'wrong':>5}  algo")
    for (dtype, size), impls in sorted(rows.items()):
        y, n = impls.get("yali"), impls.get("nccl")
        yt = y["time_us"] if y else float("nan")
        nt = n["time_us"] if n else float("nan")
        st = (y or {}).get("stats_us") or {}
        tail = st.get("p99", float("nan")) / st["p50"] if st.get("p50") else float("nan")
        wrong = ((y or {}).get("wrong") or 0) + ((n or {}).get("wrong") or 0)
        algo = f"{y.get('algo')}/{y.get('ctas')}" if y else "-"
        print(f"{dtype:>8} {human(size):>6} {yt:9.2f} {nt:9.2f} {nt / yt:6.2f} "
              f"{(y or {}).get('busbw_gbs', float('nan')):8.1f} {(n or {}).get('busbw_gbs', float('nan')):8.1f} "
              f"{tail:7.2f} {wrong:5d}  {algo}")


def variants(paths):
    table = {}   # (np, collective) -> size -> name -> busbw
    names = {}   # np -> [names in file order]
    wrong = 0
    for path in paths:
        m = re.match(r"var_(.+)_np(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        name, n = m.group(1), int(m.group(2))
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        names.setdefault(n, [])
        if name not in names[n]:
            names[n].append(name)
        for r in doc["results"]:
            if r["placement"] != "out-of-place" or r["dtype"] != "float":
                continue
            key = (n, coll_key(r))
            wrong += r.get("wrong") or 0
            cell = f"{r['busbw_gbs']:.1f}"
            if r["impl"] == "yali":
                cell += f" {r.get('algo', '')[:9]}/{r.get('ctas', '')}"
            table.setdefault(key, {}).setdefault(r["bytes"], {})[name] = cell
    only_allreduce = {c for _, c in table} <= {"allreduce"}
    for key in sorted(table, key=lambda k: (k[0], coll_order(k[1]))):
        n, coll = key
        cols = names[n]
        what = "" if only_allreduce else f" {coll},"
        print(f"\nvariants, {n} processes,{what} float, busBW GB/s (#wrong over all: {wrong})")
        print(f"{'size':>6} " + " ".join(f"{c:>22}" for c in cols))
        for size in sorted(table[key]):
            print(f"{human(size):>6} " + " ".join(f"{table[key][size].get(c, '-'):>22}" for c in cols))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--variants"]:
        variants(sys.argv[2:])
    else:
        main(sys.argv[1:])
