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
from benchmaker.recipes.bench import EngineFlags, dataset_of, grading_hooks, launch_run, resolve_api_key
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
    ids = read_input_ids(input_ids_file) if input_ids_file is not None else None
    return SGLangWorkload(
        url,
        None if ids is not None else dataset_of(dataset, field, reference_field, sharegpt, input_words, seed),
        input_ids=ids,
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
    engine: EngineFlags = EngineFlags(),
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
    grader: str | None = None,
    progress: Annotated[bool | None, ON_BY_DEFAULT] = None,
) -> int:
    """Benchmark an SGLang server's native /generate endpoint (cumulative-text stream).

    Args:
        url: Full endpoint URL, e.g. http://127.0.0.1:30000/generate.
        engine: The engine flags (benchmaker.recipes.bench.EngineFlags).
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
        grader: Grade answers: exact, contains, regex, numeric, choice, json_schema, llm_judge, or a JSON spec / @file.
        progress: Live progress display (default: on when stdout is a terminal).
    """
    cfg = engine.config("llm")
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
        engine.seed,
        stream,
        max_new_tokens,
        temperature,
        params,
        incremental,
        resolve_api_key(api_key, api_key_env),
    )
    lanes = single_lane(build)  # reads the dataset now: bad input fails before any worker starts
    wl = lanes[0].workload
    extra: dict[str, Any] = {"workload": wl.describe() if isinstance(wl, SGLangWorkload) else {}}
    hooks = grading_hooks(grader, extra)
    return launch_run(cfg, partial(single_lane, build), progress, manifest_extra=extra, lanes=lanes, post_hooks=hooks)
