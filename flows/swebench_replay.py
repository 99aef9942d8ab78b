"""The main job: the `swebench-replay` flow (DESIGN §3): convert -> serve -> sweep ->
grade -> load -> report.

    from flows.swebench_replay import swebench_replay
    out = asyncio.run(swebench_replay(logs=[Path("examples/recordings/tiny-task.pi.jsonl")],
                                      concurrency_sweep=[1, 2]))
    out["run_id"], out["run_dir"], out["points"]          # one summary row per point

Parameters are checked before any work (`validate_params`): the types and bounds by
Prefect/pydantic (a deployment's server refuses them too), then the rules a schema
cannot state (exactly one of logs/trajectories, every path exists, no duplicate point,
episodes or duration, a command for command mode, a latency spec that parses). A bad
parameter fails the flow run with a ParameterError naming it, e.g.
`concurrency_sweep[0]: expected an integer >= 1 (got 0)`.

Files: `<out_dir>/<run_id>/` is the run bundle (manifest.json, points/c<N>/...,
sweep_points.jsonl); `<out_dir>/_cache/` holds the content-addressed conversions and
Prefect's persisted task results (`result_storage` as a Path). The replay server is
stopped in `finally`, so also when a point fails for good or the run is cancelled.

Resume: a Failed/Crashed/Cancelled flow run is run again under its own id with
`python -m flows.retry FLOW_RUN_ID` (flows/retry.py; `prefect flow-run retry ID` for a
run created from a deployment). It writes into the same bundle directory, keeps the
first attempt's manifest and t0, takes the sweep points that completed from the task
cache (files untouched) and measures from the failed point on. A new flow run measures
every point again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow
from prefect.context import get_run_context
from prefect.logging import get_run_logger
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from replay.convert import CONVERTER_VERSION
from replay.sweep import point_complete, point_dir, point_name, write_run_manifest, write_sweep_points
from tasks.convert import convert_logs, logs_sha256
from tasks.grade import grade, point_files_sha256
from tasks.load import load_warehouse
from tasks.report import publish_report
from tasks.serve import start_replay_server, stop_replay_server
from tasks.sweep import run_sweep_point

__all__ = ["ParameterError", "SwebenchReplayParams", "flow_run_bundle_id", "measure_point", "result_storage_for",
           "resume_or_write_manifest", "swebench_replay", "trajectories_of", "validate_params"]

Concurrency = Annotated[int, Field(ge=1)]
Mode = Literal["recorded", "execute", "command"]


class ParameterError(ValueError):
    """Flow parameters refused before any work; one `field: problem (got VALUE)` per line."""


class SwebenchReplayParams(BaseModel):
    """The parameters of one swebench-replay run (see the flow's docstring for each)."""

    model_config = ConfigDict(extra="forbid")

    logs: list[Path] = Field(default_factory=list)
    trajectories: Path | None = None
    concurrency_sweep: Annotated[list[Concurrency], Field(min_length=1)] = Field(default_factory=lambda: [1, 5])
    episodes_per_point: Annotated[int, Field(ge=1)] | None = None
    duration_s: Annotated[float, Field(gt=0)] | None = None
    mode: Mode = "recorded"
    sandbox: Literal["local", "flash"] = "local"
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

    @model_validator(mode="after")
    def _rules(self) -> SwebenchReplayParams:
        problems: list[str] = []
        if bool(self.logs) == (self.trajectories is not None):
            problems.append(f"logs: give logs paths or a trajectories file, not both or neither "
                            f"(got logs={[str(p) for p in self.logs]}, trajectories={self.trajectories})")
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
        if self.episodes_per_point is not None and self.duration_s is not None:
            problems.append("duration_s: give episodes_per_point or duration_s, not both")
        if self.mode == "command" and not self.command:
            problems.append("command: mode command needs the agent command (got none)")
        if self.sandbox == "flash" and self.mode != "recorded" and not (self.sandbox_url and self.sandbox_image):
            problems.append("sandbox_url: the flash sandbox needs sandbox_url and sandbox_image")
        try:
            from replay.latency import parse_latency

            parse_latency(self.latency)
        except ValueError as exc:
            problems.append(f"latency: {exc} (got {self.latency!r})")
        if problems:
            raise ValueError("\n".join(problems))
        return self


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ""
        for part in err.get("loc", ()):
            loc += f"[{part}]" if isinstance(part, int) else ("." if loc else "") + str(part)
        msg = err.get("msg", "invalid")
        if err.get("type") == "value_error":  # our model validator: lines already name fields
            lines.extend(str(err.get("ctx", {}).get("error", msg)).splitlines())
            continue
        if err.get("type") in ("greater_than_equal", "greater_than") and "ctx" in err:
            bound = err["ctx"].get("ge", err["ctx"].get("gt"))
            msg = f"expected a number {'>=' if 'ge' in err['ctx'] else '>'} {bound}"
        lines.append(f"{loc or 'parameters'}: {msg} (got {err.get('input')!r})")
    return "\n".join(lines)


def validate_params(**params: Any) -> SwebenchReplayParams:
    """The validated SwebenchReplayParams of `params`. Raises ParameterError with one
    `field: problem (got VALUE)` line per problem, before anything runs."""
    try:
        return SwebenchReplayParams(**params)
    except ValidationError as exc:
        raise ParameterError("invalid swebench-replay parameters:\n" + _describe(exc)) from None


def flow_run_bundle_id(kind: str) -> str:
    """The run_id of the current flow run's bundle: `<kind>-<created UTC>-<flow run id
    [:8]>`. Stable across retries of one flow run (so a retried run resumes in the same
    directory), distinct across runs."""
    fr = get_run_context().flow_run
    created = fr.created or fr.expected_start_time
    stamp = created.strftime("%Y%m%dT%H%M%SZ") if created else time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{kind}-{stamp}-{str(fr.id)[:8]}"


def resume_or_write_manifest(run_dir: Path, *, run_id: str, kind: str, label: str | None,
                             config: dict[str, Any], workers: int = 1) -> int:
    """Write `run_dir`/manifest.json (replay.sweep.write_run_manifest) unless an earlier
    attempt of this flow run wrote it (a resumed run keeps its manifest); returns the
    manifest's `t0_wall_ns` (ns since the epoch). Raises ValueError when an existing
    manifest belongs to another run_id or has no integer t0_wall_ns."""
    path = Path(run_dir) / "manifest.json"
    if not path.is_file():
        write_run_manifest(run_dir, run_id=run_id, kind=kind, label=label, config=config, workers=workers)
    manifest = json.loads(path.read_text("utf-8"))
    if manifest.get("run_id") != run_id:
        raise ValueError(f"{path}: run_id: expected {run_id!r} (got {manifest.get('run_id')!r})")
    t0 = manifest.get("t0_wall_ns")
    if not isinstance(t0, int) or isinstance(t0, bool):
        raise ValueError(f"{path}: t0_wall_ns: expected an integer (got {t0!r})")
    return t0


def result_storage_for(out_dir: Path) -> Path:
    """Where Prefect persists task results (and cache records) for runs under
    `out_dir`: `<out_dir>/_cache/prefect-results`, absolute (a Path, never a str: a str
    is read as a block slug, DESIGN §10)."""
    return (Path(out_dir) / "_cache" / "prefect-results").resolve()


def trajectories_of(p: SwebenchReplayParams) -> Path:
    """The trajectories.jsonl a run replays: `p.trajectories`, or the conversion of
    `p.logs` into `<out_dir>/_cache/` (tasks.convert, cached on the logs' content and
    the converter version). Call it inside a flow run. Absolute path."""
    if not p.logs:
        return p.trajectories.resolve()
    convert = convert_logs.with_options(result_storage=result_storage_for(p.out_dir))
    args = dict(paths=[x.resolve() for x in p.logs], logs_digest=logs_sha256(p.logs),
                converter_version=CONVERTER_VERSION, cache_dir=(p.out_dir / "_cache").resolve(),
                fmt=p.log_format, lenient=p.lenient)
    traj = convert(**args)
    if not Path(traj).is_file():  # the cache record outlived the file: convert again
        traj = convert.with_options(refresh_cache=True)(**args)
    return Path(traj)


async def measure_point(point_task: Any, pdir: Path, *args: Any, **kwargs: Any) -> Any:
    """`await point_task(*args, **kwargs)`, the task of one sweep point whose files go to
    `pdir`; when its result came from the cache (a resumed flow run) but the point's
    files are gone (replay.sweep.point_complete), the point is measured again
    (refresh_cache). A cache hit never runs the task body, so this check lives here.
    Returns the task's result."""
    out = await point_task(*args, **kwargs)
    if not point_complete(pdir):
        get_run_logger().warning("sweep point %s: cached but its files are missing; measuring it again", pdir.name)
        out = await point_task.with_options(refresh_cache=True)(*args, **kwargs)
    return out


@flow(name="swebench-replay", log_prints=False, validate_parameters=True)
async def swebench_replay(
    logs: list[Path] | None = None,
    trajectories: Path | None = None,
    concurrency_sweep: Annotated[list[Concurrency], Field(min_length=1)] = [1, 5],  # noqa: B006
    episodes_per_point: Annotated[int, Field(ge=1)] | None = None,
    duration_s: Annotated[float, Field(gt=0)] | None = None,
    mode: Mode = "recorded",
    sandbox: Literal["local", "flash"] = "local",
    sandbox_url: str | None = None,
    sandbox_image: str | None = None,
    task_dirs: list[Path] | None = None,
    command: list[str] | None = None,
    latency: str = "instant",
    divergence: Literal["off", "status", "content"] = "off",
    log_format: str | None = None,
    lenient: bool = False,
    out_dir: Path = Path("artifacts"),
    warehouse: Path = Path("warehouse.duckdb"),
    label: str | None = None,
) -> dict[str, Any]:
    """Replay recorded agent runs at each concurrency of `concurrency_sweep` and load
    the results into the warehouse.

    logs / trajectories   agent log files or directories (converted, cached on their
                          content) or an already converted trajectories.jsonl
    concurrency_sweep     episodes in flight per point, each >= 1, run in order
    episodes_per_point    episodes per point (default max(concurrency, trajectories));
    duration_s            or keep starting episodes for this many s per point
    mode                  recorded (tool results from the recording), execute (tools run
                          in `sandbox`, local or flash), command (external agent `command`)
    task_dirs             directories with task.json for the verifier (execute/command)
    latency, divergence   replay server latency model and divergence policy
    out_dir, warehouse    where the run bundle and the DuckDB warehouse go
    label                 free text stored with the run (e.g. "nightly")

    Returns {"run_id", "run_dir", "warehouse", "points": [summary row per point],
    "flow_run_id", "trajectories", "load": {...}}.
    """
    p = validate_params(
        logs=logs or [], trajectories=trajectories, concurrency_sweep=concurrency_sweep,
        episodes_per_point=episodes_per_point, duration_s=duration_s, mode=mode, sandbox=sandbox,
        sandbox_url=sandbox_url, sandbox_image=sandbox_image, task_dirs=task_dirs or [], command=command,
        latency=latency, divergence=divergence, log_format=log_format, lenient=lenient, out_dir=out_dir,
        warehouse=warehouse, label=label,
    )
    log = get_run_logger()
    storage = result_storage_for(p.out_dir)
    run_id = flow_run_bundle_id("swebench-replay")
    run_dir = (p.out_dir / run_id).resolve()
    t0_wall_ns = resume_or_write_manifest(run_dir, run_id=run_id, kind="swebench-replay", label=p.label,
                                          config=p.model_dump(mode="json"))
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
        for c in p.concurrency_sweep:
            args = dict(episodes=p.episodes_per_point, duration_s=p.duration_s, mode=p.mode, sandbox=p.sandbox,
                        sandbox_url=p.sandbox_url, sandbox_image=p.sandbox_image,
                        task_dirs=[d.resolve() for d in p.task_dirs], command=p.command, t0_ns=t0_ns)
            rows.append(await measure_point(sweep_task, point_dir(run_dir, point_name(c)), key, traj, run_dir,
                                            run_id, c, **args))
    finally:
        stop_replay_server(key)
    write_sweep_points(run_dir, rows)

    # grade (cached on the point files' content), load, report
    pdirs = [point_dir(run_dir, point_name(c)) for c in p.concurrency_sweep]
    grade.with_options(result_storage=storage)(pdirs, [point_files_sha256(d) for d in pdirs])
    loaded = load_warehouse(p.warehouse.resolve(), run_dir)
    publish_report(run_id, rows, run_dir, warehouse=p.warehouse.resolve(),
                   report_path=run_dir / "report.html", kind="swebench-replay")
    invalid = [r["sweep_point"] for r in rows if not r["valid"]]
    if invalid:
        log.warning("invalid sweep points (target concurrency not reached): %s", ", ".join(invalid))
    return {"run_id": run_id, "run_dir": str(run_dir), "warehouse": str(p.warehouse.resolve()),
            "points": rows, "flow_run_id": str(get_run_context().flow_run.id), "trajectories": str(traj),
            "load": loaded}
