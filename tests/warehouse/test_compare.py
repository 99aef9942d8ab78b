"""`benchmaker compare` per sweep point (warehouse/compare.py, compare_points.sql):
points matched by target, sorted by number, one block each, warnings when the sweeps or
the workloads differ. Hand-written bundles with known latencies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.recipes.cli import main
from benchmaker.warehouse.compare import compare_points, compare_runs
from benchmaker.warehouse.connection import open_readonly
from benchmaker.warehouse.loader import load_run
from tests.warehouse._bundle import sample, write_jsonl, write_manifest


def _run(
    tmp_path: Path, run_id: str, points: dict[int, float], *, config: dict | None = None, label_prefix: str = "c"
) -> Path:
    """A run with one sweep point per target concurrency N (label `<prefix>N`): 10
    requests each, TTFT = base + i ms and E2E = 10 * TTFT for i = 0..9, base = points[N]."""
    run_dir = tmp_path / run_id
    write_manifest(run_dir, run_id)
    if config is not None:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        manifest["config"] = config
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
    rows, seq = [], 0
    for n, base in points.items():
        for i in range(10):
            ttft = base + i
            rows.append(
                sample(
                    run_id,
                    seq,
                    sent_ms=1000.0 * seq,
                    ttft_ms=ttft,
                    e2e_ms=10 * ttft,
                    output_tokens=11,
                    sweep_point=f"{label_prefix}{n}",
                )
            )
            seq += 1
    write_jsonl(run_dir / "samples.jsonl", rows)
    write_jsonl(
        run_dir / "sweep_points.jsonl", [{"sweep_point": f"{label_prefix}{n}", "concurrency": n} for n in points]
    )
    return run_dir


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    db = tmp_path / "w.duckdb"
    load_run(db, _run(tmp_path, "base", {1: 10.0, 4: 20.0, 16: 40.0}, config={"latency": "instant"}))
    # same targets, other labels; every latency 5 ms (TTFT) and 50 ms (E2E) higher at c4 only
    load_run(
        db, _run(tmp_path, "cand", {1: 10.0, 4: 25.0, 16: 40.0}, config={"latency": "instant"}, label_prefix="conc")
    )
    load_run(db, _run(tmp_path, "short", {1: 10.0, 2: 12.0}, config={"latency": "fixed:50:2"}))
    return db


def test_points_are_matched_by_target_and_sorted_by_number(warehouse: Path) -> None:
    con = open_readonly(warehouse)
    try:
        cmp = compare_points(con, "base", "cand", n_boot=50, min_n=1)  # 10 requests a point: judged anyway
    finally:
        con.close()
    assert cmp.points == ["concurrency=1", "concurrency=4", "concurrency=16"]  # 16 after 4: by number
    # one request at a time (1 s apart, E2E < 0.5 s): c4 and c16 never reached their target
    assert cmp.warnings == [
        f"concurrency={n}: no verdict: baseline c{n} is invalid (achieved concurrency 1 < target {n}); "
        f"candidate conc{n} is invalid (achieved concurrency 1 < target {n})"
        for n in (4, 16)
    ]
    by = {(r.point_key, r.statistic): r for r in cmp.rows}
    c4 = by[("concurrency=4", "p50_ttft_ms")]
    # TTFT 20..29 vs 25..34 ms: medians 24.5 and 29.5 (linear), +5 ms at every resample
    assert (c4.baseline_value, c4.candidate_value, c4.diff) == (24.5, 29.5, 5.0)
    assert (c4.baseline_sweep_point, c4.candidate_sweep_point) == ("c4", "conc4")
    assert (c4.n_baseline, c4.n_candidate, c4.n_boot) == (10, 10, 50)
    assert c4.diff_ci_low <= 5.0 <= c4.diff_ci_high
    c1 = by[("concurrency=1", "p50_e2e_ms")]
    assert (c1.baseline_value, c1.diff) == (145.0, 0.0)  # E2E 100..190 ms, median 145
    assert c1.verdict == "no-change"
    assert by[("concurrency=4", "p50_e2e_ms")].diff == 50.0  # 10 x the TTFT shift
    tput = by[("concurrency=16", "request_throughput_per_s")]
    assert tput.diff_ci_low is None and tput.verdict is None and tput.n_baseline == 10
    # one p50/p99 TTFT/E2E and a throughput row per point: 3 x 5
    assert len(cmp.rows) == 15


def test_different_sweeps_and_workloads_are_warned_about(warehouse: Path) -> None:
    con = open_readonly(warehouse)
    try:
        cmp = compare_points(con, "base", "short", n_boot=20, min_n=1)
        pooled = compare_runs(con, "base", "short", n_boot=20)
    finally:
        con.close()
    assert cmp.points == ["concurrency=1"]
    assert cmp.warnings == [
        "points only in base: concurrency=4 (c4), concurrency=16 (c16) (not compared)",
        "points only in short: concurrency=2 (c2) (not compared)",
        'workloads differ: config latency: "instant" vs "fixed:50:2"',
    ]
    # the pooled comparison still exists for the nightly view: 30 vs 20 requests in one sample
    assert {r.statistic: r.n_baseline for r in pooled}["p50_ttft_ms"] == 30


def test_cli_prints_one_block_per_point_and_the_warnings(warehouse: Path, capsys) -> None:
    assert main(["compare", "base", "cand", "--warehouse", str(warehouse), "--n-boot", "20"]) == 0
    out = capsys.readouterr().out
    blocks = [line.strip() for line in out.splitlines() if line.strip().startswith("concurrency=")]
    assert blocks == ["concurrency=1 (c1 vs conc1)", "concurrency=4 (c4 vs conc4)", "concurrency=16 (c16 vs conc16)"]
    assert main(["compare", "base", "short", "--warehouse", str(warehouse), "--n-boot", "20"]) == 0
    out = capsys.readouterr().out
    assert "warning: points only in base: concurrency=4 (c4), concurrency=16 (c16)" in out
    assert main(["compare", "base", "short", "--warehouse", str(warehouse), "--json", "--n-boot", "20"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert {r["point_key"] for r in rows} == {"concurrency=1"} and len(rows) == 5
    assert "warning: workloads differ: config latency" in captured.err


def test_no_verdict_on_an_invalid_point_or_with_too_few_requests(warehouse: Path, tmp_path: Path, capsys) -> None:
    con = open_readonly(warehouse)
    try:
        cmp = compare_points(con, "base", "cand", n_boot=20)
    finally:
        con.close()
    # 10 requests a point: below 20 for p50 and 100 for p99 (compare.min_n_for); c4 and
    # c16 are invalid, which is said first
    assert {r.verdict for r in cmp.rows if r.point_key == "concurrency=1" and r.verdict} == {"n too small"}
    assert {r.verdict for r in cmp.rows if r.point_key == "concurrency=4" and r.verdict} == {"invalid point"}
    assert cmp.warnings[0] == (
        "concurrency=1: n = 10 / 10 requests is too small for a verdict (a CI needs, in "
        "each run, >= 20 for p50_ttft_ms, p50_e2e_ms, >= 100 for p99_ttft_ms, p99_e2e_ms)"
    )
    # a candidate whose c1 is invalid: no verdict there, whatever n
    db = tmp_path / "invalid.duckdb"
    load_run(db, _run(tmp_path, "base2", {1: 20.0}))
    cand = _run(tmp_path, "cand2", {1: 25.0})
    write_jsonl(
        cand / "sweep_points.jsonl",
        [{"sweep_point": "c1", "concurrency": 1, "verdict_reasons": "event-loop lag p99 38.00 ms > 10 ms"}],
    )
    load_run(db, cand)
    con = open_readonly(db)
    try:
        cmp = compare_points(con, "base2", "cand2", n_boot=20, min_n=1)
    finally:
        con.close()
    assert {r.verdict for r in cmp.rows if r.statistic != "request_throughput_per_s"} == {"invalid point"}
    assert cmp.warnings == ["concurrency=1: no verdict: candidate c1 is invalid (event-loop lag p99 38.00 ms > 10 ms)"]
    assert main(["compare", "base2", "cand2", "--warehouse", str(db), "--n-boot", "20"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "invalid point" in out and "regression" not in out
    assert "warning: concurrency=1: no verdict: candidate c1 is invalid (event-loop lag p99 38.00 ms > 10 ms)" in out


def test_report_lists_sweep_points_by_number(warehouse: Path) -> None:
    from benchmaker.warehouse.report import collect_report_data

    con = open_readonly(warehouse)
    try:
        sweep = collect_report_data(con, "base").sweep
    finally:
        con.close()
    assert [r["sweep_point"] for r in sweep] == ["c1", "c4", "c16"]  # as text: c1, c16, c4


def test_report_with_a_baseline_plots_the_difference_per_point(warehouse: Path, tmp_path: Path, capsys) -> None:
    from tests.warehouse.test_report import figures

    out = tmp_path / "r.html"
    assert main(["report", "cand", "-o", str(out), "--warehouse", str(warehouse), "--baseline", "base"]) == 0
    html = out.read_text()
    fig = figures(html)["compare"]
    p50 = {t["name"]: t for t in fig["data"]}["p50_ttft_ms"]
    # per matched point: +5 ms at concurrency=4 only (TTFT 25..34 vs 20..29 ms)
    assert p50["x"] == ["concurrency=1", "concurrency=4", "concurrency=16"] and p50["y"] == [0.0, 5.0, 0.0]
    assert 'data-row="concurrency=4/p50_ttft_ms" data-col="diff" data-value="5.0"' in html
    assert main(["report", "base", "-o", str(out), "--warehouse", str(warehouse), "--baseline", "short"]) == 0
    assert "warning: points only in base: concurrency=4 (c4), concurrency=16 (c16)" in out.read_text()
