"""Resume a failed flow run: run it again under the same flow run id, in this process.

    python -m benchmaker.flows.retry 6c0a4887-55b2-45f7-af46-99dee7b406ef     # exit 0 when Completed
    python -m benchmaker.flows.retry adorable-fox                               # the flow run's name
    python -m benchmaker.flows.retry swebench-replay-20261201T010203Z-6c0a4887  # the bundle's run id
    python -m benchmaker.flows.retry artifacts/swebench-replay-20261201T...     # the bundle directory
    state = await retry_flow_run("6c0a4887-...")                    # from async code

A flow run is named by its UUID, its name, the run id of its bundle
(`<kind>-<created>-<first 8 hex of the UUID>`, benchmaker.flows.common.flow_run_bundle_id) or
the bundle directory (its manifest.json keeps `flow_run_id`); resolve_flow_run_id.

Ctrl-C (SIGINT) or SIGTERM during `main` cancels the resumed run: Prefect's engine gets
CANCEL_GRACE_S seconds to stop, the flow run is then set Cancelled (force, so a
"Running" or "Crashed" left by the engine is replaced) and main exits 130 / 143 at
once, without waiting for the interpreter's slow teardown of Prefect's threads.

Why not `prefect flow-run retry ID --entrypoint FILE:FLOW`: in Prefect 3.9.1 that
command calls `run_flow` without awaiting it, so for an async flow (both of ours) the
coroutine never runs and the run is left Scheduled ("coroutine 'run_flow_async' was
never awaited"). For a flow run created from a deployment, `prefect flow-run retry ID`
(no entrypoint) works: it sets the run Scheduled and a worker runs it.

Before it runs, the resumed run's parameters are printed, and checked against the
`flow_run_parameters_sha256` that its bundle's manifest.json stored when it started
(benchmaker.flows.outcome.record_flow_run): a run whose parameters were changed on the
Prefect server since (by the UI, the API or another user) is refused
(ParametersChanged) unless `accept_changed`. The bundle is found where the
parameters say (`out_dir`/<bundle run id>) and must be this user's and name this flow
run: parameters pointing elsewhere find no matching manifest and are refused too.

A Running run whose process is gone (SIGKILL, the OOM killer: no state change was
ever sent) is set Crashed and resumed; its bundle's flow_process.json
(benchmaker.flows.outcome.record_flow_process) names the process. A Running run
whose process lives (or runs on another host) is refused.

Both flows resume, swebench-replay and llm-sweep, each one flow that runs here or
sharded (its `sharded` parameter).

What resumes: the run keeps its id and parameters (run_count + 1), so its bundle
directory (`benchmaker.flows.swebench_replay.flow_run_bundle_id`) and every task cache key that
includes the flow run id are the same. Sweep points that completed before the failure
are cache hits (their persisted results are read back, their files are not touched);
the failed point and everything after it run. A new flow run has a new id and measures
everything again (benchmaker.tasks.sweep.sweep_point_policy includes RUN_ID).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import signal
import stat
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import Flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterName
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.exceptions import ObjectNotFound
from prefect.flow_engine import run_flow
from prefect.states import Cancelled, Crashed, Scheduled

from benchmaker.engine.exit_cleanup import exit_now
from benchmaker.flows.outcome import flow_process_gone, parameters_sha256

__all__ = ["FLOWS", "ParametersChanged", "bundle_dir", "main", "resolve_flow_run_id", "retry_flow_run"]

CANCEL_GRACE_S = 5.0  # how long Prefect's engine may take to stop after Ctrl-C
# a bundle run id: <kind>-<YYYYmmddTHHMMSSZ>-<first 8 hex of the flow run id>
_BUNDLE_RUN_ID = re.compile(r"(?P<kind>[a-z][a-z-]*)-\d{8}T\d{6}Z-(?P<prefix>[0-9a-f]{8})")

RESUMABLE = (StateType.FAILED, StateType.CRASHED, StateType.CANCELLED)


class ParametersChanged(ValueError):
    """The flow run's parameters differ from the ones it started with (or that cannot
    be checked); the message names the manifest."""


# the flows this module resumes, by flow name (each runs here or sharded)
FLOWS = ("swebench-replay", "llm-sweep")


def _flows() -> dict[str, Flow[..., Any]]:
    from benchmaker.flows.llm_sweep import llm_sweep  # one flow, local or sharded
    from benchmaker.flows.swebench_replay import swebench_replay  # likewise

    return {swebench_replay.name: swebench_replay, llm_sweep.name: llm_sweep}


async def resolve_flow_run_id(ref: str | UUID) -> UUID:
    """The flow run id `ref` names: a UUID, a bundle directory (its manifest's
    `flow_run_id`, else its run id), a bundle run id (matched on the id's first 8 hex
    among the runs of FLOWS, newest 1,000) or a flow run name. Raises ValueError naming
    `ref` when nothing or more than one flow run matches."""
    if isinstance(ref, UUID):
        return ref
    try:
        return UUID(ref)
    except ValueError:
        pass
    manifest = Path(ref) / "manifest.json"
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{manifest}: not readable JSON ({exc})") from None
        if data.get("flow_run_id"):
            return UUID(str(data["flow_run_id"]))
        ref = str(data.get("run_id") or ref)
    async with get_client() as client:
        m = _BUNDLE_RUN_ID.fullmatch(ref)
        if m:
            found = []
            for offset in range(0, 1000, 200):  # the API serves at most 200 a page
                runs = await client.read_flow_runs(
                    flow_filter=FlowFilter(name=FlowFilterName(any_=list(FLOWS))),
                    sort=FlowRunSort.START_TIME_DESC,
                    limit=200,
                    offset=offset,
                )
                found += [r for r in runs if str(r.id).startswith(m["prefix"])]
                if len(runs) < 200:
                    break
        else:
            found = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[ref])), limit=2
            )
    if len(found) > 1:
        raise ValueError(f"flow_run: {ref!r} names {len(found)} flow runs; give the flow run id (UUID)")
    if not found:
        raise ValueError(f"flow_run: no flow run with the id, name or bundle run id {ref!r}")
    return found[0].id


def bundle_dir(flow_name: str, flow_run: Any) -> Path | None:
    """The run bundle directory the flow run writes, by its parameters: `out_dir` /
    `<flow name>-<created UTC>-<id[:8]>` (benchmaker.flows.common.flow_run_bundle_id),
    resolved from this process's directory as the flow does; None without `out_dir`
    or a creation time."""
    out_dir = (flow_run.parameters or {}).get("out_dir")
    created = flow_run.created or flow_run.expected_start_time
    if not isinstance(out_dir, str) or created is None:
        return None
    return (Path(out_dir) / f"{flow_name}-{created.strftime('%Y%m%dT%H%M%SZ')}-{str(flow_run.id)[:8]}").resolve()


def _check_parameters(run_id: UUID, run_dir: Path | None, parameters: dict[str, Any]) -> None:
    """Raise ParametersChanged unless `run_dir`/manifest.json is a regular file of this
    user, names flow run `run_id` and stores the hash of `parameters`."""
    if run_dir is None:
        raise ParametersChanged(
            f"flow run {run_id}: its parameters name no run bundle (out_dir); cannot check "
            f"them against the ones it started with"
        )
    path = run_dir / "manifest.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, encoding="utf-8") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise ParametersChanged(
                    f"{path}: not a regular file of yours (uid {st.st_uid}); the run's "
                    f"parameters point at a bundle that is not its own"
                )
            manifest = json.loads(fh.read())
    except (OSError, ValueError) as exc:
        raise ParametersChanged(
            f"{path}: no readable manifest where the run's parameters put its bundle "
            f"({getattr(exc, 'strerror', None) or exc}); its parameters may have been "
            f"changed, or it failed before writing it"
        ) from None
    if manifest.get("flow_run_id") != str(run_id):
        raise ParametersChanged(
            f"{path}: flow_run_id: expected {run_id} (got {manifest.get('flow_run_id')!r}); "
            f"the run's parameters point at another run's bundle"
        )
    stored = manifest.get("flow_run_parameters_sha256")
    if stored != parameters_sha256(parameters):
        raise ParametersChanged(
            f"{path}: flow_run_parameters_sha256: the run's parameters changed after it started "
            f"(stored {stored or 'none'}, now {parameters_sha256(parameters)})"
        )


async def retry_flow_run(flow_run_id: UUID | str, *, accept_changed: bool = False, say: Any = None) -> Any:
    """Set the flow run `flow_run_id` back to Scheduled and run it again in this
    process with its stored parameters (see the module docstring). Returns its final
    Prefect State (Completed, or Failed with the exception as `state.data`).

    `flow_run_id` may be anything resolve_flow_run_id takes. `say(text)` gets the
    parameters it resumes with (JSON, before anything runs). A Running run whose
    process is gone is set Crashed first. Raises ParametersChanged when its parameters
    are not the ones it started with and `accept_changed` is False; ValueError for a
    reference that names no single flow run, a flow run that is not Failed, Crashed or
    Cancelled (or Running with its process gone), or a flow that is not one of FLOWS;
    prefect.exceptions.ObjectNotFound for an unknown id."""
    run_id = await resolve_flow_run_id(flow_run_id)
    async with get_client() as client:
        flow_run = await client.read_flow_run(run_id)
        state = flow_run.state
        name = (await client.read_flow(flow_run.flow_id)).name
        run_dir = bundle_dir(name, flow_run)
        if state is not None and state.type == StateType.RUNNING and run_dir is not None:
            gone, what = flow_process_gone(run_dir)
            if not gone:
                raise ValueError(
                    f"flow run {run_id}: Running ({what}); only a Failed, Crashed or Cancelled run, "
                    f"or a Running one whose process is gone, resumes"
                )
            await client.set_flow_run_state(
                run_id, Crashed(message=f"its process ({what}) is gone; found by benchmaker retry"), force=True
            )
            flow_run = await client.read_flow_run(run_id)
            state = flow_run.state
        if state is None or state.type not in RESUMABLE:
            raise ValueError(
                f"flow run {run_id}: only a Failed, Crashed or Cancelled run resumes "
                f"(got {state.name if state else 'no state'}); start a new run to measure again"
            )
        flow = _flows().get(name)
        if flow is None:
            raise ValueError(f"flow run {run_id}: flow {name!r} is not one of {', '.join(FLOWS)}")
        if say is not None:
            say(
                f"flow run {run_id} ({flow_run.name}) resumes with its parameters:\n"
                + json.dumps(flow_run.parameters or {}, indent=2, sort_keys=True, default=str)
            )
        try:
            _check_parameters(run_id, run_dir, flow_run.parameters or {})
        except ParametersChanged:
            if not accept_changed:
                raise
            if say is not None:
                say(f"flow run {run_id}: resuming with changed or unchecked parameters (--accept-changed)")
        await client.set_flow_run_state(run_id, Scheduled(message="Resumed by benchmaker.flows.retry"), force=True)
        flow_run = await client.read_flow_run(run_id)
    # parameters=None: run_flow binds the run's stored (JSON) parameters to the flow's
    # signature, the engine validates them (Paths come back as Paths); for an async flow
    # run_flow returns the coroutine that the Prefect CLI forgets to await
    run = run_flow(flow=flow, flow_run=flow_run, return_type="state")
    return await run if inspect.isawaitable(run) else run


async def _cancel(run_id: UUID, why: str) -> None:
    async with get_client() as client:
        await client.set_flow_run_state(run_id, Cancelled(message=why), force=True)


async def _retry_interruptible(ref: str, accept_changed: bool = False) -> tuple[UUID, Any, str | None]:
    """(flow run id, final state or None, the stop signal's name or None): retry_flow_run,
    cancelled by SIGINT/SIGTERM (module docstring)."""
    run_id = await resolve_flow_run_id(ref)
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(
        retry_flow_run(run_id, accept_changed=accept_changed, say=lambda text: print(text, flush=True))
    )
    received: list[str] = []

    def stop(name: str) -> None:
        if not received:
            received.append(name)
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop, sig.name)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
            pass
    try:
        return run_id, await asyncio.shield(task), None
    except asyncio.CancelledError:
        if not received:
            raise
    await asyncio.wait({task}, timeout=CANCEL_GRACE_S)  # Prefect's engine stops what it can
    await asyncio.wait_for(_cancel(run_id, f"interrupted by {received[0]} during benchmaker.flows.retry"), timeout=30)
    return run_id, None, received[0]


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmaker.flows.retry FLOW_RUN [--accept-changed]`: 0 when the resumed run
    Completed with every point valid, 1 when it ended otherwise (Failed, or Completed named
    "Invalid": benchmaker.flows.outcome), 2 for a refused reference or changed parameters
    (one line on stderr), 128 + n after SIGINT/SIGTERM (the flow run is left Cancelled;
    the process exits at once)."""
    args = sys.argv[1:] if argv is None else list(argv)
    accept_changed = "--accept-changed" in args
    args = [a for a in args if a != "--accept-changed"]
    if len(args) != 1:
        print(
            "usage: python -m benchmaker.flows.retry FLOW_RUN [--accept-changed] (id, name, bundle run id or bundle "
            "directory)",
            file=sys.stderr,
        )
        return 2
    try:
        run_id, state, stopped_by = asyncio.run(_retry_interruptible(args[0], accept_changed))
    except ParametersChanged as exc:
        print(f"benchmaker: error: {exc}; resume anyway with --accept-changed", file=sys.stderr)
        return 2
    except (ValueError, ObjectNotFound) as exc:
        print(f"benchmaker.flows.retry: error: {exc or 'flow run ' + args[0] + ' not found'}", file=sys.stderr)
        return 2
    if stopped_by is not None:
        print(f"flow run {run_id}: Cancelled (interrupted by {stopped_by})", flush=True)
        # Prefect's background threads can hold the interpreter's exit for minutes: exit at
        # once, this process's cleanups (replay servers, temp roots) run first
        exit_now(128 + signal.Signals[stopped_by].value)
    print(f"flow run {run_id}: {state.name}" + (f" ({state.message})" if state.name == "Invalid" else ""))
    return 0 if state.is_completed() and state.name != "Invalid" else 1


if __name__ == "__main__":
    sys.exit(main())
