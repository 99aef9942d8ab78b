"""The `distributed` variant of `swebench-replay`: each sweep point runs as N shards on N
load hosts, merged into one run (docs/several-machines.md).

    prefect deployment run swebench-replay/distributed --param shards=2 \\
        --param concurrency_sweep='[8, 32]' --param out_dir='"/mnt/bench/artifacts"' --watch

Flows:
    swebench-replay        (this module's `swebench_replay`, alias
                           `swebench_replay_distributed`; deployment swebench-replay/distributed)
                           the orchestrator: converts the logs once, then for each point
                           submits its shard runs, waits for all and merges them; then
                           grades, loads the run into the warehouse and publishes the
                           sweep table, like benchmaker.flows.swebench_replay
    swebench-replay-shard  (`swebench_replay_shard`; deployment swebench-replay-shard/shard)
                           one shard of one point (benchmaker.tasks.replay_shard.replay_shard)

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
from typing import Annotated, Any

from prefect import flow, task
from prefect.cache_policies import INPUTS, RUN_ID, TASK_SOURCE
from prefect.logging import get_run_logger
from pydantic import Field, model_validator

from benchmaker.engine.exchange import Exchange
from benchmaker.flows.common import (
    flow_run_bundle_id,
    measure_point,
    result_storage_for,
    resume_or_write_manifest,
    takes,
    validated,
)
from benchmaker.flows.outcome import current_flow_run, final_state
from benchmaker.flows.shard_runs import DEFAULT_LEAD_S, ShardParams, checked_dask_address, checked_exchange, run_shards
from benchmaker.flows.swebench_replay import Concurrency, SwebenchReplayParams, trajectories_of
from benchmaker.sweep.shard import ReplayShardPoint, fetch_replay_shards, merge_replay_point, shards_for
from benchmaker.sweep.sweep import episode_plan, point_dir, point_name, reset_point_dir, write_sweep_points
from benchmaker.tasks.grade import grade, point_files_sha256
from benchmaker.tasks.load import load_warehouse
from benchmaker.tasks.replay_shard import replay_shard, run_replay_shard_task, shard_progress
from benchmaker.tasks.report import publish_report
from benchmaker.tasks.sweep import FAIL_POINT_ENV, InjectedFault
from benchmaker.trajectories.convert import read_trajectories

__all__ = [
    "SHARD_DEPLOYMENT",
    "SwebenchReplayDistributedParams",
    "run_distributed_point",
    "swebench_replay",
    "swebench_replay_distributed",
    "swebench_replay_shard",
]

SHARD_DEPLOYMENT = "swebench-replay-shard/shard"


class SwebenchReplayDistributedParams(SwebenchReplayParams, ShardParams):
    """The swebench-replay parameters (benchmaker.flows.swebench_replay.SwebenchReplayParams; a
    default sweep of 2, 8) plus where and how the shards run
    (benchmaker.flows.shard_runs.ShardParams)."""

    concurrency_sweep: Annotated[list[Concurrency], Field(min_length=1)] = Field(default_factory=lambda: [2, 8])
    shard_deployment: str = SHARD_DEPLOYMENT

    @model_validator(mode="after")
    def _closed_points_only(self) -> SwebenchReplayDistributedParams:
        # shards split episode slots: open-loop rates and engine workers are single-host
        problems = (
            [f"rates: open-loop points run on one host (swebench-replay), not in shards (got {self.rates})"]
            if self.rates
            else []
        )
        if self.workers != 1:
            problems.append(
                f"workers: shards are the distributed flow's processes; give shards instead (got {self.workers})"
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self


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
        duration_s=template.duration_s,
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


@flow(name="swebench-replay", log_prints=False, validate_parameters=True)
@takes(SwebenchReplayDistributedParams)
async def swebench_replay(**params: Any) -> dict[str, Any]:
    """The swebench-replay flow (benchmaker.flows.swebench_replay, same parameters) with every
    point split into up to `shards` shards on other hosts (module docstring);
    parameters: the fields of SwebenchReplayDistributedParams.
    `start_lead_s`: time from submission to the earliest start (default
    benchmaker.flows.shard_runs.DEFAULT_LEAD_S); `shard_timeout_s`: how long to wait for a point's
    shards (None: benchmaker.flows.shard_runs.DEFAULT_SHARD_TIMEOUT_S, 3 h; a shard still running
    then is a verdict reason, cancelled on a pool, abandoned on Dask where a running
    task cannot be stopped); `dask_address`: run the shards on that
    Dask cluster instead of `shard_deployment`'s work pool; `exchange`: a path or fsspec URL
    (s3://bucket/prefix) every host reaches, through which the trajectories go out and
    the shards' files come back when `out_dir` is not shared (benchmaker.engine.exchange).

    Returns {"run_id", "run_dir", "warehouse", "points", "flow_run_id", "trajectories",
    "load", "shards": [per point: [{"worker", "flow_run_id"|"task_run_id", "state",
    "message"}]]}. Raises ParameterError (before any work) for a bad parameter."""
    p = validated(SwebenchReplayDistributedParams, "swebench-replay", params)
    backend = "dask" if p.dask_address else "pool"
    checked_dask_address(p.dask_address)  # refuse before any work when the extra is missing
    exchange = checked_exchange(p.exchange)
    lead_s = p.start_lead_s if p.start_lead_s is not None else DEFAULT_LEAD_S[backend]
    log = get_run_logger()
    run_id = flow_run_bundle_id("swebench-replay")
    run_dir = (p.out_dir / run_id).resolve()
    config = {
        **p.model_dump(mode="json"),
        "shards": p.shards,
        "backend": backend,
        "start_lead_s": lead_s,
        "shard_deployment": p.shard_deployment if backend == "pool" else None,
        "dask_address": p.dask_address,
        "exchange": exchange,
    }
    resume_or_write_manifest(
        run_dir, run_id=run_id, kind="swebench-replay", label=p.label, config=config, workers=p.shards
    )
    log.info(
        "run %s -> %s (up to %d shards per point on %s)",
        run_id,
        run_dir,
        p.shards,
        p.dask_address if p.dask_address else f"work pool of {p.shard_deployment}",
    )
    traj = trajectories_of(p)
    n_traj = sum(1 for _ in read_trajectories(traj))
    traj_ref = str(traj)
    if exchange:  # the shards download the trajectories from the exchange
        traj_ref = f"{run_id}/trajectories.jsonl"
        Exchange(exchange).put_file(traj, traj_ref)

    point_task = run_distributed_point.with_options(result_storage=result_storage_for(p.out_dir))
    rows: list[dict[str, Any]] = []
    shard_states: list[list[dict[str, Any]]] = []
    for c in p.concurrency_sweep:
        template = ReplayShardPoint(
            trajectories=traj_ref,
            run_dir=str(run_dir),
            run_id=run_id,
            concurrency=c,
            worker=0,
            shards=shards_for(c, p.shards),
            start_wall_ns=0,
            episodes=p.episodes_per_point,
            duration_s=p.duration_s,
            mode=p.mode,
            sandbox=p.sandbox,
            sandbox_url=p.sandbox_url,
            sandbox_image=p.sandbox_image,
            task_dirs=tuple(str(d.resolve()) for d in p.task_dirs),
            command=tuple(p.command) if p.command else None,
            latency=p.latency,
            divergence=p.divergence,
            exchange=exchange,
            max_loop_lag_ms=p.max_loop_lag_ms,
            max_schedule_lag_ms=p.max_schedule_lag_ms,
        )
        target = None if p.duration_s is not None else len(episode_plan(range(n_traj), c, p.episodes_per_point))
        args = dict(
            episodes_target=target,
            start_lead_s=lead_s,
            shard_deployment=p.shard_deployment,
            shard_timeout_s=p.shard_timeout_s,
            dask_address=p.dask_address,
        )
        out = await measure_point(point_task, point_dir(run_dir, point_name(c)), template, **args)
        rows.append(out["row"])
        shard_states.append(out["shards"])
    write_sweep_points(run_dir, rows)
    if exchange:
        Exchange(exchange).remove(run_id)

    storage = result_storage_for(p.out_dir)
    pdirs = [point_dir(run_dir, point_name(c)) for c in p.concurrency_sweep]
    grade.with_options(result_storage=storage)(pdirs, [point_files_sha256(d) for d in pdirs])
    wh = p.warehouse.resolve()
    loaded = load_warehouse(wh, run_dir)
    publish_report(run_id, rows, run_dir, warehouse=wh, report_path=run_dir / "report.html", kind="swebench-replay")
    return final_state(
        {
            "run_id": run_id,
            "run_dir": str(run_dir),
            "warehouse": str(wh),
            "points": rows,
            "flow_run_id": str(current_flow_run().id),
            "trajectories": str(traj),
            "load": loaded,
            "shards": shard_states,
        }
    )


# `prefect deploy --name swebench-replay/distributed` matches the flow part against the
# entrypoint's function name (see flows/llm_sweep_distributed.py), hence `swebench_replay`.
swebench_replay_distributed = swebench_replay
