"""The `llm-sweep` flow: an engine sweep over concurrencies or rates against an
OpenAI-compatible endpoint, one BenchRunner run per sweep point, then load + report; on
this host or, with `sharded`, every point split into shards on several load hosts
(benchmaker.flows.llm_sweep_shard).

    asyncio.run(llm_sweep(base_url="http://127.0.0.1:8000", model="m",
                          concurrency_sweep=[1, 8], duration_s=30))
    asyncio.run(llm_sweep(base_url="http://gpu-0:8000", model="m", concurrency_sweep=[8],
                          sharded=True, shards=2, dask_address="tcp://scheduler:8786"))

Points, in order: `closed:N` for each of `concurrency_sweep`, `poisson:R` for each of
`rate_sweep`, then every rate spec in `loads` (benchmaker.engine.load_models syntax). Each
point's samples carry `sweep_point` (e.g. "closed-8") and land in
`<out_dir>/<run_id>/points/<point>/samples.jsonl`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow
from pydantic import ConfigDict, Field, model_validator

from benchmaker.engine.errors import RateSpecError
from benchmaker.engine.load_models import ClosedLoop, ParsedRateSpec, Poisson
from benchmaker.flows.common import (
    ShardParams,
    finish_run,
    measure_point,
    measure_sharded_points,
    result_storage_for,
    start_run,
    takes,
    validated,
)
from benchmaker.flows.llm_sweep_shard import SHARD_DEPLOYMENT
from benchmaker.sweep.point import LlmPoint
from benchmaker.sweep.sweep import engine_point_name, point_dir, write_sweep_points
from benchmaker.tasks.engine import run_llm_sweep_point
from benchmaker.tasks.shard import ShardPoint, shards_for_load

__all__ = ["LlmSweepParams", "llm_sweep"]


def _sweep_points(
    concurrency_sweep: list[int] | None, rate_sweep: list[float] | None, loads: Sequence[str] | None
) -> tuple[list[ParsedRateSpec], list[str]]:
    """(rate specs of the sweep's points, problems: one `field: problem` line each).
    The closed:N and poisson:R points are built from their numbers (nothing parsed);
    `loads` are parsed unless already ParsedRateSpec (validated parameters)."""
    specs: list[ParsedRateSpec] = []
    problems = []
    for field, values, build in (
        ("concurrency_sweep", concurrency_sweep, lambda c: ClosedLoop(int(c))),
        ("rate_sweep", rate_sweep, lambda r: Poisson(float(f"{r:g}"))),
    ):
        for i, value in enumerate(values or []):
            try:
                specs.append(ParsedRateSpec.of_model(build(value)))
            except RateSpecError as exc:
                problems.append(f"{field}[{i}]: {exc} (got {value!r})")
    for i, spec in enumerate(loads or []):
        try:
            specs.append(ParsedRateSpec.of(spec))
        except RateSpecError as exc:
            problems.append(f"loads[{i}]: {exc} (got {spec!r})")
    if not specs:
        problems.append("concurrency_sweep: give concurrency_sweep, rate_sweep or loads (got none)")
    names = [engine_point_name(s) for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        problems.append(f"loads: duplicate sweep points {dup}")
    return specs, problems


class LlmSweepParams(ShardParams):
    """The parameters of one llm-sweep run, the one definition behind the flow's
    signature (benchmaker.flows.common.takes), its deployments' schema and the CLI's check:

    base_url, model       the OpenAI-compatible endpoint and the model name it serves
    api                   chat (/v1/chat/completions), responses (/v1/responses) or messages
                          (Anthropic /v1/messages: max_tokens required, one host: shards 1)
    concurrency_sweep     closed-loop points (closed:N), each >= 1
    rate_sweep            Poisson points in requests/s (poisson:R), each > 0
    loads                 further points as rate specs (benchmaker.engine.load_models syntax),
                          parsed here, once (ParsedRateSpec)
    duration_s            seconds per point; max_requests: requests per point
    prompt_words, max_tokens  the synthetic prompt's size and the answer's cap
    ignore_eos            send "ignore_eos": true (vLLM, SGLang: every answer max_tokens long)
    api_key_env           name of the environment variable holding the API key
    out_dir, warehouse, label, max_loop_lag_ms, max_schedule_lag_ms
                          where the files go and the lag limits (benchmaker.flows.common.RunParams)
    sharded               split every point into shards on several load hosts (a
                          `closed:C` point with C < shards runs on C shards), where and
                          how by the benchmaker.flows.common.ShardParams fields:
                          shards, start_lead_s, shard_deployment, shard_timeout_s,
                          dask_address, exchange
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str
    api: Literal["chat", "responses", "messages"] = "chat"
    concurrency_sweep: list[Annotated[int, Field(ge=1)]] | None = None
    rate_sweep: list[Annotated[float, Field(gt=0)]] | None = None
    loads: list[ParsedRateSpec] | None = None
    duration_s: Annotated[float, Field(gt=0)] | None = 30.0
    max_requests: Annotated[int, Field(ge=1)] | None = None
    prompt_words: Annotated[int, Field(ge=1)] = 128
    max_tokens: Annotated[int, Field(ge=1)] | None = 128
    ignore_eos: bool = False
    api_key_env: str | None = None
    shard_deployment: str = SHARD_DEPLOYMENT

    @model_validator(mode="after")
    def _points(self) -> LlmSweepParams:
        problems = _sweep_points(self.concurrency_sweep, self.rate_sweep, self.loads)[1]
        problems += self.unsharded_problems()
        if self.api == "messages" and self.max_tokens is None:
            problems.append("max_tokens: required with api messages (the Messages API requires it; got None)")
        if self.api == "messages" and self.sharded and self.shards > 1:
            problems.append(f"api: messages sweeps run on one host (got shards {self.shards})")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def points(self) -> list[LlmPoint]:
        """The run's points in order (module docstring), each spec built here once from
        the validated parameters (rate specs not parsed again); when sharded, a point
        runs on shards_for_load(load, shards) hosts."""
        common = self.model_dump(include=set(LlmPoint.model_fields) - {"load", "shards"})
        return [
            LlmPoint(load=spec, shards=shards_for_load(spec, self.shards) if self.sharded else 1, **common)
            for spec in _sweep_points(self.concurrency_sweep, self.rate_sweep, self.loads)[0]
        ]


async def _sweep_here(p: LlmSweepParams, points: list[LlmPoint], run_dir: Path, run_id: str) -> list[dict[str, Any]]:
    """Every point as one engine run on this host; returns the points' summary rows."""
    task = run_llm_sweep_point.with_options(result_storage=result_storage_for(Path(p.out_dir)))
    return [
        await measure_point(task, point_dir(run_dir, point.name), point, run_dir, run_id, label=p.label)
        for point in points
    ]


@flow(name="llm-sweep", validate_parameters=True)
@takes(LlmSweepParams)
async def llm_sweep(**params: Any) -> dict[str, Any]:
    """Sweep an endpoint: one engine run per point (duration_s and/or max_requests
    each), then load the run into `warehouse` and publish the sweep table. With
    `sharded`, every point runs as up to `shards` shards on other hosts
    (benchmaker.flows.llm_sweep_shard), where and when the ShardParams fields say
    (benchmaker.flows.common). Parameters: the fields of LlmSweepParams. Returns
    {"run_id", "run_dir", "warehouse", "points", "flow_run_id", "load"}, and when
    sharded "shards": [per point: [{"worker", "flow_run_id"|"task_run_id", "state",
    "message"}]]."""
    p = validated(LlmSweepParams, "llm-sweep", params)
    points = p.points()
    config: dict[str, Any] = {
        "base_url": p.base_url,
        "model": p.model,
        "loads": [point.load for point in points],
        "duration_s": p.duration_s,
        "max_requests": p.max_requests,
        "prompt_words": p.prompt_words,
        "max_tokens": p.max_tokens,
        "api_key_env": p.api_key_env,
        "max_loop_lag_ms": p.max_loop_lag_ms,
        "max_schedule_lag_ms": p.max_schedule_lag_ms,
    }
    if p.api != "chat" or p.sharded:
        config["api"] = p.api
    if p.ignore_eos or p.sharded:
        config["ignore_eos"] = p.ignore_eos
    if p.sharded:
        config.update(shards=p.shards, dask_address=p.dask_address)
    run_id, run_dir, _ = start_run(p, "llm-sweep", config)
    extra: dict[str, Any] = {}
    if p.sharded:
        templates = [
            ShardPoint(point, str(run_dir), run_id, p.label, worker=0, start_wall_ns=0, exchange=config["exchange"])
            for point in points
        ]
        rows, extra["shards"] = await measure_sharded_points(templates, p)
    else:
        rows = await _sweep_here(p, points, run_dir, run_id)
    write_sweep_points(run_dir, rows)
    return finish_run(p, "llm-sweep", run_id, run_dir, rows, **extra)
