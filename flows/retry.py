"""Resume a failed flow run: run it again under the same flow run id, in this process.

    python -m flows.retry 6c0a4887-55b2-45f7-af46-99dee7b406ef     # exit 0 when Completed
    state = await retry_flow_run("6c0a4887-...")                    # from async code

Why not `prefect flow-run retry ID --entrypoint FILE:FLOW`: in Prefect 3.9.1 that
command calls `run_flow` without awaiting it, so for an async flow (both of ours) the
coroutine never runs and the run is left Scheduled ("coroutine 'run_flow_async' was
never awaited"). For a flow run created from a deployment, `prefect flow-run retry ID`
(no entrypoint) works: it sets the run Scheduled and a worker runs it.

Both variants of each flow resume: the single-process one and the distributed one
(flows.swebench_replay_distributed, flows.llm_sweep_distributed; told apart by the
run's deployment, parameters or flow version).

What resumes: the run keeps its id and parameters (run_count + 1), so its bundle
directory (`flows.swebench_replay.flow_run_bundle_id`) and every task cache key that
includes the flow run id are the same. Sweep points that completed before the failure
are cache hits (their persisted results are read back, their files are not touched);
the failed point and everything after it run. A new flow run has a new id and measures
everything again (tasks.sweep.sweep_point_policy includes RUN_ID).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any
from uuid import UUID

from prefect import Flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.exceptions import ObjectNotFound
from prefect.flow_engine import run_flow
from prefect.states import Scheduled

__all__ = ["FLOWS", "main", "retry_flow_run"]

RESUMABLE = (StateType.FAILED, StateType.CRASHED, StateType.CANCELLED)


# the flows this module resumes, by flow name (each in its single-process and its
# distributed variant)
FLOWS = ("swebench-replay", "llm-sweep")


# Parameters only the distributed variants have (flows.*_distributed): a run that
# carries one of them was made by that variant.
_DISTRIBUTED_PARAMS = frozenset({"shards", "start_lead_s", "shard_deployment", "shard_timeout_s", "dask_address",
                                 "exchange"})


def _flows(distributed: bool) -> dict[str, Flow[..., Any]]:
    if distributed:
        from flows.llm_sweep_distributed import llm_sweep
        from flows.swebench_replay_distributed import swebench_replay
    else:
        from flows.llm_sweep import llm_sweep
        from flows.swebench_replay import swebench_replay

    return {swebench_replay.name: swebench_replay, llm_sweep.name: llm_sweep}


async def _is_distributed(client: Any, flow_run: Any) -> bool:
    """Whether `flow_run` was made by a distributed variant: by its deployment's
    entrypoint when it came from a deployment, else by its parameters, else by its
    flow version (Prefect's hash of the flow's source file)."""
    if flow_run.deployment_id is not None:
        try:
            deployment = await client.read_deployment(flow_run.deployment_id)
            if deployment.entrypoint:
                return "_distributed.py:" in deployment.entrypoint
        except ObjectNotFound:
            pass
    if _DISTRIBUTED_PARAMS & set(flow_run.parameters or {}):
        return True
    return any(f.version == flow_run.flow_version for f in _flows(True).values())


async def retry_flow_run(flow_run_id: UUID | str) -> Any:
    """Set the flow run `flow_run_id` back to Scheduled and run it again in this
    process with its stored parameters (see the module docstring). Returns its final
    Prefect State (Completed, or Failed with the exception as `state.data`).

    Raises ValueError for an id that is not a UUID, a flow run that is not Failed,
    Crashed or Cancelled, or a flow that is not one of FLOWS; prefect.exceptions.
    ObjectNotFound for an unknown id."""
    try:
        run_id = flow_run_id if isinstance(flow_run_id, UUID) else UUID(str(flow_run_id))
    except ValueError:
        raise ValueError(f"flow_run_id: expected a flow run UUID (got {flow_run_id!r})") from None
    async with get_client() as client:
        flow_run = await client.read_flow_run(run_id)
        state = flow_run.state
        if state is None or state.type not in RESUMABLE:
            raise ValueError(f"flow run {run_id}: only a Failed, Crashed or Cancelled run resumes "
                             f"(got {state.name if state else 'no state'}); start a new run to measure again")
        name = (await client.read_flow(flow_run.flow_id)).name
        flow = _flows(await _is_distributed(client, flow_run)).get(name)
        if flow is None:
            raise ValueError(f"flow run {run_id}: flow {name!r} is not one of {', '.join(FLOWS)}")
        await client.set_flow_run_state(run_id, Scheduled(message="Resumed by flows.retry"), force=True)
        flow_run = await client.read_flow_run(run_id)
    # parameters=None: run_flow binds the run's stored (JSON) parameters to the flow's
    # signature, the engine validates them (Paths come back as Paths); for an async flow
    # run_flow returns the coroutine that the Prefect CLI forgets to await
    return await run_flow(flow=flow, flow_run=flow_run, return_type="state")


def main(argv: list[str] | None = None) -> int:
    """`python -m flows.retry FLOW_RUN_ID`: 0 when the resumed run Completed, 1 when it
    ended otherwise, 2 for a refused id (message on stderr)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m flows.retry FLOW_RUN_ID", file=sys.stderr)
        return 2
    try:
        state = asyncio.run(retry_flow_run(args[0]))
    except (ValueError, ObjectNotFound) as exc:
        print(f"flows.retry: error: {exc or 'flow run ' + args[0] + ' not found'}", file=sys.stderr)
        return 2
    print(f"flow run {args[0]}: {state.name}")
    return 0 if state.is_completed() else 1


if __name__ == "__main__":
    sys.exit(main())
