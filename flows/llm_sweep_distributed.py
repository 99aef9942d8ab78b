"""The `distributed` variant of `llm-sweep`: each sweep point runs as N shards on N
load hosts, merged into one run (docs/several-machines.md).

    prefect deployment run llm-sweep/distributed --param base_url='"http://gpu-0:8000"' \\
        --param model='"m"' --param shards=2 --param out_dir='"/mnt/bench/artifacts"' --watch

Flows:
    llm-sweep        (this module's `llm_sweep`, alias `llm_sweep_distributed`; deployment
                     llm-sweep/distributed)
                     the orchestrator: for each point, submits N shard runs, waits for all,
                     merges them; then loads the run into the warehouse and publishes the
                     sweep table, like benchmaker.flows.llm_sweep
    llm-sweep-shard  (`llm_sweep_shard`; deployment llm-sweep-shard/shard) one shard of one
                     point (benchmaker.tasks.shard.run_shard_point)

Where shards run:
    Prefect work pool (default): `run_deployment(shard_deployment, ...)` per shard; the
        pool's workers pick them up. One worker per load host, started with
        `prefect worker start --pool benchmaker-process --work-queue shards --limit 1`
        so that each host runs one shard at a time (the shard deployment's queue is
        `shards`; a worker started without --work-queue serves every queue of the pool,
        which is enough on one host). The orchestrator runs wherever its own deployment
        is picked up (the `default` queue).
    Dask (`dask_address="tcp://scheduler:8786"`, needs the `dask` extra: prefect-dask):
        one task per shard on a DaskTaskRunner connected to that cluster; start the Dask
        workers with `--nthreads 1` so that each shard gets a process of its own.

Per point: the point directory is emptied, the earliest start is set to `start_lead_s`
after the submission (wall clock, ns since the epoch; default MIN_START_LEAD_S), and the
shards start together once all of them are ready (the readiness barrier of
benchmaker.engine.shared_start: each writes a ready record once its transport is open and its
workload built; the shared start is the last ready time + MIN_START_LEAD_S, not before
the earliest start), however long the work pool's polling, a process start or a cold
Dask worker's imports take. Every shard converts the start to its own monotonic clock,
sends its slice k of N of the point's load, and writes into
`<out_dir>/<run_id>/points/<point>/_shards/`. A shard still missing `shard_timeout_s`
(at most DEFAULT_READY_TIMEOUT_S) after the earliest start makes the others fail naming
it (benchmaker.engine.shared_start.ShardsNotReady). The merged point (benchmaker.tasks.shard.merge_point)
takes each shard's exit code from its flow run's (or task's) final state: COMPLETED = 0,
anything else 1, so a failed shard is a verdict reason and the others' samples stay.

Resume: each point is a task (`run_distributed_point`) cached per flow run, so
`benchmaker retry FLOW_RUN_ID` (benchmaker.flows.retry) of a failed run keeps its manifest and the
points that completed, and measures from the first that did not.

`out_dir` must be a path that every load host reaches at the same absolute path (a
shared filesystem; a relative one is resolved on the orchestrator's host), unless
`exchange` is set: then each shard writes locally and uploads its files under that
path or fsspec URL (e.g. s3://bucket/exchange, with s3fs on every host), and the
orchestrator downloads them into `out_dir` (benchmaker.tasks.shard.fetch_shards).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import INPUTS, RUN_ID, TASK_SOURCE
from prefect.logging import get_run_logger

from benchmaker.engine.exchange import Exchange
from benchmaker.flows.common import (
    flow_run_bundle_id,
    measure_point,
    result_storage_for,
    resume_or_write_manifest,
    takes,
    validated,
)
from benchmaker.flows.llm_sweep import LlmSweepParams
from benchmaker.flows.outcome import current_flow_run, final_state
from benchmaker.flows.shard_runs import DEFAULT_LEAD_S, ShardParams, checked_dask_address, checked_exchange, run_shards
from benchmaker.sweep.sweep import engine_point_name, point_dir, reset_point_dir, write_sweep_points
from benchmaker.tasks.load import load_warehouse
from benchmaker.tasks.progress import shard_progress
from benchmaker.tasks.report import publish_report
from benchmaker.tasks.shard import (
    ShardPoint,
    fetch_shards,
    merge_point,
    run_shard_point,
    run_shard_point_task,
    shards_for_load,
)
from benchmaker.tasks.sweep import FAIL_POINT_ENV, InjectedFault

__all__ = [
    "DEFAULT_LEAD_S",
    "LlmSweepDistributedParams",
    "SHARD_DEPLOYMENT",
    "llm_sweep",
    "llm_sweep_distributed",
    "llm_sweep_shard",
    "run_distributed_point",
]

SHARD_DEPLOYMENT = "llm-sweep-shard/shard"


class LlmSweepDistributedParams(LlmSweepParams, ShardParams):
    """The llm-sweep parameters (benchmaker.flows.llm_sweep.LlmSweepParams) plus where and how the
    shards run (benchmaker.flows.shard_runs.ShardParams)."""

    shard_deployment: str = SHARD_DEPLOYMENT


@flow(name="llm-sweep-shard", validate_parameters=True)
async def llm_sweep_shard(point: ShardPoint) -> dict[str, Any]:
    """One shard of one distributed sweep point on this host (benchmaker.tasks.shard.run_shard_point);
    returns the shard's self-checks. Fails (flow run Failed) when another shard was not
    ready in time (ShardsNotReady, naming it) or this one missed the shared start."""
    checks = await run_shard_point(point)
    get_run_logger().info(
        "shard %d/%d of %s on %s: t0 %.3f ms after the shared start (%.3f s after the earliest, waited "
        "%.3f s for the other shards), wall clock %+.3f ms vs storage",
        point.worker,
        point.shards,
        point.sweep_point,
        checks["hostname"],
        checks["start_late_ns"] / 1e6,
        (checks["start_wall_ns"] - point.start_wall_ns) / 1e9,
        checks["barrier"]["waited_ns"] / 1e9,
        checks["clock"]["wall_offset_ns"] / 1e6,
    )
    return checks


@task(name="run-distributed-point", cache_policy=INPUTS + TASK_SOURCE + RUN_ID, persist_result=True)
async def run_distributed_point(
    template: ShardPoint,
    *,
    start_lead_s: float,
    shard_deployment: str,
    shard_timeout_s: float | None,
    dask_address: str | None,
) -> dict[str, Any]:
    """One distributed point: empties the point directory, sets the earliest start
    `start_lead_s` from now, runs `template.shards` shards (`template` with worker k and
    that start) on `shard_deployment`'s pool or the Dask cluster at `dask_address`,
    fetches their files from the exchange (if any) and merges them
    (benchmaker.tasks.shard.merge_point). Returns {"row": the point's row, "shards": [{"worker",
    "flow_run_id"|"task_run_id", "state", "message"}]}. Cached per flow run (RUN_ID) on
    its inputs, which hold no start time, so a resumed flow run (benchmaker.flows.retry) keeps the
    points that completed. Tests only: FAIL_POINT_ENV set to this point's name fails
    it after the merge (benchmaker.tasks.sweep.InjectedFault)."""
    log = get_run_logger()
    name = template.sweep_point
    reset_point_dir(point_dir(Path(template.run_dir), name))
    async with shard_progress(template):  # the shards' live progress, merged: terminal view and artifact
        points, codes, info = await run_shards(
            template,
            start_lead_s=start_lead_s,
            shard_task=run_shard_point_task,
            deployment=shard_deployment,
            timeout_s=shard_timeout_s,
            dask_address=dask_address,
        )
    fetch_shards(points[0])
    row = merge_point(points[0], codes, info)
    log.info(
        "sweep point %s: %d requests over %d shards, %.1f req/s, p99 E2E %s ms%s",
        name,
        row["n_requests"],
        template.shards,
        row["request_throughput_per_s"] or 0.0,
        row["p99_e2e_ms"],
        "" if row["valid"] else f" INVALID: {row['invalid_reason']}",
    )
    if os.environ.get(FAIL_POINT_ENV) == name:
        raise InjectedFault(f"sweep point {name}: failure injected by {FAIL_POINT_ENV}")
    return {"row": row, "shards": info}


@flow(name="llm-sweep", validate_parameters=True)
@takes(LlmSweepDistributedParams)
async def llm_sweep(**params: Any) -> dict[str, Any]:
    """The llm-sweep (benchmaker.flows.llm_sweep, same point parameters) with every point split
    into `shards` shards on other hosts (parameters: the fields of
    LlmSweepDistributedParams; module docstring; a `closed:C` point with
    C < shards runs on C shards). `start_lead_s`: time from
    submission to the earliest start (default DEFAULT_LEAD_S); `shard_timeout_s`: how
    long to wait for a point's shards (None: benchmaker.flows.shard_runs.DEFAULT_SHARD_TIMEOUT_S,
    3 h; a shard still running then is a verdict reason, cancelled on a pool, abandoned
    on Dask where a running task cannot be stopped);
    `dask_address`: run the shards on that Dask cluster instead of
    `shard_deployment`'s work pool; `exchange`: a path or fsspec URL
    (s3://bucket/prefix) every host reaches, through which the shards hand over their
    files when `out_dir` is not shared (benchmaker.engine.exchange).
    Returns {"run_id", "run_dir", "warehouse", "points", "flow_run_id", "load",
    "shards": [per point: [{"worker", "flow_run_id"|"task_run_id", "state", "message"}]]}."""
    p = validated(LlmSweepDistributedParams, "llm-sweep", params)
    specs = p.specs()
    backend = "dask" if p.dask_address else "pool"
    lead_s = p.start_lead_s if p.start_lead_s is not None else DEFAULT_LEAD_S[backend]
    checked_dask_address(p.dask_address)  # refuse before any work when the extra is missing
    exchange = checked_exchange(p.exchange)
    log = get_run_logger()
    run_id = flow_run_bundle_id("llm-sweep")
    run_dir = (Path(p.out_dir) / run_id).resolve()
    config = {
        "base_url": p.base_url,
        "model": p.model,
        "api": p.api,
        "loads": specs,
        "duration_s": p.duration_s,
        "max_requests": p.max_requests,
        "prompt_words": p.prompt_words,
        "max_tokens": p.max_tokens,
        "ignore_eos": p.ignore_eos,
        "api_key_env": p.api_key_env,
        "shards": p.shards,
        "backend": backend,
        "start_lead_s": lead_s,
        "shard_deployment": p.shard_deployment if backend == "pool" else None,
        "dask_address": p.dask_address,
        "exchange": exchange,
        "max_loop_lag_ms": p.max_loop_lag_ms,
        "max_schedule_lag_ms": p.max_schedule_lag_ms,
    }
    resume_or_write_manifest(run_dir, run_id=run_id, kind="llm-sweep", label=p.label, config=config, workers=p.shards)
    log.info(
        "run %s -> %s (%d shards per point on %s)",
        run_id,
        run_dir,
        p.shards,
        p.dask_address if p.dask_address else f"work pool of {p.shard_deployment}",
    )
    point_task = run_distributed_point.with_options(result_storage=result_storage_for(Path(p.out_dir)))
    rows, shard_states = [], []
    for spec in specs:
        n = shards_for_load(spec, p.shards)
        template = ShardPoint(
            base_url=p.base_url,
            model=p.model,
            run_dir=str(run_dir),
            run_id=run_id,
            load=spec,
            sweep_point=engine_point_name(spec),
            worker=0,
            shards=n,
            start_wall_ns=0,
            duration_s=p.duration_s,
            max_requests=p.max_requests,
            prompt_words=p.prompt_words,
            max_tokens=p.max_tokens,
            api_key_env=p.api_key_env,
            label=p.label,
            exchange=exchange,
            max_loop_lag_ms=p.max_loop_lag_ms,
            max_schedule_lag_ms=p.max_schedule_lag_ms,
            api=p.api,
            ignore_eos=p.ignore_eos,
        )
        args = dict(
            start_lead_s=lead_s,
            shard_deployment=p.shard_deployment,
            shard_timeout_s=p.shard_timeout_s,
            dask_address=p.dask_address,
        )
        out = await measure_point(point_task, point_dir(run_dir, template.sweep_point), template, **args)
        rows.append(out["row"])
        shard_states.append(out["shards"])
    write_sweep_points(run_dir, rows)
    if exchange:
        Exchange(exchange).remove(run_id)
    wh = Path(p.warehouse).resolve()
    loaded = load_warehouse(wh, run_dir)
    publish_report(run_id, rows, run_dir, warehouse=wh, report_path=run_dir / "report.html", kind="llm-sweep")
    return final_state(
        {
            "run_id": run_id,
            "run_dir": str(run_dir),
            "warehouse": str(wh),
            "points": rows,
            "flow_run_id": str(current_flow_run().id),
            "load": loaded,
            "shards": shard_states,
        }
    )


# The entrypoint function is named `llm_sweep` because `prefect deploy --name FLOW/DEPLOYMENT`
# matches FLOW against the entrypoint's function name (prefect/cli/deploy/_config.py), so
# `prefect deploy --name llm-sweep/distributed` finds this deployment.
llm_sweep_distributed = llm_sweep
