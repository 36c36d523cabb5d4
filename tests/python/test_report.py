"""Tests of the benchmark report (yali.report), the sweep (yali.sweep) and their glue; no GPU.

    PYTHONPATH=python python3 -m pytest tests/python/test_report.py -q

The fixture under fixtures/sweep1 is what a small sweep would save (2 dtypes, 6 sizes, both impls,
two timing modes, two launch modes, 2 runs, per-iteration samples, a yali-hw baseline, example
results), one raw file per dtype and run as sweeps wrote them before yali-perf --repeat;
make_fixtures.py regenerates it. The expected figures below are recomputed here from the
fixture's raw JSON with the report's documented formulas, independently of the report's code.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "sweep1")
sys.path.insert(0, os.path.join(REPO, "python"))

from yali import report, sweep  # noqa: E402

SECTIONS = ["1. Executive summary", "2. Hardware baseline", "3. Example correctness",
            "4. Bandwidth per dtype", "5. Stability", "6. Latency", "7. Speedup heat map",
            "8. How to reproduce"]
DLABEL = {"float": "fp32", "half": "fp16", "bfloat16": "bf16"}
TLABEL = {"events": "cuda-events", "latency": "latency", "graph": "graph",
          "throughput": "throughput"}
REQUIRED_COLUMNS = ["size_bytes", "size", "launch_mode", "timing", "placement", "runs", "samples",
                    "busbw_mean_gbs", "busbw_std_gbs", "busbw_min_gbs", "busbw_max_gbs",
                    "busbw_cv_pct", "time_iter_p50_us", "time_iter_p90_us", "time_iter_p95_us",
                    "time_iter_p99_us", "sol_pct"]


# ---- helpers (independent of yali.report) --------------------------------------------------------

def load_fixture_results(root=FIXTURE):
    """{(impl, dtype, launch, timing, placement, bytes): [result, ...]} straight from raw/*.json."""
    groups = {}
    for path in sorted(glob.glob(os.path.join(root, "raw", "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        for r in doc["results"]:
            key = (r["impl"], r["dtype"], doc["launch_mode"], doc["timing"], r["placement"],
                   r["bytes"])
            groups.setdefault(key, []).append(r)
    return groups


def mean_std(values):
    m = sum(values) / len(values)
    s = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return m, s


def size_label(n):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return f"{n}B"


def us(v):
    return f"{v:.1f}" if v >= 100 else f"{v:.2f}"


def fixture_p2p():
    with open(os.path.join(FIXTURE, "hw-baseline", "yali-hw.json")) as f:
        return json.load(f)["summary"]["p2p_oneway_gbs"]


def tables_by_heading(md):
    """{'#### heading text': [[cell, ...], ...]} for every table that follows a #### heading."""
    out, heading = {}, None
    for line in md.splitlines():
        if line.startswith("#### "):
            heading = line[5:].strip()
            out[heading] = []
        elif line.startswith("## ") or line.startswith("### "):
            heading = None
        elif heading and line.startswith("|") and not line.startswith("|---"):
            out[heading].append([c.strip() for c in line.strip().strip("|").split("|")])
    return {h: rows[1:] for h, rows in out.items()}  # drop the header row


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("report"))
    ds = report.generate(FIXTURE, out)
    with open(os.path.join(out, "summary.md"), encoding="utf-8") as f:
        md = f.read()
    return out, md, ds


# ---- report --------------------------------------------------------------------------------------

def test_sections_present_in_order(built):
    _, md, _ = built
    positions = []
    for title in SECTIONS:
        m = re.search(rf"^## {re.escape(title)}\s*$", md, re.M)
        assert m, f"missing section '## {title}'"
        positions.append(m.start())
    assert positions == sorted(positions), "sections out of order"


def test_every_graph_exists_and_is_a_png(built):
    out, md, _ = built
    refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    # executive, 3 per dtype in section 4, 1 per dtype in 5, 3 per dtype in 6, the heat map
    assert len(refs) >= 1 + 2 * 3 + 2 + 2 * 3 + 1, refs
    for rel in refs:
        path = os.path.join(out, rel)
        assert os.path.isfile(path), f"{rel} referenced but missing"
        assert os.path.getsize(path) > 2000, f"{rel} is suspiciously small"
        w, h = png_size(path)
        assert 300 <= w <= 1700 and 200 <= h <= 1300, f"{rel}: {w}x{h} px"
    for section in ("Executive", "Stability", "Latency", "heat map"):
        part = md.split(section, 1)[1].split("\n## ", 1)[0]
        assert "![" in part, f"no graph in the {section} section"


def test_csvs_have_the_columns_and_the_numbers(built):
    out, _, _ = built
    groups = load_fixture_results()
    p2p = fixture_p2p()
    for impl in ("yali", "nccl"):
        for dtype in ("float", "bfloat16"):
            path = os.path.join(out, impl, f"{DLABEL[dtype]}.csv")
            assert os.path.isfile(path), path
            with open(path) as f:
                rows = list(csv.DictReader(f))
            assert rows
            for c in REQUIRED_COLUMNS:
                assert c in rows[0], f"{path} lacks column {c}"
            expected_rows = [k for k in groups if k[0] == impl and k[1] == dtype]
            assert len(rows) == len(expected_rows)
            for r in rows:
                key = (impl, dtype, r["launch_mode"], r["timing"], r["placement"],
                       int(r["size_bytes"]))
                res = groups[key]
                m, s = mean_std([x["busbw_gbs"] for x in res])
                assert float(r["busbw_mean_gbs"]) == pytest.approx(m, abs=1e-3)
                assert float(r["busbw_std_gbs"]) == pytest.approx(s, abs=1e-3)
                assert float(r["busbw_min_gbs"]) == pytest.approx(min(x["busbw_gbs"] for x in res),
                                                                  abs=1e-3)
                assert float(r["busbw_cv_pct"]) == pytest.approx(s / m * 100, abs=1e-3)
                assert int(r["runs"]) == 2
                pooled = [v for x in res for v in x["samples_us"]]
                assert int(r["samples"]) == len(pooled) == 24
                assert float(r["time_iter_p99_us"]) == pytest.approx(np.percentile(pooled, 99),
                                                                     abs=1e-3)
                assert float(r["sol_pct"]) == pytest.approx(m / p2p * 100, abs=1e-3)
    assert os.path.isfile(os.path.join(out, "speedup.csv"))


def test_bandwidth_tables_equal_the_input(built):
    _, md, _ = built
    groups = load_fixture_results()
    p2p = fixture_p2p()
    tables = tables_by_heading(md)
    modes = {(k[1], k[2], k[3], k[4]) for k in groups}
    checked = 0
    for dtype, launch, timing, placement in modes:
        heading = f"{DLABEL[dtype]} · {launch} · {TLABEL[timing]} · {placement}"
        assert heading in tables, f"no table '{heading}'"
        rows = {r[0]: r for r in tables[heading]}
        sizes = sorted({k[5] for k in groups if k[1:5] == (dtype, launch, timing, placement)})
        assert list(rows) == [size_label(b) for b in sizes]
        for b in sizes:
            y = [x["busbw_gbs"] for x in groups[("yali", dtype, launch, timing, placement, b)]]
            n = [x["busbw_gbs"] for x in groups[("nccl", dtype, launch, timing, placement, b)]]
            ym, ys = mean_std(y)
            nm, ns = mean_std(n)
            row = rows[size_label(b)]
            assert row[1] == f"{ym:.2f} ± {ys:.2f}", (heading, b, row)
            assert row[2] == f"{ym / p2p * 100:.1f}%"
            assert row[3] == f"{nm:.2f} ± {ns:.2f}"
            assert row[4] == f"{nm / p2p * 100:.1f}%"
            assert row[5] == f"{ym / nm:.2f}x"
            assert row[6] == f"{(ym / nm - 1) * 100:+.1f}%"
            checked += 1
    assert checked == 2 * 2 * 3 * 6  # dtypes x launches x (events oop+ip, latency oop) x sizes


def test_latency_tables_equal_the_input(built):
    _, md, _ = built
    groups = load_fixture_results()
    tables = tables_by_heading(md)
    for dtype in ("float", "bfloat16"):
        for launch in ("single", "multi"):
            heading = f"{DLABEL[dtype]} · {launch} · latency · out-of-place · percentiles"
            assert heading in tables, heading
            for row in tables[heading]:
                b = report.parse_size(row[0])
                cells = []
                for impl in ("yali", "nccl"):
                    pooled = [v for x in groups[(impl, dtype, launch, "latency", "out-of-place", b)]
                              for v in x["samples_us"]]
                    cells += [us(np.percentile(pooled, q)) for q in (50, 95, 99)]
                assert row[1:] == cells, (heading, row)


def test_executive_summary_peaks_and_speedup(built):
    _, md, _ = built
    groups = load_fixture_results()
    section = md.split("## 1. Executive summary", 1)[1].split("\n## ", 1)[0]
    lines = [l for l in section.splitlines() if l.startswith("| fp32 | single |")]
    assert len(lines) == 1
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    peaks = {}
    for impl in ("yali", "nccl"):
        best = max(((mean_std([x["busbw_gbs"] for x in v])[0], k[5]) for k, v in groups.items()
                    if k[:5] == (impl, "float", "single", "events", "out-of-place")))
        peaks[impl] = best
    assert cells[3] == f"{peaks['yali'][0]:.2f} @ {size_label(peaks['yali'][1])}"
    assert cells[4] == f"{peaks['nccl'][0]:.2f} @ {size_label(peaks['nccl'][1])}"
    assert cells[5] == f"{peaks['yali'][0] / peaks['nccl'][0]:.2f}x"


def test_hardware_and_examples_sections(built):
    _, md, _ = built
    hw = md.split("## 2. Hardware baseline", 1)[1].split("\n## ", 1)[0]
    assert "| 0 → 1 | yes |" in hw
    assert f"{fixture_p2p():.2f}" in hw
    assert "478.12" in hw  # 18 links x 26.562 GB/s
    ex = md.split("## 3. Example correctness", 1)[1].split("\n## ", 1)[0]
    assert "2 of 3 examples passed" in ex
    assert re.search(r"yali-example-04_broken.*\*\*FAIL\*\*", ex)
    repro = md.split("## 8. How to reproduce", 1)[1]
    assert "python3 -m yali.sweep" in repro and "python3 -m yali.report --input" in repro


def merge_fixture_per_mode(dest):
    """The fixture's raw files as yali-perf --repeat writes them today: one file per (launch,
    timing) holding both dtypes and both runs, each result tagged with its run."""
    merged = {}
    for path in sorted(glob.glob(os.path.join(FIXTURE, "raw", "*.json"))):
        run = int(re.search(r"_run(\d+)\.json$", path).group(1))
        with open(path) as f:
            doc = json.load(f)
        key = (doc["launch_mode"], doc["timing"])
        if key not in merged:
            merged[key] = dict(doc, results=[], repeat=2)
        merged[key]["results"] += [dict(r, run=run) for r in doc["results"]]
    os.makedirs(os.path.join(dest, "raw"))
    for (launch, timing), doc in merged.items():
        # yali-perf's order: runs outermost, then dtypes
        doc["results"].sort(key=lambda r: (r["run"], report.DTYPE_ORDER.index(r["dtype"])))
        with open(os.path.join(dest, "raw", f"{launch}_{timing}_run1-2.json"), "w") as f:
            json.dump(doc, f)
    for part in ("hw-baseline", "examples"):
        shutil.copytree(os.path.join(FIXTURE, part), os.path.join(dest, part))
    shutil.copy(os.path.join(FIXTURE, "sweep.json"), dest)
    return len(merged)


def test_dtypes_and_runs_in_one_file_report_as_separate_files(built, tmp_path):
    out, md, _ = built
    src = tmp_path / "in"
    assert merge_fixture_per_mode(str(src)) == 4  # 16 files (2 dtypes x 2 runs each) -> 4
    again = tmp_path / "out"
    ds = report.generate(str(src), str(again))
    assert len(ds.docs) == 4
    md2 = (again / "summary.md").read_text()
    assert tables_by_heading(md2) == tables_by_heading(md)
    assert "4 yali-perf invocations (8 runs in all)" in md2
    assert "16 yali-perf invocations (16 runs in all)" in md
    for part in ("yali", "nccl"):
        for name in ("fp32.csv", "bf16.csv"):
            assert (again / part / name).read_text() == open(os.path.join(out, part, name)).read()
    assert (again / "speedup.csv").read_text() == open(os.path.join(out, "speedup.csv")).read()


def test_iters_column_counts_what_each_result_made(tmp_path):
    sys.path.insert(0, os.path.join(HERE, "fixtures"))
    from make_fixtures import perf_document
    doc = perf_document(nranks=4, launch="single", timing="events", dtypes=("float", "half"),
                        sizes=[4096, 1 << 30], iters=12, repeat=3, max_case_time=0.02)
    assert {r["run"] for r in doc["results"]} == {1, 2, 3}
    for r in doc["results"]:
        if r["bytes"] == 1 << 30:  # as --max-case-time leaves a large size
            r["iters"], r["samples_us"] = 10, r["samples_us"][:10]
    os.makedirs(tmp_path / "raw")
    with open(tmp_path / "raw" / "single_events_run1-3.json", "w") as f:
        json.dump(doc, f)
    report.generate(str(tmp_path), str(tmp_path / "out"))
    for dtype in ("fp32", "fp16"):
        with open(tmp_path / "out" / "yali" / f"{dtype}.csv") as f:
            rows = {int(r["size_bytes"]): r for r in csv.DictReader(f)}
        assert rows[4096]["runs"] == rows[1 << 30]["runs"] == "3"
        assert (rows[4096]["iters"], rows[4096]["samples"]) == ("36", "36")
        assert (rows[1 << 30]["iters"], rows[1 << 30]["samples"]) == ("30", "30")


def test_without_hw_baseline_sol_is_na(tmp_path):
    src = tmp_path / "in"
    shutil.copytree(os.path.join(FIXTURE, "raw"), src / "raw")
    out = tmp_path / "out"
    assert report.main(["--input", str(src), "--output", str(out)]) == 0
    md = (out / "summary.md").read_text()
    assert "No hardware baseline" in md
    row = tables_by_heading(md)["fp32 · single · cuda-events · out-of-place"][0]
    assert row[2] == "n/a" and row[4] == "n/a"
    assert "Examples were not run." in md


# ---- several collectives (yali-perf -C) ----------------------------------------------------------

# collective (root) -> YALI / NCCL busBW at each size of multi_collective_doc; distinct per
# collective so that any mixing across collectives shows in the figures.
MC_SIZES = (4096, 1 << 20, 1 << 26)
MC_SPEEDUPS = {("allreduce", None): (1.5, 1.2, 1.1), ("allgather", None): (0.8, 0.9, 2.0),
               ("broadcast", 0): (1.25, 0.5, 1.0), ("broadcast", 1): (3.0, 3.0, 0.25)}
MC_NCCL_BUSBW = {"allreduce": 100.0, "allgather": 40.0, "broadcast": 10.0}


def multi_collective_doc():
    """A -C allreduce,allgather,broadcast -r all document built from make_fixtures' allreduce one:
    every result copied per collective (and root) with its own busBW and redop/root fields."""
    sys.path.insert(0, os.path.join(HERE, "fixtures"))
    from make_fixtures import perf_document
    base = perf_document(nranks=4, launch="single", timing="events", dtypes=("float",),
                         sizes=list(MC_SIZES), repeat=2)
    results = []
    for (coll, root), speedups in MC_SPEEDUPS.items():
        for r in base["results"]:
            r = dict(r, collective=coll, root=root,
                     redop="sum" if coll == "allreduce" else "none")
            nccl = MC_NCCL_BUSBW[coll] * (1 + 0.01 * r["run"])
            sp = speedups[MC_SIZES.index(r["bytes"])]
            r["busbw_gbs"] = nccl * sp if r["impl"] == "yali" else nccl
            r["wrong"] = 3 if (coll, r["impl"], r["bytes"]) == ("allgather", "nccl", 4096) else 0
            results.append(r)
    return dict(base, collective="allreduce,allgather,broadcast", results=results)


def test_several_collectives_one_executive_row_and_sections_each(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    os.makedirs(src / "raw")
    doc = multi_collective_doc()
    with open(src / "raw" / "single_events_run1-2.json", "w") as f:
        json.dump(doc, f)
    ds = report.generate(str(src), str(out))
    labels = ["AllReduce", "AllGather", "Broadcast (root 0)", "Broadcast (root 1)"]
    assert [p.coll_label for p in ds.parts] == labels and ds.rows == {}
    md = (out / "summary.md").read_text()
    assert md.startswith("# YALI vs NCCL collectives benchmark report")

    # the executive table: one row per collective, from that collective's results only
    lines = md.splitlines()
    i = lines.index(next(l for l in lines if l.startswith("| collective | median speedup")))
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines[i + 2:i + 6]]
    assert not lines[i + 6].startswith("|")
    assert [r[0] for r in rows] == labels
    for row, ((coll, root), sps) in zip(rows, MC_SPEEDUPS.items()):
        best, worst = max(sps), min(sps)
        assert row[1] == f"{sorted(sps)[1]:.2f}x"  # median of three sizes
        assert row[2] == f"{best:.2f}x @ {size_label(MC_SIZES[sps.index(best)])}"
        assert row[3] == f"{worst:.2f}x @ {size_label(MC_SIZES[sps.index(worst)])}"
        assert row[4] == f"{sum(1 for s in sps if s > 1.0)}/3"
        assert row[5] == ("6" if coll == "allgather" else "0")  # 3 wrong in each of 2 runs

    # per-collective sections: the per-size tables once per collective, nothing mixed
    tables = tables_by_heading(md)
    for label, ((coll, _), sps) in zip(labels, MC_SPEEDUPS.items()):
        t = tables[f"{label} · fp32 · single · cuda-events · out-of-place"]
        assert [r[0] for r in t] == [size_label(b) for b in MC_SIZES]
        for row, sp, b in zip(t, sps, MC_SIZES):
            nccl = MC_NCCL_BUSBW[coll] * 1.015  # mean over runs 1 and 2
            assert row[3].startswith(f"{nccl:.2f} ± ")
            assert row[1].startswith(f"{nccl * sp:.2f} ± ")
            assert row[5] == f"{sp:.2f}x"
        assert f"### {label} · fp32" in md
        assert f"#### {label} · fp32 · single · cuda-events · out-of-place · percentiles" in md
    assert len([h for h in tables if "out-of-place" in h and "percentiles" not in h]) == 4
    assert "**Correctness: 1 (collective, impl, size, mode) results reported #wrong > 0**" in md

    # files per collective; speedup.csv with a collective column; every figure written
    for tag in ("allreduce", "allgather", "broadcast_root0", "broadcast_root1"):
        for impl in ("yali", "nccl"):
            assert (out / impl / f"{tag}_fp32.csv").exists()
        assert (out / "figures" / f"{tag}_bandwidth_fp32.png").exists()
        assert (out / "figures" / f"{tag}_speedup_heatmap.png").exists()
    assert not (out / "yali" / "fp32.csv").exists()
    with open(out / "speedup.csv") as f:
        sp_rows = list(csv.DictReader(f))
    assert len(sp_rows) == 4 * len(MC_SIZES)
    assert {r["collective"] for r in sp_rows} == {"allreduce", "allgather", "broadcast@root0",
                                                   "broadcast@root1"}
    for m in re.finditer(r"!\[[^\]]*\]\(([^)]+)\)", md):
        png_size(str(out / m.group(1)))
    assert any(l.startswith("AllGather: fp32") for l in report.headline_lines(ds))


def test_one_collective_other_than_allreduce_reads_as_before(tmp_path):
    """A file of one collective keeps the single-collective layout; old files are AllReduce."""
    doc = multi_collective_doc()
    doc["results"] = [r for r in doc["results"] if r["collective"] == "allgather"]
    os.makedirs(tmp_path / "raw")
    with open(tmp_path / "raw" / "a.json", "w") as f:
        json.dump(doc, f)
    ds = report.generate(str(tmp_path), str(tmp_path / "out"))
    assert ds.parts == [ds] and ds.collective == "allgather" and not ds.multi
    md = (tmp_path / "out" / "summary.md").read_text()
    assert md.startswith("# YALI vs NCCL AllGather benchmark report")
    assert "busBW = algBW × (n-1)/n" in md and "| collective |" not in md
    assert tables_by_heading(md)["fp32 · single · cuda-events · out-of-place"][2][5] == "2.00x"
    assert (tmp_path / "out" / "yali" / "fp32.csv").exists()
    old = report.Dataset(report.load_perf_docs(report.find_perf_files(FIXTURE)))
    assert old.collectives == ["allreduce"] and old.parts == [old] and old.rows


def test_sweep_colls_option(tmp_path):
    assert sweep.parse_colls("allreduce") == ["allreduce"]
    assert sweep.parse_colls("allgather, allreduce,allgather") == ["allreduce", "allgather"]
    assert sweep.parse_colls("all") == list(sweep.COLL_NAMES) and len(sweep.COLL_NAMES) == 10  # yali-perf -C all
    with pytest.raises(ValueError):
        sweep.parse_colls("allreduce,bogus")
    common = ["--dry-run", "--single", "--gpus", "2", "--timing", "cuda-events", "--quick",
              "--build", str(tmp_path)]
    r = run_sweep(common)
    perf = [l for l in r.stdout.splitlines() if " -J " in l and not l.startswith("#")]
    assert r.returncode == 0 and len(perf) == 1 and " -C " not in perf[0]
    r = run_sweep(common + ["--colls", "all"])
    perf = [l for l in r.stdout.splitlines() if " -J " in l and not l.startswith("#")]
    assert r.returncode == 0 and len(perf) == 1
    assert " -C " + ",".join(sweep.COLL_NAMES) + " " in perf[0]
    r = run_sweep(common + ["--colls", "allgather,nope"])
    assert r.returncode == 2 and "nope" in r.stderr


def test_report_fails_on_empty_input(tmp_path):
    assert report.main(["--input", str(tmp_path), "--output", str(tmp_path / "o")]) == 1


def test_sizes_and_labels():
    assert report.parse_size("4K") == 4096
    assert report.parse_size("2G") == 2 << 30
    assert report.parse_size("1.5M") == 3 << 19
    assert report.human_size(4096) == "4K" and report.human_size(1 << 30) == "1G"
    assert report.human_size(1536) == "1.5K"
    assert sweep.parse_sizes("4K:64K") == [4096, 8192, 16384, 32768, 65536]
    assert sweep.parse_sizes("4K:1M:16") == [4096, 65536, 1 << 20]
    assert sweep.parse_sizes("1M,4K,1M") == [4096, 1 << 20]
    with pytest.raises(ValueError):
        sweep.parse_sizes("1M:4K")
    assert sweep.size_groups([4096, 65536, 1 << 20]) == [
        ([4096, 65536, 1 << 20], ["-b", "4K", "-e", "1M", "-f", "16"])]
    assert len(sweep.size_groups([4096, 65536, 3 << 20])) == 3


# ---- sweep ---------------------------------------------------------------------------------------

def plan_for(argv, ngpus=4):
    cfg = sweep.config_from_args(sweep.make_parser().parse_args(argv), ngpus, "mpirun")
    return cfg, sweep.build_plan(cfg)


def test_extensive_plan_fits_in_six_minutes():
    cfg, steps = plan_for(["--extensive"])
    # one process per launch mode x timing mode, each covering 3 dtypes x 5 runs
    assert len(steps) == 2 * 4
    assert {(s.launch, s.timing) for s in steps} == {
        (l, t) for l in ("single", "multi") for t in ("events", "throughput", "latency", "graph")}
    for step in steps:
        assert step.dtypes == ["float", "half", "bfloat16"] and step.runs == [1, 2, 3, 4, 5]
        argv = " ".join(sweep.perf_argv(cfg, step, "yali-perf"))
        assert "-b 4K -e 2G -f 2 -n 100 -w 20 " in argv
        assert " -d float,half,bfloat16 " in argv and " --inplace 2 " in argv
        assert " --repeat 5 --max-case-time 0.02 " in argv
        assert argv.endswith(f"raw/{step.launch}_{step.timing}_run1-5.json")
    total = sum(s.est_seconds for s in steps)
    # the benchmarks leave a minute of the six for yali-hw, the examples and the report
    assert 180 < total <= 5 * 60 + 30, total

    # Without the limit, the same grid is the half hour it was; separate processes per run
    # add a start-up to each of the 40.
    _, unlimited = plan_for(["--extensive", "--max-case-time", "0"])
    assert sum(s.est_seconds for s in unlimited) > 25 * 60
    _, apart = plan_for(["--extensive", "--process-per-run"])
    assert len(apart) == 40 and all(len(s.runs) == 1 for s in apart)
    assert sum(s.est_seconds for s in apart) == pytest.approx(
        total + 4 * 4 * (sweep.STARTUP_S["single"] + sweep.STARTUP_S["multi"]))

    with pytest.raises(ValueError):
        plan_for(["--extensive", "--max-case-time", "-1"])


def test_dry_run_extensive_prints_the_plan(tmp_path):
    r = run_sweep(["--dry-run", "--extensive", "--gpus", "4", "--launcher", "mpirun",
                   "--skip-hw", "--skip-examples", "--build", str(tmp_path)])
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert head.startswith("YALI sweep: 8 yali-perf processes on 4 GPU(s)"), head
    assert "5 run(s) (passes of one process)" in head and "~0.02 s of timed calls" in head
    minutes, seconds = map(int, re.search(r"estimated (\d+)m(\d+)s", head).groups())
    assert 60 * minutes + seconds <= 5 * 60 + 30
    assert len(re.findall(r"^# \[\d/8\] \S+ \S+ fp32,fp16,bf16 runs 1-5/5", r.stdout, re.M)) == 8


def test_counts_within_time_limit_match_yali_perf():
    # The cases of TestCallCountsWithinTimeLimit (bench/yali_perf/tests/test_perf_args.cc): the
    # sweep's estimate must size the cases as yali-perf does.
    f = sweep.counts_within_time_limit
    low, probe = sweep.MIN_ITERS_WITHIN_TIME_LIMIT, sweep.TIME_LIMIT_PROBE_CALLS
    assert (low, probe) == (10, 2)
    assert f(100, 20, None, 1.0, 2) == f(100, 20, 0, 1.0, 2) == (100, 20)
    assert f(100, 20, 0.02, 10e-6, 2) == (100, 20)
    assert f(100, 20, 0.02, 200e-6, 2) == (50, 10)
    assert f(100, 20, 0.02, 300e-6, 1) == (66, 14)
    assert f(100, 20, 0.02, 10e-3, 2) == (low, probe)
    assert f(5, 20, 0.02, 10e-3, 2) == (5, 4)
    assert f(100, 0, 0.02, 10e-6, 1) == (100, probe)
    assert f(100, 0, 0.02, 10e-3, 1) == (low, probe)
    assert f(100, 20, 0.02, 0.0, 2) == (100, 20)
    assert f(100000000, 5, 1000, 1e-9, 2) == (100000000, 5)

def run_sweep(args, env_extra=None, timeout=180):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        env.pop(k, None)  # the sweep must set them itself
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "yali.sweep"] + args, capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=REPO)


def test_dry_run_commands_without_binaries(tmp_path):
    r = run_sweep(["--dry-run", "--quick", "--gpus", "4", "--launcher", "mpirun",
                   "--build", str(tmp_path / "nobuild"), "--output", str(tmp_path / "out")])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    perf = [l for l in lines if " -J " in l and not l.startswith("#")]
    assert len(perf) == 8  # 1 dtype x 4 timing modes x 2 launch modes x 1 run
    single = [l for l in perf if not l.startswith("mpirun")]
    multi = [l for l in perf if l.startswith("mpirun")]
    assert len(single) == len(multi) == 4
    for l in single:
        assert " -g 4 " in l
    for l in multi:
        assert l.startswith("mpirun --allow-run-as-root -np 4 ")
        assert " -g 1 " in l
        for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
            assert f"-x {var}" in l
    timings = sorted(re.search(r"--timing (\S+)", l).group(1) for l in perf)
    assert timings == sorted(["events", "throughput", "latency", "graph"] * 2)
    for l in perf:
        assert "-b 4K -e 256M -f 16" in l and "-d float" in l and "--impl yali,nccl" in l
        assert re.search(r"-J \S+/raw/\S+\.json", l)
    assert "yali-hw --json" in r.stdout
    assert not (tmp_path / "out").exists(), "dry run must not create the output directory"


def test_dry_run_self_launch_and_options(tmp_path):
    r = run_sweep(["--dry-run", "--mpi", "--launcher", "self", "--gpus", "2", "--sizes",
                   "4K,1M", "--dtypes", "bf16,fp16", "--timing", "cuda-events", "--runs", "2",
                   "--placement", "both", "--max-case-time", "0.5", "--build", str(tmp_path)])
    assert r.returncode == 0, r.stderr
    perf = [l for l in r.stdout.splitlines() if " -J " in l and not l.startswith("#")]
    # 1 timing x 1 launch, both dtypes and both runs in one process; one range invocation
    # (4K x256 = 1M); 2 ranks
    assert len(perf) == 2
    assert all(l.startswith(("RANK=0 WORLD_SIZE=2", "RANK=1 WORLD_SIZE=2")) for l in perf)
    assert all("YALI_PERF_JOBID=" in l and " -g 1 " in l and "--inplace 2" in l for l in perf)
    assert all(" -d bfloat16,half " in l and " --repeat 2 " in l and " --max-case-time 0.5 " in l
               for l in perf)
    assert all(re.search(r"-J \S+/raw/multi_events_run1-2\.json", l) for l in perf)
    assert all("-b 4K -e 1M -f 256" in l for l in perf)

    # One process per run: the runs' files apart, no --repeat.
    r = run_sweep(["--dry-run", "--single", "--gpus", "2", "--sizes", "4K,1M", "--dtypes",
                   "bf16,fp16", "--timing", "cuda-events", "--runs", "2", "--process-per-run",
                   "--skip-hw", "--skip-examples", "--build", str(tmp_path)])
    assert r.returncode == 0, r.stderr
    perf = [l for l in r.stdout.splitlines() if " -J " in l and not l.startswith("#")]
    assert len(perf) == 2 and not any("--repeat" in l for l in perf)
    assert [re.search(r"raw/(\S+)\.json", l).group(1) for l in perf] == [
        "single_events_run1", "single_events_run2"]
    assert all("--max-case-time" not in l for l in perf)  # the standard preset has no limit


FAKE_PERF = textwrap.dedent('''\
    #!{python}
    """A stand-in for yali-perf: checks its environment and flags, writes yali-perf/1 JSON."""
    import os, sys, time
    sys.path.insert(0, {fixtures!r})
    from make_fixtures import perf_document
    import json

    for k, v in {{"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}}.items():
        if os.environ.get(k) != v:
            print("missing", k); sys.exit(3)
    args = sys.argv[1:]
    opt = {{}}
    i = 0
    while i < len(args):
        opt[args[i]] = args[i + 1]; i += 2
    def size(s):
        m = {{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}}
        return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)
    multi = "RANK" in os.environ
    if "--max-case-time" in opt and not float(opt["--max-case-time"]) > 0:
        print("bad --max-case-time"); sys.exit(2)
    if multi and (opt["-g"] != "1" or "YALI_PERF_JOBID" not in os.environ):
        print("bad multi-process launch"); sys.exit(4)
    if multi and os.environ.get("FAKE_FAIL_MULTI"):
        print("rank", os.environ["RANK"], "failing on purpose"); sys.exit(5)
    if os.environ.get("FAKE_HANG"):
        time.sleep(120)
    b, e, f = size(opt["-b"]), size(opt["-e"]), int(opt["-f"])
    sizes = []
    while b <= e:
        sizes.append(b); b *= f
    placements = {{"0": ["out-of-place"], "1": ["in-place"], "2": ["out-of-place", "in-place"]}}
    nranks = int(os.environ["WORLD_SIZE"]) if multi else int(opt["-g"])
    doc = perf_document(nranks=nranks, launch="multi" if multi else "single",
                        timing=opt["--timing"], dtypes=opt["-d"].split(","), sizes=sizes,
                        impls=opt["--impl"].split(","), placements=placements[opt["--inplace"]],
                        iters=int(opt["-n"]), warmup=int(opt["-w"]),
                        repeat=int(opt.get("--repeat", "1")),
                        max_case_time=float(opt["--max-case-time"])
                        if "--max-case-time" in opt else None,
                        seed=abs(hash(opt["-J"])) % 1000, command="yali-perf " + " ".join(args))
    if os.environ.get("RANK", "0") == "0":
        with open(opt["-J"], "w") as fh:
            json.dump(doc, fh)
    print("ok")
''')

FAKE_HW = textwrap.dedent('''\
    #!{python}
    import json, sys
    sys.path.insert(0, {fixtures!r})
    from make_fixtures import hw_document
    path = sys.argv[sys.argv.index("--json") + 1]
    with open(path, "w") as fh:
        json.dump(hw_document(2), fh)
    print("yali-hw (fake): 2 GPUs")
''')


def _write_exe(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture()
def fake_build(tmp_path):
    build = tmp_path / "build"
    fx = os.path.join(HERE, "fixtures")
    _write_exe(str(build / "bench" / "yali_perf" / "yali-perf"),
               FAKE_PERF.format(python=sys.executable, fixtures=fx))
    _write_exe(str(build / "bench" / "hw" / "yali-hw"),
               FAKE_HW.format(python=sys.executable, fixtures=fx))
    _write_exe(str(build / "examples" / "yali-example-01_ok"), "#!/bin/sh\necho result OK\n")
    _write_exe(str(build / "examples" / "yali-example-02_bad"),
               "#!/bin/sh\necho mismatch at 3\nexit 1\n")
    _write_exe(str(build / "examples" / "sub" / "yali-example-03_needs_world"),
               "#!/bin/sh\n# linked against libmpi.so.40\n"
               "[ -n \"$OMPI_COMM_WORLD_SIZE\" ] && echo PASS && exit 0\nexit 9\n")
    (build / "examples" / "yali-example-notes.txt").write_text("not executable\n")
    return build


def test_sweep_end_to_end_with_fake_binaries(fake_build, tmp_path):
    out = tmp_path / "out"
    r = run_sweep(["--quick", "--gpus", "2", "--launcher", "self", "--runs", "2",
                   "--timing", "cuda-events,latency", "--build", str(fake_build),
                   "--output", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\[4/4\] multi\s+latency\s+fp32 4K\.\.256M runs 1-2/2 \| elapsed \S+ \| "
                     r"left ~\S+", r.stdout), r.stdout
    assert "peak busBW YALI" in r.stdout  # the closing summary
    raws = sorted(glob.glob(str(out / "raw" / "*.json")))
    assert len(raws) == 2 * 2  # launch modes x timing modes, each with both runs
    with open(out / "sweep.json") as f:
        rec = json.load(f)
    assert rec["failures"] == [] and all(s["status"] == "ok" for s in rec["steps"])
    with open(out / "examples" / "results.json") as f:
        ex = {e["name"]: e["status"] for e in json.load(f)}
    # the MPI example runs under mpirun where there is one, else it is skipped, never run alone
    mpi_status = "PASS" if shutil.which("mpirun") else "SKIP"
    assert ex == {"yali-example-01_ok": "PASS", "yali-example-02_bad": "FAIL",
                  "yali-example-03_needs_world": mpi_status}
    assert (out / "hw-baseline" / "yali-hw.json").exists()
    assert (out / "hw-baseline" / "yali-hw.txt").read_text().startswith("yali-hw (fake)")
    md = (out / "summary.md").read_text()
    for title in SECTIONS:
        assert f"## {title}" in md
    assert f"{1 + (mpi_status == 'PASS')} of 3 examples passed" in md
    tables = tables_by_heading(md)
    row = tables["fp32 · multi · cuda-events · out-of-place"][0]
    assert row[0] == "4K" and row[2] != "n/a"  # SoL from the (fake) hw baseline
    with open(out / "yali" / "fp32.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["runs"] for r in rows} == {"2"}

    # --from-json rebuilds the same tables into another directory, running nothing.
    again = tmp_path / "again"
    r2 = run_sweep(["--from-json", str(out), "--output", str(again)])
    assert r2.returncode == 0, r2.stderr
    assert tables_by_heading((again / "summary.md").read_text()) == tables


def test_sweep_records_failures_and_timeouts(fake_build, tmp_path):
    out = tmp_path / "out"
    r = run_sweep(["--quick", "--gpus", "2", "--launcher", "self", "--timing", "latency",
                   "--skip-hw", "--skip-examples", "--build", str(fake_build),
                   "--output", str(out)], env_extra={"FAKE_FAIL_MULTI": "1"})
    assert r.returncode == 1
    with open(out / "sweep.json") as f:
        rec = json.load(f)
    status = {s["name"]: s["status"] for s in rec["steps"]}
    assert status == {"single_latency_run1": "ok", "multi_latency_run1": "failed"}
    assert "exit code 5" in rec["failures"][0]["reason"]
    md = (out / "summary.md").read_text()
    assert "1 benchmark invocation(s) failed" in md

    out2 = tmp_path / "hang"
    r = run_sweep(["--quick", "--gpus", "2", "--single", "--timing", "latency", "--skip-hw",
                   "--skip-examples", "--timeout", "2", "--build", str(fake_build),
                   "--output", str(out2)], env_extra={"FAKE_HANG": "1"}, timeout=60)
    assert r.returncode == 1
    with open(out2 / "sweep.json") as f:
        rec = json.load(f)
    assert "timed out" in rec["failures"][0]["reason"]


def test_sweep_without_perf_binary_fails_clearly(tmp_path):
    r = run_sweep(["--quick", "--gpus", "2", "--build", str(tmp_path), "--output",
                   str(tmp_path / "o")])
    assert r.returncode == 1
    assert "yali-perf not found" in r.stderr
