"""One shard of a distributed agent-replay sweep point as a Prefect task (for a
DaskTaskRunner) and as the body of the `swebench-replay-shard` flow: builds the
sandbox factory and the verifier's tasks, then benchmaker.sweep.shard.run_replay_shard
(documented there).

    report = await replay_shard(ReplayShardPoint(...worker=k, shards=N...))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from benchmaker.sweep.shard import ReplayShardPoint, run_replay_shard
from benchmaker.tasks.sweep import load_tasks, sandbox_factory_of

__all__ = ["replay_shard", "run_replay_shard_task"]


async def replay_shard(point: ReplayShardPoint) -> dict[str, Any]:
    """Run shard `point.worker` of its point on this host; returns its report
    (benchmaker.sweep.shard.run_replay_shard). Raises what that raises (ShardsNotReady, ShardLate,
    ReplayServerError, ValueError), and ConfinementError for a local sandbox without bwrap."""
    spec = point.point
    report = await run_replay_shard(
        point, sandbox_factory=sandbox_factory_of(spec), tasks=load_tasks([Path(d) for d in spec.task_dirs])
    )
    get_run_logger().info(
        "shard %d/%d of %s on %s: %s episodes in flight, t0 %.3f ms after the shared start, "
        "wall clock %+.3f ms vs storage",
        point.worker,
        point.shards,
        point.sweep_point,
        report["hostname"],
        report["concurrency"],
        report["start_late_ns"] / 1e6,
        report["clock"]["wall_offset_ns"] / 1e6,
    )
    return report


run_replay_shard_task = task(name="run-swebench-replay-shard", cache_policy=NO_CACHE)(replay_shard)
"""replay_shard as a Prefect task (one per shard on a DaskTaskRunner; never cached or
retried: a retried shard would miss the shared start)."""
