"""Where the shards of a distributed sweep point run (issue #8 item 2; DESIGN §9):
one flow run per shard on a Prefect work pool, or one task per shard on a Dask cluster
through prefect-dask. Both return the same (exit codes, info) pair for the merge.

    codes, info = await shards_on_pool(points, "llm-sweep-shard/shard", timeout_s=None)
    codes, info = await shards_on_dask(points, run_shard_point_task, "tcp://scheduler:8786")

A shard point is a dataclass with `run_id`, `sweep_point`, `worker` and `as_params()`
(tasks.shard.ShardPoint, replay.shard.ReplayShardPoint). Exit codes: 0 = the shard's
run COMPLETED, 1 = any other final state, None = not final after `timeout_s`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prefect import Task, flow
from prefect.deployments.flow_runs import arun_deployment
from prefect.flow_runs import wait_for_flow_run

__all__ = ["DEFAULT_LEAD_S", "DaskMissing", "dask_task_runner", "shards_on_dask", "shards_on_pool"]

# Default time from a point's submission to its shared start, s: a work pool's workers
# must poll (PREFECT_WORKER_QUERY_SECONDS, 10 s by default) and start a process; a cold
# Dask worker imports Prefect and the engine on its first shard.
DEFAULT_LEAD_S = {"pool": 30.0, "dask": 10.0}


class DaskMissing(ValueError):
    """dask_address was given but prefect-dask (the `dask` extra) is not installed."""


async def shards_on_pool(points: list[Any], deployment: str, timeout_s: float | None
                         ) -> tuple[list[int | None], list[dict[str, Any]]]:
    """Submit one flow run of `deployment` per shard point (parameter `point`) and wait
    for all of them. Returns (exit codes, [{"worker", "flow_run_id", "state",
    "message"}]). Flow runs are named `<run_id>-<sweep_point>-w<worker>`."""
    runs = []
    for p in points:
        runs.append(await arun_deployment(
            deployment, parameters={"point": p.as_params()}, timeout=0,
            flow_run_name=f"{p.run_id}-{p.sweep_point}-w{p.worker}", tags=["benchmaker", "shard"]))
    codes: list[int | None] = []
    info: list[dict[str, Any]] = []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for p, fr in zip(points, runs):
        left = None if deadline is None else max(1, int(deadline - time.monotonic()))
        try:
            fr = await wait_for_flow_run(fr.id, timeout=left, poll_interval=1)
            final = fr.state is not None and fr.state.is_final()
        except Exception:  # noqa: BLE001 - FlowRunWaitTimeout: reported as not final
            final = False
        state = fr.state
        codes.append((0 if state.is_completed() else 1) if final else None)
        info.append({"worker": p.worker, "flow_run_id": str(fr.id), "state": state.type.value if state else None,
                     "message": state.message if state else None})
    return codes, info


def dask_task_runner(address: str) -> Any:
    """A prefect_dask.DaskTaskRunner connected to the Dask scheduler at `address`.
    Raises DaskMissing (a ValueError) when prefect-dask is not installed."""
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        raise DaskMissing("dask_address: needs prefect-dask (pip install 'benchmaker[dask]')") from exc
    return DaskTaskRunner(address=address)


async def shards_on_dask(points: list[Any], shard_task: Task, address: str
                         ) -> tuple[list[int | None], list[dict[str, Any]]]:
    """Run `shard_task(point)` once per shard point on the Dask cluster at `address`
    (a subflow on a DaskTaskRunner: one task per shard). Returns (exit codes, [{"worker",
    "task_run_id", "state", "message"}])."""

    @flow(name=f"{shard_task.name}-dask", task_runner=dask_task_runner(address))
    async def dask_point(points: list[Any]) -> tuple[list[int | None], list[dict[str, Any]]]:
        futures = [shard_task.submit(p) for p in points]
        codes: list[int | None] = []
        info: list[dict[str, Any]] = []
        for p, fut in zip(points, futures):
            await asyncio.to_thread(fut.wait)  # a blocking wait: keep this loop free
            state = fut.state
            codes.append(0 if state.is_completed() else 1)
            info.append({"worker": p.worker, "task_run_id": str(fut.task_run_id), "state": state.type.value,
                         "message": state.message})
        return codes, info

    return await dask_point(points)
