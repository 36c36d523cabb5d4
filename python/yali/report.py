"""Benchmark report: raw yali-perf JSON (+ yali-hw JSON + example results) -> CSV, PNG, summary.md.

A pure function of its inputs: nothing here runs a GPU or a benchmark, so a report can be
regenerated from saved raw JSON at any time:

    python3 -m yali.report --input output/2026-11-22/100000 --output output/2026-11-22/100000

Input directory layout (what yali.sweep writes; every part but the raw JSON is optional):
    raw/*.json                 yali-perf -J output, schema "yali-perf/1" (or *.json directly in it)
    hw-baseline/*.json         yali-hw --json output, schema "yali-hw/1"
    examples/results.json      [{"name", "status": PASS|FAIL|TIMEOUT|SKIP, "seconds", "tail", ...}]
    sweep.json                 the sweep's own record: its command line, failures, machine
Output: summary.md, figures/*.png, yali/<dtype>.csv, nccl/<dtype>.csv, speedup.csv.

A raw file may hold several dtypes and several runs: every result names its dtype and, from
yali-perf --repeat, its run (its pass over the sizes); a file's results are grouped exactly as if
each (dtype, run) had come in a file of its own.

Statistics (the one definition used by the CSVs, the tables and the graphs):
  - busBW columns (busbw_*): across runs. Each run (one pass of yali-perf over its sizes: a whole
    invocation, or one --repeat pass of one) reports one busBW per size and mode, computed by
    yali-perf from its mean time; mean/std/min/max/CV are over those per-run figures. std is the
    sample standard deviation (n-1), 0 with a single run.
  - iters: timed iterations summed over runs, as each result records them (yali-perf
    --max-case-time makes fewer than -n at large sizes); samples: per-iteration samples pooled.
  - time_iter_* columns: over the per-iteration samples (samples_us) pooled from all runs.
    Percentiles use linear interpolation (numpy's default). Runs without samples contribute the
    figures of their stats_us, averaged over runs.
  - SoL% = busBW mean / the measured one-way P2P bandwidth from yali-hw (median over GPU pairs of
    the best of copy-engine, SM-write and SM-read), times 100.
  - speedup = YALI busBW mean / NCCL busBW mean at the same size, dtype and mode (= NCCL time /
    YALI time); improvement = (speedup - 1) x 100 %.

Only the standard library and numpy are imported at module load; matplotlib is imported inside the
plotting functions, with the Agg backend.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import math
import os
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

PERF_SCHEMA = "yali-perf/1"
HW_SCHEMA = "yali-hw/1"
IMPLS = ("yali", "nccl")
IMPL_LABELS = {"yali": "YALI", "nccl": "NCCL"}
IMPL_COLORS = {"yali": "#1f77b4", "nccl": "#d62728"}

# yali-perf's names -> the names shown (the sweep's --timing names, --dtypes names).
TIMING_LABELS = {"events": "cuda-events", "throughput": "throughput", "latency": "latency",
                 "graph": "graph"}
TIMING_ORDER = ("events", "graph", "throughput", "latency")
DTYPE_LABELS = {"float": "fp32", "half": "fp16", "bfloat16": "bf16"}
DTYPE_ORDER = ("float", "half", "bfloat16")
LAUNCH_ORDER = ("single", "multi")
PLACEMENT_ORDER = ("out-of-place", "in-place")

# yali-perf -C names, in its order; a result without "collective" (files from before -C) is an
# AllReduce. A rooted collective measured at several roots (-r all) is one collective per root,
# keyed "<name>@root<r>".
COLL_ORDER = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "gather",
              "scatter", "alltoall", "rs_ag", "sendrecv")
COLL_LABELS = {"allreduce": "AllReduce", "reducescatter": "ReduceScatter",
               "allgather": "AllGather", "broadcast": "Broadcast", "reduce": "Reduce",
               "gather": "Gather", "scatter": "Scatter", "alltoall": "AllToAll",
               "rs_ag": "RS+AG AllReduce", "sendrecv": "SendRecv (point-to-point ring)"}
# nccl-tests' busBW factors (busBW = algBW x factor), as yali-perf applies them.
BUS_FACTORS = {"allreduce": "2(n-1)/n", "rs_ag": "2(n-1)/n", "reducescatter": "(n-1)/n",
               "allgather": "(n-1)/n", "alltoall": "(n-1)/n", "gather": "(n-1)/n",
               "scatter": "(n-1)/n", "broadcast": "1", "reduce": "1", "sendrecv": "1"}

SECTION_TITLES = (
    "1. Executive summary",
    "2. Hardware baseline",
    "3. Example correctness",
    "4. Bandwidth per dtype",
    "5. Stability",
    "6. Latency",
    "7. Speedup heat map",
    "8. How to reproduce",
)

CSV_COLUMNS = (
    "size_bytes", "size", "count", "nranks", "launch_mode", "timing", "placement", "redop",
    "runs", "iters", "samples",
    "busbw_mean_gbs", "busbw_std_gbs", "busbw_min_gbs", "busbw_max_gbs", "busbw_cv_pct",
    "algbw_mean_gbs", "time_mean_us",
    "time_iter_mean_us", "time_iter_std_us", "time_iter_min_us", "time_iter_max_us",
    "time_iter_cv_pct", "time_iter_p50_us", "time_iter_p90_us", "time_iter_p95_us",
    "time_iter_p99_us",
    "sol_pct", "wrong", "algo", "ctas",
)

FIG_DPI = 100


# ---- Formatting (the tables and the tests use these same functions) ------------------------------

def human_size(n: int) -> str:
    """4096 -> '4K', 1048576 -> '1M', 3 GiB -> '3G', 1536 -> '1.5K', 100 -> '100B'."""
    n = int(n)
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        unit = 1 << shift
        if n >= unit:
            if n % unit == 0:
                return f"{n // unit}{suffix}"
            return f"{n / unit:.3g}{suffix}"
    return f"{n}B"


def parse_size(text: str) -> int:
    """'4K' -> 4096, '2G' -> 2147483648, '1.5M', '100' (bytes). K/M/G are powers of 1024."""
    s = text.strip().upper().rstrip("B")
    mult = 1
    if s and s[-1] in "KMG":
        mult = 1 << {"K": 10, "M": 20, "G": 30}[s[-1]]
        s = s[:-1]
    try:
        value = float(s)
    except ValueError:
        raise ValueError(f"bad size '{text}' (use e.g. 4096, 4K, 1M, 2G)") from None
    if value <= 0:
        raise ValueError(f"bad size '{text}': must be positive")
    return int(round(value * mult))


def fmt_gbs(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def fmt_mean_std(mean: Optional[float], std: Optional[float]) -> str:
    if mean is None:
        return "n/a"
    return f"{fmt_gbs(mean)} ± {fmt_gbs(std or 0.0)}"


def fmt_pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def fmt_speedup(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def fmt_improvement(speedup: Optional[float]) -> str:
    return "n/a" if speedup is None else f"{(speedup - 1.0) * 100.0:+.1f}%"


def fmt_us(v: Optional[float]) -> str:
    if v is None:
        return "n/a"
    return f"{v:.1f}" if v >= 100 else f"{v:.2f}"


def dtype_label(dtype: str) -> str:
    return DTYPE_LABELS.get(dtype, dtype)


def timing_label(timing: str) -> str:
    return TIMING_LABELS.get(timing, timing)


def mode_label(launch: str, timing: str, placement: str) -> str:
    return f"{launch} · {timing_label(timing)} · {placement}"


def coll_base(key: str) -> str:
    """'broadcast@root1' -> 'broadcast'."""
    return key.split("@", 1)[0]


def coll_label(key: str) -> str:
    """'allgather' -> 'AllGather'; 'broadcast@root1' -> 'Broadcast (root 1)'."""
    base, _, root = key.partition("@")
    text = COLL_LABELS.get(base, base)
    return f"{text} (root {root[4:]})" if root else text


def coll_tag(key: str) -> str:
    """File-name form of a collective key: 'broadcast@root1' -> 'broadcast_root1'."""
    return key.replace("@", "_")


def result_collective(r: Dict[str, Any]) -> str:
    return str(r.get("collective") or "allreduce")


def collective_keys(docs: Iterable[Dict[str, Any]]) -> Tuple[List[str], set]:
    """(the collective keys present in report order, the collectives measured at several roots)."""
    roots: Dict[str, set] = {}
    for doc in docs:
        for r in doc.get("results", []):
            roots.setdefault(result_collective(r), set()).add(r.get("root"))
    multiroot = {c for c, rs in roots.items() if len(rs - {None}) > 1}
    keys = []
    for c in _order(roots, COLL_ORDER):
        if c in multiroot:
            keys += [f"{c}@root{x}" for x in sorted(roots[c] - {None})]
        else:
            keys.append(c)
    return keys, multiroot


def _result_key(r: Dict[str, Any], multiroot: set) -> str:
    c = result_collective(r)
    return f"{c}@root{r.get('root')}" if c in multiroot else c


def _order(values: Iterable[str], preferred: Sequence[str]) -> List[str]:
    vals = set(values)
    head = [v for v in preferred if v in vals]
    return head + sorted(vals - set(head))


# ---- Statistics ----------------------------------------------------------------------------------

def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def sample_std(values: Sequence[float]) -> float:
    """Sample standard deviation (n-1); 0.0 for a single value."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def percentile(values: Sequence[float], q: float) -> float:
    import numpy as np
    return float(np.percentile(np.asarray(values, dtype=float), q))


