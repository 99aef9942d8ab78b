"""The shard side of a sharded `llm-sweep` run (benchmaker.flows.llm_sweep with
`sharded`): each sweep point runs as N shards on N load hosts, merged into one run
(docs/several-machines.md).

    prefect deployment run llm-sweep/distributed --param base_url='"http://gpu-0:8000"' \\
        --param model='"m"' --param shards=2 --param out_dir='"/mnt/bench/artifacts"' --watch

Here: the flow `llm-sweep-shard` (`llm_sweep_shard`; deployment llm-sweep-shard/shard),
one shard of one point (benchmaker.tasks.shard.run_shard_point). On the orchestrator,
each point is the task benchmaker.tasks.distributed_point.run_distributed_point (as for
a sharded swebench-replay): it submits the point's shard runs, waits for all and
merges them.

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

from typing import Any

from prefect import flow
from prefect.logging import get_run_logger

from benchmaker.tasks.shard import ShardPoint, run_shard_point

__all__ = ["SHARD_DEPLOYMENT", "llm_sweep_shard"]

SHARD_DEPLOYMENT = "llm-sweep-shard/shard"


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
