"""Recorded-error and aborted calls of a sweep point: counted apart, with exact
values, in the point row (point_summary.json), v_sweep_summary, the HTML report and the
CLI sweep table (print_sweep), from one hand-written bundle loaded into a real DuckDB file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import duckdb
import orjson
from rich.console import Console

from benchmaker.agent.episodes import Episode, TurnRecord
from benchmaker.engine.records import Sample
from benchmaker.recipes.swebench_replay import print_sweep
from benchmaker.sweep.point_summary import summarize_point, sweep_table_rows, write_point_summary
from benchmaker.sweep.sweep import point_dir, write_run_manifest, write_sweep_points
from benchmaker.warehouse.loader import load_run
from benchmaker.warehouse.report import write_report
from tests.warehouse.test_report import cells

MS = 1_000_000
RUN = "r-outcomes"


def _call(seq: int, sent_ms: int, outcome: str, finish_reason: str | None) -> dict:
    """A model call of episode c1-0, turn `seq`: 30 ms, first token at 10 ms."""
    return Sample(
        run_id=RUN,
        seq=seq,
        lane="agent",
        sweep_point="c1",
        outcome=outcome,
        finish_reason=finish_reason,
        intended_ns=sent_ms * MS,
        sent_ns=sent_ms * MS,
        first_token_ns=(sent_ms + 10) * MS,
        end_ns=(sent_ms + 30) * MS,
        usage_present=True,
        prompt_tokens=100,
        output_tokens=5,
        meta={"episode_id": "c1-0", "turn_index": seq, "miss_kind": None},
    ).to_dict()


def _bundle(run_dir: Path) -> Path:
    write_run_manifest(run_dir, run_id=RUN, kind="swebench-replay", label="outcomes", config={})
    pdir = point_dir(run_dir, "c1")
    pdir.mkdir(parents=True)
    # turns 0, 1 ok; 2 failed in the original recording (served as recorded); 3 the server
    # ended with finish_reason abort; 4 ok
    calls = [
        _call(0, 0, "ok", "tool_calls"),
        _call(1, 40, "ok", "tool_calls"),
        _call(2, 80, "recorded_error", "aborted"),
        _call(3, 120, "aborted", "abort"),
        _call(4, 160, "ok", "stop"),
    ]
    (pdir / "samples.jsonl").write_bytes(b"".join(orjson.dumps(c, option=orjson.OPT_APPEND_NEWLINE) for c in calls))
    ep = Episode(
        run_id=RUN,
        sweep_point="c1",
        concurrency=1,
        episode_id="c1-0",
        trajectory_id="t",
        task_id=None,
        mode="recorded",
        worker=0,
        started_ns=0,
        ended_ns=190 * MS,
        n_turns=5,
        n_requests=5,
    )
    (pdir / "episodes.jsonl").write_text(json.dumps(ep.to_dict()) + "\n")
    (pdir / "turns.jsonl").write_text(
        "".join(
            json.dumps(
                TurnRecord(run_id=RUN, sweep_point="c1", episode_id="c1-0", turn_index=i, byte_equal=True).to_dict()
            )
            + "\n"
            for i in range(5)
        )
    )
    return pdir


def test_recorded_errors_and_aborted_calls_are_columns_everywhere(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    pdir = _bundle(run_dir)
    row = summarize_point(pdir, sweep_point="c1", concurrency=1, episodes_target=1)
    # 5 sent, 3 ok, 1 recorded_error (out of the error rate), 1 aborted (a failure):
    # error rate 1 - 3 / (5 - 1) = 0.25
    assert (row["n_requests"], row["n_ok"], row["n_recorded_error"], row["n_aborted"]) == (5, 3, 1, 1)
    assert row["error_rate"] == 0.25
    write_point_summary(pdir, row)
    write_sweep_points(run_dir, [row])

    db = tmp_path / "w.duckdb"
    load_run(db, run_dir)
    con = duckdb.connect(str(db), read_only=True)
    try:
        view = con.execute(
            "SELECT n_requests, n_ok, n_recorded_error, n_aborted, error_rate FROM v_sweep_summary WHERE run_id = ?",
            [RUN],
        ).fetchall()
        # the same counts by hand over the turns joined to their requests
        hand = con.execute(
            "SELECT count(*) FILTER (r.outcome = 'recorded_error'), count(*) FILTER (r.outcome = 'aborted') "
            "FROM turns t JOIN requests r USING (run_id, sweep_point, episode_id, turn_index) "
            "WHERE t.run_id = ?",
            [RUN],
        ).fetchall()
    finally:
        con.close()
    assert view == [(5, 3, 1, 1, 0.25)]
    assert hand == [(1, 1)]

    report = cells(write_report(db, RUN, tmp_path / "report.html").read_text(encoding="utf-8"))["sweep"]
    assert (report[("n_recorded_error", "c1")][0], report[("n_aborted", "c1")][0]) == (1, 1)

    headers, table = sweep_table_rows([row])
    cell = dict(zip(headers, table[0], strict=False))
    assert (cell["rec. errors"], cell["aborted"]) == ("1", "1")
    buf = io.StringIO()
    print_sweep(
        {"points": [row], "run_id": RUN, "run_dir": str(run_dir), "warehouse": str(db)},
        "swebench-replay",
        console=Console(file=buf, width=300, force_terminal=False),
    )
    printed = buf.getvalue()
    # the second table: its header names the columns, the c1 line carries their cells
    head = next(x for x in printed.splitlines() if "rec. errors" in x)
    line = next(x for x in printed.splitlines() if x.startswith("│ c1") and "30.0" in x)
    names = [c.strip() for c in head.split("┃")[1:-1]]
    values = [c.strip() for c in line.split("│")[1:-1]]
    assert (
        dict(zip(names, values, strict=False))["rec. errors"] == "1"
        and dict(zip(names, values, strict=False))["aborted"] == "1"
    )
