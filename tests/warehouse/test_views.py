"""warehouse views: exact values over a hand-written bundle, identity with summary.sql."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmaker.engine.summary import summarize_samples
from benchmaker.warehouse.compare import compare_runs
from benchmaker.warehouse.connection import connect_writer, open_readonly
from benchmaker.warehouse.errors import ViewError
from benchmaker.warehouse.loader import load_run
from benchmaker.warehouse.views import view_files
from tests.warehouse._bundle import E2ES_MS, TTFTS_MS, reference_bundle, sample, write_jsonl, write_manifest

approx = pytest.approx  # rel 1e-12: only float rounding of the linear interpolation


def _rows(con, sql, params=None):
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=False)) for r in cur.fetchall()]


@pytest.fixture
def warehouse(tmp_path):
    db = tmp_path / "w.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    con = open_readonly(db)
    yield con
    con.close()


def test_sweep_summary_percentiles_are_linear_over_hand_written_timings(warehouse):
    rows = _rows(warehouse, "SELECT * FROM v_sweep_summary ORDER BY sweep_point")
    assert [r["sweep_point"] for r in rows] == ["c1", "c2"]
    c1, c2 = rows
    # c1 holds seq 0, 1: TTFT 10, 20 ms -> p50 = 15; p99 = 10 + 0.99 * 10 = 19.9
    assert (c1["n_ttft"], c1["p50_ttft_ms"], c1["p99_ttft_ms"]) == (2, 15.0, approx(19.9, rel=1e-12))
    # c2 holds seq 2, 3: E2E 300, 400 ms -> p50 = 350, p90 = 390
    assert (c2["n_e2e"], c2["p50_e2e_ms"], c2["p90_e2e_ms"]) == (2, 350.0, approx(390.0, rel=1e-12))
    # TPOT = (E2E - TTFT) / (11 - 1): c2 -> 27, 36 ms; p50 = 31.5
    assert c2["p50_tpot_ms"] == approx(31.5, rel=1e-12)
    # ITL: one gap per request between its two token events (E2E - TTFT): 270, 360
    assert (c2["n_itl"], c2["p50_itl_ms"]) == (2, approx(315.0, rel=1e-12))
    # requests 2 and 3 overlap (sent 200/300 ms, 300/400 ms long): 2 in flight at most
    assert c2["achieved_max_concurrency"] == 2
    assert c1["valid"] is True and c1["target_concurrency"] is None


def test_the_verdict_written_with_a_sweep_point_is_kept(tmp_path):
    run_dir = reference_bundle(tmp_path / "run-a")
    # c1 reached its target, but its writer found it invalid (e.g. a shard failed);
    # c2 was written without reasons: the view's own checks still apply to it (its
    # stored `valid` is the writer's copy of the verdict, not an input)
    write_jsonl(
        run_dir / "sweep_points.jsonl",
        [
            {
                "sweep_point": "c1",
                "concurrency": 1,
                "valid": False,
                "invalid_reason": "shard 1 failed (exit code 1)",
                "verdict_reasons": "shard 1 failed (exit code 1)",
                "shards": 2,
            },
            {"sweep_point": "c2", "concurrency": 2, "valid": True, "invalid_reason": None, "shards": 2},
        ],
    )
    db = tmp_path / "w.duckdb"
    load_run(db, run_dir)
    con = open_readonly(db)
    try:
        rows = _rows(
            con,
            "SELECT sweep_point, achieved_max_concurrency, shards, valid, invalid_reason "
            "FROM v_sweep_summary ORDER BY sweep_point",
        )
    finally:
        con.close()
    # c1: requests 0 (0..100 ms) and 1 (100..200 ms) touch, never overlap: 1 in flight
    assert rows == [
        {
            "sweep_point": "c1",
            "achieved_max_concurrency": 1,
            "shards": 2,
            "valid": False,
            "invalid_reason": "shard 1 failed (exit code 1)",
        },
        {"sweep_point": "c2", "achieved_max_concurrency": 2, "shards": 2, "valid": True, "invalid_reason": None},
    ]


def test_vllm_compat_has_vllm_keys_with_exact_values(warehouse):
    (run,) = _rows(warehouse, "SELECT * FROM v_vllm_compat WHERE sweep_point IS NULL")
    assert run["completed"] == 4 and run["failed"] == 0
    # TTFT 10, 20, 30, 40 ms: mean 25, median 25, p99 = 30 + 0.97 * 10 = 39.7
    assert run["mean_ttft_ms"] == 25.0 and run["median_ttft_ms"] == 25.0
    assert run["p99_ttft_ms"] == approx(39.7, rel=1e-12)
    # population std of 10, 20, 30, 40 = sqrt(125) (numpy np.std, as vLLM)
    assert run["std_ttft_ms"] == approx(125**0.5, rel=1e-12)
    # TPOT 9, 18, 27, 36 ms: median 22.5, p99 = 27 + 0.97 * 9 = 35.73
    assert run["median_tpot_ms"] == approx(22.5, rel=1e-12)
    assert run["p99_tpot_ms"] == approx(35.73, rel=1e-12)
    # E2E 100..400 ms: mean 250, p99 = 300 + 0.97 * 100 = 397
    assert run["mean_e2el_ms"] == 250.0 and run["p99_e2el_ms"] == approx(397.0, rel=1e-12)
    # window: first intended send 0 .. last end 300 + 400 = 700 ms -> 4 / 0.7 s
    assert run["duration"] == approx(0.7, rel=1e-12)
    assert run["request_throughput"] == approx(4 / 0.7, rel=1e-12)
    # 11 output tokens each, server usage on all: 44 tokens / 0.7 s
    assert run["output_throughput"] == approx(44 / 0.7, rel=1e-12)
    for key in ("mean_itl_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "total_token_throughput"):
        assert key in run


def test_run_summary_equals_summary_sql_over_the_bundle_files(tmp_path, warehouse):
    # summary.json of a bundle is summary.sql over its samples.jsonl (benchmaker.engine.summary)
    from_files = [r for r in summarize_samples([tmp_path / "run-a" / "samples.jsonl"])]
    from_warehouse = _rows(warehouse, "SELECT * FROM samples_summary WHERE run_id = 'run-a'")
    assert from_warehouse == from_files
    (run,) = _rows(warehouse, "SELECT * FROM v_run_summary")
    bundle_run = next(r for r in from_files if r["group_by"] == "run")
    # the reference bundle is a sweep of two points (c1, c2): figures over a time window
    # would mix its sequential points, so they are per point only (v_sweep_summary)
    per_point = {
        "window_s",
        "request_throughput_per_s",
        "offered_rate_per_s",
        "achieved_send_rate_per_s",
        "output_throughput_tok_per_s",
        "goodput_per_s",
        "max_concurrency",
        "mean_concurrency",
        "correct_throughput_per_s",
        "goodput_correct_per_s",
    }
    assert run["n_sweep_points"] == 2
    for key, value in bundle_run.items():
        if key not in ("group_by", "group_key"):
            assert run[key] == (None if key in per_point else value), key
    assert run["ttft_ms"]["p50"] == 25.0 and run["ttft_ms"]["count"] == len(TTFTS_MS)
    assert run["e2e_ms"]["max"] == max(E2ES_MS)


def _slow_run(tmp_path, run_id, created_at, extra_ms):
    run = tmp_path / run_id
    write_manifest(run, run_id, created_at=created_at)
    write_jsonl(
        run / "samples.jsonl",
        [
            sample(
                run_id,
                i,
                sent_ms=10.0 * i,
                ttft_ms=10.0 + extra_ms + (i % 7),
                e2e_ms=100.0 + extra_ms + (i % 5),
                output_tokens=11,
            )
            for i in range(60)
        ],
    )
    return run


def test_nightly_regression_flags_a_slower_latest_nightly(tmp_path):
    db = tmp_path / "w.duckdb"
    load_run(db, _slow_run(tmp_path, "n1", "2026-11-28T01:00:00Z", 0.0))
    load_run(db, _slow_run(tmp_path, "n2", "2026-11-29T01:00:00Z", 50.0))
    con = open_readonly(db)
    rows = {r["statistic"]: r for r in _rows(con, "SELECT * FROM v_nightly_regression")}
    con.close()
    assert set(rows) == {"p50_ttft_ms", "p99_ttft_ms", "p50_e2e_ms", "p99_e2e_ms", "request_throughput_per_s"}
    ttft = rows["p50_ttft_ms"]
    assert (ttft["baseline_run_id"], ttft["candidate_run_id"], ttft["baseline_source"]) == ("n1", "n2", "previous")
    # every TTFT of n2 is 50 ms above n1's: any resample difference is 50 +- the spread 0..6
    assert ttft["diff"] == approx(50.0, rel=1e-12)
    assert 44.0 <= ttft["diff_ci_low"] <= 50.0 <= ttft["diff_ci_high"] <= 56.0
    assert ttft["verdict"] == "regression" and ttft["n_boot"] == 200 and ttft["n_candidate"] == 60
    assert rows["request_throughput_per_s"]["verdict"] is None


def test_pinned_baseline_and_identical_runs_give_no_change(tmp_path):
    db = tmp_path / "w.duckdb"
    load_run(db, _slow_run(tmp_path, "n1", "2026-11-27T01:00:00Z", 0.0))
    load_run(db, _slow_run(tmp_path, "n2", "2026-11-28T01:00:00Z", 50.0))
    load_run(db, _slow_run(tmp_path, "n3", "2026-11-29T01:00:00Z", 0.0))
    con = connect_writer(db)
    con.execute("INSERT INTO baselines VALUES ('nightly', 'n1', NULL, 'pinned by test')")
    rows = _rows(con, "SELECT * FROM v_nightly_regression WHERE statistic LIKE 'p%'")
    assert {(r["baseline_run_id"], r["baseline_source"]) for r in rows} == {("n1", "pinned")}
    # n3 has exactly n1's values: the point difference is 0 and the interval (independent
    # resamples of the two runs) straddles it
    for r in rows:
        assert r["diff"] == 0.0 and r["diff_ci_low"] <= 0.0 <= r["diff_ci_high"], r["statistic"]
        assert r["verdict"] == "no-change"
    # the CLI's comparison uses the same macro: same numbers
    via_python = {c.statistic: c for c in compare_runs(con, "n1", "n3")}
    by_view = {r["statistic"]: r for r in rows}
    assert via_python["p99_e2e_ms"].diff_ci_high == by_view["p99_e2e_ms"]["diff_ci_high"]  # seeded
    assert via_python["request_throughput_per_s"].diff == 0.0
    con.close()


def test_every_view_file_holds_one_relation_named_as_the_file():
    for name, label, sql in view_files():
        if label.startswith("warehouse/views/"):
            assert f"CREATE OR REPLACE VIEW {name} AS" in sql or f"CREATE OR REPLACE MACRO {name}(" in sql, label
            assert sql.count("CREATE OR REPLACE") == 1, label


def test_failing_view_names_its_file(tmp_path, monkeypatch):
    import benchmaker.warehouse.views as views

    real = views.view_files
    monkeypatch.setattr(
        views,
        "view_files",
        lambda: (
            real()
            + [("zz_bad", "warehouse/views/zz_bad.sql", "CREATE OR REPLACE VIEW zz_bad AS SELECT nope FROM runs")]
        ),
    )
    with pytest.raises(ViewError, match=r"^warehouse/views/zz_bad.sql: .*nope"):
        load_run(tmp_path / "w.duckdb", reference_bundle(tmp_path / "run-a"))


def _duckdb_cli() -> str | None:
    """The `duckdb` CLI from PyPI (package duckdb-cli): env BENCHMAKER_DUCKDB_CLI, the
    venv's bin, or PATH."""
    env = os.environ.get("BENCHMAKER_DUCKDB_CLI")
    if env:
        return env
    import sys

    venv = Path(sys.executable).parent / "duckdb"
    return str(venv) if venv.exists() else shutil.which("duckdb")


def test_warehouse_opens_in_the_duckdb_cli(tmp_path):
    cli = _duckdb_cli()
    if cli is None:
        pytest.skip("no duckdb CLI (pip install duckdb-cli) in the venv or on PATH")
    db = tmp_path / "w.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    out = subprocess.run(
        [
            cli,
            "-readonly",
            "-csv",
            str(db),
            "-c",
            "SELECT run_id, p50_ttft_ms FROM v_sweep_summary ORDER BY sweep_point",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["run_id,p50_ttft_ms", "run-a,15.0", "run-a,35.0"]  # 10/20, 30/40 ms
