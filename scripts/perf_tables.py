#!/usr/bin/env python3
"""Markdown tables for docs/PERF.md from yali-perf JSON files (out-of-place results).

    perf_tables.py [--dtype float] FILE [FILE ...]
    perf_tables.py --best [--dtype float] FILE [FILE ...]

One table per dtype (per collective and dtype with results of several collectives, yali-perf -C;
files from before -C are AllReduce); one column group per file (its nranks, launch mode and timing in the header):
YALI time, NCCL time, NCCL/YALI (above 1: YALI faster), both busBWs, and YALI's algorithm/CTAs.
Times in us, busBW in GB/s.

--best (issue 21's table, from the runs of gpu_check.sh's everycoll stage): the files are pooled
and one table is made per (GPUs, launch mode, timing, collective, dtype): plain buffers against
plain (the -R 0 files), then each library at its best over every file, plain ones included (a
user can always leave buffers unregistered, and NCCL on plain buffers is sometimes faster than on
its windows): -R 1 (ncclCommRegister), -R 2 (NCCL's symmetric windows), -R 2 -x 2 (also its
zero-CTA copy-engine collectives). The columns "YALI best" and "NCCL best" name the run each
best came from. Ratios above 1: YALI faster.

--best --summary SIZES (docs/PERF.md's one-table overview): one row per (collective, size) for
each dtype, one column per (GPUs, launch mode, timing) group of the pool, each cell
"NCCL/YALI plain / NCCL best/YALI best", and a last column with both bests' busBW in the largest
eager group. SIZES is a comma list of labels as the tables print them (4K,1M,16M,256M,1G).
"""
import argparse
import gzip
import json
import statistics


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def tabled(r):
    """Whether a result enters the tables: out of place, and of sum (the tables' op) or of a
    collective without one (redop "none"); -o all runs hold every op, which must not overwrite
    each other's cells."""
    return r["placement"] == "out-of-place" and r.get("redop", "sum") in ("sum", "none")


