"""The main job: the `swebench-replay` flow (docs/architecture.md): convert -> serve -> sweep ->
grade -> load -> report.

    from benchmaker.flows.swebench_replay import swebench_replay
    out = asyncio.run(swebench_replay(logs=[Path("examples/recordings/tiny-task.pi.jsonl")],
                                      concurrency_sweep=[1, 2]))
    out["run_id"], out["run_dir"], out["points"]          # one summary row per point

Parameters are the fields of `SwebenchReplayParams` (benchmaker.flows.common.takes makes them the
flow's signature). They are checked before any work: the types and bounds by
Prefect/pydantic (a deployment's server refuses them too), then the rules a schema
cannot state (exactly one of logs/trajectories, every path exists, no duplicate point,
episodes or duration, a command for command mode, a latency spec that parses). A bad
parameter fails the flow run with a ParameterError naming it, e.g.
`concurrency_sweep[0]: expected an integer >= 1 (got 0)`.

Files: `<out_dir>/<run_id>/` is the run bundle (manifest.json, points/c<N>/...,
sweep_points.jsonl); `<out_dir>/_cache/` holds the content-addressed conversions
(benchmaker.tasks.convert) and Prefect's persisted results of the sweep points
(`result_storage` as a Path). The replay server is
stopped in `finally`, so also when a point fails for good or the run is cancelled.

Resume: a Failed/Crashed/Cancelled flow run is run again under its own id with
`python -m benchmaker.flows.retry FLOW_RUN_ID` (flows/retry.py; `prefect flow-run retry ID` for a
run created from a deployment). It writes into the same bundle directory, keeps the
first attempt's manifest and t0, takes the sweep points that completed from the task
cache (files untouched) and measures from the failed point on. A new flow run measures
every point again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow
from prefect.logging import get_run_logger
from pydantic import BaseModel, ConfigDict, Field, model_validator

from benchmaker.engine.config import LagLimitMs
from benchmaker.engine.load_models import ClosedLoop, ParsedRateSpec
from benchmaker.flows.common import (
    ParameterError,
    fill_lag_limits,
    flow_run_bundle_id,
    lag_checks,
    measure_point,
    result_storage_for,
    resume_or_write_manifest,
    takes,
    validated,
)
from benchmaker.flows.outcome import current_flow_run, final_state
from benchmaker.sweep.point_run import replay_point_name
from benchmaker.sweep.sweep import point_dir, write_sweep_points
from benchmaker.tasks.convert import cache_dir_of, convert_logs
from benchmaker.tasks.grade import grade, point_files_sha256
from benchmaker.tasks.load import load_warehouse
from benchmaker.tasks.report import publish_report
from benchmaker.tasks.serve import start_replay_server, stop_replay_server
from benchmaker.tasks.sweep import run_sweep_point

__all__ = [
    "Concurrency",
    "Mode",
    "ParameterError",
    "SwebenchReplayParams",
    "swebench_replay",
    "sweep_points",
    "trajectories_of",
    "validate_params",
]

Concurrency = Annotated[int, Field(ge=1)]
Mode = Literal["recorded", "execute", "command"]


class SwebenchReplayParams(BaseModel):
    """The parameters of one swebench-replay run, the one definition behind the flow's
    signature (benchmaker.flows.common.takes), its deployments' schema and the CLI's check:

    logs / trajectories   agent log files or directories (converted, cached on their
                          content) or an already converted trajectories.jsonl
    concurrency_sweep     episodes in flight per point, each >= 1, run in order
    rates                 open-loop points, run after them: engine rate specs at which
                          episodes start (poisson:0.5, constant:2, trace:FILE), as agent
                          sessions arrive; each for duration_s (else episodes_per_point
                          episodes, default one per trajectory); offered vs achieved
                          episode rate and schedule lag in the row. Parsed here, once
                          (ParsedRateSpec: the points' runners read the parsed model)
    workers               engine worker processes per point (recorded mode), as
                          `--workers` of engine runs
    episodes_per_point    episodes per point (default max(concurrency, trajectories));
    duration_s            or keep starting episodes for this many s per point
    mode                  recorded (tool results from the recording), execute (tools run
                          in `sandbox`, local or flash), command (external agent `command`)
    task_dirs             directories with task.json for the verifier (execute/command)
    latency, divergence   replay server latency model and divergence policy
    log_format, lenient   the converter's format (default: detected) and leniency
    out_dir, warehouse    where the run bundle and the DuckDB warehouse go
    label                 free text stored with the run (e.g. "nightly")
    max_loop_lag_ms       a point is invalid when the client's event-loop lag p99
                          exceeds this, in ms (finite, > 0)
    max_schedule_lag_ms   an open-loop point is invalid (client-saturated) when its
                          episode schedule lag p99 exceeds this, in ms (finite, > 0);
                          either left None: BENCHMAKER_MAX_LOOP_LAG_MS /
                          BENCHMAKER_MAX_SCHEDULE_LAG_MS, else 10 ms, filled in at
                          validation (benchmaker.flows.common.fill_lag_limits: the manifest keeps
                          the limits every point was judged with)
    """

    model_config = ConfigDict(extra="forbid")

    logs: list[Path] = Field(default_factory=list)
    trajectories: Path | None = None
    concurrency_sweep: list[Concurrency] = Field(default_factory=lambda: [1, 5])
    rates: list[ParsedRateSpec] = Field(default_factory=list)
    workers: Annotated[int, Field(ge=1)] = 1
    episodes_per_point: Annotated[int, Field(ge=1)] | None = None
    duration_s: Annotated[float, Field(gt=0)] | None = None
    mode: Mode = "recorded"
    sandbox: Literal["local", "none", "flash"] = "local"
    sandbox_url: str | None = None
    sandbox_image: str | None = None
    task_dirs: list[Path] = Field(default_factory=list)
    command: list[str] | None = None
    latency: str = "instant"
    divergence: Literal["off", "status", "content"] = "off"
    log_format: str | None = None
    lenient: bool = False
    out_dir: Path = Path("artifacts")
    warehouse: Path = Path("warehouse.duckdb")
    label: str | None = None
    max_loop_lag_ms: LagLimitMs | None = None
    max_schedule_lag_ms: LagLimitMs | None = None

    @model_validator(mode="after")
    def _rules(self) -> SwebenchReplayParams:
        problems: list[str] = []
        if bool(self.logs) == (self.trajectories is not None):
            problems.append(
                f"logs: give logs paths or a trajectories file, not both or neither "
                f"(got logs={[str(p) for p in self.logs]}, trajectories={self.trajectories})"
            )
        for i, p in enumerate(self.logs):
            if not p.exists():
                problems.append(f"logs[{i}]: no such file or directory (got {str(p)!r})")
        if self.trajectories is not None and not self.trajectories.is_file():
            problems.append(f"trajectories: no such file (got {str(self.trajectories)!r})")
        for i, p in enumerate(self.task_dirs):
            if not (p / "task.json").is_file():
                problems.append(f"task_dirs[{i}]: no task.json in it (got {str(p)!r})")
        seen: set[int] = set()
        for i, c in enumerate(self.concurrency_sweep):
            if c in seen:
                problems.append(f"concurrency_sweep[{i}]: duplicate point (got {c})")
            seen.add(c)
        if not self.concurrency_sweep and not self.rates:
            problems.append("concurrency_sweep: no point to run: give concurrency_sweep or rates (got neither)")
        problems += _rate_problems(self.rates)
        if self.workers > 1 and self.mode != "recorded":
            problems.append(f"workers: more than one engine worker needs mode recorded (got mode {self.mode})")
        if self.episodes_per_point is not None and self.duration_s is not None:
            problems.append("duration_s: give episodes_per_point or duration_s, not both")
        if self.mode == "command" and not self.command:
            problems.append("command: mode command needs the agent command (got none)")
        if self.sandbox == "flash" and self.mode != "recorded" and not (self.sandbox_url and self.sandbox_image):
            problems.append("sandbox_url: the flash sandbox needs sandbox_url and sandbox_image")
        try:
            from benchmaker.replay_server.latency import parse_latency

            parse_latency(self.latency)
        except ValueError as exc:
            problems.append(f"latency: {exc} (got {self.latency!r})")
        if problems:
            raise ValueError("\n".join(problems))
        return fill_lag_limits(self)


def _rate_problems(rates: list[ParsedRateSpec]) -> list[str]:
    """One `rates[i]: problem (got VALUE)` line per rate spec that is a closed loop
    (those are concurrency_sweep points) or repeats (each already parsed: a spec that
    does not parse is the field's own error)."""
    problems: list[str] = []
    for i, spec in enumerate(rates):
        if isinstance(spec.model, ClosedLoop):
            problems.append(f"rates[{i}]: a closed loop is a concurrency_sweep point, not a rate (got {spec!r})")
        if spec in rates[:i]:
            problems.append(f"rates[{i}]: duplicate point (got {spec!r})")
    return problems


def sweep_points(p: SwebenchReplayParams) -> list[tuple[int | None, ParsedRateSpec | None]]:
    """The run's points in order, as (concurrency, rate spec): each of concurrency_sweep
    (closed loop), then each of rates (open loop)."""
    return [(c, None) for c in p.concurrency_sweep] + [(None, r) for r in p.rates]


def validate_params(**params: Any) -> SwebenchReplayParams:
    """The validated SwebenchReplayParams of `params`. Raises ParameterError with one
    `field: problem (got VALUE)` line per problem, before anything runs."""
    return validated(SwebenchReplayParams, "swebench-replay", params)


def trajectories_of(p: SwebenchReplayParams) -> Path:
    """The trajectories.jsonl a run replays: `p.trajectories`, or the conversion of
    `p.logs` in `<out_dir>/_cache/` (benchmaker.tasks.convert: the one conversion cache,
    keyed on the logs' content, the converter version and options; a complete
    conversion there is returned as it is). Call it inside a flow run. Absolute path."""
    if not p.logs:
        assert p.trajectories is not None, "the params model requires logs or trajectories"
        return p.trajectories.resolve()
    paths = [x.resolve() for x in p.logs]
    return Path(convert_logs(paths, cache_dir_of(p.out_dir), fmt=p.log_format, lenient=p.lenient))


@flow(name="swebench-replay", log_prints=False, validate_parameters=True)
@takes(SwebenchReplayParams)
async def swebench_replay(**params: Any) -> dict[str, Any]:
    """Replay recorded agent runs at each concurrency of `concurrency_sweep` and load
    the results into the warehouse. Parameters: the fields of SwebenchReplayParams
    (one keyword argument each, as in a deployment's `parameters:`).

    Returns {"run_id", "run_dir", "warehouse", "points": [summary row per point],
    "flow_run_id", "trajectories", "load": {...}}.
    """
    p = validate_params(**params)
    log = get_run_logger()
    storage = result_storage_for(p.out_dir)
    run_id = flow_run_bundle_id("swebench-replay")
    run_dir = (p.out_dir / run_id).resolve()
    t0_wall_ns = resume_or_write_manifest(
        run_dir, run_id=run_id, kind="swebench-replay", label=p.label, config=p.model_dump(mode="json")
    )
    log.info("run %s -> %s", run_id, run_dir)

    traj = trajectories_of(p)

    # serve + sweep: one async task per point; the server is always stopped
    sweep_task = run_sweep_point.with_options(result_storage=storage)
    rows: list[dict[str, Any]] = []
    key: str | None = None
    # the run's t0 on this process's perf_counter clock: episode stamps of a resumed run
    # and of the points cached from its earlier attempt share one origin
    t0_ns = time.perf_counter_ns() - (time.time_ns() - t0_wall_ns)
    try:
        key = start_replay_server(traj, latency=p.latency, divergence=p.divergence)
        for c, rate in sweep_points(p):
            args = dict(
                episodes=p.episodes_per_point,
                duration_s=p.duration_s,
                mode=p.mode,
                sandbox=p.sandbox,
                sandbox_url=p.sandbox_url,
                sandbox_image=p.sandbox_image,
                task_dirs=[d.resolve() for d in p.task_dirs],
                command=p.command,
                t0_ns=t0_ns,
                load=rate,
                workers=p.workers,
                checks=lag_checks(p),
            )
            rows.append(
                await measure_point(
                    sweep_task, point_dir(run_dir, replay_point_name(c, rate)), key, traj, run_dir, run_id, c, **args
                )
            )
    finally:
        stop_replay_server(key)
    write_sweep_points(run_dir, rows)

    # grade (cached on the point files' content), load, report
    pdirs = [point_dir(run_dir, replay_point_name(c, rate)) for c, rate in sweep_points(p)]
    grade.with_options(result_storage=storage)(pdirs, [point_files_sha256(d) for d in pdirs])
    loaded = load_warehouse(p.warehouse.resolve(), run_dir)
    publish_report(
        run_id,
        rows,
        run_dir,
        warehouse=p.warehouse.resolve(),
        report_path=run_dir / "report.html",
        kind="swebench-replay",
    )
    invalid = [f"{r['sweep_point']} ({r.get('invalid_reason') or 'invalid'})" for r in rows if not r["valid"]]
    if invalid:
        log.warning("invalid sweep points: %s", "; ".join(invalid))
    return final_state(
        {
            "run_id": run_id,
            "run_dir": str(run_dir),
            "warehouse": str(p.warehouse.resolve()),
            "points": rows,
            "flow_run_id": str(current_flow_run().id),
            "trajectories": str(traj),
            "load": loaded,
        }
    )  # Invalid / Failed when points are invalid (benchmaker.flows.outcome)
