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

Where episodes were graded (a verifier re-ran the task: execute and command mode), the
message also gives each point's accuracy with its n (grading_summary), a valid run's
Completed state too: the UI and `prefect flow-run inspect` show it beside the state.
The flow run also logs that message (a warning when a point is invalid), so that
`prefect deployment run --watch`, which prints the run's logs and then only the final
state's name, shows the reason.

The CLI exits 1 in both invalid cases, as `benchmaker llm` does for an invalid run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from prefect import Flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext, get_run_context
from prefect.flow_engine import run_flow
from prefect.states import Completed, Failed, State

from benchmaker.engine.bundle import write_json_atomic

__all__ = [
    "FLOW_PROCESS_FILE",
    "AllPointsInvalid",
    "FlowRunFailed",
    "final_state",
    "flow_process_gone",
    "grading_summary",
    "invalid_summary",
    "parameters_sha256",
    "process_start_ticks",
    "record_flow_process",
    "recorded_run_dirs",
    "record_flow_run",
    "result_of",
    "run_sweep_flow",
]

FLOW_PROCESS_FILE = "flow_process.json"


class AllPointsInvalid(Exception):
    """Every sweep point of a flow run was invalid; `out` is the flow's usual return value."""

    def __init__(self, message: str, out: dict[str, Any]):
        super().__init__(message)
        self.out = out


class FlowRunFailed(Exception):
    """A sweep flow run ended Failed or Crashed for a reason other than its points'
    verdicts (a task raised, the warehouse refused the load). The message names the
    flow run, its final state and the state's message (the reason), and says how to
    resume it; `flow_run_id` is the run's UUID."""

    def __init__(self, message: str, flow_run_id: str):
        super().__init__(message)
        self.flow_run_id = flow_run_id


def invalid_summary(points: list[dict[str, Any]]) -> str | None:
    """`"c4: reason; c8: reason"` for the invalid points (`valid` false), each reason of
    `invalid_reason` in plain words (benchmaker.sweep.verdicts: "your machine was busy:
    the client's event loop lagged 38 ms ..."), None when every point is valid."""
    from benchmaker.sweep.verdicts import reasons_of

    bad = [
        f"{p.get('sweep_point')}: {'; '.join(r.plain for r in reasons_of(p)) or 'invalid'}"
        for p in points
        if not p.get("valid")
    ]
    return "; ".join(bad) if bad else None


def grading_summary(points: list[dict[str, Any]]) -> str | None:
    """The accuracy of each point whose episodes were graded, with its n: `"accuracy
    (resolved of re-verified episodes): c1 1 of 1 (100%), c2 1 of 2 (50%)"`, from the
    point rows' n_reverified and n_resolved_reverified (the verifier ran the task's
    tests again); the recorded outcomes carried from the logs (n_carried,
    n_resolved_carried) follow as `carried: ...` where there are any. None when no
    point has a graded episode."""

    def part(key: str) -> list[str]:
        out = []
        for p in points:
            n = p.get(f"n_{key}")
            if n:
                k = p.get(f"n_resolved_{key}") or 0
                out.append(f"{p.get('sweep_point')} {k} of {n} ({100 * k / n:.0f}%)")
        return out

    parts = []
    if reverified := part("reverified"):
        parts.append("accuracy (resolved of re-verified episodes): " + ", ".join(reverified))
    if carried := part("carried"):
        parts.append("resolved as recorded (carried from the logs): " + ", ".join(carried))
    return "; ".join(parts) or None


def final_state(out: dict[str, Any]) -> Any:
    """What a sweep flow returns, by `out["points"]` verdicts (module docstring): `out`
    itself when every point is valid and none was graded, a Completed State whose message
    gives the accuracy (grading_summary) when every point is valid and some were graded,
    else a Completed("Invalid") or Failed State whose message gives the reasons, then the
    accuracy."""
    points = out.get("points") or []
    reasons = invalid_summary(points)
    graded = grading_summary(points)
    then = f"; {graded}" if graded else ""
    if reasons is None:
        if graded is None:
            return out
        message = f"{len(points)} of {len(points)} sweep points valid; {graded}"
        _log(logging.INFO, message)
        return Completed(message=message, data=out)
    n_bad = sum(1 for p in points if not p.get("valid"))
    if n_bad == len(points):
        message = f"every sweep point is invalid ({n_bad} of {len(points)}): {reasons}{then}"
        _log(logging.WARNING, message)
        return Failed(message=message, data=AllPointsInvalid(message, out))
    message = f"{n_bad} of {len(points)} sweep points invalid: {reasons}{then}"
    _log(logging.WARNING, message)
    return Completed(name="Invalid", message=message, data=out)


