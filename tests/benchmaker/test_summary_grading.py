"""Grading columns of benchmaker/engine/sql/summary.sql over hand-written samples: n_graded,
n_correct, accuracy, correct_throughput_per_s, n_good_correct, goodput_correct_per_s;
the same numbers through the warehouse's v_run_summary / v_lane_summary."""

from __future__ import annotations

import json
from pathlib import Path

from benchmaker.engine.records import Sample
from benchmaker.engine.summary import nest_summary, summarize_samples
from benchmaker.warehouse.connection import open_readonly
from benchmaker.warehouse.loader import load_run

S = 1_000_000_000  # ns per s


def row(
    seq: int,
    end_s: float,
    outcome: str = "ok",
    grade: str | None = None,
    slo_met: bool | None = None,
    lane: str = "default",
) -> dict:
    return Sample(
        run_id="r",
        seq=seq,
        lane=lane,
        outcome=outcome,
        grade=grade,
        slo_met=slo_met,
        intended_ns=0,
        sent_ns=0,
        end_ns=int(end_s * S),
    ).to_dict()


# Window: first intended (0 s) .. last end (4 s) = 4 s for the run; lane qa 0 .. 2 s.
GRADED = [
    row(0, 1.0, "ok", "correct", True, lane="qa"),  # correct and within SLO
    row(1, 2.0, "ok", "correct", False, lane="qa"),  # correct but too slow
    row(2, 1.5, "graded_wrong", "wrong", False),
    row(3, 1.0, "grading_error", None, False),  # the grader failed: not graded
    row(4, 4.0, "http_error", None, False),  # never graded
]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_accuracy_and_goodput_of_correct_answers(tmp_path):
    summary = nest_summary(summarize_samples([write(tmp_path / "samples.jsonl", GRADED)]))
    run = summary["run"]
    assert (run["n_graded"], run["n_correct"], run["n_graded_wrong"], run["n_grading_error"]) == (3, 2, 1, 1)
    assert run["accuracy"] == 2 / 3  # 2 correct of 3 graded
    assert run["window_s"] == 4.0
    assert run["correct_throughput_per_s"] == 0.5  # 2 correct / 4 s
    assert run["n_good_correct"] == 1  # seq 0 only
    assert run["goodput_correct_per_s"] == 0.25  # 1 / 4 s
    qa = summary["lanes"]["qa"]
    assert (qa["n_graded"], qa["accuracy"], qa["window_s"], qa["goodput_correct_per_s"]) == (2, 1.0, 2.0, 0.5)


def test_without_grades_or_slo_the_columns_are_null_not_zero(tmp_path):
    ungraded = [row(i, 1.0, "ok") for i in range(2)]
    run = nest_summary(summarize_samples([write(tmp_path / "a.jsonl", ungraded)]))["run"]
    assert (run["n_graded"], run["n_correct"]) == (0, 0)
    assert run["accuracy"] is None and run["correct_throughput_per_s"] is None
    assert run["n_good_correct"] is None and run["goodput_correct_per_s"] is None
    no_slo = [row(0, 2.0, "ok", "correct"), row(1, 2.0, "graded_wrong", "wrong")]
    run = nest_summary(summarize_samples([write(tmp_path / "b.jsonl", no_slo)]))["run"]
    assert (run["accuracy"], run["correct_throughput_per_s"]) == (0.5, 0.5)  # 1 of 2; 1 / 2 s
    assert run["n_good_correct"] is None and run["goodput_correct_per_s"] is None  # no SLO declared


def test_warehouse_views_carry_the_grading_columns(tmp_path):
    bundle = tmp_path / "r"
    bundle.mkdir()
    manifest = {
        "run_id": "r",
        "kind": "llm",
        "label": None,
        "created_at": "2026-11-29T01:00:00Z",
        "t0_wall_ns": 1,
        "config": {},
        "seed": 0,
        "versions": {},
        "git_sha": None,
        "host": {"hostname": "h"},
        "workers": 1,
        "slo": None,
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    write(bundle / "samples.jsonl", GRADED)
    db = tmp_path / "w.duckdb"
    load_run(db, bundle)
    con = open_readonly(db)
    try:
        got = con.execute("SELECT n_graded, n_correct, accuracy, goodput_correct_per_s FROM v_run_summary").fetchall()
        lane = con.execute("SELECT accuracy FROM v_lane_summary WHERE lane = 'qa'").fetchall()
    finally:
        con.close()
    assert got == [(3, 2, 2 / 3, 0.25)]
    assert lane == [(1.0,)]
