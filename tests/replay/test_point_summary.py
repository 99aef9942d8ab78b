"""benchmaker.sweep.point_summary: the sweep row of a point from hand-written files (exact values,
the arithmetic in comments): request metrics by summary.sql over samples.jsonl, episode
metrics by episode_summary.sql, the verdict by sweep_summary.sql."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from benchmaker.agent.episodes import Episode
from benchmaker.engine.records import Sample
from benchmaker.sweep.point_summary import engine_point_row, summarize_point, sweep_table_markdown, sweep_table_rows

MS = 1_000_000


def _ep(i: int, start_ms: int, end_ms: int, **kw) -> dict:
    return Episode(
        run_id="r",
        sweep_point="c2",
        concurrency=2,
        episode_id=f"c2-{i}",
        trajectory_id="t",
        task_id=None,
        mode="recorded",
        worker=i,
        started_ns=start_ms * MS,
        ended_ns=end_ms * MS,
        **kw,
    ).to_dict()


def _req(
    seq: int,
    sent_ms: int,
    ttft_ms: int | None,
    e2e_ms: int,
    *,
    outcome: str = "ok",
    output_tokens: int | None = None,
    sweep_point: str | None = "c2",
) -> dict:
    return Sample(
        run_id="r",
        seq=seq,
        lane="agent",
        sweep_point=sweep_point,
        outcome=outcome,
        intended_ns=sent_ms * MS,
        sent_ns=sent_ms * MS,
        first_token_ns=None if ttft_ms is None else (sent_ms + ttft_ms) * MS,
        # two token events: the first token and the last, at the end of the body
        token_event_ns=None if ttft_ms is None else [(sent_ms + ttft_ms) * MS, (sent_ms + e2e_ms) * MS],
        n_token_events=0 if ttft_ms is None else 2,
        end_ns=(sent_ms + e2e_ms) * MS,
        usage_present=output_tokens is not None,
        output_tokens=output_tokens,
        prompt_tokens=None if output_tokens is None else 100,
    ).to_dict()


def _write(path: Path, rows: list[dict]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))


@pytest.fixture
def point(tmp_path: Path) -> Path:
    pdir = tmp_path / "points" / "c2"
    pdir.mkdir(parents=True)
    # episode 0: 0..100 ms, episode 1: 50..150 ms, episode 2: 150..200 ms (touches 1: no overlap)
    _write(
        pdir / "episodes.jsonl",
        [
            _ep(
                0,
                0,
                100,
                n_turns=2,
                n_requests=2,
                model_time_ns=60 * MS,
                tool_time_ns=10 * MS,
                misses_beyond_turns=1,
                resolved=True,
                reverified=True,
            ),
            _ep(
                1,
                50,
                150,
                n_turns=1,
                n_requests=1,
                model_time_ns=30 * MS,
                tool_time_ns=20 * MS,
                divergences=2,
                resolved=False,
                reverified=True,
            ),
            _ep(
                2,
                150,
                200,
                n_turns=1,
                n_requests=1,
                model_time_ns=30 * MS,
                tool_time_ns=0,
                misses_unknown_key=1,
                resolved=True,
                reverified=False,
                outcome="error",
            ),
        ],
    )
    # requests (model calls): 0..20, 40..70, 50..90 ok; 150..200 an http_error
    _write(
        pdir / "samples.jsonl",
        [
            _req(0, 0, 10, 20, output_tokens=3),
            _req(1, 40, 5, 30, output_tokens=6),
            _req(2, 50, 20, 40),
            _req(3, 150, None, 50, outcome="http_error"),
        ],
    )
    # a turn line of the shape written before migration 0010 (request figures on it): read as before
    _write(
        pdir / "turns.jsonl",
        [
            {
                "run_id": "r",
                "sweep_point": "c2",
                "episode_id": "c2-0",
                "turn_index": 0,
                "sent_ns": 0,
                "first_token_ns": 10 * MS,
                "end_ns": 20 * MS,
                "outcome": "ok",
                "byte_equal": False,
            },
        ],
    )
    return pdir


def test_request_metrics_come_from_the_point_samples(point: Path) -> None:
    row = summarize_point(point, sweep_point="c2", concurrency=2, episodes_target=3)
    assert (row["n_requests"], row["n_ok"]) == (4, 3)
    # window: first intended 0 ms .. last end 200 ms; 3 ok requests / 0.2 s
    assert row["window_s"] == 0.2
    assert row["request_throughput_per_s"] == pytest.approx(15.0)
    # E2E of ok requests 20, 30, 40 ms: linear p50 = 30, p90 = 30 + 0.8 * 10 = 38
    assert (row["n_e2e"], row["p50_e2e_ms"], row["p90_e2e_ms"]) == (3, 30.0, 38.0)
    # TTFT of ok requests 10, 5, 20 ms: sorted 5, 10, 20 -> p50 10, p90 10 + 0.8 * 10 = 18
    assert (row["n_ttft"], row["p50_ttft_ms"], row["p90_ttft_ms"]) == (3, 10.0, 18.0)
    # TPOT: (20 - 10) / (3 - 1) = 5 and (70 - 45) / (6 - 1) = 5 ms
    assert (row["n_tpot"], row["p50_tpot_ms"]) == (2, 5.0)
    # usage per request: 2 of 3 ok requests carried usage -> coverage 2/3, no token totals
    assert (row["n_ok_with_usage"], row["usage_coverage"]) == (2, 2 / 3)
    assert (row["prompt_tokens_total"], row["output_tokens_total"]) == (None, None)
    assert row["token_totals_null_reason"] == "1 of 3 successful requests lack server usage"
    # requests in flight: 0..20, 40..70, 50..90, 150..200 -> at most 2 (50..70 ms)
    assert row["max_requests_in_flight"] == 2


def test_episode_metrics_and_overlap(point: Path) -> None:
    row = summarize_point(point, sweep_point="c2", concurrency=2, episodes_target=3)
    assert (row["n_episodes"], row["n_episodes_failed"], row["n_turns"]) == (3, 1, 4)
    # model time 60, 30, 30 ms -> mean 40; tool 10, 20, 0 -> 10
    assert (row["mean_model_time_ms"], row["mean_tool_time_ms"]) == (40.0, 10.0)
    assert (row["misses_unknown_key"], row["misses_beyond_turns"], row["misses_diverged"]) == (1, 1, 0)
    assert (row["misses_total"], row["divergences"], row["n_turns_not_byte_equal"]) == (2, 2, 1)
    # re-verified: ep0 resolved, ep1 not -> 0.5; carried: ep2 resolved -> 1.0 (kept apart)
    assert (row["n_reverified"], row["n_resolved_reverified"], row["resolved_rate_reverified"]) == (2, 1, 0.5)
    assert (row["n_carried"], row["n_resolved_carried"], row["resolved_rate_carried"]) == (1, 1, 1.0)
    # in flight: 1 over 0..50, 2 over 50..100, 1 over 100..200 -> max 2, mean (50+100+100)/200
    assert (row["achieved_max_concurrency"], row["max_episodes_in_flight"]) == (2, 2)
    assert row["achieved_mean_concurrency"] == pytest.approx(1.25)
    # episodes 0 and 1 started before the first end (100 ms): proof holds for target 2
    assert (row["all_started_before_first_finish"], row["proof_ok"], row["proof_reason"]) == (True, True, None)
    assert (row["started_ns"], row["ended_ns"]) == (0, 200 * MS)
    assert (row["valid"], row["invalid_reason"], row["target_concurrency"], row["target_episodes"]) == (
        True,
        None,
        2,
        3,
    )


def test_point_below_target_concurrency_is_invalid(point: Path) -> None:
    row = summarize_point(point, sweep_point="c2", concurrency=3)
    assert row["valid"] is False
    # the first failed check only; the proof (target min(3, 3 episodes)) fails too
    assert row["invalid_reason"] == "achieved concurrency 2 < target 3"
    assert row["proof_reason"] == (
        "max episodes in flight 2 < target 3; only 2 of 3 episodes started before the first finished"
    )


def test_writer_reasons_follow_the_points_own(point: Path) -> None:
    row = summarize_point(
        point, sweep_point="c2", concurrency=3, shards=2, verdict_reasons=["shard 1 failed (exit code 1)"]
    )
    assert (row["valid"], row["shards"], row["verdict_reasons"]) == (False, 2, "shard 1 failed (exit code 1)")
    assert row["invalid_reason"] == "achieved concurrency 2 < target 3; shard 1 failed (exit code 1)"
    ok = summarize_point(point, sweep_point="c2", concurrency=2, verdict_reasons=["late"])
    assert (ok["valid"], ok["invalid_reason"]) == (False, "late")


def test_point_where_nothing_ran_is_invalid(tmp_path: Path) -> None:
    row = summarize_point(tmp_path, sweep_point="c1", concurrency=1)
    assert (row["n_episodes"], row["n_requests"], row["p50_e2e_ms"]) == (0, 0, None)
    assert (row["valid"], row["invalid_reason"]) == (False, "nothing ran at this point")


def test_staggered_episodes_fail_the_proof(tmp_path: Path) -> None:
    pdir = tmp_path / "points" / "c2"
    pdir.mkdir(parents=True)
    # a near-serial executor: 0..100, 150..300, 200..400 ms. Two episodes are in flight
    # over 200..300 ms (max 2 = target), but only one had started before the first
    # finished at 100 ms, so the proof fails
    _write(pdir / "episodes.jsonl", [_ep(0, 0, 100), _ep(1, 150, 300), _ep(2, 200, 400)])
    row = summarize_point(pdir, sweep_point="c2", concurrency=2)
    assert (row["achieved_max_concurrency"], row["all_started_before_first_finish"]) == (2, False)
    assert (row["proof_ok"], row["valid"]) == (False, False)
    assert row["proof_reason"] == "only 1 of 2 episodes started before the first finished"
    assert row["invalid_reason"] == "concurrency proof failed: only 1 of 2 episodes started before the first finished"
    md = sweep_table_markdown([row])
    assert "| proof | usage cov. |" in md and "| NO | - |" in md  # no request: coverage unknown, not 0


def test_full_usage_coverage_gives_token_totals(tmp_path: Path) -> None:
    pdir = tmp_path / "points" / "c2"
    pdir.mkdir(parents=True)
    _write(pdir / "episodes.jsonl", [_ep(0, 0, 100), _ep(1, 10, 120)])
    # samples without a sweep_point (as a shard may write them) take the point's name
    _write(
        pdir / "samples.jsonl",
        [_req(0, 0, 5, 50, output_tokens=5, sweep_point=None), _req(1, 10, 5, 60, output_tokens=7, sweep_point=None)],
    )
    row = summarize_point(pdir, sweep_point="c2", concurrency=2)
    # 100 prompt tokens each; 5 + 7 output tokens
    assert (row["usage_coverage"], row["prompt_tokens_total"], row["output_tokens_total"]) == (1.0, 200, 12)
    assert row["token_totals_null_reason"] is None
    assert (row["proof_ok"], row["valid"]) == (True, True)


def test_engine_point_takes_target_and_verdict_from_its_summary(tmp_path: Path) -> None:
    pdir = tmp_path / "points" / "closed-2"
    pdir.mkdir(parents=True)
    _write(pdir / "samples-w0.jsonl", [_req(0, 0, 5, 50, sweep_point="closed-2")])
    _write(pdir / "samples-w1.jsonl", [_req(1, 10, 5, 60, sweep_point="closed-2")])
    summary = {
        "run_id": "r",
        "target": {
            "target_concurrency": 2,
            "lanes": {"default": {"load": "closed:2", "target_rate_per_s": None, "concurrency": 2}},
        },
        "verdict": {"valid": False, "reasons": ["event-loop lag p99 40.0 ms exceeds 10 ms"]},
    }
    row = engine_point_row(pdir, summary, "closed-2", 1.0, shards=2)
    # no episodes: achieved concurrency is requests in flight, 0..50 and 10..60 -> 2
    assert (row["load"], row["target_concurrency"], row["achieved_max_concurrency"]) == ("closed:2", 2, 2)
    assert (row["n_requests"], row["n_episodes"], row["proof_ok"], row["shards"]) == (2, 0, None, 2)
    assert (row["valid"], row["invalid_reason"]) == (False, "event-loop lag p99 40.0 ms exceeds 10 ms")


def test_table_rows_format_the_row(point: Path) -> None:
    row = summarize_point(point, sweep_point="c2", concurrency=2)
    headers, cells = sweep_table_rows([json.loads(json.dumps(row))])
    got = dict(zip(headers, cells[0], strict=False))
    assert (got["point"], got["target"], got["valid"], got["usage cov."], got["req/s"]) == (
        "c2",
        "2",
        "yes",
        "0.667",
        "15.0",
    )
    assert (got["resolved ver."], got["resolved car."], got["p50 E2E"]) == ("0.5", "1", "30.0")
