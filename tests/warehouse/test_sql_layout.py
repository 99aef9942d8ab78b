"""`benchmaker sql` on wide results: a table of the leading columns that fit with the
rest named, --vertical (one block per row), --wide (every column); and the hint printed
after a sweep, which runs as printed and keeps a custom --warehouse."""

from __future__ import annotations

import shlex
from pathlib import Path

from benchmaker.recipes.cli import main
from benchmaker.recipes.swebench_replay import HINT_COLUMNS, sql_hint
from benchmaker.warehouse.loader import load_run
from tests.warehouse._bundle import reference_bundle


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "custom.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    return db


def test_a_wide_result_shows_the_columns_that_fit_and_names_the_rest(tmp_path, capsys, monkeypatch):
    db = _db(tmp_path)
    assert main(["sql", "SELECT * FROM v_sweep_summary ORDER BY sweep_point", "--warehouse", str(db)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # piped: 200 columns; every printed line fits, no value is cut with an ellipsis
    assert max(len(line) for line in lines[:-1]) <= 200 and "…" not in out
    flat = " ".join(out.split())  # the line of names may wrap
    named = flat.split(" more columns not shown: ")[1].split(" (name them")[0].split(", ")
    header = next(line for line in lines if "run_id" in line and "┃" in line)
    shown = [c.strip() for c in header.split("┃")[1:-1]]
    assert shown[:2] == ["run_id", "sweep_point"] and "invalid_reason" in named
    # shown + named = every column of the view, in its order
    assert main(["sql", "SELECT * FROM v_sweep_summary LIMIT 0", "--warehouse", str(db), "--csv"]) == 0
    assert shown + named == capsys.readouterr().out.strip().split(",")


def test_vertical_prints_one_block_per_row_and_wide_every_column(tmp_path, capsys):
    db = _db(tmp_path)
    query = "SELECT sweep_point, n_requests, p50_ttft_ms FROM v_sweep_summary ORDER BY sweep_point"
    assert main(["sql", query, "--warehouse", str(db), "--vertical"]) == 0
    # TTFT 10/20 ms in c1 and 30/40 ms in c2 -> medians 15 and 35 (tests/warehouse/_bundle.py)
    assert capsys.readouterr().out == (
        "-[ row 1 ]-----\n"
        "sweep_point  c1\n"
        "n_requests   2\n"
        "p50_ttft_ms  15\n"
        "-[ row 2 ]-----\n"
        "sweep_point  c2\n"
        "n_requests   2\n"
        "p50_ttft_ms  35\n"
    )
    assert main(["sql", "SELECT * FROM v_sweep_summary", "--warehouse", str(db), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "more columns not shown" not in out and "invalid_reason" in out and "…" not in out
    assert main(["sql", query, "--warehouse", str(db), "--wide", "--vertical"]) == 2
    assert capsys.readouterr().err == "benchmaker: error: --wide and --vertical: choose one\n"


def test_the_hint_after_a_sweep_runs_as_printed_and_keeps_a_custom_warehouse(tmp_path, capsys, monkeypatch):
    db = _db(tmp_path)
    monkeypatch.setenv("BENCHMAKER_WAREHOUSE", str(tmp_path / "default.duckdb"))
    hint = sql_hint("run-a", db)
    argv = shlex.split(hint)
    assert argv[:2] == ["benchmaker", "sql"] and argv[-2:] == ["--warehouse", str(db)]
    assert main([*argv[1:], "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ",".join(HINT_COLUMNS)
    # the reference bundle: two points of 2 requests each, all ok (tests/warehouse/_bundle.py)
    assert [line.split(",")[:4] for line in lines[1:]] == [["c1", "True", "2", "2"], ["c2", "True", "2", "2"]]
    # the default warehouse: no --warehouse in the hint
    monkeypatch.setenv("BENCHMAKER_WAREHOUSE", str(db))
    assert "--warehouse" not in sql_hint("run-a", db)


def test_an_id_column_prints_whole_and_other_long_values_fold(tmp_path, capsys):
    """A run id (48 characters here) is never folded where the line holds it, so it can
    be copied into the next query; other values fold at MAX_CELL_WIDTH (40)."""
    db = _db(tmp_path)
    run_id = "swebench-replay-20261204T130918Z-06c0140f-shard1"
    query = f"SELECT '{run_id}' AS run_id, repeat('ab', 25) AS note"
    assert main(["sql", query, "--warehouse", str(db)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    assert [[c.strip() for c in row.split("│")[1:-1]] for row in rows] == [
        [run_id, "ab" * 20],
        ["", "ab" * 5],
    ]
