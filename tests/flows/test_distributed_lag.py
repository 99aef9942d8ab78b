"""The lag limits of a distributed sweep point reach every shard's engine and the
merged point's verdict: llm-sweep shards (benchmaker.tasks.shard.ShardPoint) and
agent-replay shards (benchmaker.sweep.shard.ReplayShardPoint), two of each in process. The loop
lag is the injected monitor's (tests/_fixed_lag.py: p99 7.5 ms), so nothing depends on
how busy the host is."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from benchmaker.sweep.point import LlmPoint, ReplayPoint
from benchmaker.sweep.shard import ReplayShardPoint, merge_replay_point, run_replay_shard
from benchmaker.sweep.sweep import point_dir, reset_point_dir, write_run_manifest
from benchmaker.tasks.shard import ShardPoint, merge_point, run_shard_point
from benchmaker.testing.scenario_server import Scenario, ScenarioServer
from benchmaker.trajectories.convert import convert_paths, read_trajectories
from tests._fixed_lag import LOOP_LAG_P99_MS, FixedLag

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recordings" / "tiny-task.pi.jsonl"


def _lag_reasons(row: dict) -> list[str]:
    return [r for r in (row["invalid_reason"] or "").split("; ") if "event-loop lag" in r]


def _expected(limit: str, prefixes: list[str]) -> list[str]:
    reason = f"event-loop lag p99 {LOOP_LAG_P99_MS:.2f} ms > {limit} ms: client-side timestamps include client delay"
    return [f"{prefix}{reason}" for prefix in prefixes]


@pytest.mark.parametrize("limit,lagged", [("5", True), ("7.5", False)])
async def test_llm_sweep_shards_judge_with_the_given_loop_lag_limit(tmp_path, monkeypatch, limit, lagged) -> None:
    monkeypatch.setattr("benchmaker.engine.runner.LoopLagMonitor", FixedLag)
    run_dir = tmp_path / "rid"
    write_run_manifest(run_dir, run_id="rid", kind="llm-sweep", label=None, config={}, workers=2)
    reset_point_dir(point_dir(run_dir, "closed-2"))
    start = time.time_ns() + 1_500_000_000
    points = [
        ShardPoint(
            LlmPoint(
                base_url="",
                model="m",
                load="closed:2",
                shards=2,
                max_requests=4,
                max_tokens=8,
                max_loop_lag_ms=float(limit),
                max_schedule_lag_ms=60000.0,
            ),
            str(run_dir),
            "rid",
            None,
            worker=k,
            start_wall_ns=start,
        )
        for k in range(2)
    ]
    async with ScenarioServer(Scenario(ttft_ms=1)) as server:
        points = [replace(p, point=p.point.model_copy(update={"base_url": server.url})) for p in points]
        await asyncio.gather(*(run_shard_point(p) for p in points))
    row = merge_point(points[0], [0, 0])
    # the merge judges the merged loop lag once; each shard's own verdict is not carried
    assert _lag_reasons(row) == (_expected(limit, [""]) if lagged else [])


@pytest.mark.parametrize("limit,lagged", [("5", True), ("7.5", False)])
async def test_replay_shards_judge_with_the_given_loop_lag_limit(tmp_path, monkeypatch, limit, lagged) -> None:
    monkeypatch.setattr("benchmaker.engine.runner.LoopLagMonitor", FixedLag)
    traj = tmp_path / "trajectories.jsonl"
    convert_paths([EXAMPLE], traj)
    run_dir = tmp_path / "rid"
    write_run_manifest(run_dir, run_id="rid", kind="swebench-replay", label=None, config={}, workers=2)
    reset_point_dir(point_dir(run_dir, "c2"))
    start = time.time_ns() + 6_000_000_000  # each shard starts a replay server first (slow on a busy host)
    points = [
        ReplayShardPoint(
            point=ReplayPoint(load="closed:2", shards=2, max_loop_lag_ms=float(limit)),
            trajectories=str(traj),
            run_dir=str(run_dir),
            run_id="rid",
            worker=k,
            start_wall_ns=start,
        )
        for k in range(2)
    ]
    trajs = list(read_trajectories(traj))
    await asyncio.gather(*(run_replay_shard(p, trajs) for p in points))
    row = merge_replay_point(run_dir, "c2", attempt=start, concurrency=2, exit_codes=[0, 0])
    # each shard's engine verdict reasons become the point's, named by shard
    assert _lag_reasons(row) == (_expected(limit, ["shard 0 engine: ", "shard 1 engine: "]) if lagged else [])
