"""One shard of a distributed agent-replay sweep point as a Prefect task (for a
DaskTaskRunner) and as the body of the `swebench-replay-shard` flow: builds the
sandbox factory and the verifier's tasks, then replay.shard.run_replay_shard
(documented there); and, on the coordinator, the live progress of a distributed point
merged from its shards' progress files (`shard_progress`).

    report = await replay_shard(ReplayShardPoint(...worker=k, shards=N...))
    async with shard_progress(template):   # while the coordinator waits for the shards
        ...
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from replay.progress import ProgressEvent, watch_shards
from replay.shard import ReplayShardPoint, read_shard_progress, run_replay_shard
from tasks.progress import progress_artifact
from tasks.sweep import load_tasks, make_sandbox_factory

__all__ = ["replay_shard", "run_replay_shard_task", "shard_progress"]


async def replay_shard(point: ReplayShardPoint) -> dict[str, Any]:
    """Run shard `point.worker` of its point on this host; returns its report
    (replay.shard.run_replay_shard). Raises what that raises (ShardLate,
    ReplayServerError, ValueError), and ValueError for a bad sandbox."""
    factory = (make_sandbox_factory(point.sandbox, point.sandbox_url, point.sandbox_image)
               if point.mode != "recorded" else None)
    report = await run_replay_shard(point, sandbox_factory=factory,
                                    tasks=load_tasks([Path(d) for d in point.task_dirs]))
    get_run_logger().info(
        "shard %d/%d of %s on %s: %s episodes in flight, t0 %.3f ms after the shared start, "
        "wall clock %+.3f ms vs storage", point.worker, point.shards, point.sweep_point, report["hostname"],
        report["concurrency"], report["start_late_ns"] / 1e6, report["clock"]["wall_offset_ns"] / 1e6)
    return report


run_replay_shard_task = task(name="run-swebench-replay-shard", cache_policy=NO_CACHE)(replay_shard)
"""replay_shard as a Prefect task (one per shard on a DaskTaskRunner; never cached or
retried: a retried shard would miss the shared start)."""


@asynccontextmanager
async def shard_progress(template: ReplayShardPoint, interval_s: float | None = None) -> AsyncIterator[None]:
    """While the block runs (the coordinator waiting for the shards of `template`'s
    point), the point's progress merged from its `template.shards` shards' progress
    files (replay.shard.read_shard_progress, replay.progress.watch_shards) goes to the
    registered observers (the terminal view) and to the point's Prefect progress
    artifact, as a single-process point's does. Polls every `interval_s` s (default 1,
    2 through an exchange: each poll lists and reads its keys)."""
    since = time.time_ns()  # an earlier attempt's straggler (in the exchange) is not this attempt

    def read() -> tuple[int | None, list[ProgressEvent]]:
        attempt, events = read_shard_progress(Path(template.run_dir), template.run_id, template.sweep_point,
                                              template.exchange)
        return (attempt, events) if attempt is not None and attempt >= since else (None, [])

    every = interval_s if interval_s is not None else (2.0 if template.exchange else 1.0)
    with progress_artifact(template.run_id, template.sweep_point):
        async with watch_shards(template.sweep_point, read, shards=template.shards, interval_s=every):
            yield