# ---- Loading -------------------------------------------------------------------------------------

def _read_json(path: str) -> Optional[Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"yali.report: skipping {path}: {e}", file=sys.stderr)
        return None


def find_perf_files(input_dir: str) -> List[str]:
    raw = os.path.join(input_dir, "raw")
    base = raw if os.path.isdir(raw) else input_dir
    return sorted(glob.glob(os.path.join(base, "*.json")))


def load_perf_docs(paths: Iterable[str]) -> List[Dict[str, Any]]:
    docs = []
    for p in paths:
        doc = _read_json(p)
        if isinstance(doc, dict) and doc.get("schema") == PERF_SCHEMA:
            doc = dict(doc)
            doc["_path"] = p
            docs.append(doc)
    return docs


def find_hw_file(input_dir: str) -> Optional[str]:
    for p in sorted(glob.glob(os.path.join(input_dir, "hw-baseline", "*.json"))):
        doc = _read_json(p)
        if isinstance(doc, dict) and doc.get("schema") == HW_SCHEMA:
            return p
    return None


def load_hw(path: Optional[str]) -> Optional[Dict[str, Any]]:
    if not path:
        return None
    doc = _read_json(path)
    if isinstance(doc, dict) and doc.get("schema") == HW_SCHEMA:
        return doc
    return None


def sol_reference(hw: Optional[Dict[str, Any]]) -> Tuple[Optional[float], Optional[float]]:
    """(measured one-way P2P GB/s, NVLink link rate GB/s) from a yali-hw document."""
    if not hw:
        return None, None
    summary = hw.get("summary") or {}
    p2p = summary.get("p2p_oneway_gbs")
    if isinstance(p2p, dict):  # tolerate {"min":..., "median":...}
        p2p = p2p.get("median", p2p.get("min"))
    rate = summary.get("nvlink_link_rate_gbs")
    p2p = float(p2p) if isinstance(p2p, (int, float)) and p2p > 0 else None
    rate = float(rate) if isinstance(rate, (int, float)) and rate > 0 else None
    return p2p, rate


# ---- Aggregation ---------------------------------------------------------------------------------

Key = Tuple[str, str, str, str, str, int]  # impl, dtype, launch, timing, placement, bytes


