"""The shard side of a sharded `llm-sweep` run (benchmaker.flows.llm_sweep with
`sharded`): each sweep point runs as N shards on N load hosts, merged into one run
(docs/several-machines.md).

    prefect deployment run llm-sweep/distributed --param base_url='"http://gpu-0:8000"' \\
        --param model='"m"' --param shards=2 --param out_dir='"/mnt/bench/artifacts"' --watch

Here: the flow `llm-sweep-shard` (`llm_sweep_shard`; deployment llm-sweep-shard/shard),
one shard of one point (benchmaker.tasks.shard.run_shard_point: its slice k of N of the
point's load, from the shared start of the readiness barrier). On the orchestrator,
each point is the task benchmaker.tasks.distributed_point.run_distributed_point (as for
a sharded swebench-replay): it submits the point's shard runs, waits for all and
merges them; a failed shard is a verdict reason and the others' samples stay.

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
