"""Where the shards of a distributed sweep point run (docs/several-machines.md):
one flow run per shard on a Prefect work pool, or one task per shard on a Dask cluster
through prefect-dask. Both return the same (exit codes, info) pair for the merge.

    codes, info = await shards_on_pool(points, "llm-sweep-shard/shard", timeout_s=None)
    codes, info = await shards_on_dask(points, run_shard_point_task, "tcp://scheduler:8786")

A shard point is a dataclass with `run_id`, `sweep_point`, `worker` and `as_params()`
(benchmaker.tasks.shard.ShardPoint, benchmaker.sweep.shard.ReplayShardPoint). Exit codes: 0 = the shard's
run COMPLETED, 1 = any other final state, None = not final after `timeout_s`.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import replace
from typing import Any

from prefect import Task, flow
from prefect.client.orchestration import get_client
from prefect.deployments.flow_runs import arun_deployment
from prefect.flow_runs import wait_for_flow_run
from prefect.futures import PrefectWrappedFuture
from prefect.logging import get_run_logger
from prefect.states import Cancelled, Cancelling

from benchmaker.engine.bundle import redact
from benchmaker.engine.shared_start import DEFAULT_READY_TIMEOUT_S, MIN_START_LEAD_S

__all__ = [
    "DEFAULT_LEAD_S",
    "DEFAULT_SHARD_TIMEOUT_S",
    "DaskMissing",
    "cancel_flow_runs",
    "dask_task_runner",
    "run_shards",
    "shards_on_dask",
    "shards_on_pool",
]

# Default time from a point's submission to its EARLIEST start, s. The shared start
# itself comes from the shards' readiness barrier (benchmaker.engine.shared_start): the last
# shard's ready time + MIN_START_LEAD_S, however long a work pool's polling
# (PREFECT_WORKER_QUERY_SECONDS, 10 s by default), a process start or a cold Dask
# worker's imports take; a longer lead only lines the start up with something else.
DEFAULT_LEAD_S = {"pool": MIN_START_LEAD_S, "dask": MIN_START_LEAD_S}
# How long a distributed flow waits for a point's shards when shard_timeout_s is None, s
# (Prefect's own default for wait_for_flow_run).
DEFAULT_SHARD_TIMEOUT_S = 10800.0


class DaskMissing(ValueError):
    """dask_address was given but prefect-dask (the `dask` extra) is not installed."""


async def shards_on_pool(
    points: list[Any], deployment: str, timeout_s: float | None
) -> tuple[list[int | None], list[dict[str, Any]]]:
    """Submit one flow run of `deployment` per shard point (parameter `point`) and wait
    for all of them, at most `timeout_s` s in all (None: DEFAULT_SHARD_TIMEOUT_S). A
    shard run not final by then is cancelled (cancel_flow_runs) before this returns, so
    no straggler writes into a point that is being merged or loads the hosts during
    the next point. Returns (exit codes, [{"worker", "flow_run_id", "state",
    "message"}]). Flow runs are named `<run_id>-<sweep_point>-w<worker>`."""
    runs = [
        await arun_deployment(
            deployment,
            parameters={"point": p.as_params()},
            timeout=0,
            flow_run_name=f"{p.run_id}-{p.sweep_point}-w{p.worker}",
            tags=["benchmaker", "shard"],
        )
        for p in points
    ]
    deadline = time.monotonic() + (DEFAULT_SHARD_TIMEOUT_S if timeout_s is None else timeout_s)
    finished = []
    for fr in runs:
        try:
            fr = await wait_for_flow_run(fr.id, timeout=max(1, math.ceil(deadline - time.monotonic())))
        except Exception:  # FlowRunWaitTimeout: cancelled below
            pass
        finished.append(fr)
    late = [fr.id for fr in finished if fr.state is None or not fr.state.is_final()]
    if late:  # every late shard is told to stop first, then waited for
        stopped = await cancel_flow_runs(late, f"not done within shard_timeout_s ({timeout_s} s)")
        finished = [stopped.get(fr.id, fr) for fr in finished]
    codes: list[int | None] = []
    info: list[dict[str, Any]] = []
    for p, fr in zip(points, finished, strict=True):  # one flow run per point
        state = fr.state
        codes.append(0 if state is not None and state.is_completed() else None if fr.id in late else 1)
        info.append(
            {
                "worker": p.worker,
                "flow_run_id": str(fr.id),
                "state": state.type.value if state else None,
                "message": state.message if state else None,
            }
        )
    return codes, info


async def cancel_flow_runs(flow_run_ids: list[Any], message: str, wait_s: float = 60.0) -> dict[Any, Any]:
    """Cancel flow runs and return them ({id: FlowRun}) once final (or after `wait_s`
    s in all). Each one not final is proposed CANCELLING under the server's
    orchestration rules, as `prefect flow-run cancel` does (never forced): a run still
    SCHEDULED (no infrastructure) goes straight to CANCELLED there and a worker's later
    PENDING proposal for it is refused; a PENDING or RUNNING one goes to CANCELLING,
    which its worker turns into killing the flow-run process and CANCELLED. Never
    straight to CANCELLED: a run being picked up at that moment would leave CANCELLED
    for RUNNING and measure anyway. All are told first, then waited for.

    A run still CANCELLING at the deadline is one its worker never finished (Prefect's
    runner sets no state when the cancel finds the attempt already concluded or its
    process gone, and the server allows only CANCELLED after CANCELLING): it is
    proposed CANCELLED with a message that says so, as the server's own cancelling
    timeout does after 300 s."""
    out: dict[Any, Any] = {}
    async with get_client() as client:
        told = []
        for fid in flow_run_ids:
            fr = await client.read_flow_run(fid)
            if fr.state is not None and fr.state.is_final():
                continue
            result: Any = await client.set_flow_run_state(fid, Cancelling(message=message))
            if result.state is None or not result.state.is_final():  # CANCELLED at once: nothing to wait for
                told.append(fid)
        deadline = time.monotonic() + wait_s
        for fid in flow_run_ids:
            fr = await client.read_flow_run(fid)
            # read the run until final or the deadline (not wait_for_flow_run: the events
            # stream it follows can fail or miss the final state)
            while fid in told and not (fr.state is not None and fr.state.is_final()) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                fr = await client.read_flow_run(fid)
            if fid in told and fr.state is not None and fr.state.is_cancelling():
                await client.set_flow_run_state(
                    fid,
                    Cancelled(message=f"{message}; its worker did not confirm the cancellation within {wait_s:g} s"),
                )
                fr = await client.read_flow_run(fid)
            out[fid] = fr
    return out


async def run_shards(
    template: Any,
    *,
    start_lead_s: float,
    shard_task: Task,
    deployment: str,
    timeout_s: float | None,
    dask_address: str | None,
) -> tuple[list[Any], list[int | None], list[dict[str, Any]]]:
    """Run one attempt of a point's `template.shards` shards: the earliest start is set
    `start_lead_s` s from now (wall-clock ns; the shards' readiness barrier fixes the
    shared start, benchmaker.engine.shared_start), shard k is `template` with worker k, that
    start and a ready timeout of min(DEFAULT_READY_TIMEOUT_S, `timeout_s`) unless the
    template sets one, and they run on the Dask cluster at
    `dask_address` (shards_on_dask with `shard_task`) or else on `deployment`'s work
    pool (shards_on_pool); a warning is logged per shard that did not complete.
    Returns (the shard points, exit codes, info), the info's state messages redacted
    (benchmaker.engine.bundle.redact: they may quote a URL)."""
    start_wall_ns = time.time_ns() + round(start_lead_s * 1e9)
    ready_timeout_s = template.ready_timeout_s
    if ready_timeout_s is None:
        ready_timeout_s = DEFAULT_READY_TIMEOUT_S if timeout_s is None else min(DEFAULT_READY_TIMEOUT_S, timeout_s)
    points = [
        replace(template, worker=k, start_wall_ns=start_wall_ns, ready_timeout_s=ready_timeout_s)
        for k in range(template.shards)
    ]
    if dask_address:
        codes, info = await shards_on_dask(points, shard_task, dask_address, timeout_s)
    else:
        codes, info = await shards_on_pool(points, deployment, timeout_s)
    info = redact(info)
    log = get_run_logger()
    for p, i in zip(points, info, strict=True):
        if i["state"] != "COMPLETED":
            log.warning("point %s shard %d ended %s: %s", p.sweep_point, i["worker"], i["state"], i["message"])
    return points, codes, info


def dask_task_runner(address: str) -> Any:
    """A prefect_dask.DaskTaskRunner connected to the Dask scheduler at `address`.
    Raises DaskMissing (a ValueError) when prefect-dask is not installed."""
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        raise DaskMissing("dask_address: needs prefect-dask (pip install 'benchmaker[dask]')") from exc
    return DaskTaskRunner(address=address)


async def shards_on_dask(
    points: list[Any], shard_task: Task, address: str, timeout_s: float | None = None
) -> tuple[list[int | None], list[dict[str, Any]]]:
    """Run `shard_task(point)` once per shard point on the Dask cluster at `address`
    (a subflow on a DaskTaskRunner: one task per shard), waiting at most `timeout_s` s
    in all (None: DEFAULT_SHARD_TIMEOUT_S). A shard not done by then is reported with
    exit code None and its Dask future cancelled; a task already running in a Dask
    worker thread cannot be interrupted and ends on its own bounds (the point's
    duration, episodes and deadlines). Returns (exit codes, [{"worker", "task_run_id",
    "state", "message"}])."""

    @flow(name=f"{shard_task.name}-dask", task_runner=dask_task_runner(address))
    async def dask_point(points: list[Any]) -> tuple[list[int | None], list[dict[str, Any]]]:
        futures = [shard_task.submit(p) for p in points]
        deadline = time.monotonic() + (DEFAULT_SHARD_TIMEOUT_S if timeout_s is None else timeout_s)
        codes: list[int | None] = []
        info: list[dict[str, Any]] = []
        for p, fut in zip(points, futures, strict=True):
            # a blocking wait: keep this loop free
            await asyncio.to_thread(fut.wait, max(0.0, deadline - time.monotonic()))
            state = fut.state
            if not state.is_final():
                if isinstance(fut, PrefectWrappedFuture):  # a task runner's future (thread, Dask)
                    fut.wrapped_future.cancel()
                codes.append(None)
            else:
                codes.append(0 if state.is_completed() else 1)
            info.append(
                {
                    "worker": p.worker,
                    "task_run_id": str(fut.task_run_id),
                    "state": state.type.value,
                    "message": state.message,
                }
            )
        return codes, info

    return await dask_point(points)