class Dataset:
    """All yali-perf results of one collective, grouped by (impl, dtype, launch, timing, placement,
    bytes).

    With results of several collectives and no `collective` given, its own rows are empty and
    `parts` holds one Dataset per collective (nothing is ever grouped across collectives); with
    one collective (files from before -C: AllReduce), `parts` is [self]."""

    def __init__(self, docs: List[Dict[str, Any]], sol_gbs: Optional[float] = None,
                 collective: Optional[str] = None):
        self.docs = docs
        self.sol_gbs = sol_gbs
        self.collectives, multiroot = collective_keys(docs)
        self.multi = len(self.collectives) > 1
        self.rows: Dict[Key, Dict[str, Any]] = {}
        if collective is None and self.multi:
            self.collective: Optional[str] = None
            self.parts: List["Dataset"] = [Dataset(docs, sol_gbs, c) for c in self.collectives]
            return
        self.collective = collective or (self.collectives[0] if self.collectives
                                         else "allreduce")
        self.parts = [self]
        nranks_seen = {int(d.get("nranks", 0)) for d in docs}
        groups: Dict[Key, List[Tuple[Dict[str, Any], Dict[str, Any]]]] = {}
        for doc in docs:
            launch = str(doc.get("launch_mode", "single"))
            if len(nranks_seen) > 1:
                launch = f"{launch}-{int(doc.get('nranks', 0))}gpu"
            timing = str(doc.get("timing", "events"))
            for r in doc.get("results", []):
                if _result_key(r, multiroot) != self.collective:
                    continue
                dtype = str(r.get("dtype", "float"))
                if r.get("redop", "sum") not in ("sum", "none", None):
                    dtype = f"{dtype}-{r['redop']}"
                key = (str(r["impl"]), dtype, launch, timing,
                       str(r.get("placement", "out-of-place")), int(r["bytes"]))
                groups.setdefault(key, []).append((doc, r))
        self.rows = {k: self._aggregate(k, items) for k, items in groups.items()}

    # -- the collective's names (empty prefixes with a single collective: the old report) --
    @property
    def coll_label(self) -> str:
        return coll_label(self.collective) if self.collective else "collectives"

    @property
    def tag(self) -> str:
        """File-name prefix: '' with one collective, else e.g. 'allgather'."""
        return coll_tag(self.collective) if self.multi and self.collective else ""

    def fig(self, name: str) -> str:
        return f"{self.tag}_{name}" if self.tag else name

    def dlabel(self, dtype: str) -> str:
        """The dtype's label in headings and titles, after the collective's with several."""
        dl = dtype_label(dtype)
        return f"{self.coll_label} · {dl}" if self.multi and self.collective else dl

    def all_rows(self) -> List[Dict[str, Any]]:
        return [r for p in self.parts for r in p.rows.values()]

    def _aggregate(self, key: Key, items: List[Tuple[Dict[str, Any], Dict[str, Any]]]):
        impl, dtype, launch, timing, placement, nbytes = key
        busbw = [float(r["busbw_gbs"]) for _, r in items]
        algbw = [float(r.get("algbw_gbs", 0.0)) for _, r in items]
        times = [float(r["time_us"]) for _, r in items]
        samples: List[float] = []
        fallback: List[Dict[str, Any]] = []
        # Files from before per-result counts hold only the document's -n.
        iters = sum(int(r.get("iters") or doc.get("iters") or 0) for doc, r in items)
        for _, r in items:
            s = r.get("samples_us") or []
            if s:
                samples.extend(float(x) for x in s)
            elif r.get("stats_us"):
                fallback.append(r["stats_us"])
        bmean = mean(busbw)
        bstd = sample_std(busbw)
        row: Dict[str, Any] = {
            "impl": impl, "collective": self.collective, "dtype": dtype, "size_bytes": nbytes, "size": human_size(nbytes),
            "count": items[0][1].get("count"),
            "nranks": items[0][0].get("nranks"), "launch_mode": launch, "timing": timing,
            "placement": placement, "redop": items[0][1].get("redop", "sum"),
            "runs": len(items), "iters": iters, "samples": len(samples),
            "busbw_mean_gbs": bmean, "busbw_std_gbs": bstd,
            "busbw_min_gbs": min(busbw), "busbw_max_gbs": max(busbw),
            "busbw_cv_pct": (bstd / bmean * 100.0) if bmean > 0 else None,
            "algbw_mean_gbs": mean(algbw), "time_mean_us": mean(times),
            "wrong": sum(int(r.get("wrong") or 0) for _, r in items),
            "algo": "/".join(sorted({str(r["algo"]) for _, r in items if r.get("algo")})),
            "ctas": "/".join(sorted({str(r["ctas"]) for _, r in items
                                     if r.get("ctas") is not None}, key=lambda x: int(x))),
            "busbw_runs": busbw,
            "samples_list": samples,
        }
        if samples:
            import numpy as np
            arr = np.asarray(samples, dtype=float)
            tmean = float(arr.mean())
            tstd = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
            row.update({
                "time_iter_mean_us": tmean, "time_iter_std_us": tstd,
                "time_iter_min_us": float(arr.min()), "time_iter_max_us": float(arr.max()),
                "time_iter_p50_us": percentile(samples, 50),
                "time_iter_p90_us": percentile(samples, 90),
                "time_iter_p95_us": percentile(samples, 95),
                "time_iter_p99_us": percentile(samples, 99),
            })
        elif fallback:
            def avg(field: str) -> Optional[float]:
                vals = [float(s[field]) for s in fallback if s.get(field) is not None]
                return mean(vals) if vals else None
            row.update({
                "time_iter_mean_us": avg("mean"), "time_iter_std_us": avg("std"),
                "time_iter_min_us": avg("min"), "time_iter_max_us": avg("max"),
                "time_iter_p50_us": avg("p50"), "time_iter_p90_us": avg("p90"),
                "time_iter_p95_us": avg("p95"), "time_iter_p99_us": avg("p99"),
            })
        else:
            for c in ("mean", "std", "min", "max", "p50", "p90", "p95", "p99"):
                row[f"time_iter_{c}_us"] = None
        tm, ts = row["time_iter_mean_us"], row["time_iter_std_us"]
        row["time_iter_cv_pct"] = (ts / tm * 100.0) if tm and ts is not None else None
        row["sol_pct"] = (bmean / self.sol_gbs * 100.0) if self.sol_gbs else None
        return row

    # -- queries --
    def values(self, field: int) -> set:
        return {k[field] for k in self.rows}

    def dtypes(self) -> List[str]:
        return _order(self.values(1), DTYPE_ORDER)

    def launches(self, dtype: Optional[str] = None) -> List[str]:
        vals = {k[2] for k in self.rows if dtype is None or k[1] == dtype}
        return _order(vals, LAUNCH_ORDER)

    def timings(self, dtype: Optional[str] = None) -> List[str]:
        vals = {k[3] for k in self.rows if dtype is None or k[1] == dtype}
        return _order(vals, TIMING_ORDER)

    def placements(self, dtype: Optional[str] = None) -> List[str]:
        vals = {k[4] for k in self.rows if dtype is None or k[1] == dtype}
        return _order(vals, PLACEMENT_ORDER)

    def modes(self, dtype: str) -> List[Tuple[str, str, str]]:
        """(launch, timing, placement) combinations with data for this dtype, in report order."""
        present = {(k[2], k[3], k[4]) for k in self.rows if k[1] == dtype}
        return [(l, t, p) for l in self.launches(dtype) for t in self.timings(dtype)
                for p in self.placements(dtype) if (l, t, p) in present]

    def sizes(self, dtype: str, launch: Optional[str] = None, timing: Optional[str] = None,
              placement: Optional[str] = None) -> List[int]:
        return sorted({k[5] for k in self.rows if k[1] == dtype
                       and (launch is None or k[2] == launch)
                       and (timing is None or k[3] == timing)
                       and (placement is None or k[4] == placement)})

    def get(self, impl: str, dtype: str, launch: str, timing: str, placement: str,
            nbytes: int) -> Optional[Dict[str, Any]]:
        return self.rows.get((impl, dtype, launch, timing, placement, nbytes))

    def speedup(self, dtype: str, launch: str, timing: str, placement: str,
                nbytes: int) -> Optional[float]:
        y = self.get("yali", dtype, launch, timing, placement, nbytes)
        n = self.get("nccl", dtype, launch, timing, placement, nbytes)
        if not y or not n or n["busbw_mean_gbs"] <= 0:
            return None
        return y["busbw_mean_gbs"] / n["busbw_mean_gbs"]

    def reference_mode(self, dtype: str, launch: str) -> Optional[Tuple[str, str]]:
        """(timing, placement) of the headline figures: cuda-events, out-of-place if measured."""
        modes = [(t, p) for (l, t, p) in self.modes(dtype) if l == launch]
        return modes[0] if modes else None

    def peak(self, impl: str, dtype: str, launch: str, timing: str,
             placement: str) -> Optional[Dict[str, Any]]:
        rows = [self.get(impl, dtype, launch, timing, placement, b)
                for b in self.sizes(dtype, launch, timing, placement)]
        rows = [r for r in rows if r]
        return max(rows, key=lambda r: r["busbw_mean_gbs"]) if rows else None


def headline(ds: Dataset) -> List[Dict[str, Any]]:
    """Per collective, dtype and launch mode: peak busBW of each library (reference
    timing/placement), the speedup of the peaks, and the geometric mean of the per-size speedups."""
    out = []
    for part in ds.parts:
        for dtype in part.dtypes():
            for launch in part.launches(dtype):
                ref = part.reference_mode(dtype, launch)
                if not ref:
                    continue
                timing, placement = ref
                py = part.peak("yali", dtype, launch, timing, placement)
                pn = part.peak("nccl", dtype, launch, timing, placement)
                sps = [s for s in (part.speedup(dtype, launch, timing, placement, b)
                                   for b in part.sizes(dtype, launch, timing, placement)) if s]
                out.append({
                    "collective": part.collective, "dtype": dtype, "launch": launch,
                    "timing": timing, "placement": placement,
                    "yali_peak": py, "nccl_peak": pn,
                    "peak_speedup": (py["busbw_mean_gbs"] / pn["busbw_mean_gbs"])
                    if py and pn and pn["busbw_mean_gbs"] > 0 else None,
                    "geomean_speedup": math.exp(mean([math.log(s) for s in sps]))
                    if sps else None,
                    "wins": sum(1 for s in sps if s > 1.0), "compared": len(sps),
                })
    return out


def collective_summary(ds: Dataset) -> List[Dict[str, Any]]:
    """One entry per collective: YALI vs NCCL speedups over every size of every dtype and launch
    mode (in its reference timing/placement, as the headline), their median, the best and the worst
    (speedup, size, dtype, launch), how many sizes YALI won, and #wrong summed over every result
    of both libraries in every mode."""
    import numpy as np
    out = []
    for part in ds.parts:
        points = []  # (speedup, bytes, dtype, launch)
        for dtype in part.dtypes():
            for launch in part.launches(dtype):
                ref = part.reference_mode(dtype, launch)
                if not ref:
                    continue
                for b in part.sizes(dtype, launch, *ref):
                    sp = part.speedup(dtype, launch, ref[0], ref[1], b)
                    if sp:
                        points.append((sp, b, dtype, launch))
        combos = {(d, l) for _, _, d, l in points}
        out.append({
            "collective": part.collective,
            "median_speedup": float(np.median([p[0] for p in points])) if points else None,
            "best": max(points, key=lambda p: p[0]) if points else None,
            "worst": min(points, key=lambda p: p[0]) if points else None,
            "several_modes": len(combos) > 1,
            "wins": sum(1 for p in points if p[0] > 1.0), "compared": len(points),
            "wrong": sum(int(r["wrong"] or 0) for r in part.rows.values()),
            "results": len(part.rows),
        })
    return out


def headline_lines(ds: Dataset) -> List[str]:
    """A few plain-text lines for the sweep's closing summary."""
    lines = []
    for h in headline(ds):
        y, n = h["yali_peak"], h["nccl_peak"]
        ytxt = f"YALI {fmt_gbs(y['busbw_mean_gbs'])} GB/s @{y['size']}" if y else "YALI n/a"
        ntxt = f"NCCL {fmt_gbs(n['busbw_mean_gbs'])} GB/s @{n['size']}" if n else "NCCL n/a"
        coll = f"{coll_label(h['collective'])}: " if ds.multi else ""
        lines.append(
            f"{coll}{dtype_label(h['dtype']):5} {h['launch']:7} ({timing_label(h['timing'])}, "
            f"{h['placement']}): peak busBW {ytxt}, {ntxt}, peak speedup "
            f"{fmt_speedup(h['peak_speedup'])}, geomean over sizes "
            f"{fmt_speedup(h['geomean_speedup'])} (YALI faster at {h['wins']}/{h['compared']})")
    return lines


