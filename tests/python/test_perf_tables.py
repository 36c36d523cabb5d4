"""scripts/perf_tables.py --best: plain against plain, each library at its best over every file."""
import importlib.util
import json
import pathlib

import pytest

_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "perf_tables.py"
_spec = importlib.util.spec_from_file_location("perf_tables", _SCRIPT)
perf_tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(perf_tables)


def _result(impl, time_us, busbw, coll="allgather", size=4096, placement="out-of-place", run=1):
    return {"impl": impl, "collective": coll, "dtype": "float", "root": None, "bytes": size,
            "placement": placement, "run": run, "time_us": time_us, "busbw_gbs": busbw,
            "algo": "allgather_ll" if impl == "yali" else None, "ctas": 4 if impl == "yali" else None}


def _doc(registered, policy, results, nranks=4):
    return {"nranks": nranks, "launch_mode": "multi", "timing": "events", "registered": registered,
            "nccl_cta_policy": policy, "results": results}


@pytest.fixture
def files(tmp_path):
    docs = {
        "r0": _doc(0, None, [_result("yali", 5.0, 1.0), _result("nccl", 10.0, 0.5),
                             _result("yali", 1.0, 9.0, placement="in-place")]),
        "r1": _doc(1, None, [_result("yali", 4.0, 1.2), _result("nccl", 9.0, 0.6)]),
        # Two passes of one run: the median counts, not the fastest pass.
        "r2": _doc(2, None, [_result("yali", 4.5, 1.1), _result("nccl", 8.0, 0.7),
                             _result("nccl", 6.0, 0.8, run=2), _result("nccl", 7.0, 0.75, run=3)]),
        "r2x2": _doc(2, 2, [_result("yali", 4.2, 1.15), _result("nccl", 8.5, 0.65)]),
        "other": _doc(0, None, [_result("yali", 3.0, 2.0)], nranks=2),
    }
    paths = []
    for name, doc in docs.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def test_best_pools_configs_and_compares_like_with_like(files):
    docs = [perf_tables.load(f) for f in files]
    groups = perf_tables.pool(docs)
    assert set(groups) == {(4, "multi", "events"), (2, "multi", "events")}
    table = perf_tables.best_table(groups[(4, "multi", "events")], "float", "allgather")
    row = table.splitlines()[2].split("|")[1:-1]
    cells = [c.strip() for c in row]
    # size, plain YALI 5 / NCCL 10 (in-place ignored), then each at its best over every file:
    # YALI's 4.0 (R1), NCCL's the median of R2's passes (7.0) against R0's 10, R1's 9.0 and
    # R2 x2's 8.5.
    assert cells[:9] == ["4K", "5.00", "10.00", "2.00", "4.00", "7.00", "1.75", "R1", "R2"]
    assert cells[9:] == ["1.2", "0.8", "allgather_ll/4"]


def test_best_counts_plain_buffers_too(tmp_path):
    """NCCL on plain buffers faster than on its windows (seen at 1 GB on H200s): its best is the
    plain run, not the fastest registered one."""
    docs = [_doc(0, None, [_result("yali", 5.0, 1.0), _result("nccl", 6.0, 0.9)]),
            _doc(2, None, [_result("yali", 5.5, 0.9), _result("nccl", 8.0, 0.7)])]
    paths = []
    for i, doc in enumerate(docs):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    groups = perf_tables.pool([perf_tables.load(f) for f in paths])
    cells = [c.strip() for c in perf_tables.best_table(groups[(4, "multi", "events")], "float", "allgather")
             .splitlines()[2].split("|")[1:-1]]
    assert cells[4:9] == ["5.00", "6.00", "1.20", "R0", "R0"]


def test_best_missing_side_is_a_dash(files):
    groups = perf_tables.pool([perf_tables.load(f) for f in files])
    cells = [c.strip() for c in
             perf_tables.best_table(groups[(2, "multi", "events")], "float", "allgather")
             .splitlines()[2].split("|")[1:-1]]
    assert cells[1] == "3.00" and cells[2] == "-" and cells[3] == "-"
    assert cells[4] == "3.00" and cells[5] == "-" and cells[6] == "-" and cells[8] == "-"


def test_config_names():
    assert perf_tables.config_of({"registered": 0}) == "R0"
    assert perf_tables.config_of({"registered": 2, "nccl_cta_policy": 2}) == "R2 x2"
    assert perf_tables.config_of({}) == "R0"  # files from before -R 2 and -x


def test_summary_one_row_per_collective_and_size(files):
    """--best --summary: a column per (GPUs, launch mode, timing) group, eager first, and each
    cell plain ratio / best ratio; sizes that no group has are left out."""
    docs = [perf_tables.load(f) for f in files]
    table = perf_tables.summary_table(docs, "float", "4K,1M").splitlines()
    assert table[0].startswith("| collective | size | 2 GPUs eager | 4 GPUs eager |")
    assert "4 GPUs best busBW" in table[0]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in table[2:]]
    assert rows == [["allgather", "4K", "- / -", "2.00 / 1.75", "1.2 / 0.8"]]


def test_tables_keep_ops_and_passes_apart_and_mark_wrong_results(tmp_path):
    """-o all puts every op of a size in one file, and --repeat several passes: the sum table's cell
    must be the sum result (the median pass), not whichever record came last; a result with
    #wrong > 0 is marked in the table and is no candidate for --best."""
    def rec(impl, t, op="sum", run=1, wrong=0):
        r = _result(impl, t, 1.0, coll="allreduce", run=run)
        r.update(redop=op, wrong=wrong, algo="oneshot_ll" if impl == "yali" else None)
        return r

    doc = _doc(0, None, [rec("yali", 5.0), rec("yali", 7.0, run=2), rec("yali", 6.0, run=3),
                         rec("nccl", 9.0), rec("yali", 1.0, op="max"), rec("nccl", 2.0, op="max"),
                         rec("yali", 0.5, op="prod", wrong=3)])
    path = tmp_path / "ops.json"
    path.write_text(json.dumps(doc))
    _, rows = perf_tables.load(str(path))
    cell = rows[("allreduce", "float", 4096)]
    assert cell["yali"]["time_us"] == 6.0 and cell["nccl"]["time_us"] == 9.0  # sum, median pass
    # A wrong pass marks the cell even when the median pass was right, and keeps every pass of
    # the case out of --best.
    bad = _doc(0, None, [rec("yali", 4.0), rec("yali", 5.0, run=2), rec("yali", 6.0, run=3, wrong=2),
                         rec("nccl", 9.0)])
    bad_path = tmp_path / "bad.json"
    bad_path.write_text(json.dumps(bad))
    docs = [perf_tables.load(str(bad_path))]
    assert "5.00 WRONG" in perf_tables.table("float", docs)
    group = perf_tables.pool(docs)[(4, "multi", "events")]
    assert ("yali", True) not in group[("allreduce", "float", 4096)]
