"""benchmaker: load engine and Python API for benchmarking LLM and HTTP endpoints.

The 30-second tour:

    from benchmaker import BenchConfig, BenchRunner, OpenAIChatWorkload, SyntheticDataset

    workload = OpenAIChatWorkload("http://127.0.0.1:8000/v1/chat/completions", "my-model",
                                  SyntheticDataset(input_words=256, count=100), max_tokens=128)
    config = BenchConfig(load="poisson:20", duration_s=60, warmup_s=5, out_dir="runs")
    result = BenchRunner(config, workload=workload).run_sync()
    print(result.summary["run"]["ttft_ms"]["p99"], result.valid, result.bundle_dir)

Units: time stamps in ns (perf_counter), metrics in ms or s as named (`ttft_ms`,
`window_s`), rates in req/s, tokens as counted by the server's usage report.
Definitions: docs/metrics.md; SQL: benchmaker/engine/sql/summary.sql.
"""

from typing import TYPE_CHECKING

from benchmaker.lazy_exports import lazy_getattr

# Every public name -> its module, imported on first access (PEP 562): `import
# benchmaker.engine.errors` (every CLI command does) must not pay for aiohttp, httpx and DuckDB
# through the engine, and the workloads import the engine, so an eager
# import of them here would be circular.
_EXPORTS = {
    "SLO": "benchmaker.engine.config",
    "BenchConfig": "benchmaker.engine.config",
    "SelfCheckLimits": "benchmaker.engine.config",
    "Timeouts": "benchmaker.engine.config",
    "BenchmakerError": "benchmaker.engine.errors",
    "ConfigError": "benchmaker.engine.errors",
    "ConnectTimeout": "benchmaker.engine.errors",
    "RateSpecError": "benchmaker.engine.errors",
    "RunInvalid": "benchmaker.engine.errors",
    "TransportError": "benchmaker.engine.errors",
    "Burst": "benchmaker.engine.load_models",
    "ClosedLoop": "benchmaker.engine.load_models",
    "Constant": "benchmaker.engine.load_models",
    "Gamma": "benchmaker.engine.load_models",
    "LoadModel": "benchmaker.engine.load_models",
    "Poisson": "benchmaker.engine.load_models",
    "Ramp": "benchmaker.engine.load_models",
    "Stages": "benchmaker.engine.load_models",
    "Trace": "benchmaker.engine.load_models",
    "parse_duration_s": "benchmaker.engine.load_models",
    "parse_rate_spec": "benchmaker.engine.load_models",
    "Outcome": "benchmaker.engine.records",
    "Phase": "benchmaker.engine.records",
    "RequestSpec": "benchmaker.engine.records",
    "Sample": "benchmaker.engine.records",
    "TimeoutKind": "benchmaker.engine.records",
    "BenchRunner": "benchmaker.engine.runner",
    "Lane": "benchmaker.engine.runner",
    "RunResult": "benchmaker.engine.runner",
    "summarize_samples": "benchmaker.engine.summary",
    "AiohttpTransport": "benchmaker.engine.transport",
    "HttpxTransport": "benchmaker.engine.transport",
    "NullTransport": "benchmaker.engine.transport",
    "HttpWorkload": "benchmaker.workloads.http",
    "JsonlDataset": "benchmaker.workloads.datasets",
    "OpenAIChatWorkload": "benchmaker.workloads.openai_chat",
    "OpenAICompletionsWorkload": "benchmaker.workloads.openai_completions",
    "ShareGPTDataset": "benchmaker.workloads.datasets",
    "StaticDataset": "benchmaker.workloads.datasets",
    "SyntheticDataset": "benchmaker.workloads.datasets",
}

if TYPE_CHECKING:  # the names for type checkers and editors
    from benchmaker.engine.config import SLO, BenchConfig, SelfCheckLimits, Timeouts
    from benchmaker.engine.errors import (
        BenchmakerError,
        ConfigError,
        ConnectTimeout,
        RateSpecError,
        RunInvalid,
        TransportError,
    )
    from benchmaker.engine.load_models import (
        Burst,
        ClosedLoop,
        Constant,
        Gamma,
        LoadModel,
        Poisson,
        Ramp,
        Stages,
        Trace,
        parse_duration_s,
        parse_rate_spec,
    )
    from benchmaker.engine.records import Outcome, Phase, RequestSpec, Sample, TimeoutKind
    from benchmaker.engine.runner import BenchRunner, Lane, RunResult
    from benchmaker.engine.summary import summarize_samples
    from benchmaker.engine.transport import AiohttpTransport, HttpxTransport, NullTransport
    from benchmaker.workloads.datasets import JsonlDataset, ShareGPTDataset, StaticDataset, SyntheticDataset
    from benchmaker.workloads.http import HttpWorkload
    from benchmaker.workloads.openai_chat import OpenAIChatWorkload
    from benchmaker.workloads.openai_completions import OpenAICompletionsWorkload


__getattr__ = lazy_getattr(__name__, _EXPORTS)

__all__ = [
    "AiohttpTransport",
    "BenchConfig",
    "BenchRunner",
    "BenchmakerError",
    "Burst",
    "ClosedLoop",
    "ConfigError",
    "ConnectTimeout",
    "Constant",
    "Gamma",
    "HttpWorkload",
    "HttpxTransport",
    "JsonlDataset",
    "Lane",
    "LoadModel",
    "NullTransport",
    "OpenAIChatWorkload",
    "OpenAICompletionsWorkload",
    "Outcome",
    "Phase",
    "Poisson",
    "Ramp",
    "RateSpecError",
    "RequestSpec",
    "RunInvalid",
    "RunResult",
    "SLO",
    "Sample",
    "SelfCheckLimits",
    "ShareGPTDataset",
    "Stages",
    "StaticDataset",
    "SyntheticDataset",
    "TimeoutKind",
    "Timeouts",
    "Trace",
    "TransportError",
    "parse_duration_s",
    "parse_rate_spec",
    "summarize_samples",
]