# ---- CSV -----------------------------------------------------------------------------------------

def _csv_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def write_csvs(ds: Dataset, out_dir: str) -> List[str]:
    """<impl>/<dtype>.csv per library and dtype (<impl>/<collective>_<dtype>.csv with several
    collectives) and speedup.csv (with a leading collective column with several)."""
    written = []
    for part in ds.parts:
        for impl in IMPLS:
            for dtype in part.dtypes():
                rows = [r for k, r in part.rows.items() if k[0] == impl and k[1] == dtype]
                if not rows:
                    continue
                order = {m: i for i, m in enumerate(part.modes(dtype))}
                rows.sort(key=lambda r: (order.get((r["launch_mode"], r["timing"],
                                                    r["placement"]), 99), r["size_bytes"]))
                path = os.path.join(out_dir, impl, f"{part.fig(dtype_label(dtype))}.csv")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", newline="", encoding="utf-8") as f:
                    w = csv.writer(f)
                    w.writerow(CSV_COLUMNS)
                    for r in rows:
                        w.writerow([_csv_value(r.get(c)) for c in CSV_COLUMNS])
                written.append(path)
    path = os.path.join(out_dir, "speedup.csv")
    lead = ("collective",) if ds.multi else ()
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(lead + ("dtype", "launch_mode", "timing", "placement", "size_bytes", "size",
                           "yali_busbw_mean_gbs", "nccl_busbw_mean_gbs", "speedup",
                           "improvement_pct"))
        for part in ds.parts:
            cell = (part.collective,) if ds.multi else ()
            for dtype in part.dtypes():
                for (l, t, p) in part.modes(dtype):
                    for b in part.sizes(dtype, l, t, p):
                        s = part.speedup(dtype, l, t, p, b)
                        y = part.get("yali", dtype, l, t, p, b)
                        n = part.get("nccl", dtype, l, t, p, b)
                        w.writerow(cell + (dtype_label(dtype), l, t, p, b, human_size(b),
                                           _csv_value(y["busbw_mean_gbs"] if y else None),
                                           _csv_value(n["busbw_mean_gbs"] if n else None),
                                           _csv_value(s),
                                           _csv_value((s - 1.0) * 100.0 if s else None)))
    written.append(path)
    return written


# ---- Graphs --------------------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
                         "legend.fontsize": 8, "figure.dpi": FIG_DPI})
    return plt


def _size_axis(ax, sizes: Sequence[int]) -> None:
    """Log2 size axis labelled 4K/1M/1G at (at most ~10 of) the measured sizes."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if len(ticks) > 10:
        step = math.ceil(len(ticks) / 10)
        ticks = ticks[::step]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human_size(int(round(x)))))
    ax.set_xlabel("message size (bytes)")


def _log_y(ax, axis: str = "y") -> None:
    """Log axis with plain-number labels (also at 2x and 5x), so values can be read off."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    getattr(ax, f"set_{axis}scale")("log")
    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _save(fig, out_dir: str, name: str) -> str:
    rel = f"figures/{name}.png"
    path = os.path.join(out_dir, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.tight_layout()
    # metadata=None-ish: no software/date chunks, so regenerated figures are byte-stable.
    fig.savefig(path, dpi=FIG_DPI, metadata={"Software": None},
                pil_kwargs={"optimize": True})
    import matplotlib.pyplot as plt
    plt.close(fig)
    return rel


def _series(ds: Dataset, impl: str, dtype: str, launch: str, timing: str, placement: str,
            field: str) -> Tuple[List[int], List[float]]:
    xs, ys = [], []
    for b in ds.sizes(dtype, launch, timing, placement):
        r = ds.get(impl, dtype, launch, timing, placement, b)
        if r and r.get(field) is not None:
            xs.append(b)
            ys.append(r[field])
    return xs, ys


def plot_headline(ds: Dataset, heads: List[Dict[str, Any]], out_dir: str) -> Optional[str]:
    if not heads:
        return None
    plt = _plt()
    import numpy as np
    labels = [(f"{coll_label(h['collective'])}\n" if ds.multi else "")
              + f"{dtype_label(h['dtype'])}\n{h['launch']}" for h in heads]
    x = np.arange(len(heads))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(heads) + 2), 3.6))
    w = 0.38
    for i, impl in enumerate(IMPLS):
        vals = [(h[f"{impl}_peak"] or {}).get("busbw_mean_gbs", 0.0) for h in heads]
        bars = ax.bar(x + (i - 0.5) * w, vals, w, label=IMPL_LABELS[impl], color=IMPL_COLORS[impl])
        for rect, v in zip(bars, vals):
            if v:
                ax.annotate(f"{v:.0f}", (rect.get_x() + rect.get_width() / 2, v),
                            ha="center", va="bottom", fontsize=7)
    if ds.sol_gbs:
        ax.axhline(ds.sol_gbs, ls="--", color="gray", lw=1, label="measured P2P one-way")
    ax.set_xticks(x)
    ax.set_xticklabels(labels)
    top = max([(h[f"{i}_peak"] or {}).get("busbw_mean_gbs", 0.0) for h in heads for i in IMPLS]
              + [ds.sol_gbs or 0.0])
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    ax.set_ylabel("peak busBW (GB/s)")
    ax.set_title(f"Peak {'busBW per collective' if ds.multi else ds.coll_label + ' busBW'} "
                 "(cuda-events, out-of-place where measured)")
    ax.legend(loc="upper left", ncol=3)
    return _save(fig, out_dir, ds.fig("executive_peak_busbw"))


def plot_bandwidth(ds: Dataset, dtype: str, out_dir: str, link_rate: Optional[float]) -> str:
    plt = _plt()
    launches = ds.launches(dtype)
    fig, axes = plt.subplots(1, len(launches), figsize=(4.2 * len(launches) + 0.6, 3.6),
                             squeeze=False, sharey=True)
    for ax, launch in zip(axes[0], launches):
        timing, placement = ds.reference_mode(dtype, launch)
        for impl in IMPLS:
            xs, ys = _series(ds, impl, dtype, launch, timing, placement, "busbw_mean_gbs")
            _, es = _series(ds, impl, dtype, launch, timing, placement, "busbw_std_gbs")
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", ms=3, capsize=2,
                            label=IMPL_LABELS[impl], color=IMPL_COLORS[impl])
        if ds.sol_gbs:
            ax.axhline(ds.sol_gbs, ls="--", color="gray", lw=1, label="measured P2P one-way")
        if link_rate:
            ax.axhline(link_rate, ls=":", color="black", lw=1, label="NVLink link rate")
        _size_axis(ax, ds.sizes(dtype, launch, timing, placement))
        ax.set_title(f"{ds.dlabel(dtype)}, {mode_label(launch, timing, placement)}")
        ax.set_ylabel("busBW (GB/s)")
        ax.legend(loc="upper left")
    return _save(fig, out_dir, ds.fig(f"bandwidth_{dtype_label(dtype)}"))


def plot_speedup(ds: Dataset, dtype: str, out_dir: str) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    styles = {"single": "-", "multi": "--"}
    for (l, t, p) in ds.modes(dtype):
        xs, ys = [], []
        for b in ds.sizes(dtype, l, t, p):
            s = ds.speedup(dtype, l, t, p, b)
            if s:
                xs.append(b)
                ys.append(s)
        if xs:
            ax.plot(xs, ys, marker="o", ms=3, ls=styles.get(l.split("-")[0], "-."),
                    label=mode_label(l, t, p))
    ax.axhline(1.0, color="black", lw=1)
    _size_axis(ax, ds.sizes(dtype))
    ax.set_ylabel("speedup (YALI busBW / NCCL busBW)")
    ax.set_title(f"{ds.dlabel(dtype)}: YALI speedup over NCCL")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, out_dir, ds.fig(f"speedup_{dtype_label(dtype)}"))


