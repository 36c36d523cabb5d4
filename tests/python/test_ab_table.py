"""scripts/ab_table.py: the abperf stage's before/after tables, from yali-perf JSON files."""
import importlib.util
import json
import pathlib

_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "ab_table.py"
_spec = importlib.util.spec_from_file_location("ab_table", _SCRIPT)
ab_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab_table)


def _write(d, name, results):
    (d / name).write_text(json.dumps({"results": results}))


def _row(out, prefix):
    return [line for line in out.splitlines() if line.startswith(prefix)]


def test_time_and_host_issue_tables(tmp_path, capsys):
    # Two rounds; the base build's yali-perf predates host_issue_us, the new one records it.
    for rep, (b, a) in enumerate([(7.0, 10.0), (9.0, 12.0)], start=1):
        _write(tmp_path, f"ab_base_e_g2_r{rep}.json",
               [{"bytes": 4096, "time_us": b, "placement": "out-of-place"},
                {"bytes": 4096, "time_us": 1.0, "placement": "in-place"}])
        _write(tmp_path, f"ab_new_e_g2_r{rep}.json",
               [{"bytes": 4096, "time_us": a, "host_issue_us": a / 2, "placement": "out-of-place"}])
        _write(tmp_path, f"ab_base_g_g2_r{rep}.json", [{"bytes": 4096, "time_us": 3.0}])
        _write(tmp_path, f"ab_new_g_g2_r{rep}.json", [{"bytes": 4096, "time_us": 3.3, "host_issue_us": None}])
    ab_table.main(str(tmp_path))
    out = capsys.readouterr().out
    assert _row(out, "| eager | 2 | 4 KB |") == ["| eager | 2 | 4 KB | 7.00 | 9.00 | 10.00 | 12.00 | 1.375 |"]
    assert _row(out, "| graph | 2 | 4 KB |") == ["| graph | 2 | 4 KB | 3.00 | 3.00 | 3.30 | 3.30 | 1.100 |"]
    # Only the new build's eager runs have the host figure: shown, without a ratio.
    assert _row(out, "| host issue |") == ["| host issue | 2 | 4 KB | - | - | 5.00 | 6.00 | - |"]


def test_no_host_table_without_the_figure(tmp_path, capsys):
    _write(tmp_path, "ab_base_e_g4_r1.json", [{"bytes": 65536, "time_us": 8.0}])
    _write(tmp_path, "ab_new_e_g4_r1.json", [{"bytes": 65536, "time_us": 8.0}])
    ab_table.main(str(tmp_path))
    out = capsys.readouterr().out
    assert _row(out, "| eager | 4 | 64 KB |") == ["| eager | 4 | 64 KB | 8.00 | 8.00 | 1.000 |"]
    assert "host issue" not in out
