"""replay.sweep: point summary SQL on hand-written files (exact values), the episode
plan, samples from turns, the table, and one real point against a replay server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.convert import convert_paths, read_trajectories
from replay.episodes import Episode, TurnRecord
from replay.process import start_replay_server
from replay.sweep import (
    episode_plan,
    point_dir,
    point_name,
    read_sweep_points,
    run_point,
    summarize_point,
    sweep_table_markdown,
    turns_to_samples,
    write_sweep_points,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
MS = 1_000_000


def _ep(i: int, start_ms: int, end_ms: int, **kw) -> dict:
    return Episode(run_id="r", sweep_point="c2", concurrency=2, episode_id=f"c2-{i}", trajectory_id="t",
                   task_id=None, mode="recorded", worker=i, started_ns=start_ms * MS, ended_ns=end_ms * MS,
                   **kw).to_dict()


def _turn(ep: int, idx: int, sent_ms: int, ttft_ms: int | None, e2e_ms: int, outcome: str = "ok") -> dict:
    return TurnRecord(run_id="r", sweep_point="c2", episode_id=f"c2-{ep}", turn_index=idx, sent_ns=sent_ms * MS,
                      first_token_ns=None if ttft_ms is None else (sent_ms + ttft_ms) * MS,
                      end_ns=(sent_ms + e2e_ms) * MS, outcome=outcome).to_dict()


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def point(tmp_path: Path) -> Path:
    pdir = tmp_path / "points" / "c2"
    pdir.mkdir(parents=True)
    # episode 0: 0..100 ms, episode 1: 50..150 ms, episode 2: 150..200 ms (touches 1: no overlap)
    _write(pdir / "episodes.jsonl", [
        _ep(0, 0, 100, n_turns=2, n_requests=2, model_time_ns=60 * MS, tool_time_ns=10 * MS,
            misses_beyond_turns=1, resolved=True, reverified=True),
        _ep(1, 50, 150, n_turns=1, n_requests=1, model_time_ns=30 * MS, tool_time_ns=20 * MS,
            divergences=2, resolved=False, reverified=True),
        _ep(2, 150, 200, n_turns=1, n_requests=1, model_time_ns=30 * MS, tool_time_ns=0,
            misses_unknown_key=1, resolved=True, reverified=False, outcome="error"),
    ])
    _write(pdir / "turns.jsonl", [
        _turn(0, 0, 0, 10, 20), _turn(0, 1, 40, 5, 30), _turn(1, 0, 50, 20, 40),
        _turn(2, 0, 150, None, 50, outcome="http_error"),
    ])
    return pdir


def test_summary_counts_percentiles_and_overlap(point: Path) -> None:
    row = summarize_point(point, sweep_point="c2", concurrency=2, episodes_target=3)
    assert (row["n_episodes"], row["n_episodes_failed"], row["n_turns"]) == (3, 1, 4)
    assert (row["n_requests"], row["n_requests_ok"]) == (4, 3)
    # window: first send 0 ms .. last end 200 ms; 3 ok requests / 0.2 s
    assert row["window_s"] == 0.2
    assert row["request_throughput_per_s"] == pytest.approx(15.0)
    # E2E of ok turns 20, 30, 40 ms: linear p50 = 30, p90 = 30 + 0.8 * 10 = 38
    assert (row["n_e2e"], row["p50_e2e_ms"], row["p90_e2e_ms"]) == (3, 30.0, 38.0)
    # TTFT of turns with a first token: 5, 10, 20 ms -> p50 10
    assert (row["n_ttft"], row["p50_ttft_ms"]) == (3, 10.0)
    # model time 60, 30, 30 ms -> mean 40; tool 10, 20, 0 -> 10
    assert (row["mean_model_time_ms"], row["mean_tool_time_ms"]) == (40.0, 10.0)
    assert (row["misses_unknown_key"], row["misses_beyond_turns"], row["misses_diverged"]) == (1, 1, 0)
    assert (row["misses_total"], row["divergences"]) == (2, 2)
    # verified: ep0 resolved, ep1 not -> 0.5; carried: ep2 resolved -> 1.0
    assert (row["n_reverified"], row["resolved_rate_reverified"]) == (2, 0.5)
    assert (row["n_carried"], row["resolved_rate_carried"]) == (1, 1.0)
    # in flight: 1 over 0..50, 2 over 50..100, 1 over 100..200 -> max 2, mean (50+100+100)/200
    assert row["achieved_max_concurrency"] == 2
    assert row["achieved_mean_concurrency"] == pytest.approx(1.25)
    assert (row["valid"], row["invalid_reason"]) == (True, None)


def test_point_below_target_concurrency_is_invalid(point: Path) -> None:
    row = summarize_point(point, sweep_point="c2", concurrency=3)
    assert row["valid"] is False
    assert row["invalid_reason"] == "achieved concurrency 2 < target 3"


def test_point_where_nothing_ran_is_invalid(tmp_path: Path) -> None:
    row = summarize_point(tmp_path, sweep_point="c1", concurrency=1)
    assert (row["n_episodes"], row["n_requests"], row["p50_e2e_ms"]) == (0, 0, None)
    assert (row["valid"], row["invalid_reason"]) == (False, "nothing ran at this point")


def test_episode_plan_cycles_and_fills_every_worker() -> None:
    a, b = object(), object()
    assert episode_plan([a, b], 5, None) == [a, b, a, b, a]  # max(5, 2) episodes
    assert episode_plan([a, b], 1, None) == [a, b]            # every trajectory once
    assert episode_plan([a], 3, 2) == [a, a]                  # explicit count wins
    with pytest.raises(ValueError, match="trajectories"):
        episode_plan([], 1, None)


def test_turns_become_samples(point: Path) -> None:
    n = turns_to_samples(point / "turns.jsonl", point / "samples.jsonl")
    lines = [json.loads(x) for x in (point / "samples.jsonl").read_text().splitlines()]
    assert n == len(lines) == 4
    assert (lines[3]["outcome"], lines[3]["sent_ns"], lines[3]["end_ns"]) == ("http_error", 150 * MS, 200 * MS)
    assert lines[0]["meta"] == {"episode_id": "c2-0", "turn_index": 0, "miss_kind": None}


def test_sweep_points_roundtrip_and_markdown_names_invalid(point: Path, tmp_path: Path) -> None:
    rows = [summarize_point(point, sweep_point="c2", concurrency=2),
            summarize_point(point, sweep_point="c3", concurrency=3)]
    write_sweep_points(tmp_path, rows)
    assert [r["sweep_point"] for r in read_sweep_points(tmp_path)] == ["c2", "c3"]
    md = sweep_table_markdown(rows, title="t")
    assert md.count("\n| c") == 2
    assert "- **c3 invalid**: achieved concurrency 2 < target 3" in md


async def test_run_point_against_replay_server(tmp_path: Path) -> None:
    traj = tmp_path / "traj.jsonl"
    convert_paths([EXAMPLE], traj)
    trajs = list(read_trajectories(traj))
    with start_replay_server(traj) as srv:
        row = await run_point(trajs, srv.url, tmp_path / "run", run_id="r1", concurrency=3)
        stats = srv.stats()
    pdir = point_dir(tmp_path / "run", point_name(3))
    # 1 trajectory, concurrency 3 -> 3 episodes of its 4 recorded turns
    assert (row["n_episodes"], row["n_turns"], row["n_requests"]) == (3, 12, 12)
    assert row["achieved_max_concurrency"] == 3 and row["valid"] is True
    assert row["misses_total"] == 0 and stats["misses"]["total"] == 0
    assert stats["requests"] == 12
    assert sorted(p.name for p in pdir.iterdir()) == [
        "concurrency.json", "episodes.jsonl", "point_summary.json", "samples.jsonl", "turns.jsonl"]
    # a second attempt of the same point replaces the first attempt's lines
    again = await _rerun(trajs, traj, tmp_path)
    assert again == 3


async def _rerun(trajs, traj: Path, tmp_path: Path) -> int:
    with start_replay_server(traj) as srv:
        await run_point(trajs, srv.url, tmp_path / "run", run_id="r1", concurrency=3)
    pdir = point_dir(tmp_path / "run", "c3")
    return len((pdir / "episodes.jsonl").read_text().splitlines())


def test_summary_reports_the_concurrency_proof_and_usage_coverage(point: Path) -> None:
    row = summarize_point(point, sweep_point="c2", concurrency=2)
    # episodes 0 (0..100 ms) and 1 (50..150 ms) both started before the first end (100 ms)
    assert (row["max_in_flight"], row["all_started_before_first_finish"]) == (2, True)
    assert (row["proof_ok"], row["proof_reason"]) == (True, None)
    # the fixture's episodes carry no usage (Episode.usage_complete defaults to False)
    assert (row["n_episodes_usage_complete"], row["usage_coverage"]) == (0, 0.0)
    assert (row["prompt_tokens_total"], row["output_tokens_total"]) == (None, None)
    assert row["token_totals_null_reason"] == "usage incomplete in 3 of 3 episodes"


def test_staggered_episodes_fail_the_proof_and_partial_usage_has_no_totals(tmp_path: Path) -> None:
    pdir = tmp_path / "points" / "c2"
    pdir.mkdir(parents=True)
    # a near-serial executor: 0..100, 150..300, 200..400 ms. Two episodes are in flight
    # over 200..300 ms (max 2 = target), but only one had started before the first
    # finished at 100 ms, so the proof fails
    _write(pdir / "episodes.jsonl", [
        _ep(0, 0, 100, usage_complete=True, prompt_tokens=10, output_tokens=5),
        _ep(1, 150, 300, usage_complete=True, prompt_tokens=20, output_tokens=7),
        _ep(2, 200, 400),
    ])
    row = summarize_point(pdir, sweep_point="c2", concurrency=2)
    assert (row["achieved_max_concurrency"], row["max_in_flight"]) == (2, 2)
    assert (row["all_started_before_first_finish"], row["proof_ok"]) == (False, False)
    assert row["proof_reason"] == "only 1 of 2 episodes started before the first finished"
    assert row["valid"] is False
    assert row["invalid_reason"] == "concurrency proof failed: only 1 of 2 episodes started before the first finished"
    # 2 of 3 episodes with usage: coverage 2/3, totals null (never the partial sums 30 / 12)
    assert (row["n_episodes_usage_complete"], row["usage_coverage"]) == (2, 2 / 3)
    assert (row["prompt_tokens_total"], row["output_tokens_total"]) == (None, None)
    assert row["token_totals_null_reason"] == "usage incomplete in 1 of 3 episodes"
    md = sweep_table_markdown([row])
    assert "| proof | usage cov. |" in md and "| NO | 0.667 |" in md


def test_full_usage_coverage_gives_token_totals(tmp_path: Path) -> None:
    pdir = tmp_path / "points" / "c2"
    pdir.mkdir(parents=True)
    _write(pdir / "episodes.jsonl", [
        _ep(0, 0, 100, usage_complete=True, prompt_tokens=10, output_tokens=5),
        _ep(1, 10, 120, usage_complete=True, prompt_tokens=20, output_tokens=7),
    ])
    row = summarize_point(pdir, sweep_point="c2", concurrency=2)
    assert (row["usage_coverage"], row["prompt_tokens_total"], row["output_tokens_total"]) == (1.0, 30, 12)
    assert row["token_totals_null_reason"] is None
    assert (row["proof_ok"], row["valid"]) == (True, True)
