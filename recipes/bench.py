"""Engine recipes: `benchmaker llm`, `benchmaker http`, `benchmaker run CONFIG.yaml`.

Each builds a BenchConfig and workload(s), runs the engine with a live view on a
terminal, prints the summary tables and returns the exit code: 0 valid, 1 invalid run
(verdict reasons printed), 2 bad input (one line naming the flag, no traceback; every
bound is checked before any work, benchmaker.engine.config), 130 interrupted by Ctrl-C, 143 by
SIGTERM, 129 by SIGHUP (the partial bundle is written either way).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from cyclopts import Parameter
from pydantic import ValidationError

from benchmaker.engine.config import BenchConfig, check_http_url, check_output_dir, check_output_file
from benchmaker.engine.config_file import format_validation_error
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.load_models import MAX_CONCURRENCY, parse_duration_s
from benchmaker.engine.monitors import PrometheusMonitor, build_monitors
from benchmaker.engine.runner import STOP_SIGNALS, BenchRunner, Lane, interrupt_exit_code, run_on_fresh_loop
from benchmaker.engine.workers import check_shares, lane_loads, resolve_workers, run_sharded, single_lane
from benchmaker.recipes.app import ON_BY_DEFAULT, app
from benchmaker.recipes.display import console, print_summary, run_with_progress
from benchmaker.recipes.runfile import lanes_from_run_file, read_run_file
from benchmaker.workloads.anthropic_messages import AnthropicMessagesWorkload
from benchmaker.workloads.datasets import Dataset, JsonlDataset, ShareGPTDataset, SyntheticDataset
from benchmaker.workloads.graders import GradingHook, parse_grader_option
from benchmaker.workloads.http import HttpWorkload
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from benchmaker.workloads.openai_completions import OpenAICompletionsWorkload
from benchmaker.workloads.openai_responses import OpenAIResponsesWorkload

# `--api` value -> (workload class, manifest workload type)
_LLM_APIS: dict[str, tuple[Any, str]] = {
    "chat": (OpenAIChatWorkload, "openai-chat"),
    "completions": (OpenAICompletionsWorkload, "openai-completions"),
    "responses": (OpenAIResponsesWorkload, "openai-responses"),
    "messages": (AnthropicMessagesWorkload, "anthropic-messages"),
}


def parse_workers(value: str) -> int | Literal["auto"]:
    try:
        return "auto" if value == "auto" else resolve_workers(value)
    except ConfigError as exc:
        raise ConfigError(f"--{exc}") from None


def load_of(rate: str | None, concurrency: int | None) -> str:
    """The engine's load spec of a run's `--concurrency N` (closed:N: N requests in
    flight, the next sent as one ends) or `--rate SPEC` (as given); closed:1 when neither
    is given. Raises ConfigError when both are, or for a concurrency below 1."""
    if concurrency is not None and rate is not None:
        raise ConfigError(
            f"--concurrency and --rate: give one (--concurrency {concurrency} is --rate closed:{concurrency})"
        )
    if concurrency is not None:
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ConfigError(f"--concurrency: expected an integer in 1..{MAX_CONCURRENCY} (got {concurrency})")
        return f"closed:{concurrency}"
    return "closed:1" if rate is None else rate


# EngineFlags field (its flag: --field-with-dashes) -> the BenchConfig field path it sets
_CONFIG_PATHS = {
    "duration": ("duration_s",),
    "max_requests": ("max_requests",),
    "out_dir": ("out_dir",),
    "warmup": ("warmup_s",),
    "cooldown": ("cooldown_s",),
    "max_in_flight": ("max_in_flight",),
    "overflow": ("overflow",),
    "seed": ("seed",),
    "label": ("label",),
    "transport": ("transport",),
    "workers": ("workers",),
    "ttft_timeout": ("timeouts", "ttft_s"),
    "idle_timeout": ("timeouts", "idle_s"),
    "total_timeout": ("timeouts", "total_s"),
    "slo_ttft_ms": ("slo", "ttft_ms"),
    "slo_tpot_ms": ("slo", "tpot_ms"),
    "slo_e2e_ms": ("slo", "e2e_ms"),
    "max_error_rate": ("checks", "max_error_rate"),
    "max_loop_lag_ms": ("checks", "max_loop_lag_p99_ms"),
    "max_schedule_lag_ms": ("checks", "max_schedule_lag_p99_ms"),
}
# BenchConfig field path -> the flag that sets it (errors name the flag)
_FLAGS = {
    ("load",): "--rate",
    **{path: "--" + name.replace("_", "-") for name, path in _CONFIG_PATHS.items()},
    (): "options",
}


def make_config(*, load_flag: str = "--rate", **kw: Any) -> BenchConfig:
    """A BenchConfig of CLI values (None = not given; nested dicts for timeouts, slo,
    checks). Raises ConfigError with one line per bad flag, e.g. `--slo-ttft-ms: Input
    should be greater than 0 (got -5.0)`; `load_flag` is the flag an error on `load`
    names: --concurrency when it set the load."""
    data = {k: v for k, v in kw.items() if v is not None}
    for key in ("timeouts", "slo", "checks"):
        if isinstance(data.get(key), dict):
            data[key] = {k: v for k, v in data[key].items() if v is not None}
            if not data[key] and key != "timeouts":
                del data[key]
    try:
        cfg = BenchConfig.model_validate(data)
    except ValidationError as exc:
        import re

        names = {**_FLAGS, ("load",): load_flag}
        text = format_validation_error(exc, None, names=names)
        if load_flag != "--rate":  # the in-flight check across load and workers
            text = text.replace("options: closed-loop concurrency", f"{load_flag}: closed-loop concurrency")
        # a check across fields names them as BenchConfig does (duration_s): say the flags
        for path, flag in _FLAGS.items():
            if len(path) == 1 and "_" in path[0]:  # duration_s, max_requests, warmup_s, ... (not `load`)
                text = re.sub(rf"(?<![\w-]){path[0]}\b", flag, text)
        raise ConfigError(text) from None
    check_output_dir(cfg.out_dir, "--out-dir")
    return cfg


@Parameter(name="*")
@dataclass(frozen=True)
class EngineFlags:
    """The engine flags of `benchmaker llm` and `benchmaker sglang` (one cyclopts
    parameter group, flattened: `--concurrency`, not `--engine.concurrency`); `config`
    makes them a BenchConfig.

    Attributes:
        concurrency: Requests in flight, each sent as the one before it ends (closed loop; default 1; the same as --rate closed:N).
        rate: Open-loop arrivals instead of --concurrency: constant:50, poisson:50, gamma:50:0.5, ramp:1..20@60s, stages:2,8,2@30s, trace:FILE (or closed:8:THINK, a closed loop with think time).
        duration: Stop sending after this long (10s, 2m).
        max_requests: Stop after this many requests.
        out_dir: Folder for run bundles (OUT_DIR/<run_id>/).
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
        label: Run label stored with the run (e.g. nightly).
        transport: raw (default: benchmaker's own HTTP/1.1 client), aiohttp or httpx.
        workers: Worker processes sharing the schedule (N or auto = usable CPUs).
    """

    concurrency: int | None = None
    rate: str | None = None
    duration: str | None = None
    max_requests: int | None = None
    out_dir: Path = Path("runs")
    warmup: str | None = None
    cooldown: str | None = None
    max_in_flight: int | None = None
    overflow: str = "late"
    ttft_timeout: str | None = None
    idle_timeout: str | None = None
    total_timeout: str | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    slo_e2e_ms: float | None = None
    max_error_rate: float | None = None
    max_loop_lag_ms: float | None = None
    max_schedule_lag_ms: float | None = None
    seed: int = 0
    label: str | None = None
    transport: str = "raw"
    workers: str = "1"

    def config(self, kind: str) -> BenchConfig:
        """The run's BenchConfig of these flags, its `kind` (e.g. "llm"). Raises
        ConfigError naming the flag (make_config)."""
        data: dict[str, Any] = {"kind": kind, "load": load_of(self.rate, self.concurrency)}
        for name, path in _CONFIG_PATHS.items():
            value = parse_workers(self.workers) if name == "workers" else getattr(self, name)
            if len(path) == 2:
                data.setdefault(path[0], {})[path[1]] = value
            else:
                data[path[0]] = value
        return make_config(load_flag="--rate" if self.concurrency is None else "--concurrency", **data)


def _check_llm_options(
    url: str,
    max_tokens: int | None,
    temperature: float | None,
    input_words: list[int] | None,
    metrics_url: list[str] | None,
    record_trace: Path | None,
) -> None:
    """The `llm` options BenchConfig does not hold; ConfigError naming the flag."""
    check_http_url(url, "--url")
    if max_tokens is not None and not 1 <= max_tokens <= 10_000_000:
        raise ConfigError(f"--max-tokens: expected 1..10000000 (got {max_tokens})")
    if temperature is not None and not 0 <= temperature <= 100:  # NaN fails both
        raise ConfigError(f"--temperature: expected a finite number >= 0 (got {temperature})")
    for n in input_words or []:
        if not 1 <= n <= 1_000_000:
            raise ConfigError(f"--input-words: expected 1..1000000 words (got {n})")
    for u in metrics_url or []:
        check_http_url(u, "--metrics-url")
    if record_trace is not None:
        check_output_file(record_trace, "--record-trace")


def execute_run(runner: BenchRunner, progress: bool | None, then: Callable[[Any], None] | None = None) -> int:
    """Run `runner` in this process with the live view when `progress` (default: stdout is
    a terminal), print the summary, then `then(result)` when given. Returns 0 valid, 1
    invalid, 130/143/129 when Ctrl-C/SIGTERM/SIGHUP stopped it (the partial summary
    printed)."""
    show = sys.stdout.isatty() if progress is None else progress
    try:
        result = run_on_fresh_loop(run_with_progress(runner, show))
    except (KeyboardInterrupt, asyncio.CancelledError):
        if runner.result is not None:
            print_summary(runner.result.summary, runner.result.bundle_dir)
        console.print(
            f"[yellow]interrupted{' by ' + runner.interrupted_by if runner.interrupted_by else ''}: "
            "partial bundle written[/]"
        )
        return interrupt_exit_code(runner.interrupted_by)
    print_summary(result.summary, result.bundle_dir)
    if then is not None:
        then(result)
    return 0 if result.valid else 1


def launch_run(
    cfg: BenchConfig,
    lanes_factory: Any,
    progress: bool | None,
    *,
    base_dir: Path | None = None,
    manifest_extra: dict[str, Any] | None = None,
    lanes: list[Lane] | None = None,
    monitors: list[Any] | None = None,
    record_trace: Path | None = None,
    post_hooks: list[Any] | None = None,
) -> int:
    """Run in this process (workers = 1; `lanes` if already built) or in worker
    processes that build their own lanes with `lanes_factory`; print; exit code.
    `post_hooks` (graders) run in this process only: with workers > 1 a ConfigError."""
    n = resolve_workers(cfg.workers)
    if n == 1:
        lanes = lanes if lanes is not None else lanes_factory()
        return execute_run(
            BenchRunner(
                cfg,
                lanes=lanes,
                base_dir=base_dir,
                manifest_extra=manifest_extra,
                monitors=monitors or (),
                record_trace=record_trace,
                post_hooks=post_hooks or (),
            ),
            progress,
        )
    if post_hooks:
        raise ConfigError(f"grader: runs in one process only; use workers = 1 (got {n})")
    if monitors or record_trace is not None:
        raise ConfigError(f"monitors and --record-trace run in one process only; use workers = 1 (got {n})")
    check_shares(lane_loads(cfg, lanes_factory(), base_dir), n, "--workers")
    console.print(f"running {n} worker processes (no live view; each writes samples-w<k>.jsonl)")
    try:
        result = run_sharded(cfg, lanes_factory, n, base_dir=base_dir, manifest_extra=manifest_extra)
    except KeyboardInterrupt as exc:
        name = exc.args[0] if exc.args and exc.args[0] in STOP_SIGNALS else None
        console.print(f"[yellow]interrupted{' by ' + name if name else ''}: partial bundle written[/]")
        return interrupt_exit_code(name)
    print_summary(result.summary, result.bundle_dir)
    return 0 if result.valid else 1


def _llm_workload(
    api: str,
    url: str,
    model: str,
    dataset: Path | None,
    field: str,
    sharegpt: Path | None,
    input_words: list[int] | None,
    seed: int,
    stream: bool,
    max_tokens: int | None,
    temperature: float | None,
    api_key: str | None,
    reference_field: str | None = None,
    ignore_eos: bool = False,
) -> Any:
    """The `benchmaker llm` workload (module level, so worker processes can rebuild it)."""
    return _LLM_APIS[api][0](
        url,
        model,
        dataset_of(dataset, field, reference_field, sharegpt, input_words, seed),
        stream=stream,
        max_tokens=max_tokens,
        temperature=temperature,
        api_key=api_key,
        ignore_eos=ignore_eos,
    )


def dataset_of(
    dataset: Path | None,
    field: str,
    reference_field: str | None,
    sharegpt: Path | None,
    input_words: list[int] | None,
    seed: int,
) -> Dataset:
    """The prompts of `benchmaker llm` and `benchmaker sglang`: the JSONL `dataset` (prompt
    at field path `field`, expected answer at `reference_field`), else the ShareGPT file
    `sharegpt`, else 1,000 synthetic prompts of `input_words` words (default [128]) drawn
    with `seed`. Raises the dataset's DatasetError on a bad file."""
    if dataset is not None:
        return JsonlDataset(dataset, field, reference_field=reference_field)
    if sharegpt is not None:
        return ShareGPTDataset(sharegpt)
    return SyntheticDataset(input_words or [128], count=1000, seed=seed)


def resolve_api_key(api_key: str | None, api_key_env: str | None) -> str | None:
    """The API key: `api_key`, else the value of the environment variable `api_key_env`,
    else None. Raises ConfigError when `api_key_env` is given empty or names a variable
    that is not set."""
    if api_key:
        return api_key
    if api_key_env is not None and not api_key_env.strip():
        raise ConfigError("--api-key-env: expected the name of an environment variable (got '')")
    if api_key_env:
        value = os.environ.get(api_key_env)
        if not value:
            raise ConfigError(f"--api-key-env: environment variable {api_key_env} is not set")
        return value
    return None


def _metrics_monitors(urls: list[str] | None, interval: str) -> list[Any]:
    """PrometheusMonitors of `--metrics-url` values, every `--metrics-interval`."""
    interval_s = parse_duration_s(interval, "--metrics-interval")
    if interval_s <= 0:
        raise ConfigError(f"--metrics-interval: expected a duration > 0 (got {interval!r})")
    return [PrometheusMonitor(u, interval_s=interval_s) for u in urls or []]


@app.command(name="llm")
def llm(
    *,
    url: str,
    model: str,
    engine: EngineFlags = EngineFlags(),
    api: Annotated[str, Parameter(help="chat, completions, responses or messages")] = "chat",
    api_key: str | None = None,
    api_key_env: str | None = None,
    stream: Annotated[bool, ON_BY_DEFAULT] = True,
    max_tokens: int | None = None,
    ignore_eos: bool = False,
    temperature: float | None = None,
    input_words: list[int] | None = None,
    dataset: Path | None = None,
    field: str = "prompt",
    sharegpt: Path | None = None,
    metrics_url: list[str] | None = None,
    metrics_interval: str = "1s",
    record_trace: Path | None = None,
    grader: str | None = None,
    reference_field: str | None = None,
    progress: Annotated[bool | None, ON_BY_DEFAULT] = None,
) -> int:
    """Benchmark an LLM endpoint: OpenAI chat, completions or Responses, or Anthropic Messages.

    Args:
        url: Full endpoint URL, e.g. http://127.0.0.1:8000/v1/chat/completions.
        model: Model name sent in the body.
        engine: The engine flags (EngineFlags).
        api: chat (/v1/chat/completions), completions (/v1/completions), responses (/v1/responses; max tokens sent as max_output_tokens) or messages (Anthropic /v1/messages; needs --max-tokens).
        api_key: API key, sent as a Bearer token (messages: as x-api-key); prefer --api-key-env; never written to the bundle.
        api_key_env: Name of the environment variable holding the API key.
        stream: Stream responses (TTFT/ITL need it).
        max_tokens: max_tokens sent with each request.
        ignore_eos: Send "ignore_eos": true (vLLM, SGLang; sent with every --api, but vLLM 0.32.0 ignores it on messages): generate past the end-of-sequence token up to --max-tokens, so every answer has the same length (as `vllm bench serve --ignore-eos`).
        temperature: temperature sent with each request.
        input_words: Synthetic prompt lengths in words (default 128).
        dataset: JSONL file of prompts; --field names the field path.
        field: Field path in --dataset rows (e.g. messages or request.prompt).
        sharegpt: ShareGPT JSON/JSONL file of conversations.
        metrics_url: Prometheus /metrics URL scraped during the run into monitor.jsonl (repeatable).
        metrics_interval: Scrape interval of --metrics-url (500ms, 1s, 5s).
        record_trace: Write every request (intended send time, body, redacted headers) to this JSONL.
        grader: Grade answers: exact, contains, regex, numeric, choice, json_schema, llm_judge, or a JSON spec / @file (docs/benchmark-an-endpoint.md).
        reference_field: Field path of the expected answer in --dataset rows (for --grader).
        progress: Live progress display (default: on when stdout is a terminal).
    """
    cfg = engine.config("llm")
    _check_llm_options(url, max_tokens, temperature, input_words, metrics_url, record_trace)
    if sum(x is not None for x in (dataset, sharegpt)) > 1:
        raise ConfigError("--dataset and --sharegpt: give at most one")
    if api not in _LLM_APIS:
        raise ConfigError(f"--api: expected {', '.join(_LLM_APIS)} (got {api!r})")
    if not model.strip():
        raise ConfigError(f"--model: expected the model name the endpoint serves (got {model!r})")
    if api == "messages" and max_tokens is None:
        raise ConfigError("--max-tokens: required with --api messages (the Messages API requires max_tokens)")
    build = partial(
        _llm_workload,
        api,
        url,
        model,
        dataset,
        field,
        sharegpt,
        input_words,
        engine.seed,
        stream,
        max_tokens,
        temperature,
        resolve_api_key(api_key, api_key_env),
        reference_field,
        ignore_eos,
    )
    extra: dict[str, Any] = {
        "workload": {
            "type": _LLM_APIS[api][1],
            "url": url,
            "model": model,
            "stream": stream,
            "max_tokens": max_tokens,
            "ignore_eos": ignore_eos,
            "dataset": "jsonl" if dataset else "sharegpt" if sharegpt else "synthetic",
        }
    }
    hooks = grading_hooks(grader, extra)
    lanes = single_lane(build)  # reads the dataset now: bad input fails before any worker starts
    return launch_run(
        cfg,
        partial(single_lane, build),
        progress,
        manifest_extra=extra,
        lanes=lanes,
        monitors=_metrics_monitors(metrics_url, metrics_interval),
        record_trace=record_trace,
        post_hooks=hooks,
    )


def grading_hooks(grader: str | None, manifest_extra: dict[str, Any]) -> list[Any]:
    """The post-response hooks of a `--grader` value ([] when None), its grader type put in
    `manifest_extra["grader"]` (the type only: an inline spec may hold a judge's api_key);
    ConfigError on a bad one."""
    if grader is None:
        return []
    obj, reference_key = parse_grader_option(grader)
    manifest_extra["grader"] = obj.name
    return [GradingHook(obj, reference_key=reference_key)]


@app.command(name="http")
def http(
    *,
    url: str,
    method: str = "GET",
    header: list[str] | None = None,
    body: str | None = None,
    expected_status: list[int] | None = None,
    concurrency: int | None = None,
    rate: str | None = None,
    duration: str | None = None,
    max_requests: int | None = None,
    out_dir: Path = Path("runs"),
    max_in_flight: int | None = None,
    total_timeout: str | None = None,
    max_error_rate: float | None = None,
    max_loop_lag_ms: float | None = None,
    max_schedule_lag_ms: float | None = None,
    seed: int = 0,
    label: str | None = None,
    workers: str = "1",
    record_trace: Path | None = None,
    progress: Annotated[bool | None, ON_BY_DEFAULT] = None,
) -> int:
    """Benchmark any HTTP endpoint with one fixed request.

    Args:
        url: Request URL.
        method: HTTP method.
        header: Header as "Name: value" (repeatable).
        body: Request body (sent as-is).
        expected_status: Status codes that count as ok (repeatable; default 200).
        concurrency: Requests in flight (closed loop; default 1; the same as --rate closed:N).
        rate: Open-loop arrivals instead of --concurrency (rate specs: `benchmaker llm --help`).
        duration: Stop sending after this long.
        max_requests: Stop after this many requests.
        out_dir: Folder for run bundles.
        max_in_flight: Cap on requests in flight.
        total_timeout: Deadline for the whole request.
        max_error_rate: The run is invalid (exit 1) when more than this fraction of requests failed (0..1; default 0.1; 1 turns it off).
        max_loop_lag_ms: The run is invalid (exit 1) when the client's event-loop lag p99 exceeds this, in ms (default 10, or BENCHMAKER_MAX_LOOP_LAG_MS; raise it on a loaded host).
        max_schedule_lag_ms: An open-loop run is invalid (exit 1, client-saturated) when its schedule lag p99 (sent - intended) exceeds this, in ms (default 10, or BENCHMAKER_MAX_SCHEDULE_LAG_MS).
        seed: Seed of random arrivals.
        label: Run label.
        workers: Worker processes sharing the schedule (N or auto).
        record_trace: Write every request (intended send time, body, redacted headers) to this JSONL.
        progress: Live progress display.
    """
    headers = {}
    for h in header or []:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header: expected 'Name: value' (got {h!r})")
        headers[name.strip()] = value.strip()
    cfg = EngineFlags(
        concurrency=concurrency,
        rate=rate,
        duration=duration,
        max_requests=max_requests,
        out_dir=out_dir,
        max_in_flight=max_in_flight,
        total_timeout=total_timeout,
        max_error_rate=max_error_rate,
        max_loop_lag_ms=max_loop_lag_ms,
        max_schedule_lag_ms=max_schedule_lag_ms,
        seed=seed,
        label=label,
        workers=workers,
    ).config("http")
    check_http_url(url, "--url")
    if record_trace is not None:
        check_output_file(record_trace, "--record-trace")
    build = partial(HttpWorkload, url, method, headers, body, expected_status or [200])
    try:
        lanes = single_lane(build)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    extra = {"workload": {"type": "http", "url": url, "method": method, "headers": headers}}
    return launch_run(
        cfg, partial(single_lane, build), progress, manifest_extra=extra, lanes=lanes, record_trace=record_trace
    )


@app.command(name="run")
def run(
    config: Path,
    *,
    out_dir: Path | None = None,
    workers: str | None = None,
    progress: Annotated[bool | None, ON_BY_DEFAULT] = None,
) -> int:
    """Run a YAML run file (engine settings plus a workload or mixed lanes). A file's
    `needs:` (what it needs to succeed) is printed before the run, and again after a run
    that is not valid.

    Args:
        config: The YAML file.
        out_dir: Override the file's out_dir.
        workers: Override the file's workers (N or auto).
        progress: Live progress display.
    """
    rf = read_run_file(config)
    if out_dir is not None:
        rf.out_dir = out_dir
    elif not rf.out_dir.is_absolute():
        rf.out_dir = Path.cwd() / rf.out_dir
    if workers is not None:
        try:
            rf.workers = parse_workers(workers)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, None, names=_FLAGS)) from None
    check_output_dir(rf.out_dir, "--out-dir" if out_dir is not None else f"{config}: out_dir")
    if rf.record_trace is not None:
        check_output_file(rf.record_trace, f"{config}: record_trace")
    base = config.resolve().parent
    # in this process the lanes come from `rf` (the file read and its rates parsed once);
    # worker processes read the file anew
    lanes = rf.lanes(base) if resolve_workers(rf.workers) == 1 else None
    if rf.needs:
        console.print(f"{config.name} needs: {rf.needs}", highlight=False, markup=False)
    code = launch_run(
        rf,
        partial(lanes_from_run_file, config.resolve()),
        progress,
        base_dir=base,
        lanes=lanes,
        monitors=build_monitors(rf.monitors),
        record_trace=rf.record_trace,
        post_hooks=rf.post_hooks(base),
    )
    if rf.needs and code == 1:
        console.print(f"the run is not valid; {config.name} needs: {rf.needs}", highlight=False, markup=False)
    return code
