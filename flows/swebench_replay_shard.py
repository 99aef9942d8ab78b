"""The shard side of a sharded `swebench-replay` run (benchmaker.flows.swebench_replay
with `sharded`): each sweep point runs as N shards on N load hosts, merged into one
run (docs/several-machines.md).

    prefect deployment run swebench-replay/distributed --param shards=2 \\
        --param concurrency_sweep='[8, 32]' --param out_dir='"/mnt/bench/artifacts"' --watch

Here:
    swebench-replay-shard  (`swebench_replay_shard`; deployment swebench-replay-shard/shard)
                           one shard of one point (benchmaker.tasks.replay_shard.replay_shard)
    run_distributed_point  the task of one sharded point on the orchestrator: submits its
                           shard runs, waits for all and merges them

A point at concurrency C runs min(C, shards) shards (benchmaker.sweep.shard): each owns a share of
the C episode slots and of the episode plan, starts its own replay server on its host
(the mocked model never crosses the network), and plays its episodes from the shared
start: once all shards are ready (server up, engine set up), the last one's ready time
plus MIN_START_LEAD_S, not before `start_lead_s` after the submission (the readiness
barrier, benchmaker.engine.shared_start). Shards run on the work pool's `shards`
queue (one worker per load host, `--limit 1`) or, with `dask_address`, as tasks on a
Dask cluster (benchmaker.flows.shard_runs), exactly as for llm-sweep/distributed.

Resume: each point is a task (`run_distributed_point`) cached per flow run, so
`benchmaker retry FLOW_RUN_ID` (benchmaker.flows.retry) of a failed run keeps its manifest and the
points that completed, and measures from the first that did not.

`out_dir` (where the trajectories are converted, the shards write and the run bundle
is), `task_dirs` and `trajectories` must be paths every load host reaches at the same
absolute path (a shared filesystem; relative ones are resolved on the orchestrator's
host), unless `exchange` is set: then the trajectories and the shards' files travel
through that path or fsspec URL and `out_dir` stays on the orchestrator's host
(`task_dirs`, for execute/command mode, must still exist on every load host). A
failed shard is a verdict reason of its point; the others' episodes stay.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import INPUTS, RUN_ID, TASK_SOURCE
from prefect.logging import get_run_logger

from benchmaker.flows.shard_runs import run_shards
from benchmaker.sweep.shard import ReplayShardPoint, fetch_replay_shards, merge_replay_point
from benchmaker.sweep.sweep import point_dir, reset_point_dir
from benchmaker.tasks.replay_shard import replay_shard, run_replay_shard_task, shard_progress
from benchmaker.tasks.sweep import FAIL_POINT_ENV, InjectedFault

__all__ = ["SHARD_DEPLOYMENT", "run_distributed_point", "swebench_replay_shard"]

SHARD_DEPLOYMENT = "swebench-replay-shard/shard"


@flow(name="swebench-replay-shard", validate_parameters=True)
async def swebench_replay_shard(point: ReplayShardPoint) -> dict[str, Any]:
    """One shard of one distributed agent-replay point on this host
    (benchmaker.tasks.replay_shard.replay_shard); returns the shard's report. Fails (flow run
    Failed) when it missed the shared start or its replay server did not start."""
    return await replay_shard(point)


@task(name="run-distributed-point", cache_policy=INPUTS + TASK_SOURCE + RUN_ID, persist_result=True)
async def run_distributed_point(
    template: ReplayShardPoint,
    *,
    episodes_target: int | None,
    start_lead_s: float,
    shard_deployment: str,
    shard_timeout_s: float | None,
    dask_address: str | None,
) -> dict[str, Any]:
    """One distributed point: empties the point directory, sets the earliest start
    `start_lead_s` from now, runs `template.shards` shards (`template` with worker k and
    that start) on `shard_deployment`'s pool or the Dask cluster at `dask_address`,
    fetches their files from the exchange (if any) and merges them
    (benchmaker.sweep.shard.merge_replay_point). Returns {"row": the point's summary row,
    "shards": [{"worker", "flow_run_id"|"task_run_id", "state", "message"}]}.

    Cached per flow run (RUN_ID) on its inputs, which hold no start time: a resumed
    flow run (benchmaker.flows.retry) keeps the points that completed and measures from the
    first that did not. Tests only: FAIL_POINT_ENV set to this point's name fails it
    after the merge (benchmaker.tasks.sweep.InjectedFault)."""
    log = get_run_logger()
    sp, run_dir = template.sweep_point, Path(template.run_dir)
    reset_point_dir(point_dir(run_dir, sp))
    async with shard_progress(template):  # the shards' live progress, merged: terminal view and artifact
        points, codes, info = await run_shards(
            template,
            start_lead_s=start_lead_s,
            shard_task=run_replay_shard_task,
            deployment=shard_deployment,
            timeout_s=shard_timeout_s,
            dask_address=dask_address,
        )
    start_wall_ns = points[0].start_wall_ns
    fetch_replay_shards(run_dir, template.run_id, sp, template.exchange, start_wall_ns)
    row = merge_replay_point(
        run_dir,
        sp,
        attempt=start_wall_ns,
        concurrency=template.concurrency,
        exit_codes=codes,
        shard_info=info,
        episodes_target=episodes_target,
        duration_s=template.point.duration_s,
    )
    log.info(
        "sweep point %s: %d episodes over %d shards, %d requests, max concurrency %s/%d, misses %s%s",
        sp,
        row["n_episodes"],
        template.shards,
        row["n_requests"],
        row["achieved_max_concurrency"],
        template.concurrency,
        row["misses_total"],
        "" if row["valid"] else f" INVALID: {row['invalid_reason']}",
    )
    if os.environ.get(FAIL_POINT_ENV) == sp:
        raise InjectedFault(f"sweep point {sp}: failure injected by {FAIL_POINT_ENV}")
    return {"row": row, "shards": info}
