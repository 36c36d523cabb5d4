#!/usr/bin/env python3
"""Markdown tables for docs/PERF.md from yali-perf JSON files (out-of-place results).

    perf_tables.py [--dtype float] FILE [FILE ...]

One table per dtype (per collective and dtype with results of several collectives, yali-perf -C;
files from before -C are AllReduce); one column group per file (its nranks, launch mode and timing in the header):
YALI time, NCCL time, NCCL/YALI (above 1: YALI faster), both busBWs, and YALI's algorithm/CTAs.
Times in us, busBW in GB/s.
"""
import argparse
import json


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = {}
    for r in doc["results"]:
        if r["placement"] == "out-of-place":
            rows.setdefault((coll_key(r), r["dtype"], r["bytes"]), {})[r["impl"]] = r
    return doc, rows


# yali-perf -C's order.
COLLS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "gather", "scatter",
         "alltoall", "rs_ag")


def coll_order(key):
    base = key.split(" ")[0]
    return (COLLS.index(base) if base in COLLS else len(COLLS), key)


def coll_key(r):
    """The result's collective, with its root where it has one: 'allreduce', 'broadcast root 1'."""
    coll = r.get("collective") or "allreduce"
    return coll if r.get("root") is None else f"{coll} root {r['root']}"


def table(dtype, docs, coll="allreduce"):
    head = "| size |"
    rule = "| --- |"
    for doc, _ in docs:
        tag = f"{doc['nranks']} GPUs {doc['launch_mode']} {doc['timing']}"
        head += f" {tag}: YALI us | NCCL us | NCCL/YALI | YALI busBW | NCCL busBW | algo/CTAs |"
        rule += " --- | --- | --- | --- | --- | --- |"
    lines = [head, rule]
    sizes = sorted({b for _, rows in docs for (c, d, b) in rows if d == dtype and c == coll})
    for size in sizes:
        line = f"| {human(size)} |"
        for _, rows in docs:
            impls = rows.get((coll, dtype, size), {})
            y, n = impls.get("yali"), impls.get("nccl")
            if not y or not n:
                line += " - | - | - | - | - | - |"
                continue
            line += (f" {y['time_us']:.2f} | {n['time_us']:.2f} | {n['time_us'] / y['time_us']:.2f} |"
                     f" {y['busbw_gbs']:.1f} | {n['busbw_gbs']:.1f} | {y['algo']}/{y['ctas']} |")
        lines.append(line)
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dtype", action="append", help="float, half, bfloat16 (default: all present)")
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    docs = [load(f) for f in args.files]
    dtypes = args.dtype or sorted({d for _, rows in docs for (_, d, _) in rows})
    colls = sorted({c for _, rows in docs for (c, _, _) in rows},
                   key=coll_order) or ["allreduce"]
    for coll in colls:
        for dtype in dtypes:
            if coll != "allreduce" or colls != ["allreduce"]:
                if not any(c == coll and d == dtype for _, rows in docs for (c, d, _) in rows):
                    continue
                print(f"\n**{coll} {dtype}**\n")
            else:
                print(f"\n**{dtype}**\n")
            print(table(dtype, docs, coll))


if __name__ == "__main__":
    main()
