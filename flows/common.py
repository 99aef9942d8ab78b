"""What every flow of flows/ shares: its parameters as one pydantic model (on the
fields every run has, `RunParams`, and the settings of a sharded run, `ShardParams`,
with their checks), the run bundle's id,
manifest and result storage, and the cached-point check.

    class MyParams(BaseModel): ...                      # the one definition of the parameters
    @flow(name="my-flow", validate_parameters=True)
    @takes(MyParams)                                    # the flow's signature is the model's
    async def my_flow(**params: Any) -> dict[str, Any]:
        p = validated(MyParams, "my-flow", params)      # ParameterError naming each field

Why the flow's Prefect parameters are the model's fields and not one parameter holding
the model: a deployment's stored parameters and `prefect deployment run --param k=v`
are merged key by key at the top level only, so with a single `params` object an
override of one field would have to restate all of them. `takes` sets the function's
`__signature__` from the model's fields (types, bounds, defaults): Prefect builds the
deployment's parameter schema (validated by the server), the UI form and its own
validation from it, and the flow body builds the model, whose validators state the
rules a schema cannot (flows/swebench_replay.py: exactly one of logs/trajectories,
paths exist, no duplicate point).
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Self, TypeVar

from prefect.logging import get_run_logger
from pydantic import BaseModel, Field, ValidationError, model_validator

from benchmaker.engine.config import SelfCheckLimits
from benchmaker.engine.exchange import Exchange, absolute_exchange
from benchmaker.flows.outcome import current_flow_run, final_state, record_flow_process, record_flow_run
from benchmaker.sweep.point import LagLimits
from benchmaker.sweep.sweep import point_complete, point_dir, write_run_manifest
from benchmaker.tasks.distributed_point import run_distributed_point
from benchmaker.tasks.load import load_warehouse
from benchmaker.tasks.report import publish_report
from benchmaker.tasks.shard_runs import DEFAULT_LEAD_S, DaskMissing, dask_task_runner

__all__ = [
    "ParameterError",
    "RunParams",
    "ShardParams",
    "checked_exchange",
    "describe_errors",
    "finish_run",
    "flow_run_bundle_id",
    "measure_point",
    "measure_sharded_points",
    "result_storage_for",
    "start_run",
    "takes",
    "validated",
]

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])


class ParameterError(ValueError):
    """Flow parameters refused before any work; one `field: problem (got VALUE)` per line."""


def takes(model: type[BaseModel]) -> Callable[[F], F]:
    """Give a `**params` flow function the signature of `model`'s fields: one
    keyword-only parameter per field, annotated with the field's type and constraints
    (Annotated[type, *metadata]), defaulting to the field's default (a default_factory
    is called once). Apply under `@flow`. Raises TypeError when the function takes
    anything but **params."""

    def wrap(fn: F) -> F:
        kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
        if kinds != [inspect.Parameter.VAR_KEYWORD]:
            raise TypeError(f"{fn.__qualname__}: expected a function of **params only (got {kinds})")
        params = []
        for name, field in model.model_fields.items():
            annotation: Any = field.annotation
            if field.metadata:
                annotation = Annotated[(annotation, *field.metadata)]
            default = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
            params.append(
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
            )
        fn.__signature__ = inspect.Signature(params, return_annotation=dict[str, Any])  # type: ignore[attr-defined]  # typeshed: no __signature__ on functions
        return fn

    return wrap


def describe_errors(exc: ValidationError) -> str:
    """One `field[index].sub: problem (got VALUE)` line per error of `exc`; the lines a
    model validator raised (already naming their fields) are kept as written."""
    lines = []
    for err in exc.errors():
        loc = ""
        for part in err.get("loc", ()):
            loc += f"[{part}]" if isinstance(part, int) else ("." if loc else "") + str(part)
        msg = err.get("msg", "invalid")
        if err.get("type") == "value_error":  # our model validators: lines already name fields
            lines.extend(str(err.get("ctx", {}).get("error", msg)).splitlines())
            continue
        if err.get("type") in ("greater_than_equal", "greater_than") and "ctx" in err:
            bound = err["ctx"].get("ge", err["ctx"].get("gt"))
            msg = f"expected a number {'>=' if 'ge' in err['ctx'] else '>'} {bound}"
        lines.append(f"{loc or 'parameters'}: {msg} (got {err.get('input')!r})")
    return "\n".join(lines)


def validated(model: type[M], flow_name: str, params: Mapping[str, Any]) -> M:
    """`model(**params)`. Raises ParameterError "invalid <flow_name> parameters:" with
    one line per problem (describe_errors), before anything runs."""
    try:
        return model(**params)
    except ValidationError as exc:
        raise ParameterError(f"invalid {flow_name} parameters:\n" + describe_errors(exc)) from None


def flow_run_bundle_id(kind: str) -> str:
    """The run_id of the current flow run's bundle: `<kind>-<created UTC>-<flow run id
    [:8]>`. Stable across retries of one flow run (so a retried run resumes in the same
    directory), distinct across runs."""
    fr = current_flow_run()
    created = fr.created or fr.expected_start_time
    stamp = created.strftime("%Y%m%dT%H%M%SZ") if created else time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{kind}-{stamp}-{str(fr.id)[:8]}"


def start_run(p: ShardParams, kind: str, config: dict[str, Any]) -> tuple[str, Path, int]:
    """Open the current flow run's bundle `<p.out_dir>/<run_id>` (absolute; run_id:
    flow_run_bundle_id(kind)): a sharded run's `config` gets the shard settings
    (ShardParams.checked_shard_config, which raises ParameterError), then
    `run_dir`/manifest.json is written with `config` (benchmaker.sweep.sweep.write_run_manifest)
    unless an earlier attempt of this flow run wrote it (a resumed run keeps its
    manifest), and this attempt's process is recorded
    (benchmaker.flows.outcome.record_flow_process). Returns (run_id, run_dir, the
    manifest's `t0_wall_ns`, ns since the epoch). Raises ValueError when an existing
    manifest belongs to another run_id or has no integer t0_wall_ns."""
    run_id = flow_run_bundle_id(kind)
    run_dir = (Path(p.out_dir) / run_id).resolve()
    if p.sharded:
        config.update(p.checked_shard_config())
    path = run_dir / "manifest.json"
    if not path.is_file():
        workers = p.shards if p.sharded else 1
        write_run_manifest(run_dir, run_id=run_id, kind=kind, label=p.label, config=config, workers=workers)
        record_flow_run(path)  # flow_run_id / flow_run_name, which `benchmaker retry` takes
    manifest = json.loads(path.read_text("utf-8"))
    if manifest.get("run_id") != run_id:
        raise ValueError(f"{path}: run_id: expected {run_id!r} (got {manifest.get('run_id')!r})")
    t0 = manifest.get("t0_wall_ns")
    if not isinstance(t0, int) or isinstance(t0, bool):
        raise ValueError(f"{path}: t0_wall_ns: expected an integer (got {t0!r})")
    record_flow_process(run_dir)
    where = f" (up to {p.shards} shards per point on {p.dask_address or f'work pool of {p.shard_deployment}'})"
    get_run_logger().info("run %s -> %s%s", run_id, run_dir, where if p.sharded else "")
    return run_id, run_dir, t0


def finish_run(p: RunParams, kind: str, run_id: str, run_dir: Path, rows: list[dict[str, Any]], **extra: Any) -> Any:
    """The last stages of a sweep flow run whose points' summary rows are `rows`: load
    `run_dir` into `p.warehouse` (benchmaker.tasks.load.load_warehouse), publish the
    report (benchmaker.tasks.report.publish_report; `run_dir`/report.html), and return
    benchmaker.flows.outcome.final_state of {"run_id", "run_dir", "warehouse", "points",
    "flow_run_id", "load", **extra}."""
    wh = Path(p.warehouse).resolve()
    loaded = load_warehouse(wh, run_dir)
    publish_report(run_id, rows, run_dir, wh, kind)
    out = {"run_id": run_id, "run_dir": str(run_dir), "warehouse": str(wh), "points": rows}
    return final_state({**out, "flow_run_id": str(current_flow_run().id), "load": loaded, **extra})


def result_storage_for(out_dir: Path) -> Path:
    """Where Prefect persists task results (and cache records) for runs under
    `out_dir`: `<out_dir>/_cache/prefect-results`, absolute (a Path, never a str: a str
    is read as a block slug)."""
    return (Path(out_dir) / "_cache" / "prefect-results").resolve()


async def measure_point(point_task: Any, pdir: Path, *args: Any, **kwargs: Any) -> Any:
    """`await point_task(*args, **kwargs)`, the task of one sweep point whose files go to
    `pdir`; when its result came from the cache (a resumed flow run) but the point's
    files are gone (benchmaker.sweep.sweep.point_complete), the point is measured again
    (refresh_cache). A cache hit never runs the task body, so this check lives here.
    Returns the task's result."""
    out = await point_task(*args, **kwargs)
    if not point_complete(pdir):
        get_run_logger().warning("sweep point %s: cached but its files are missing; measuring it again", pdir.name)
        out = await point_task.with_options(refresh_cache=True)(*args, **kwargs)
    return out


class RunParams(LagLimits):
    """The parameters every flow run has (a base of the flows' parameters models):
    where its files go and the lag limits its points are judged by (LagLimits, the
    points' base too).

    out_dir, warehouse    where the run bundle and the DuckDB warehouse go
    label                 free text stored with the run (e.g. "nightly")
    max_loop_lag_ms       a point is invalid when the client's event-loop lag p99
                          exceeds this, in ms (finite, > 0)
    max_schedule_lag_ms   an open-loop point is invalid (client-saturated) when its
                          schedule lag p99 exceeds this, in ms (finite, > 0)

    A lag limit left None is filled in at validation with the value a run uses
    (benchmaker.engine.config.SelfCheckLimits: the environment's
    BENCHMAKER_MAX_LOOP_LAG_MS / BENCHMAKER_MAX_SCHEDULE_LAG_MS, else 10 ms), so the
    manifest keeps the limits every point was judged with; a bad environment value is
    a validation error naming the variable.
    """

    out_dir: Path = Path("artifacts")
    warehouse: Path = Path("warehouse.duckdb")
    label: str | None = None

    @model_validator(mode="after")
    def _fill_lag_limits(self) -> Self:
        if self.max_loop_lag_ms is None or self.max_schedule_lag_ms is None:
            limits = SelfCheckLimits(**self.checks())
            self.max_loop_lag_ms = limits.max_loop_lag_p99_ms
            self.max_schedule_lag_ms = limits.max_schedule_lag_p99_ms
        return self


class ShardParams(RunParams):
    """The parameters of a flow that runs here or sharded (RunParams and these; a base
    of the parameters models of swebench-replay and llm-sweep; each sets its own
    `shard_deployment` default):

    sharded           split every point into shards on several load hosts
    shards            shards (load hosts) per point, >= 1
    start_lead_s      s from a point's submission to its earliest start (None: DEFAULT_LEAD_S);
                      the shards start together once all are ready (benchmaker.engine.shared_start)
    shard_deployment  the shard flow's deployment whose work pool runs the shards
    shard_timeout_s   s to wait for a point's shards (None: DEFAULT_SHARD_TIMEOUT_S, 3 h); a
                      shard still running then is a verdict reason, cancelled on a pool,
                      abandoned on Dask (where a running task cannot be stopped)
    dask_address      run the shards on this Dask cluster instead (the `dask` extra)
    exchange          path or fsspec URL (s3://bucket/prefix) every host reaches, through
                      which files travel when out_dir is not shared (benchmaker.engine.exchange)
    """

    sharded: bool = False
    shards: Annotated[int, Field(ge=1)] = 2
    start_lead_s: Annotated[float, Field(gt=0)] | None = None
    shard_deployment: str
    shard_timeout_s: Annotated[float, Field(gt=0)] | None = None
    dask_address: str | None = None
    exchange: str | None = None

    @property
    def backend(self) -> str:
        """Where the shards run: "dask" with a dask_address, else "pool"."""
        return "dask" if self.dask_address else "pool"

    @property
    def lead_s(self) -> float:
        """start_lead_s, else the backend's DEFAULT_LEAD_S (benchmaker.tasks.shard_runs), in s."""
        return self.start_lead_s if self.start_lead_s is not None else DEFAULT_LEAD_S[self.backend]

    def checked_shard_config(self) -> dict[str, Any]:
        """What a sharded run's manifest records of where its shards run, checked before
        any work: {"backend", "start_lead_s" (`lead_s`), "shard_deployment" (None on
        Dask), "exchange" (made absolute: checked_exchange)}. Raises ParameterError when
        dask_address is given without prefect-dask (the `dask` extra) or the exchange
        is refused."""
        if self.dask_address:
            try:
                dask_task_runner(self.dask_address)
            except DaskMissing as exc:
                raise ParameterError(str(exc)) from None
        return {
            "backend": self.backend,
            "start_lead_s": self.lead_s,
            "shard_deployment": self.shard_deployment if self.backend == "pool" else None,
            "exchange": checked_exchange(self.exchange),
        }

    def unsharded_problems(self) -> list[str]:
        """One `field: problem (got VALUE)` line per setting that only a sharded run reads
        (dask_address, exchange, start_lead_s, shard_timeout_s) given without `sharded`;
        [] for a sharded run."""
        if self.sharded:
            return []
        given = [k for k in ("dask_address", "exchange", "start_lead_s", "shard_timeout_s") if getattr(self, k)]
        return [f"{k}: a setting of sharded runs; give sharded true (got {getattr(self, k)!r})" for k in given]


def checked_exchange(url: str | None) -> str | None:
    """The exchange URL a distributed flow uses (benchmaker.engine.exchange): None stays None;
    a relative path is made absolute here, where it was meant. Raises
    ParameterError (before any work) for a password in the URL,
    an unknown protocol or a protocol whose fsspec package is not installed."""
    if not url:
        return None
    try:
        url = absolute_exchange(url)
        Exchange(url)
    except ValueError as exc:
        raise ParameterError(str(exc) if str(exc).startswith("exchange:") else f"exchange: {exc}") from None
    except ImportError as exc:
        raise ParameterError(
            f"exchange: {exc} (install the fsspec package of that protocol on every host, e.g. s3fs)"
        ) from None
    return url


async def measure_sharded_points(
    templates: Sequence[Any],
    p: ShardParams,
    episodes_targets: Sequence[int | None] | None = None,
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Each point of a sharded run in order: its `templates[i]` (a shard point with
    worker 0: benchmaker.tasks.shard.ShardPoint or benchmaker.sweep.shard.ReplayShardPoint)
    measured by benchmaker.tasks.distributed_point.run_distributed_point (persisted under
    `p.out_dir`) on the shards `p` says where and when to run (`episodes_targets[i]`:
    point i's planned episodes, None when duration-bound), through measure_point; then
    the run's files on the templates' `exchange` (if any) are removed. Returns (the
    points' summary rows, per point its shards' states)."""
    point_task = run_distributed_point.with_options(result_storage=result_storage_for(p.out_dir))
    rows: list[dict[str, Any]] = []
    shard_states: list[list[dict[str, Any]]] = []
    for i, template in enumerate(templates):
        out = await measure_point(
            point_task,
            point_dir(Path(template.run_dir), template.sweep_point),
            template,
            episodes_target=None if episodes_targets is None else episodes_targets[i],
            start_lead_s=p.lead_s,
            shard_deployment=p.shard_deployment,
            shard_timeout_s=p.shard_timeout_s,
            dask_address=p.dask_address,
        )
        rows.append(out["row"])
        shard_states.append(out["shards"])
    if templates and templates[0].exchange:
        Exchange(templates[0].exchange).remove(templates[0].run_id)
    return rows, shard_states
