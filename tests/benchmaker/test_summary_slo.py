"""SLO attainment judged by benchmaker/engine/sql/summary.sql (not by the runner): hand-made
samples with the arithmetic in comments, the same numbers from the warehouse (run_slo
over runs.slo), and a real run's goodput."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import orjson
import pytest

from benchmaker.engine.bundle import build_manifest
from benchmaker.engine.config import SLO
from benchmaker.engine.records import Sample
from benchmaker.engine.summary import nest_summary, summarize_samples
from benchmaker.warehouse.loader import load_run

MS = 1_000_000


def _s(seq: int, ft_ms: int | None, end_ms: int, out: int | None, outcome: str = "ok", **kw) -> Sample:
    # token events: the first at ft_ms and, past one token, the last at end_ms
    events = None if ft_ms is None else [ft_ms * MS] + ([end_ms * MS] if out and out > 1 else [])
    return Sample(
        run_id="slo",
        seq=seq,
        outcome=outcome,
        intended_ns=0,
        sent_ns=0,
        first_token_ns=None if ft_ms is None else ft_ms * MS,
        end_ns=end_ms * MS,
        token_event_ns=events,
        n_token_events=len(events or ()),
        usage_present=out is not None,
        output_tokens=out,
        **kw,
    )


# SLO ttft <= 500 ms, tpot <= 40 ms, e2e <= 1000 ms
BOUNDS = SLO(ttft_ms=500, tpot_ms=40, e2e_ms=1000)
SAMPLES = [
    _s(0, 100, 300, 11),  # TTFT 100, TPOT (300 - 100) / 10 = 20, E2E 300: met
    _s(1, 600, 700, 3),  # TTFT 600 > 500: not met
    _s(2, 50, 1300, 1),  # one token (TPOT not held against it), E2E 1300 > 1000: not met
    _s(3, None, 10, None, outcome="http_error"),  # a failure never meets it
    _s(4, 100, 900, 11),  # TPOT (900 - 100) / 10 = 80 > 40: not met
    _s(5, 100, 400, 1),  # one token, TTFT 100, E2E 400: met
]


def _write(path: Path, samples: list[Sample]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(s.to_dict(), option=orjson.OPT_APPEND_NEWLINE) for s in samples))
    return path


def test_slo_is_judged_in_sql(tmp_path: Path) -> None:
    run = nest_summary(summarize_samples([_write(tmp_path / "samples.jsonl", SAMPLES)], BOUNDS))["run"]
    # 2 of 6 met (seq 0 and 5); window: first intended 0 .. last end 1300 ms
    assert run["n_good"] == 2
    assert run["goodput_per_s"] == pytest.approx(2 / 1.3)
    # the same bounds as a dict; without an SLO nothing is judged
    assert nest_summary(summarize_samples([tmp_path / "samples.jsonl"], BOUNDS.model_dump()))["run"]["n_good"] == 2
    none = nest_summary(summarize_samples([tmp_path / "samples.jsonl"]))["run"]
    assert (none["n_good"], none["goodput_per_s"]) == (None, None)


def test_samples_judged_by_their_writer_keep_their_verdict_without_an_slo(tmp_path: Path) -> None:
    samples = [_s(0, 100, 300, 11, slo_met=True), _s(1, 100, 300, 11, slo_met=False)]
    run = nest_summary(summarize_samples([_write(tmp_path / "samples.jsonl", samples)]))["run"]
    assert run["n_good"] == 1  # 1 of 2 as written


def test_warehouse_judges_the_manifest_slo_like_the_bundle(tmp_path: Path) -> None:
    run_dir = tmp_path / "slo"
    _write(run_dir / "samples.jsonl", SAMPLES)
    manifest = build_manifest(
        run_id="slo", kind="llm", label=None, config={}, seed=None, t0_wall_ns=0, slo=BOUNDS.model_dump()
    )
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    load_run(tmp_path / "w.duckdb", run_dir)
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        got = con.execute("SELECT n_good, goodput_per_s FROM v_run_summary WHERE run_id = 'slo'").fetchone()
    finally:
        con.close()
    assert got == (2, pytest.approx(2 / 1.3))
