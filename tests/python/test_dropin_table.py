"""scripts/dropin_table.py: the dropinperf stage's table, from nccl-tests logs of plain NCCL and the
drop-in (rows as nccl-tests 2.19.6 prints them, with the shim's debug lines in between)."""
import importlib.util
import pathlib

_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "dropin_table.py"
_spec = importlib.util.spec_from_file_location("dropin_table", _SCRIPT)
dropin_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dropin_table)

_HEAD = """#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
[yali-nccl rank 0] ncclAllGather of 0 bytes (2^0 class): YALI
"""


def _row(size, t, bus, wrong_oop=0, wrong_ip=0):
    return (f"  {size:>10}  {size // 4:>12}     float    none      -1  {t:7.2f}  {0.0:6.2f}  {bus:6.2f}"
            f"  {wrong_oop:6}  {t:7.2f}  {0.0:6.2f}  {bus:6.2f}  {wrong_ip:6}\n")


def _log(d, name, rows):
    (d / name).write_text(_HEAD + "".join(rows) + "# Out of bounds values : 0 OK\n")


def _line(out, prefix):
    return [line for line in out.splitlines() if line.startswith(prefix)]


def test_median_of_runs_ratio_and_busbw(tmp_path, capsys):
    _log(tmp_path, "dropinperf_plain_eager_all_gather_r1.log", [_row(8388608, 40.0, 110.0)])
    _log(tmp_path, "dropinperf_plain_eager_all_gather_r2.log", [_row(8388608, 36.0, 120.0)])
    _log(tmp_path, "dropinperf_yali_eager_all_gather_r1.log", [_row(8388608, 24.0, 176.0)])
    _log(tmp_path, "dropinperf_yali_eager_all_gather_r2.log", [_row(8388608, 26.0, 170.0)])
    dropin_table.main(str(tmp_path))
    out = capsys.readouterr().out
    assert "all_gather (eager)" in out and "median of 2 plain and 2 drop-in runs" in out
    # medians: NCCL 38.0 us / 115.0 GB/s, drop-in 25.0 us / 173.0 GB/s; 38 / 25 = 1.52
    assert _line(out, "| 8M |") == ["| 8M | 38.0 | 25.0 | 1.52 | 115.0 | 173.0 |"]
    assert out.strip().endswith(": 0")


def test_wrong_rows_are_counted_and_unpaired_sizes_skipped(tmp_path, capsys):
    # hypercube-style rows lack the redop field: still read from the line's end.
    hyper = "        2048           512     float      -1     9.00    0.00   50.00       3     9.00    0.00   50.00       0\n"
    (tmp_path / "dropinperf_plain_graph_hypercube_r1.log").write_text(_HEAD + hyper)
    _log(tmp_path, "dropinperf_yali_graph_hypercube_r1.log", [_row(2048, 3.0, 150.0, wrong_ip=1), _row(4096, 3.0, 1.0)])
    dropin_table.main(str(tmp_path))
    out = capsys.readouterr().out
    assert _line(out, "| 2K |") == ["| 2K | 9.0 | 3.0 | 3.00 | 50.0 | 150.0 |"]
    assert _line(out, "| 4K |") == []  # measured by one library only
    assert out.strip().endswith(": 2")
