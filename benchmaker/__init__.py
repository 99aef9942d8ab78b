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
Definitions: DESIGN §4; SQL: benchmaker/sql/summary.sql.
"""

from typing import TYPE_CHECKING

from benchmaker.lazy_exports import lazy_getattr

# Every public name -> its module, imported on first access (PEP 562): `import
# benchmaker.errors` (every CLI command does) must not pay for aiohttp, httpx and DuckDB
# through the engine (issue #15), and the workloads import the engine, so an eager
# import of them here would be circular.
_EXPORTS = {
    "SLO": "benchmaker.config", "BenchConfig": "benchmaker.config", "SelfCheckLimits": "benchmaker.config",
    "Timeouts": "benchmaker.config",
    "BenchmakerError": "benchmaker.errors", "ConfigError": "benchmaker.errors", "ConnectTimeout": "benchmaker.errors",
    "RateSpecError": "benchmaker.errors", "RunInvalid": "benchmaker.errors", "TransportError": "benchmaker.errors",
    "Burst": "benchmaker.load_models", "ClosedLoop": "benchmaker.load_models", "Constant": "benchmaker.load_models",
    "Gamma": "benchmaker.load_models", "LoadModel": "benchmaker.load_models", "Poisson": "benchmaker.load_models",
    "Ramp": "benchmaker.load_models", "Stages": "benchmaker.load_models", "Trace": "benchmaker.load_models",
    "parse_duration_s": "benchmaker.load_models", "parse_rate_spec": "benchmaker.load_models",
    "Outcome": "benchmaker.records", "Phase": "benchmaker.records", "RequestSpec": "benchmaker.records",
    "Sample": "benchmaker.records", "TimeoutKind": "benchmaker.records",
    "BenchRunner": "benchmaker.runner", "Lane": "benchmaker.runner", "RunResult": "benchmaker.runner",
    "summarize_samples": "benchmaker.summary",
    "AiohttpTransport": "benchmaker.transport", "HttpxTransport": "benchmaker.transport",
    "NullTransport": "benchmaker.transport",
    "HttpWorkload": "workloads.http",
    "JsonlDataset": "workloads.datasets",
    "OpenAIChatWorkload": "workloads.openai_chat",
    "OpenAICompletionsWorkload": "workloads.openai_completions",
    "ShareGPTDataset": "workloads.datasets",
    "StaticDataset": "workloads.datasets",
    "SyntheticDataset": "workloads.datasets",
}

if TYPE_CHECKING:  # the names for type checkers and editors
    from benchmaker.config import SLO, BenchConfig, SelfCheckLimits, Timeouts
    from benchmaker.errors import (BenchmakerError, ConfigError, ConnectTimeout, RateSpecError, RunInvalid,
                                   TransportError)
    from benchmaker.load_models import (Burst, ClosedLoop, Constant, Gamma, LoadModel, Poisson, Ramp, Stages, Trace,
                                        parse_duration_s, parse_rate_spec)
    from benchmaker.records import Outcome, Phase, RequestSpec, Sample, TimeoutKind
    from benchmaker.runner import BenchRunner, Lane, RunResult
    from benchmaker.summary import summarize_samples
    from benchmaker.transport import AiohttpTransport, HttpxTransport, NullTransport
    from workloads.datasets import JsonlDataset, ShareGPTDataset, StaticDataset, SyntheticDataset
    from workloads.http import HttpWorkload
    from workloads.openai_chat import OpenAIChatWorkload
    from workloads.openai_completions import OpenAICompletionsWorkload


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
