"""One sharded sweep point on the orchestrator, for both pipelines: the `llm-sweep` point
(benchmaker.tasks.shard.ShardPoint: engine load split over shards) and the
`swebench-replay` point (benchmaker.sweep.shard.ReplayShardPoint: episode slots split
over shards, each with its own replay server).

    out = await run_distributed_point(template, start_lead_s=30.0, shard_deployment=
                                      "llm-sweep-shard/shard", shard_timeout_s=None,
                                      dask_address=None)
    out["row"], out["shards"]     # the merged point's summary row, the shards' states
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import INPUTS, RUN_ID, TASK_SOURCE

from benchmaker.sweep.shard import ReplayShardPoint, fetch_replay_shards, merge_replay_point
from benchmaker.sweep.sweep import point_dir, reset_point_dir
from benchmaker.tasks.progress import shard_progress
from benchmaker.tasks.replay_shard import run_replay_shard_task
from benchmaker.tasks.shard import ShardPoint, fetch_shards, merge_point, run_shard_point_task
from benchmaker.tasks.shard_runs import run_shards
from benchmaker.tasks.sweep import FAIL_POINT_ENV, InjectedFault, log_point_row

__all__ = ["run_distributed_point"]


@task(name="run-distributed-point", cache_policy=INPUTS + TASK_SOURCE + RUN_ID, persist_result=True)
async def run_distributed_point(
    template: ShardPoint | ReplayShardPoint,
    *,
    episodes_target: int | None = None,
    start_lead_s: float,
    shard_deployment: str,
    shard_timeout_s: float | None,
    dask_address: str | None,
) -> dict[str, Any]:
    """One distributed point: empties the point directory, sets the earliest start
    `start_lead_s` s from now, runs `template.shards` shards (`template` with worker k
    and that start) on `shard_deployment`'s pool or the Dask cluster at `dask_address`
    (benchmaker.tasks.shard_runs.run_shards) while their live progress is merged
    (benchmaker.tasks.progress.shard_progress), fetches their files from the exchange
    (if any) and merges them (benchmaker.tasks.shard.merge_point,
    benchmaker.sweep.shard.merge_replay_point; `episodes_target`: the episodes a replay
    point's plan holds, None for a duration-bound or an engine point). Returns {"row": the point's summary row,
    "shards": [{"worker", "flow_run_id"|"task_run_id", "state", "message"}]}.

    Cached per flow run (RUN_ID) on its inputs, which hold no start time: a resumed
    flow run (benchmaker.flows.retry) keeps the points that completed and measures from
    the first that did not. Tests only: FAIL_POINT_ENV set to this point's name fails
    it after the merge (benchmaker.tasks.sweep.InjectedFault)."""
    name, run_dir = template.sweep_point, Path(template.run_dir)
    replay = isinstance(template, ReplayShardPoint)
    reset_point_dir(point_dir(run_dir, name))
    async with shard_progress(template):  # the shards' live progress, merged: terminal view and artifact
        points, codes, info = await run_shards(
            template,
            start_lead_s=start_lead_s,
            shard_task=run_replay_shard_task if replay else run_shard_point_task,
            deployment=shard_deployment,
            timeout_s=shard_timeout_s,
            dask_address=dask_address,
        )
    if isinstance(template, ReplayShardPoint):
        start_wall_ns = points[0].start_wall_ns
        fetch_replay_shards(run_dir, template.run_id, name, template.exchange, start_wall_ns)
        row = merge_replay_point(
            run_dir,
            name,
            attempt=start_wall_ns,
            concurrency=template.concurrency,
            exit_codes=codes,
            shard_info=info,
            episodes_target=episodes_target,
            duration_s=template.point.duration_s,
        )
        log_point_row(row, slots=template.concurrency, shards=template.shards)
    else:
        fetch_shards(points[0])
        row = merge_point(points[0], codes, info)
        log_point_row(row, shards=template.shards)
    if os.environ.get(FAIL_POINT_ENV) == name:
        raise InjectedFault(f"sweep point {name}: failure injected by {FAIL_POINT_ENV}")
    return {"row": row, "shards": info}
