"""The engine sweep stage (llm-sweep): one async Prefect task per sweep point running
`benchmaker.BenchRunner` against an endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from benchmaker.sweep.point import LlmPoint
from benchmaker.sweep.sweep import run_engine_point
from benchmaker.tasks.progress import progress_artifact
from benchmaker.tasks.shard import point_config, point_workload
from benchmaker.tasks.sweep import log_point_row, sweep_point_policy
from benchmaker.tasks.transient import retry_on_transient

__all__ = ["run_llm_sweep_point"]


@task(
    name="run-llm-sweep-point",
    cache_policy=sweep_point_policy,
    persist_result=True,
    retries=2,
    retry_delay_seconds=[2, 5],
    retry_condition_fn=retry_on_transient,
)
async def run_llm_sweep_point(point: LlmPoint, run_dir: Path, run_id: str, label: str | None = None) -> dict[str, Any]:
    """Prefect shell over benchmaker.sweep.sweep.run_engine_point (documented there): the
    llm-sweep point `point` (benchmaker.sweep.point.LlmPoint: streamed requests of its
    `api` over a seeded synthetic dataset, at its `load`, under its lag limits;
    benchmaker.tasks.shard.point_workload, whose API key is read from the environment
    variable `point.api_key_env`, never passed as a parameter) as one engine run of
    run `run_id` labelled `label`, into `run_dir`. Returns the point's summary row.
    Failures of single requests are samples, not exceptions."""
    with progress_artifact(run_id, point.name):  # the point's progress in the UI (benchmaker.progress)
        row = await run_engine_point(point_config(point, run_id, label), point_workload(point), Path(run_dir))
    log_point_row(row)
    return row
