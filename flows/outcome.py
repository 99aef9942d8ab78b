"""The final state of a sweep flow run, from the verdicts of its points.

    return final_state(out)                 # last line of a sweep flow: out["points"][i]["valid"]
    out = await result_of(await flow(**params, return_state=True))   # a caller that needs `out`

A scheduler must be able to tell a nightly run that measured nothing usable:

- every point valid   -> Completed, the flow's return value is `out` as before;
- some point invalid  -> Completed named "Invalid" (message: which points and why). The
                         valid points are results worth keeping, so the run is not a
                         failure (and `benchmaker retry` has nothing to resume), but the
                         state name differs: Prefect emits `prefect.flow-run.Invalid`,
                         which an automation can match, and the UI shows the name;
- every point invalid -> Failed (message: the reasons), data AllPointsInvalid carrying
                         `out`: `prefect deployment run --watch` exits 1 and failure
                         notifications fire. Calling the flow directly raises
                         AllPointsInvalid (with `.out`).

The CLI exits 1 in both invalid cases, as `benchmaker llm` does for an invalid run.

The CLI runs a sweep flow with run_sweep_flow: the flow run is created first, so its id
(UUID) and name are printed before anything is measured, and record_flow_run keeps both
in the bundle's manifest.json; `benchmaker retry` takes either, or the bundle's run id.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import Flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext, get_run_context
from prefect.flow_engine import run_flow
from prefect.states import Completed, Failed, State

from benchmaker.engine.bundle import write_json_atomic

__all__ = ["AllPointsInvalid", "current_flow_run", "final_state", "invalid_summary", "record_flow_run", "result_of", "run_sweep_flow"]


class AllPointsInvalid(Exception):
    """Every sweep point of a flow run was invalid; `out` is the flow's usual return value."""

    def __init__(self, message: str, out: dict[str, Any]):
        super().__init__(message)
        self.out = out


def invalid_summary(points: list[dict[str, Any]]) -> str | None:
    """`"c4: reason; c8: reason"` for the invalid points (`valid` false, reason from
    `invalid_reason`), None when every point is valid."""
    bad = [f"{p.get('sweep_point')}: {p.get('invalid_reason') or 'invalid'}" for p in points if not p.get("valid")]
    return "; ".join(bad) if bad else None


def final_state(out: dict[str, Any]) -> Any:
    """What a sweep flow returns, by `out["points"]` verdicts (module docstring): `out`
    itself when every point is valid, else a Completed("Invalid") or Failed State."""
    points = out.get("points") or []
    reasons = invalid_summary(points)
    if reasons is None:
        return out
    n_bad = sum(1 for p in points if not p.get("valid"))
    if n_bad == len(points):
        message = f"every sweep point is invalid ({n_bad} of {len(points)}): {reasons}"
        return Failed(message=message, data=AllPointsInvalid(message, out))
    return Completed(name="Invalid", message=f"{n_bad} of {len(points)} sweep points invalid: {reasons}", data=out)


async def result_of(state: State) -> dict[str, Any]:
    """The `out` dict of a sweep flow run's final `state` (final_state): its result, or
    the AllPointsInvalid's `out` when it Failed that way. Any other failure raises as
    `state.result()` does."""
    try:
        return await state.result()
    except AllPointsInvalid as exc:
        return exc.out


def current_flow_run() -> FlowRun:
    """The flow run whose code this is (Prefect's run context is a FlowRunContext, not a
    task run's). Raises RuntimeError elsewhere."""
    ctx = get_run_context()  # raises MissingContextError (a RuntimeError) outside any run
    if not isinstance(ctx, FlowRunContext) or ctx.flow_run is None:
        raise RuntimeError("not in a Prefect flow run's own code")
    return ctx.flow_run


def record_flow_run(manifest_path: Path) -> None:
    """Add `flow_run_id` (UUID) and `flow_run_name` of the current flow run to the
    manifest at `manifest_path` (nothing outside a flow run)."""
    try:
        fr = current_flow_run()
    except RuntimeError:  # not in a flow run's own code
        return
    manifest = json.loads(Path(manifest_path).read_text("utf-8"))
    manifest.update(flow_run_id=str(fr.id), flow_run_name=fr.name)
    write_json_atomic(Path(manifest_path), manifest)


def _print_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run_sweep_flow(flow: Flow[..., Any], params: dict[str, Any],
                         announce: Callable[[str], None] = _print_stderr) -> dict[str, Any]:
    """Run the sweep `flow` with `params` as the CLI does: create its flow run, announce
    its id and name (`flow run <UUID> (<name>)`, default on stderr) before anything is
    measured, run it in this process and return its `out` dict whatever the verdicts
    (result_of). A flow that fails otherwise raises as its state's result does."""
    async with get_client() as client:
        flow_run = await client.create_flow_run(flow, parameters=flow.serialize_parameters(params))
    announce(f"flow run {flow_run.id} ({flow_run.name}); if it fails: benchmaker retry {flow_run.id}")
    run = run_flow(flow=flow, flow_run=flow_run, parameters=params, return_type="state")
    state = await run if inspect.isawaitable(run) else run
    if not isinstance(state, State):
        raise TypeError(f"run_flow returned {type(state).__name__}, not a State")
    return await result_of(state)