def median_record(records):
    """Of several passes of one case (--repeat), the one with the median time."""
    ordered = sorted(records, key=lambda r: r["time_us"])
    return ordered[(len(ordered) - 1) // 2]


def load(path):
    """A yali-perf JSON file, gzipped (.gz, as docs/results keeps them) or not: (doc, {(collective,
    dtype, bytes): {impl: record}}), each record the median pass of its case."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        doc = json.load(f)
    passes = {}
    for r in doc["results"]:
        if tabled(r) and r.get("time_us") is not None:
            passes.setdefault((coll_key(r), r["dtype"], r["bytes"]), {}).setdefault(r["impl"], []).append(r)
    rows = {}
    for key, impls in passes.items():
        for impl, rs in impls.items():
            # The median pass gives the figure; every pass's check gives the mark.
            rows.setdefault(key, {})[impl] = dict(median_record(rs), passes_verdict=verdict(rs))
    return doc, rows


def verdict(records):
    """'' when every record was checked and right; else a mark for the cell: a wrong result (or an
    unchecked one, -c 0) is no speed figure to compare."""
    if any((r.get("wrong") or 0) > 0 for r in records):
        return " WRONG"
    if any("wrong" in r and r["wrong"] is None for r in records):
        return " (unchecked)"
    return ""


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


def table(dtype, docs, coll="allreduce"):
    head = "| size |"
    rule = "| --- |"
    for doc, _ in docs:
        tag = f"{doc['nranks']} GPUs {doc['launch_mode']} {doc['timing']}"
        if doc.get("registered", 0) or doc.get("nccl_cta_policy") is not None:
            tag += f" {config_of(doc)}"
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
            line += (f" {y['time_us']:.2f}{y['passes_verdict']} | {n['time_us']:.2f}{n['passes_verdict']} |"
                     f" {n['time_us'] / y['time_us']:.2f} |"
                     f" {y['busbw_gbs']:.1f} | {n['busbw_gbs']:.1f} | {y['algo']}/{y['ctas']} |")
        lines.append(line)
    return "\n".join(lines)


def config_of(doc):
    """The registration of a file's run, as --best names it: R0, R1, R2, R2 x2 (-x 2)."""
    tag = f"R{doc.get('registered', 0)}"
    policy = doc.get("nccl_cta_policy")
    return tag if policy is None else f"{tag} x{policy}"


def pool(docs):
    """--best's pool: {(nranks, launch mode, timing): {(coll, dtype, bytes): {(impl, plain):
    [(time_us, busbw, config, record)]}}}, out-of-place results of every file; `plain` is whether
    the file's buffers were unregistered (-R 0)."""
    groups = {}
    for doc, _ in docs:
        group = groups.setdefault((doc["nranks"], doc["launch_mode"], doc["timing"]), {})
        plain = doc.get("registered", 0) == 0
        # A case with a wrong pass is no candidate for a library's best: none of its passes.
        wrong = {(coll_key(r), r["dtype"], r["bytes"], r["impl"]) for r in doc["results"]
                 if tabled(r) and (r.get("wrong") or 0) > 0}
        for r in doc["results"]:
            if not tabled(r) or r.get("time_us") is None or (coll_key(r), r["dtype"], r["bytes"], r["impl"]) in wrong:
                continue
            key = (coll_key(r), r["dtype"], r["bytes"])
            group.setdefault(key, {}).setdefault((r["impl"], plain), []).append(
                (r["time_us"], r["busbw_gbs"], config_of(doc), r))
    return groups


def best_of(samples):
    """The best configuration among `samples`: per configuration the median over its runs
    (--repeat, or the same run in several files), then the fastest configuration."""
    by_config = {}
    for time_us, busbw, config, record in samples:
        by_config.setdefault(config, []).append((time_us, busbw, record))
    best = None
    for config, runs in by_config.items():
        time_us = statistics.median(t for t, _, _ in runs)
        busbw = statistics.median(b for _, b, _ in runs)
        if best is None or time_us < best[0]:
            best = (time_us, busbw, config, runs[0][2])
    return best


def contenders(impls):
    """One size's four contenders, each best_of()'s tuple or None: YALI and NCCL on plain buffers,
    then each at its best over every file (plain ones included)."""
    every = lambda impl: impls.get((impl, True), []) + impls.get((impl, False), [])
    return (best_of(impls.get(("yali", True), [])), best_of(impls.get(("nccl", True), [])),
            best_of(every("yali")), best_of(every("nccl")))


def ratio(y, n):
    """NCCL time / YALI time (above 1: YALI faster), "-" when one is missing."""
    return f"{n[0] / y[0]:.2f}" if y and n else "-"


def best_table(rows, dtype, coll):
    """One --best table: rows is one group of pool()'s result."""
    lines = ["| size | YALI us | NCCL us | NCCL/YALI | YALI best us | NCCL best us | NCCL best/YALI best"
             " | YALI best | NCCL best | YALI best busBW | NCCL best busBW | YALI best algo/CTAs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    sizes = sorted({b for (c, d, b) in rows if d == dtype and c == coll})
    for size in sizes:
        yp, np_, y, n = contenders(rows[(coll, dtype, size)])
        cells = [f"{yp[0]:.2f}" if yp else "-", f"{np_[0]:.2f}" if np_ else "-", ratio(yp, np_)]
        cells += [f"{y[0]:.2f}" if y else "-", f"{n[0]:.2f}" if n else "-",
                  ratio(y, n), y[2] if y else "-", n[2] if n else "-",
                  f"{y[1]:.1f}" if y else "-", f"{n[1]:.1f}" if n else "-",
                  f"{y[3].get('algo')}/{y[3].get('ctas')}" if y else "-"]
        lines.append(f"| {human(size)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_best(docs, dtypes):
    for (nranks, launch, timing), rows in sorted(pool(docs).items()):
        for coll in sorted({c for (c, _, _) in rows}, key=coll_order):
            for dtype in dtypes or sorted({d for (c, d, _) in rows if c == coll}):
                if any(c == coll and d == dtype for (c, d, _) in rows):
                    print(f"\n**{coll} {dtype}, {nranks} GPUs, {launch}, {timing}**\n")
                    print(best_table(rows, dtype, coll))


def summary_table(docs, dtype, sizes):
    """--best --summary: the overview across every group of the pool (module docstring)."""
    groups = pool(docs)
    keys = sorted(groups, key=lambda g: (g[2] != "events", g[0], g[1]))
    colls = sorted({c for rows in groups.values() for (c, d, _) in rows if d == dtype and not c.startswith("rs_ag")},
                   key=coll_order)
    wanted = [s.strip() for s in sizes.split(",") if s.strip()]
    eager = [g for g in keys if g[2] == "events"]
    widest = max(eager or keys, key=lambda g: g[0]) if keys else None
    head = " | ".join(f"{n} GPUs {'eager' if t == 'events' else t}" for n, _, t in keys)
    lines = [f"| collective | size | {head} | {widest[0]} GPUs best busBW YALI / NCCL (GB/s) |",
             "| --- | --- | " + " | ".join("---" for _ in keys) + " | --- |"]

    def ratios(rows, coll, size):
        yp, np_, yb, nb = contenders(rows[(coll, dtype, size)])
        bw = f"{yb[1]:.1f} / {nb[1]:.1f}" if yb and nb else "-"
        return f"{ratio(yp, np_)} / {ratio(yb, nb)}", bw

    for coll in colls:
        for label in wanted:
            cells, bw = [], "-"
            for g in keys:
                rows = groups[g]
                size = next((b for (c, d, b) in rows if c == coll and d == dtype and human(b) == label), None)
                if size is None:
                    cells.append("-")
                    continue
                cell, busbw = ratios(rows, coll, size)
                cells.append(cell)
                if g == widest:
                    bw = busbw
            if all(c == "-" for c in cells):
                continue
            lines.append(f"| {coll} | {label} | " + " | ".join(cells) + f" | {bw} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", action="append", help="float, half, bfloat16 (default: all present)")
    p.add_argument("--best", action="store_true",
                   help="pool the files: plain against plain, each library at its best over every file")
    p.add_argument("--summary", metavar="SIZES",
                   help="with --best: one overview table per dtype at these sizes (4K,1M,16M,256M,1G)")
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    docs = [load(f) for f in args.files]
    if args.summary and not args.best:
        p.error("--summary needs --best")
    if args.best and args.summary:
        for dtype in args.dtype or sorted({d for _, rows in docs for (_, d, _) in rows}):
            print(f"\n**{dtype}: NCCL time / YALI time, plain / best**\n")
            print(summary_table(docs, dtype, args.summary))
        return
    if args.best:
        print_best(docs, args.dtype)
        return
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
