"""The main job: the `swebench-replay` flow (docs/architecture.md): convert -> serve -> sweep ->
grade -> load -> report, on this host or, with `sharded`, every point split into shards
on several load hosts (benchmaker.flows.swebench_replay_shard).

    from benchmaker.flows.swebench_replay import swebench_replay
    out = asyncio.run(swebench_replay(logs=[Path("examples/recordings/tiny-task.pi.jsonl")],
                                      concurrency_sweep=[1, 2]))
    out["run_id"], out["run_dir"], out["points"]          # one summary row per point
    out = asyncio.run(swebench_replay(logs=[...], concurrency_sweep=[8, 32], sharded=True,
                                      shards=2, dask_address="tcp://scheduler:8786"))

Parameters are the fields of `SwebenchReplayParams` (benchmaker.flows.common.takes makes them the
flow's signature), checked before any work: the types and bounds by Prefect/pydantic (a
deployment's server refuses them too), then the rules a schema cannot state (the
model's validator). A bad parameter fails the flow run with a ParameterError naming
it, e.g. `concurrency_sweep[0]: expected an integer >= 1 (got 0)`. The validated
parameters build the run's points once (`SwebenchReplayParams.points`), which go
unchanged to the sweep task and on to the engine.

Files: `<out_dir>/<run_id>/` is the run bundle (manifest.json, points/c<N>/...,
sweep_points.jsonl); `<out_dir>/_cache/` holds the content-addressed conversions
(benchmaker.tasks.convert) and Prefect's persisted results of the sweep points
(`result_storage` as a Path). The replay server is
stopped in `finally`, so also when a point fails for good or the run is cancelled.

Resume: a Failed/Crashed/Cancelled flow run is run again under its own id, measuring
from the failed point on (benchmaker.flows.retry).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow
from pydantic import ConfigDict, Field, model_validator

from benchmaker.agent.verifier import load_task
from benchmaker.engine.exchange import Exchange
from benchmaker.engine.load_models import ClosedLoop, ParsedRateSpec
from benchmaker.flows.common import (
    ParameterError,
    ShardParams,
    finish_run,
    measure_point,
    measure_sharded_points,
    result_storage_for,
    start_run,
    takes,
    validated,
)
from benchmaker.flows.swebench_replay_shard import SHARD_DEPLOYMENT
from benchmaker.sweep.point import Mode, ReplayPoint
from benchmaker.sweep.shard import ReplayShardPoint, shards_for
from benchmaker.sweep.sweep import episode_plan, point_dir, write_sweep_points
from benchmaker.tasks.convert import cache_dir_of, convert_logs
from benchmaker.tasks.grade import grade, point_files_sha256
from benchmaker.tasks.serve import start_replay_server, stop_replay_server
from benchmaker.tasks.sweep import run_sweep_point
from benchmaker.trajectories.convert import read_trajectories
from benchmaker.trajectories.errors import InputError

__all__ = [
    "Concurrency",
    "Mode",
    "ParameterError",
    "SwebenchReplayParams",
    "swebench_replay",
    "trajectories_of",
    "validate_params",
]

Concurrency = Annotated[int, Field(ge=1)]


class SwebenchReplayParams(ShardParams):
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
    stray_grace_s         command mode only: s a diverged agent may take to exit before
                          its process group is killed (finite, > 0, at most 3600; None:
                          ReplayPoint's default, benchmaker.agent.harness.STRAY_GRACE_S)
    latency, divergence   replay server latency model and divergence policy
    log_format, lenient   the converter's format (default: detected) and leniency
    out_dir, warehouse, label, max_loop_lag_ms, max_schedule_lag_ms
                          where the files go and the lag limits (benchmaker.flows.common.RunParams;
                          the schedule lag is the episodes')
    sharded               split every point into shards on several load hosts (closed-loop
                          points only, one engine worker each), where and how by the
                          benchmaker.flows.common.ShardParams fields: shards, start_lead_s,
                          shard_deployment, shard_timeout_s, dask_address, exchange
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
    stray_grace_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] | None = None
    latency: str = "instant"
    divergence: Literal["off", "status", "content"] = "off"
    log_format: str | None = None
    lenient: bool = False
    shard_deployment: str = SHARD_DEPLOYMENT

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
                continue
            try:
                load_task(p)  # read once here, so a bad field is refused before any work
            except InputError as exc:
                problems.append(f"task_dirs[{i}]: {exc}")
        seen: set[int] = set()
        for i, c in enumerate(self.concurrency_sweep):
            if c in seen:
                problems.append(f"concurrency_sweep[{i}]: duplicate point (got {c})")
            seen.add(c)
        if not self.concurrency_sweep and not self.rates:
            problems.append("concurrency_sweep: no point to run: give concurrency_sweep or rates (got neither)")
        problems += _rate_problems(self.rates)
        problems += self._shard_problems()
        if self.workers > 1 and self.mode != "recorded":
            problems.append(f"workers: more than one engine worker needs mode recorded (got mode {self.mode})")
        if self.episodes_per_point is not None and self.duration_s is not None:
            problems.append("duration_s: give episodes_per_point or duration_s, not both")
        if self.mode == "command" and not self.command:
            problems.append("command: mode command needs the agent command (got none)")
        if self.stray_grace_s is not None and self.mode != "command":
            problems.append(
                f"stray_grace_s: a setting of mode command (got {self.stray_grace_s:g} with mode {self.mode})"
            )
        if self.sandbox == "flash" and self.mode != "recorded" and not (self.sandbox_url and self.sandbox_image):
            problems.append("sandbox_url: the flash sandbox needs sandbox_url and sandbox_image")
        try:
            from benchmaker.replay_server.latency import parse_latency

            parse_latency(self.latency)
        except ValueError as exc:
            problems.append(f"latency: {exc} (got {self.latency!r})")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _shard_problems(self) -> list[str]:
        """The rules of a sharded run (shards split episode slots: open-loop rates and
        engine workers are single-host), and shard settings without `sharded`."""
        if not self.sharded:
            return self.unsharded_problems()
        problems = (
            [f"rates: open-loop points run on one host (swebench-replay), not in shards (got {self.rates})"]
            if self.rates
            else []
        )
        if self.workers != 1:
            problems.append(
                f"workers: shards are the distributed flow's processes; give shards instead (got {self.workers})"
            )
        return problems

    def points(self) -> list[ReplayPoint]:
        """The run's points in order, each spec built here once from the validated
        parameters: a closed loop per concurrency_sweep entry (split over
        shards_for(C, shards) shards when sharded), then an open loop per rate spec;
        task_dirs made absolute. A closed loop of C runs on min(workers, C) engine
        workers: a worker with no episode in flight would send nothing, and its share of
        the point's episodes would never be played."""
        # the fields of the same name, a None one left to the point's default
        common = self.model_dump(
            include=set(ReplayPoint.model_fields) - {"load", "workers", "shards"}, exclude_none=True
        )
        common.update(
            episodes=self.episodes_per_point,
            task_dirs=tuple(str(d.resolve()) for d in self.task_dirs),
            command=tuple(self.command) if self.command else None,
        )
        closed = [
            ReplayPoint(
                load=ParsedRateSpec.of_model(ClosedLoop(c)),
                shards=shards_for(c, self.shards) if self.sharded else 1,
                workers=min(self.workers, c),
                **common,
            )
            for c in self.concurrency_sweep
        ]
        return closed + [ReplayPoint(load=r, workers=self.workers, **common) for r in self.rates]


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


