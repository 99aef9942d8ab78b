"""`benchmaker sglang`: benchmark an SGLang server's native `/generate` endpoint
(workloads/sglang.py), with the engine settings of `benchmaker llm`.

    benchmaker sglang --url http://127.0.0.1:30000/generate --rate poisson:20 --duration 60s
    benchmaker sglang --url ... --input-ids-file ids.jsonl --max-new-tokens 128
    benchmaker sglang --url ... --dataset qa.jsonl --field question --reference-field answer --grader numeric

Exit codes as `benchmaker llm`: 0 valid, 1 invalid run, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Any

import orjson

from benchmaker.engine.config import check_http_url
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.workers import single_lane
from benchmaker.recipes.app import ON_BY_DEFAULT, app
from benchmaker.recipes.bench import (
    grading_hooks,
    launch_run,
    load_flag_of,
    load_of,
    make_config,
    parse_workers,
    resolve_api_key,
)
from benchmaker.workloads.datasets import Dataset, JsonlDataset, ShareGPTDataset, SyntheticDataset
from benchmaker.workloads.sglang import SGLangWorkload, read_input_ids


def _sglang_workload(
    url: str,
    dataset: Path | None,
    field: str,
    reference_field: str | None,
    sharegpt: Path | None,
    input_ids_file: Path | None,
    input_words: list[int] | None,
    seed: int,
    stream: bool,
    max_new_tokens: int | None,
    temperature: float | None,
    sampling_params: dict[str, Any],
    incremental: bool,
    api_key: str | None,
) -> SGLangWorkload:
    """The `benchmaker sglang` workload (module level, so worker processes can rebuild it)."""
    if input_ids_file is not None:
        return SGLangWorkload(
            url,
            input_ids=read_input_ids(input_ids_file),
            stream=stream,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            sampling_params=sampling_params,
            incremental=incremental,
            api_key=api_key,
        )
    ds: Dataset
    if dataset is not None:
        ds = JsonlDataset(dataset, field, reference_field=reference_field)
    elif sharegpt is not None:
        ds = ShareGPTDataset(sharegpt)
    else:
        ds = SyntheticDataset(input_words or [128], count=1000, seed=seed)
    return SGLangWorkload(
        url,
        ds,
        stream=stream,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        sampling_params=sampling_params,
        incremental=incremental,
        api_key=api_key,
    )


@app.command(name="sglang")
def sglang(
    *,
    url: str,
    concurrency: int | None = None,
    rate: str | None = None,
    duration: str | None = None,
    max_requests: int | None = None,
    out_dir: Path = Path("runs"),
    api_key: str | None = None,
    api_key_env: str | None = None,
    stream: Annotated[bool, ON_BY_DEFAULT] = True,
    max_new_tokens: int | None = None,
    temperature: float | None = None,
    sampling_params: str | None = None,
    incremental: bool = False,
    input_words: list[int] | None = None,
    dataset: Path | None = None,
    field: str = "prompt",
    reference_field: str | None = None,
    sharegpt: Path | None = None,
    input_ids_file: Path | None = None,
    warmup: str | None = None,
    cooldown: str | None = None,
    max_in_flight: int | None = None,
    overflow: str = "late",
    ttft_timeout: str | None = None,
    idle_timeout: str | None = None,
    total_timeout: str | None = None,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    slo_e2e_ms: float | None = None,
    max_error_rate: float | None = None,
    max_loop_lag_ms: float | None = None,
    max_schedule_lag_ms: float | None = None,
    seed: int = 0,
    label: str | None = None,
    transport: str = "raw",
    workers: str = "1",
    grader: str | None = None,
    progress: Annotated[bool | None, ON_BY_DEFAULT] = None,
) -> int:
    """Benchmark an SGLang server's native /generate endpoint (cumulative-text stream).

    Args:
        url: Full endpoint URL, e.g. http://127.0.0.1:30000/generate.
        concurrency: Requests in flight (closed loop; default 1; the same as --rate closed:N).
        rate: Open-loop arrivals instead of --concurrency (rate specs: `benchmaker llm --help`).
        duration: Stop sending after this long (10s, 2m).
        max_requests: Stop after this many requests.
        out_dir: Folder for run bundles (OUT_DIR/<run_id>/).
        api_key: Bearer token (prefer --api-key-env; never written to the bundle).
        api_key_env: Name of the environment variable holding the API key.
        stream: Stream responses (TTFT/ITL need it).
        max_new_tokens: sampling_params.max_new_tokens.
        temperature: sampling_params.temperature.
        sampling_params: More sampling_params as JSON, e.g. '{"top_p": 0.9, "ignore_eos": true}'.
        incremental: The server streams text deltas (--incremental-streaming-output), not cumulative text.
        input_words: Synthetic prompt lengths in words (default 128).
        dataset: JSONL file of prompts; --field names the field path.
        field: Field path in --dataset rows.
        reference_field: Field path of the expected answer in --dataset rows (for --grader).
        sharegpt: ShareGPT JSON/JSONL file of conversations.
        input_ids_file: JSONL of token-id lists (sent as input_ids instead of text).
        warmup: Leave requests intended in the first N seconds out of the summary.
        cooldown: Leave requests intended in the last N seconds out of the summary.
        max_in_flight: Cap on requests in flight.
        overflow: At the cap: late (send late, lag recorded) or drop (count as dropped).
        ttft_timeout: Deadline for the first token.
        idle_timeout: Deadline for the gap between two reads.
        total_timeout: Deadline for the whole request.
        slo_ttft_ms: Goodput SLO on TTFT.
        slo_tpot_ms: Goodput SLO on TPOT.
        slo_e2e_ms: Goodput SLO on E2E latency.
        max_error_rate: The run is invalid (exit 1) when more than this fraction of requests failed (0..1; default 0.1; 1 turns it off).
        max_loop_lag_ms: The run is invalid (exit 1) when the client's event-loop lag p99 exceeds this, in ms (default 10, or BENCHMAKER_MAX_LOOP_LAG_MS; raise it on a loaded host).
        max_schedule_lag_ms: An open-loop run is invalid (exit 1, client-saturated) when its schedule lag p99 (sent - intended) exceeds this, in ms (default 10, or BENCHMAKER_MAX_SCHEDULE_LAG_MS).
        seed: Seed of random arrivals and synthetic prompts.
        label: Run label stored with the run.
        transport: raw (default: benchmaker's own HTTP/1.1 client), aiohttp or httpx.
        workers: Worker processes sharing the schedule (N or auto).
        grader: Grade answers: exact, contains, regex, numeric, choice, json_schema, llm_judge, or a JSON spec / @file.
        progress: Live progress display (default: on when stdout is a terminal).
    """
    cfg = make_config(
        load=load_of(rate, concurrency),
        load_flag=load_flag_of(concurrency),
        duration_s=duration,
        max_requests=max_requests,
        out_dir=out_dir,
        warmup_s=warmup,
        cooldown_s=cooldown,
        max_in_flight=max_in_flight,
        overflow=overflow,
        timeouts={"ttft_s": ttft_timeout, "idle_s": idle_timeout, "total_s": total_timeout},
        slo={"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "e2e_ms": slo_e2e_ms},
        seed=seed,
        label=label,
        kind="llm",
        transport=transport,
        workers=parse_workers(workers),
        checks={
            "max_error_rate": max_error_rate,
            "max_loop_lag_p99_ms": max_loop_lag_ms,
            "max_schedule_lag_p99_ms": max_schedule_lag_ms,
        },
    )
    check_http_url(url, "--url")
    if sum(x is not None for x in (dataset, sharegpt, input_ids_file)) > 1:
        raise ConfigError("--dataset, --sharegpt and --input-ids-file: give at most one")
    params: dict[str, Any] = {}
    if sampling_params is not None:
        try:
            params = orjson.loads(sampling_params)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"--sampling-params: bad JSON: {exc} (got {sampling_params!r})") from None
        if not isinstance(params, dict):
            raise ConfigError(f"--sampling-params: expected a JSON object (got {sampling_params!r})")
    build = partial(
        _sglang_workload,
        url,
        dataset,
        field,
        reference_field,
        sharegpt,
        input_ids_file,
        input_words,
        seed,
        stream,
        max_new_tokens,
        temperature,
        params,
        incremental,
        resolve_api_key(api_key, api_key_env),
    )
    lanes = single_lane(build)  # reads the dataset now: bad input fails before any worker starts
    hooks, grader_name = grading_hooks(grader)
    wl = lanes[0].workload
    extra: dict[str, Any] = {"workload": wl.describe() if isinstance(wl, SGLangWorkload) else {}}
    if grader_name is not None:
        extra["grader"] = grader_name
    return launch_run(cfg, partial(single_lane, build), progress, manifest_extra=extra, lanes=lanes, post_hooks=hooks)