def _log(level: int, message: str) -> None:
    """`message` on the current flow run's logger (shown by the UI and by `prefect
    deployment run --watch`); nothing outside a flow run."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        logger = get_run_logger()
    except MissingContextError:
        return
    logger.log(level, message)


async def result_of(state: State) -> dict[str, Any]:
    """The `out` dict of a sweep flow run's final `state` (final_state): its result, or
    the AllPointsInvalid's `out` when it Failed that way. Any other failure raises as
    `state.result()` does."""
    try:
        return await state.result()
    except AllPointsInvalid as exc:
        return exc.out


def parameters_sha256(parameters: dict[str, Any] | None) -> str:
    """SHA-256 (hex) of a flow run's parameters as the Prefect API stores them (JSON):
    serialized with sorted keys, no spaces, non-JSON values as str."""
    text = json.dumps(parameters or {}, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def current_flow_run() -> FlowRun:
    """The flow run whose code this is (Prefect's run context is a FlowRunContext, not a
    task run's). Raises RuntimeError elsewhere."""
    ctx = get_run_context()  # raises MissingContextError (a RuntimeError) outside any run
    if not isinstance(ctx, FlowRunContext) or ctx.flow_run is None:
        raise RuntimeError("not in a Prefect flow run's own code")
    return ctx.flow_run


def record_flow_run(manifest_path: Path) -> None:
    """Add `flow_run_id` (UUID), `flow_run_name` and `flow_run_parameters_sha256`
    (parameters_sha256 of the parameters it started with; `benchmaker retry` refuses
    a run whose parameters changed since) of the current flow run to the manifest at
    `manifest_path` (nothing outside a flow run)."""
    try:
        fr = current_flow_run()
    except RuntimeError:  # not in a flow run's own code
        return
    manifest = json.loads(Path(manifest_path).read_text("utf-8"))
    manifest.update(
        flow_run_id=str(fr.id), flow_run_name=fr.name, flow_run_parameters_sha256=parameters_sha256(fr.parameters)
    )
    write_json_atomic(Path(manifest_path), manifest)


def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat field 22:
    proc(5)); None when it is gone or there is no /proc. Tells a live process from a
    later one that got the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 and fields[0] != "Z" else None


_RECORDED: list[Path] = []  # the run folders of this process's flow runs, oldest first


def record_flow_process(run_dir: Path) -> None:
    """Write `run_dir`/flow_process.json: {"host", "pid", "start_ticks"} of this process,
    which runs the flow run's current attempt (rewritten by every attempt), so that
    `benchmaker retry` can tell a Running run whose process is gone (SIGKILL, OOM)."""
    pid = os.getpid()
    _RECORDED.append(Path(run_dir))
    write_json_atomic(
        Path(run_dir) / FLOW_PROCESS_FILE,
        {"host": socket.gethostname(), "pid": pid, "start_ticks": process_start_ticks(pid)},
    )


def recorded_run_dirs() -> list[Path]:
    """The run folders whose flow runs this process ran (record_flow_process), oldest first."""
    return list(_RECORDED)


def flow_process_gone(run_dir: Path) -> tuple[bool, str]:
    """(gone, description) of the process recorded in `run_dir`/flow_process.json:
    gone when it ran on this host and no process with its pid and start time is alive.
    Unknown (no record, another host) is not gone."""
    try:
        rec = json.loads((Path(run_dir) / FLOW_PROCESS_FILE).read_text("utf-8"))
        host, pid, ticks = str(rec["host"]), int(rec["pid"]), rec.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"no readable {Path(run_dir) / FLOW_PROCESS_FILE}"
    what = f"pid {pid} on {host}"
    if host != socket.gethostname():
        return False, what + " (another host: cannot tell)"
    now = process_start_ticks(pid)
    return (now is None or (ticks is not None and now != ticks)), what


def _print_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run_sweep_flow(
    flow: Flow[..., Any], params: dict[str, Any], announce: Callable[[str], None] = _print_stderr
) -> dict[str, Any]:
    """Run the sweep `flow` with `params` as the CLI does: create its flow run, announce
    its id and name (`flow run <UUID> (<name>)`, default on stderr) before anything is
    measured, run it in this process and return its `out` dict whatever the verdicts
    (result_of). A flow run that ends Failed or Crashed otherwise raises FlowRunFailed
    (its reason and how to resume it), chained to the flow's exception."""
    async with get_client() as client:
        flow_run = await client.create_flow_run(flow, parameters=flow.serialize_parameters(params))
    announce(f"flow run {flow_run.id} ({flow_run.name})")
    # run_flow's return type covers every kind of flow: a sweep flow is async, and
    # return_type="state" makes its coroutine give the final State
    running = run_flow(flow=flow, flow_run=flow_run, parameters=params, return_type="state")
    if not isinstance(running, Coroutine):
        raise TypeError(f"flow {flow.name}: expected an async flow")
    state = await running
    if not isinstance(state, State):
        raise TypeError(f"flow {flow.name}: expected a final State (got {type(state).__name__})")
    try:
        return await result_of(state)
    except Exception as exc:
        if not (state.is_failed() or state.is_crashed()):
            raise
        reason = state.message or f"{type(exc).__name__}: {exc}"
        raise FlowRunFailed(
            f"flow run {flow_run.id} ({flow_run.name}) ended {state.name}: {reason}; "
            f"`benchmaker retry {flow_run.id}` resumes it, keeping the points already measured",
            str(flow_run.id),
        ) from exc