async def _sweep_here(
    p: SwebenchReplayParams, points: list[ReplayPoint], traj: Path, run_dir: Path, run_id: str, t0_wall_ns: int
) -> list[dict[str, Any]]:
    """Serve + sweep on this host: one replay server for the run (always stopped), one
    async task per point; returns the points' summary rows."""
    sweep_task = run_sweep_point.with_options(result_storage=result_storage_for(p.out_dir))
    rows: list[dict[str, Any]] = []
    key: str | None = None
    # the run's t0 on this process's perf_counter clock: episode stamps of a resumed run
    # and of the points cached from its earlier attempt share one origin
    t0_ns = time.perf_counter_ns() - (time.time_ns() - t0_wall_ns)
    try:
        key = start_replay_server(traj, latency=p.latency, divergence=p.divergence)
        for point in points:
            pdir = point_dir(run_dir, point.name)
            rows.append(await measure_point(sweep_task, pdir, key, traj, run_dir, run_id, point, t0_ns=t0_ns))
    finally:
        stop_replay_server(key)
    return rows


async def _sweep_in_shards(
    p: SwebenchReplayParams, points: list[ReplayPoint], traj: Path, run_dir: Path, run_id: str, exchange: str | None
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Every point as shards on other hosts (benchmaker.tasks.distributed_point.
    run_distributed_point); the trajectories go out through `exchange` when given.
    Returns (the points' summary rows, per point its shards' states)."""
    n_traj = sum(1 for _ in read_trajectories(traj))
    traj_ref = str(traj)
    if exchange:  # the shards download the trajectories from the exchange
        traj_ref = f"{run_id}/trajectories.jsonl"
        Exchange(exchange).put_file(traj, traj_ref)
    templates = [
        ReplayShardPoint(
            point=point,
            trajectories=traj_ref,
            run_dir=str(run_dir),
            run_id=run_id,
            worker=0,
            start_wall_ns=0,
            exchange=exchange,
        )
        for point in points
    ]
    targets = [
        None if t.point.duration_s is not None else len(episode_plan(range(n_traj), t.concurrency, t.point.episodes))
        for t in templates
    ]
    return await measure_sharded_points(templates, p, targets)


@flow(name="swebench-replay", log_prints=False, validate_parameters=True)
@takes(SwebenchReplayParams)
async def swebench_replay(**params: Any) -> dict[str, Any]:
    """Replay recorded agent runs at each point of the sweep (`concurrency_sweep`, then
    `rates`) and load the results into the warehouse; with `sharded`, every point runs
    as up to `shards` shards on other hosts (benchmaker.flows.swebench_replay_shard),
    where and when the ShardParams fields say (benchmaker.flows.common; through
    `exchange` the trajectories go out and the shards' files come back). Parameters:
    the fields of SwebenchReplayParams (one keyword argument each, as in a deployment's
    `parameters:`).

    Returns {"run_id", "run_dir", "warehouse", "points": [summary row per point],
    "flow_run_id", "trajectories", "load": {...}}, and when sharded "shards": [per point:
    [{"worker", "flow_run_id"|"task_run_id", "state", "message"}]]. Raises
    ParameterError (before any work) for a bad parameter.
    """
    p = validate_params(**params)
    config: dict[str, Any] = p.model_dump(mode="json")
    run_id, run_dir, t0_wall_ns = start_run(p, "swebench-replay", config)
    traj = trajectories_of(p)
    points = p.points()
    extra: dict[str, Any] = {}
    if p.sharded:
        rows, extra["shards"] = await _sweep_in_shards(p, points, traj, run_dir, run_id, config["exchange"])
    else:
        rows = await _sweep_here(p, points, traj, run_dir, run_id, t0_wall_ns)
    write_sweep_points(run_dir, rows)
    # grade (cached on the point files' content), then load and report
    pdirs = [point_dir(run_dir, point.name) for point in points]
    grade.with_options(result_storage=result_storage_for(p.out_dir))(pdirs, [point_files_sha256(d) for d in pdirs])
    return finish_run(p, "swebench-replay", run_id, run_dir, rows, trajectories=str(traj), **extra)