def plot_timing_modes(ds: Dataset, dtype: str, out_dir: str) -> str:
    plt = _plt()
    launches = ds.launches(dtype)
    fig, axes = plt.subplots(1, len(launches), figsize=(4.2 * len(launches) + 0.6, 3.6),
                             squeeze=False, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, launch in zip(axes[0], launches):
        placement = ds.reference_mode(dtype, launch)[1]
        for i, timing in enumerate(ds.timings(dtype)):
            for impl, ls in (("yali", "-"), ("nccl", "--")):
                xs, ys = _series(ds, impl, dtype, launch, timing, placement, "time_mean_us")
                if xs:
                    ax.plot(xs, ys, ls=ls, marker="o", ms=2.5, color=colors[i % len(colors)],
                            label=f"{IMPL_LABELS[impl]} {timing_label(timing)}")
        _log_y(ax)
        _size_axis(ax, ds.sizes(dtype, launch))
        ax.set_ylabel(f"time per {ds.coll_label} (µs)")
        ax.set_title(f"{ds.dlabel(dtype)}, {launch}, {placement}: timing modes")
        ax.legend(fontsize=7, ncol=2)
    return _save(fig, out_dir, ds.fig(f"timing_modes_{dtype_label(dtype)}"))


def plot_stability(ds: Dataset, dtype: str, out_dir: str) -> str:
    """Left: each size's busBW across runs relative to its mean (error bar: ± std, band: min–max);
    right: CV across runs and per-iteration CV of the time."""
    plt = _plt()
    launches = ds.launches(dtype)
    fig, axes = plt.subplots(len(launches), 2, figsize=(8.4, 2.9 * len(launches) + 0.4),
                             squeeze=False)
    for row, launch in enumerate(launches):
        timing, placement = ds.reference_mode(dtype, launch)
        ax_bw, ax_cv = axes[row]
        for k, impl in enumerate(IMPLS):
            xs, ys = _series(ds, impl, dtype, launch, timing, placement, "busbw_mean_gbs")
            if not xs:
                continue
            _, es = _series(ds, impl, dtype, launch, timing, placement, "busbw_std_gbs")
            _, lo = _series(ds, impl, dtype, launch, timing, placement, "busbw_min_gbs")
            _, hi = _series(ds, impl, dtype, launch, timing, placement, "busbw_max_gbs")
            c = IMPL_COLORS[impl]
            shift = 1.06 if k else 1 / 1.06  # side by side on the log2 axis
            xo = [x * shift for x in xs]
            ax_bw.errorbar(xo, [100.0] * len(xs), yerr=[e / m * 100 for e, m in zip(es, ys)],
                           fmt="o", ms=3, capsize=3, color=c, label=f"{IMPL_LABELS[impl]} ± std")
            ax_bw.vlines(xo, [l / m * 100 for l, m in zip(lo, ys)],
                         [h / m * 100 for h, m in zip(hi, ys)], color=c, alpha=0.35, lw=6,
                         label=f"{IMPL_LABELS[impl]} min–max")
            cx, cy = _series(ds, impl, dtype, launch, timing, placement, "busbw_cv_pct")
            ax_cv.plot(cx, cy, marker="o", ms=3, color=c,
                       label=f"{IMPL_LABELS[impl]} busBW CV across runs")
            tx, ty = _series(ds, impl, dtype, launch, timing, placement, "time_iter_cv_pct")
            ax_cv.plot(tx, ty, ls="--", marker="x", ms=3, color=c,
                       label=f"{IMPL_LABELS[impl]} time CV per iteration")
        ax_bw.set_ylabel("busBW across runs (% of mean)")
        ax_bw.set_title(f"{ds.dlabel(dtype)}, {mode_label(launch, timing, placement)}",
                        fontsize=8)
        ax_cv.set_ylabel("coefficient of variation (%)")
        ax_cv.set_title("variation", fontsize=8)
        for ax in (ax_bw, ax_cv):
            _size_axis(ax, ds.sizes(dtype, launch, timing, placement))
            ax.legend(fontsize=6)
    return _save(fig, out_dir, ds.fig(f"stability_{dtype_label(dtype)}"))


def _pick_sizes(sizes: Sequence[int], n: int) -> List[int]:
    if len(sizes) <= n:
        return list(sizes)
    idx = sorted({round(i * (len(sizes) - 1) / (n - 1)) for i in range(n)})
    return [sizes[i] for i in idx]


def latency_mode(ds: Dataset, dtype: str) -> Optional[str]:
    """The timing mode whose per-iteration samples describe per-call latency best."""
    for t in ("latency", "events", "graph", "throughput"):
        if t in ds.timings(dtype):
            return t
    return None


def _latency_placement(ds: Dataset, dtype: str) -> str:
    ps = ds.placements(dtype)
    return ps[0] if ps else "out-of-place"


def plot_latency_box(ds: Dataset, dtype: str, timing: str, out_dir: str) -> Optional[str]:
    plt = _plt()
    placement = _latency_placement(ds, dtype)
    launches = [l for l in ds.launches(dtype) if ds.sizes(dtype, l, timing, placement)]
    if not launches:
        return None
    fig, axes = plt.subplots(1, len(launches), figsize=(4.6 * len(launches) + 0.6, 3.6),
                             squeeze=False, sharey=True)
    drew = False
    for ax, launch in zip(axes[0], launches):
        sizes = _pick_sizes(ds.sizes(dtype, launch, timing, placement), 8)
        for j, impl in enumerate(IMPLS):
            data, pos = [], []
            for i, b in enumerate(sizes):
                r = ds.get(impl, dtype, launch, timing, placement, b)
                if r and r["samples_list"]:
                    data.append(r["samples_list"])
                    pos.append(i * 3 + j)
            if data:
                drew = True
                bp = ax.boxplot(data, positions=pos, widths=0.8, patch_artist=True,
                                showfliers=True, flierprops={"markersize": 2},
                                medianprops={"color": "black"})
                for patch in bp["boxes"]:
                    patch.set_facecolor(IMPL_COLORS[impl])
                    patch.set_alpha(0.5)
                ax.plot([], [], color=IMPL_COLORS[impl], lw=6, alpha=0.5, label=IMPL_LABELS[impl])
        ax.set_xticks([i * 3 + 0.5 for i in range(len(sizes))])
        ax.set_xticklabels([human_size(b) for b in sizes])
        _log_y(ax)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("time per call (µs)")
        ax.set_title(f"{ds.dlabel(dtype)}, {mode_label(launch, timing, placement)}", fontsize=8)
        ax.legend()
    if not drew:
        plt.close(fig)
        return None
    return _save(fig, out_dir, ds.fig(f"latency_box_{dtype_label(dtype)}"))


def plot_latency_percentiles(ds: Dataset, dtype: str, timing: str, out_dir: str) -> Optional[str]:
    plt = _plt()
    placement = _latency_placement(ds, dtype)
    launches = [l for l in ds.launches(dtype) if ds.sizes(dtype, l, timing, placement)]
    if not launches:
        return None
    fig, axes = plt.subplots(1, len(launches), figsize=(4.2 * len(launches) + 0.6, 3.6),
                             squeeze=False, sharey=True)
    for ax, launch in zip(axes[0], launches):
        for impl in IMPLS:
            for q, ls in (("p50", "-"), ("p95", "--"), ("p99", ":")):
                xs, ys = _series(ds, impl, dtype, launch, timing, placement, f"time_iter_{q}_us")
                if xs:
                    ax.plot(xs, ys, ls=ls, marker="o", ms=2.5, color=IMPL_COLORS[impl],
                            label=f"{IMPL_LABELS[impl]} {q.upper()}")
        _log_y(ax)
        _size_axis(ax, ds.sizes(dtype, launch, timing, placement))
        ax.set_ylabel("time per call (µs)")
        ax.set_title(f"{ds.dlabel(dtype)}, {mode_label(launch, timing, placement)}", fontsize=8)
        ax.legend(fontsize=7, ncol=2)
    return _save(fig, out_dir, ds.fig(f"latency_percentiles_{dtype_label(dtype)}"))


def plot_latency_cdf(ds: Dataset, dtype: str, timing: str, out_dir: str) -> Optional[str]:
    plt = _plt()
    import numpy as np
    placement = _latency_placement(ds, dtype)
    sizes = _pick_sizes(ds.sizes(dtype, None, timing, placement), 3)
    if not sizes:
        return None
    fig, axes = plt.subplots(1, len(sizes), figsize=(3.6 * len(sizes) + 0.6, 3.4), squeeze=False)
    styles = {"single": "-", "multi": "--"}
    drew = False
    for ax, b in zip(axes[0], sizes):
        for launch in ds.launches(dtype):
            for impl in IMPLS:
                r = ds.get(impl, dtype, launch, timing, placement, b)
                if not r or not r["samples_list"]:
                    continue
                drew = True
                xs = np.sort(np.asarray(r["samples_list"], dtype=float))
                ys = np.arange(1, xs.size + 1) / xs.size
                ax.step(xs, ys, where="post", color=IMPL_COLORS[impl],
                        ls=styles.get(launch.split("-")[0], "-."),
                        label=f"{IMPL_LABELS[impl]} {launch}")
        _log_y(ax, "x")
        ax.set_xlabel("time per call (µs)")
        ax.set_ylabel("fraction of calls")
        ax.set_title(f"{ds.dlabel(dtype)} {human_size(b)}, {timing_label(timing)}", fontsize=8)
        ax.legend(fontsize=7)
    if not drew:
        plt.close(fig)
        return None
    return _save(fig, out_dir, ds.fig(f"latency_cdf_{dtype_label(dtype)}"))


def plot_heatmap(ds: Dataset, out_dir: str) -> Optional[str]:
    """Speedup per mode (rows: dtype x launch x timing x placement) and size (columns)."""
    import numpy as np
    rows = [(d, l, t, p) for d in ds.dtypes() for (l, t, p) in ds.modes(d)]
    sizes = sorted({k[5] for k in ds.rows})
    if not rows or not sizes:
        return None
    grid = np.full((len(rows), len(sizes)), np.nan)
    for i, (d, l, t, p) in enumerate(rows):
        for j, b in enumerate(sizes):
            s = ds.speedup(d, l, t, p, b)
            if s:
                grid[i, j] = s
    if np.all(np.isnan(grid)):
        return None
    plt = _plt()
    from matplotlib.colors import TwoSlopeNorm
    finite = grid[np.isfinite(grid)]
    lo, hi = min(float(finite.min()), 0.99), max(float(finite.max()), 1.01)
    fig, ax = plt.subplots(figsize=(min(14.0, 3.2 + 0.42 * len(sizes)),
                                    min(14.0, 1.4 + 0.24 * len(rows))))
    im = ax.imshow(grid, aspect="auto", cmap="RdBu", norm=TwoSlopeNorm(1.0, lo, hi))
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels([human_size(b) for b in sizes], rotation=45 if len(sizes) > 12 else 0)
    ax.set_xlabel("message size (bytes)")
    ax.set_yticks(range(len(rows)))
    short = {"out-of-place": "oop", "in-place": "in-place"}
    ax.set_yticklabels([f"{dtype_label(d)} {l} {timing_label(t)} {short.get(p, p)}"
                        for (d, l, t, p) in rows], fontsize=7)
    ax.grid(False)
    for i in range(1, len(rows)):  # a line between dtypes
        if rows[i][0] != rows[i - 1][0]:
            ax.axhline(i - 0.5, color="black", lw=1)
    if grid.size <= 600:
        for i in range(len(rows)):
            for j in range(len(sizes)):
                v = grid[i, j]
                if np.isfinite(v):
                    strong = v > 1.0 + 0.6 * (hi - 1.0) or v < 1.0 - 0.6 * (1.0 - lo)
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=5.5,
                            color="white" if strong else "black")
    cb = fig.colorbar(im, ax=ax, fraction=0.04)
    cb.set_label("speedup (YALI / NCCL busBW)")
    ax.set_title(("" if not ds.multi else f"{ds.coll_label}: ")
                 + "YALI speedup over NCCL (blue: YALI faster, red: NCCL faster)")
    return _save(fig, out_dir, ds.fig("speedup_heatmap"))


