"""The engine sweep stage (llm-sweep): one async Prefect task per sweep point running
`benchmaker.BenchRunner` against an endpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import task
from prefect.logging import get_run_logger

from benchmaker.engine.config import BenchConfig
from benchmaker.sweep.sweep import run_engine_point
from benchmaker.tasks.progress import progress_artifact
from benchmaker.tasks.shard import sweep_workload
from benchmaker.tasks.sweep import sweep_point_policy
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
async def run_llm_sweep_point(
    base_url: str,
    model: str,
    run_dir: Path,
    run_id: str,
    load: str,
    sweep_point: str,
    duration_s: float | None = None,
    max_requests: int | None = None,
    prompt_words: int = 128,
    max_tokens: int | None = 128,
    api_key_env: str | None = None,
    label: str | None = None,
    checks: dict[str, float] | None = None,
    api: str = "chat",
    ignore_eos: bool = False,
) -> dict[str, Any]:
    """Prefect shell over benchmaker.sweep.sweep.run_engine_point (documented there): OpenAI chat
    requests (`base_url` + /v1/chat/completions, streaming, usage requested; `api`
    "responses": Responses requests to `base_url` + /v1/responses) over a
    seeded synthetic dataset of `prompt_words` words, at `load` (a rate spec). The API
    key is read from the environment variable named `api_key_env`, never passed as a
    parameter. `load` is parsed once: a ParsedRateSpec (the flow's parameters) is used as
    it is. `checks`: the point's self-check limits (benchmaker.engine.config.SelfCheckLimits
    fields, e.g. {"max_loop_lag_p99_ms": 50.0}; default the environment's or 10 ms).
    Point failures of single requests are samples, not exceptions. `api`: "chat",
    "responses" or "messages" (benchmaker.tasks.shard.sweep_workload; messages needs
    max_tokens). `ignore_eos`: send "ignore_eos": true (vLLM, SGLang: every answer
    `max_tokens` long)."""
    api_key = os.environ.get(api_key_env) if api_key_env else None
    workload = sweep_workload(api, base_url, model, prompt_words, max_tokens, api_key, ignore_eos)
    config = BenchConfig(
        load=load,
        duration_s=duration_s,
        max_requests=max_requests,
        run_id=run_id,
        sweep_point=sweep_point,
        kind="llm-sweep",
        label=label,
        checks=checks or {},
    )
    with progress_artifact(run_id, sweep_point):  # the point's progress in the UI (benchmaker.progress)
        row = await run_engine_point(config, workload, Path(run_dir))
    get_run_logger().info(
        "sweep point %s: %d requests, %.1f req/s, p99 E2E %s ms%s",
        sweep_point,
        row["n_requests"],
        row["request_throughput_per_s"] or 0.0,
        row["p99_e2e_ms"],
        "" if row["valid"] else f" INVALID: {row['invalid_reason']}",
    )
    return row
