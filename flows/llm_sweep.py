"""The `llm-sweep` flow: an engine sweep over concurrencies or rates against an
OpenAI-compatible endpoint, one BenchRunner run per sweep point, then load + report.

    asyncio.run(llm_sweep(base_url="http://127.0.0.1:8000", model="m",
                          concurrency_sweep=[1, 8], duration_s=30))

Points, in order: `closed:N` for each of `concurrency_sweep`, `poisson:R` for each of
`rate_sweep`, then every rate spec in `loads` (benchmaker.load_models syntax). Each
point's samples carry `sweep_point` (e.g. "closed-8") and land in
`<out_dir>/<run_id>/points/<point>/samples.jsonl`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from prefect import flow
from prefect.context import get_run_context
from prefect.logging import get_run_logger
from pydantic import Field

from benchmaker.load_models import parse_rate_spec
from flows.swebench_replay import (ParameterError, flow_run_bundle_id, measure_point, result_storage_for,
                                   resume_or_write_manifest)
from replay.sweep import engine_point_name, point_dir, write_sweep_points
from tasks.engine import run_llm_sweep_point
from tasks.load import load_warehouse
from tasks.report import publish_report

__all__ = ["llm_sweep", "sweep_loads"]


def sweep_loads(concurrency_sweep: list[int] | None, rate_sweep: list[float] | None,
                loads: list[str] | None) -> list[str]:
    """The rate specs of the sweep's points (module docstring). Raises ParameterError
    naming the parameter when there is no point, a spec does not parse, or two points
    get the same label."""
    specs = [f"closed:{c}" for c in concurrency_sweep or []] + [f"poisson:{r:g}" for r in rate_sweep or []]
    problems = []
    for i, spec in enumerate(loads or []):
        try:
            parse_rate_spec(spec)
        except Exception as exc:  # noqa: BLE001 - any parse failure is a bad parameter
            problems.append(f"loads[{i}]: {exc} (got {spec!r})")
        specs.append(spec)
    if not specs:
        problems.append("concurrency_sweep: give concurrency_sweep, rate_sweep or loads (got none)")
    names = [engine_point_name(s) for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        problems.append(f"loads: duplicate sweep points {dup}")
    if problems:
        raise ParameterError("invalid llm-sweep parameters:\n" + "\n".join(problems))
    return specs


@flow(name="llm-sweep", validate_parameters=True)
async def llm_sweep(
    base_url: str,
    model: str,
    concurrency_sweep: list[Annotated[int, Field(ge=1)]] | None = None,
    rate_sweep: list[Annotated[float, Field(gt=0)]] | None = None,
    loads: list[str] | None = None,
    duration_s: Annotated[float, Field(gt=0)] | None = 30.0,
    max_requests: Annotated[int, Field(ge=1)] | None = None,
    prompt_words: Annotated[int, Field(ge=1)] = 128,
    max_tokens: Annotated[int, Field(ge=1)] | None = 128,
    api_key_env: str | None = None,
    out_dir: Path = Path("artifacts"),
    warehouse: Path = Path("warehouse.duckdb"),
    label: str | None = None,
) -> dict[str, Any]:
    """Sweep an endpoint: one engine run per point (duration_s and/or max_requests
    each), then load the run into `warehouse` and publish the sweep table. Returns
    {"run_id", "run_dir", "warehouse", "points", "flow_run_id", "load"}."""
    specs = sweep_loads(concurrency_sweep, rate_sweep, loads)
    log = get_run_logger()
    run_id = flow_run_bundle_id("llm-sweep")
    run_dir = (Path(out_dir) / run_id).resolve()
    config = {"base_url": base_url, "model": model, "loads": specs, "duration_s": duration_s,
              "max_requests": max_requests, "prompt_words": prompt_words, "max_tokens": max_tokens,
              "api_key_env": api_key_env}
    resume_or_write_manifest(run_dir, run_id=run_id, kind="llm-sweep", label=label, config=config)
    log.info("run %s -> %s", run_id, run_dir)
    task = run_llm_sweep_point.with_options(result_storage=result_storage_for(Path(out_dir)))
    rows = []
    for spec in specs:
        name = engine_point_name(spec)
        args = dict(duration_s=duration_s, max_requests=max_requests, prompt_words=prompt_words,
                    max_tokens=max_tokens, api_key_env=api_key_env, label=label)
        rows.append(await measure_point(task, point_dir(run_dir, name), base_url, model, run_dir, run_id, spec,
                                        name, **args))
    write_sweep_points(run_dir, rows)
    loaded = load_warehouse(Path(warehouse).resolve(), run_dir)
    publish_report(run_id, rows, run_dir, warehouse=Path(warehouse).resolve(),
                   report_path=run_dir / "report.html", kind="llm-sweep")
    return {"run_id": run_id, "run_dir": str(run_dir), "warehouse": str(Path(warehouse).resolve()),
            "points": rows, "flow_run_id": str(get_run_context().flow_run.id), "load": loaded}