# ---- Markdown ------------------------------------------------------------------------------------

def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines


def _img(alt: str, rel: Optional[str]) -> List[str]:
    return [f"![{alt}]({rel})", ""] if rel else []


def mode_table(ds: Dataset, dtype: str, launch: str, timing: str, placement: str) -> List[str]:
    header = ("size", "YALI GB/s (mean ± std)", "YALI SoL%", "NCCL GB/s (mean ± std)",
              "NCCL SoL%", "speedup", "improvement")
    rows = []
    for b in ds.sizes(dtype, launch, timing, placement):
        y = ds.get("yali", dtype, launch, timing, placement, b)
        n = ds.get("nccl", dtype, launch, timing, placement, b)
        s = ds.speedup(dtype, launch, timing, placement, b)
        rows.append((human_size(b),
                     fmt_mean_std(y["busbw_mean_gbs"], y["busbw_std_gbs"]) if y else "n/a",
                     fmt_pct(y["sol_pct"]) if y else "n/a",
                     fmt_mean_std(n["busbw_mean_gbs"], n["busbw_std_gbs"]) if n else "n/a",
                     fmt_pct(n["sol_pct"]) if n else "n/a",
                     fmt_speedup(s), fmt_improvement(s)))
    return _table(header, rows)


def _hw_section(hw: Optional[Dict[str, Any]], hw_path: Optional[str]) -> List[str]:
    out = []
    if not hw:
        return ["No hardware baseline (yali-hw was not run or not built), so SoL% columns say "
                "n/a.", ""]
    p2p, rate = sol_reference(hw)
    s = hw.get("summary") or {}
    out += [f"From `{os.path.basename(hw_path or 'yali-hw.json')}`: "
            f"{hw.get('bytes', 0) / 2**30:.3g} GiB per transfer, {hw.get('statistic', 'median')} "
            f"of {hw.get('reps', '?')} repetitions; GB/s = 1e9 bytes/s.", ""]
    nvml = hw.get("nvml") or {}
    if not nvml.get("ok", True):
        out += [f"NVML was unavailable: {nvml.get('error')}. NVLink counts are unknown.", ""]
    out += _table(("GPU", "name", "PCI", "NVLinks", "GB/s per link",
                   "link rate GB/s per direction"),
                  [(g.get("index"), g.get("name"), g.get("pci_bus_id"),
                    g.get("nvlinks") if g.get("nvlinks") is not None else "n/a",
                    fmt_gbs(g.get("nvlink_gbs_per_link")),
                    fmt_gbs(g["nvlinks"] * g["nvlink_gbs_per_link"])
                    if g.get("nvlinks") and g.get("nvlink_gbs_per_link") else "n/a")
                   for g in hw.get("gpus", [])])
    out.append("")
    out += ["P2P per ordered pair (one-way: src → dst; both: total of the two directions at "
            "once; SM write: src's kernel stores into dst; SM read: dst's kernel loads from src):",
            ""]
    out += _table(("src → dst", "P2P", "CE one-way", "CE both", "SM write", "SM read", "SM both"),
                  [(f"{p['src']} → {p['dst']}", "yes" if p.get("p2p") else "no",
                    fmt_gbs(p.get("ce_oneway_gbs")), fmt_gbs(p.get("ce_bidir_gbs")),
                    fmt_gbs(p.get("sm_write_gbs")), fmt_gbs(p.get("sm_read_gbs")),
                    fmt_gbs(p.get("sm_bidir_gbs"))) for p in hw.get("pairs", [])])
    out.append("")
    d2d = hw.get("local_d2d_gbs") or []
    if d2d:
        out += ["Local device-to-device copy (" + str(hw.get("local_d2d_counts",
                                                             "bytes read + bytes written"))
                + "): " + ", ".join(f"GPU {i}: {fmt_gbs(v)} GB/s" for i, v in enumerate(d2d)),
                ""]
    out += _table(("reference", "GB/s"), [
        ("measured P2P one-way (SoL% reference; " + str(s.get(
            "p2p_oneway_basis", "median over pairs of the best one-way figure")) + ")",
         fmt_gbs(p2p)),
        ("P2P one-way, min / max over pairs",
         f"{fmt_gbs(s.get('p2p_oneway_min_gbs'))} / {fmt_gbs(s.get('p2p_oneway_max_gbs'))}"),
        ("P2P both ways, per direction", fmt_gbs(s.get("p2p_bidir_per_direction_gbs"))),
        ("NVLink link rate (links × per-link rate, per direction)", fmt_gbs(rate)),
    ])
    out.append("")
    return out


def _examples_section(examples: Optional[List[Dict[str, Any]]]) -> List[str]:
    if examples is None:
        return ["Examples were not run.", ""]
    if not examples:
        return ["No example executables were found (`<build>/examples/yali-example-*`).", ""]
    npass = sum(1 for e in examples if e.get("status") == "PASS")
    out = [f"{npass} of {len(examples)} examples passed.", ""]
    rows = []
    for e in examples:
        tail = (e.get("tail") or "").strip().splitlines()
        last = tail[-1] if tail else ""
        last = last.replace("|", "\\|")[:100]
        secs = e.get("seconds")
        rows.append((f"`{e.get('name')}`", f"**{e.get('status')}**",
                     f"{secs:.1f}" if isinstance(secs, (int, float)) else "n/a",
                     f"`{last}`" if last else ""))
    out += _table(("example", "result", "time (s)", "last output line"), rows)
    out.append("")
    return out


def _reproduce_section(docs, sweep: Optional[Dict[str, Any]], input_dir: str,
                       output_dir: str) -> List[str]:
    out = []
    if sweep and sweep.get("command"):
        out += ["The sweep that produced these results (from the repository root):", "", "```",
                sweep["command"], "```", ""]
        if sweep.get("commit"):
            out += [f"Commit: `{sweep['commit']}`" + (" (with local changes)"
                                                     if sweep.get("dirty") else ""), ""]
    cmds = []
    for d in docs:
        c = d.get("command")
        if c and c not in cmds:
            cmds.append(c)
    if cmds:
        out += [f"The yali-perf invocations ({len(cmds)} distinct):", "", "```"]
        out += cmds[:60]
        if len(cmds) > 60:
            out.append(f"# ... and {len(cmds) - 60} more (see raw/*.json, field 'command')")
        out += ["```", ""]
    out += ["Regenerate this report from the saved raw JSON (no GPU needed):", "", "```",
            f"PYTHONPATH=python python3 -m yali.report --input {input_dir} --output {output_dir}",
            "```", ""]
    return out


def _bus_factor_text(ds: Dataset) -> str:
    if ds.collectives in ([], ["allreduce"]):
        return "busBW = algBW × 2(n-1)/n (nccl-tests' AllReduce factor)"
    bases = _order({coll_base(c) for c in ds.collectives}, COLL_ORDER)
    if len(bases) == 1:
        return (f"busBW = algBW × {BUS_FACTORS.get(bases[0], '?')} (nccl-tests' "
                f"{coll_label(bases[0])} factor)")
    return ("busBW = algBW × nccl-tests' factor of the collective ("
            + ", ".join(f"{coll_label(c)} {BUS_FACTORS.get(c, '?')}" for c in bases) + ")")


def _collective_table(ds: Dataset) -> List[str]:
    """The executive table with several collectives: one row per collective."""
    rows = []
    for c in collective_summary(ds):
        def point(p):
            if not p:
                return "n/a"
            text = f"{fmt_speedup(p[0])} @ {human_size(p[1])}"
            return text + (f" ({dtype_label(p[2])}, {p[3]})" if c["several_modes"] else "")
        rows.append((coll_label(c["collective"]), fmt_speedup(c["median_speedup"]),
                     point(c["best"]), point(c["worst"]), f"{c['wins']}/{c['compared']}",
                     str(c["wrong"])))
    return _table(("collective", "median speedup (YALI / NCCL busBW)", "best (size)",
                   "worst (size)", "sizes YALI faster", "#wrong total"), rows)


def _bandwidth_part(ds: Dataset, output_dir: str, link_rate: Optional[float]) -> List[str]:
    md: List[str] = []
    for dtype in ds.dtypes():
        dl = ds.dlabel(dtype)
        md += [f"### {dl}", ""]
        md += _img(f"{dl} bandwidth", plot_bandwidth(ds, dtype, output_dir, link_rate))
        md += _img(f"{dl} speedup", plot_speedup(ds, dtype, output_dir))
        md += _img(f"{dl} timing modes", plot_timing_modes(ds, dtype, output_dir))
        for (l, t, p) in ds.modes(dtype):
            md += [f"#### {dl} · {mode_label(l, t, p)}", ""]
            md += mode_table(ds, dtype, l, t, p)
            md.append("")
    return md


def _stability_part(ds: Dataset, output_dir: str) -> List[str]:
    md: List[str] = []
    for dtype in ds.dtypes():
        dl = ds.dlabel(dtype)
        md += [f"### {dl}", ""]
        md += _img(f"{dl} stability", plot_stability(ds, dtype, output_dir))
        rows = []
        for launch in ds.launches(dtype):
            timing, placement = ds.reference_mode(dtype, launch)
            for b in ds.sizes(dtype, launch, timing, placement):
                cells = [human_size(b), f"{launch} · {timing_label(timing)} · {placement}"]
                for impl in IMPLS:
                    r = ds.get(impl, dtype, launch, timing, placement, b)
                    if r:
                        spread = ((r["busbw_max_gbs"] - r["busbw_min_gbs"]) / r["busbw_mean_gbs"]
                                  * 100.0) if r["busbw_mean_gbs"] > 0 else None
                        cells += [str(r["runs"]), fmt_pct(r["busbw_cv_pct"]), fmt_pct(spread),
                                  fmt_pct(r["time_iter_cv_pct"])]
                    else:
                        cells += ["0", "n/a", "n/a", "n/a"]
                rows.append(cells)
        md += _table(("size", "mode", "YALI runs", "YALI busBW CV", "YALI spread",
                      "YALI per-iter CV", "NCCL runs", "NCCL busBW CV", "NCCL spread",
                      "NCCL per-iter CV"), rows)
        md.append("")
    return md


def _latency_part(ds: Dataset, output_dir: str) -> List[str]:
    md: List[str] = []
    for dtype in ds.dtypes():
        dl = ds.dlabel(dtype)
        timing = latency_mode(ds, dtype)
        if not timing:
            continue
        placement = _latency_placement(ds, dtype)
        md += [f"### {dl} ({timing_label(timing)}, {placement})", ""]
        md += _img(f"{dl} latency box plot", plot_latency_box(ds, dtype, timing, output_dir))
        md += _img(f"{dl} latency percentiles",
                   plot_latency_percentiles(ds, dtype, timing, output_dir))
        md += _img(f"{dl} latency CDF", plot_latency_cdf(ds, dtype, timing, output_dir))
        for launch in ds.launches(dtype):
            sizes = ds.sizes(dtype, launch, timing, placement)
            if not sizes:
                continue
            md += [f"#### {dl} · {mode_label(launch, timing, placement)} · percentiles", ""]
            rows = []
            for b in sizes:
                cells = [human_size(b)]
                for impl in IMPLS:
                    r = ds.get(impl, dtype, launch, timing, placement, b) or {}
                    cells += [fmt_us(r.get("time_iter_p50_us")), fmt_us(r.get("time_iter_p95_us")),
                              fmt_us(r.get("time_iter_p99_us"))]
                rows.append(cells)
            md += _table(("size", "YALI P50 µs", "YALI P95 µs", "YALI P99 µs", "NCCL P50 µs",
                          "NCCL P95 µs", "NCCL P99 µs"), rows)
            md.append("")
    return md


def build_summary(ds: Dataset, hw: Optional[Dict[str, Any]], hw_path: Optional[str],
                  examples: Optional[List[Dict[str, Any]]], sweep: Optional[Dict[str, Any]],
                  input_dir: str, output_dir: str) -> str:
    """summary.md. With several collectives: an executive table with one row per collective, and
    sections 4-7 once per collective (headings '<Collective> · <dtype>'); with one, the
    AllReduce-only report as before."""
    p2p, link_rate = sol_reference(hw)
    docs = ds.docs
    md: List[str] = [f"# YALI vs NCCL {ds.coll_label} benchmark report", ""]
    if docs:
        d0 = docs[0]
        gpus = d0.get("gpus") or []
        gname = gpus[0].get("name") if gpus else "?"
        dates = sorted(str(d.get("date", "")) for d in docs)
        runs = sum(len({r.get("run", 1) for r in d.get("results", [])}) for d in docs)
        md += [f"Host `{d0.get('hostname', '?')}`, {d0.get('nranks', '?')} × {gname}; "
               f"{len(docs)} yali-perf invocations ({runs} runs in all) from {dates[0]} to "
               f"{dates[-1]}; "
               f"YALI version code {d0.get('yali_version', '?')}, "
               f"NCCL version code {d0.get('nccl_version', '?')}.", ""]
    failures = (sweep or {}).get("failures") or []
    all_rows = ds.all_rows()

    # 1
    md += [f"## {SECTION_TITLES[0]}", ""]
    heads = headline(ds)
    if ds.multi:
        md += ["Per collective: YALI busBW / NCCL busBW at every size of every dtype and launch "
               "mode (cuda-events, out-of-place where measured); #wrong summed over every "
               "result of both libraries.", ""]
        md += _collective_table(ds)
        md.append("")
    if not heads:
        md += ["No benchmark results were found.", ""]
    else:
        rows = []
        for h in heads:
            y, n = h["yali_peak"], h["nccl_peak"]
            rows.append(((coll_label(h["collective"]),) if ds.multi else ())
                        + (dtype_label(h["dtype"]), h["launch"],
                           f"{timing_label(h['timing'])}, {h['placement']}",
                           f"{fmt_gbs(y['busbw_mean_gbs'])} @ {y['size']}" if y else "n/a",
                           f"{fmt_gbs(n['busbw_mean_gbs'])} @ {n['size']}" if n else "n/a",
                           fmt_speedup(h["peak_speedup"]), fmt_speedup(h["geomean_speedup"]),
                           f"{h['wins']}/{h['compared']}",
                           fmt_pct(y["sol_pct"]) if y else "n/a"))
        md += _table((("collective",) if ds.multi else ())
                     + ("dtype", "launch", "timing", "YALI peak busBW GB/s",
                        "NCCL peak busBW GB/s", "peak speedup", "geomean speedup (all sizes)",
                        "sizes YALI faster", "YALI peak SoL%"), rows)
        md.append("")
        sol_txt = (f"SoL reference: measured one-way P2P {fmt_gbs(p2p)} GB/s"
                   if p2p else "SoL reference: n/a (no hardware baseline)")
        if link_rate:
            sol_txt += f"; NVLink link rate {fmt_gbs(link_rate)} GB/s per direction"
        md += [sol_txt + ".", ""]
        md += _img("Peak busBW per dtype and launch mode", plot_headline(ds, heads, output_dir))
    wrong = [r for r in all_rows if r["wrong"]]
    if wrong:
        what = "(collective, impl, size, mode)" if ds.multi else "(impl, size, mode)"
        md += [f"**Correctness: {len(wrong)} {what} results reported #wrong > 0** "
               "(see the `wrong` column of the CSVs).", ""]
    elif all_rows:
        md += ["Correctness: every result reported #wrong = 0.", ""]
    if failures:
        md += [f"**{len(failures)} benchmark invocation(s) failed** and are missing above:", ""]
        md += [f"- `{f.get('command', '?')}`: {f.get('reason', '?')}" for f in failures[:20]]
        md.append("")

    # 2
    md += [f"## {SECTION_TITLES[1]}", ""] + _hw_section(hw, hw_path)
    # 3
    md += [f"## {SECTION_TITLES[2]}", ""] + _examples_section(examples)

    # 4
    csv_name = "<collective>_<dtype>" if ds.multi else "<dtype>"
    md += [f"## {SECTION_TITLES[3]}", "",
           _bus_factor_text(ds) + ". `mean ± std` are over runs "
           "(one busBW per pass of yali-perf over the sizes; sample std, 0 with one run). "
           "SoL% = busBW mean / "
           "measured one-way P2P bandwidth"
           + (f" ({fmt_gbs(p2p)} GB/s; NVLink link rate {fmt_gbs(link_rate)} GB/s)" if p2p
              else " (n/a: no hardware baseline)")
           + ". speedup = YALI busBW / NCCL busBW; improvement = (speedup − 1) × 100%. "
           f"Per-iteration statistics are in `yali/{csv_name}.csv` and `nccl/{csv_name}.csv`.",
           ""]
    for part in ds.parts:
        md += _bandwidth_part(part, output_dir, link_rate)

    # 5
    md += [f"## {SECTION_TITLES[4]}", "",
           "Left graphs: busBW across runs as % of its mean (error bar ± std, bar min–max). "
           "CV = std / mean. Spread = (max − min) / mean across runs. Per-iteration CV is of the "
           "per-call times pooled over runs.", ""]
    for part in ds.parts:
        md += _stability_part(part, output_dir)

    # 6
    md += [f"## {SECTION_TITLES[5]}", "",
           "Per-call times (µs) from the per-iteration samples pooled over runs; the `latency` "
           "timing mode (one synchronized call per sample) is used where it was measured.", ""]
    for part in ds.parts:
        md += _latency_part(part, output_dir)

    # 7
    md += [f"## {SECTION_TITLES[6]}", "",
           "Speedup (YALI busBW / NCCL busBW) per dtype × launch × timing × placement (rows) and "
           "size (columns); blue: YALI faster, red: NCCL faster. All figures: `speedup.csv`.",
           ""]
    for part in ds.parts:
        if ds.multi:
            md += [f"### {part.coll_label}", ""]
        heat = plot_heatmap(part, output_dir)
        md += (_img(f"{part.coll_label} speedup heat map" if ds.multi else "Speedup heat map",
                    heat) if heat else ["No size had both libraries measured.", ""])

    # 8
    md += [f"## {SECTION_TITLES[7]}", ""]
    md += _reproduce_section(docs, sweep, input_dir, output_dir)
    return "\n".join(md).rstrip() + "\n"


def load_examples(input_dir: str) -> Optional[List[Dict[str, Any]]]:
    path = os.path.join(input_dir, "examples", "results.json")
    if not os.path.exists(path):
        return None
    doc = _read_json(path)
    if isinstance(doc, dict):
        doc = doc.get("examples")
    return doc if isinstance(doc, list) else None


def generate(input_dir: str, output_dir: str, hw_path: Optional[str] = None) -> Dataset:
    """Writes the whole report for the results under input_dir into output_dir; returns the data."""
    os.makedirs(output_dir, exist_ok=True)
    docs = load_perf_docs(find_perf_files(input_dir))
    hw_path = hw_path or find_hw_file(input_dir)
    hw = load_hw(hw_path)
    p2p, _ = sol_reference(hw)
    ds = Dataset(docs, sol_gbs=p2p)
    sweep_path = os.path.join(input_dir, "sweep.json")
    sweep = _read_json(sweep_path) if os.path.exists(sweep_path) else None
    write_csvs(ds, output_dir)
    text = build_summary(ds, hw, hw_path, load_examples(input_dir),
                         sweep if isinstance(sweep, dict) else None, input_dir, output_dir)
    with open(os.path.join(output_dir, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text)
    return ds


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m yali.report",
                                 description="Build the benchmark report from saved raw JSON.")
    ap.add_argument("--input", required=True,
                    help="directory with raw/*.json (yali-perf -J), optional hw-baseline/, "
                         "examples/results.json and sweep.json")
    ap.add_argument("--output", help="where to write summary.md, CSVs and figures "
                                     "(default: the input directory)")
    ap.add_argument("--hw", help="yali-hw JSON to use instead of <input>/hw-baseline/*.json")
    args = ap.parse_args(argv)
    out = args.output or args.input
    if not find_perf_files(args.input):
        print(f"yali.report: no JSON files under {args.input} (or its raw/)", file=sys.stderr)
        return 1
    ds = generate(args.input, out, args.hw)
    if not ds.all_rows():
        print(f"yali.report: no {PERF_SCHEMA} results found under {args.input}", file=sys.stderr)
        return 1
    for line in headline_lines(ds):
        print(line)
    print(f"report: {os.path.join(out, 'summary.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
