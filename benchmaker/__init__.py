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

from benchmaker.config import SLO, BenchConfig, SelfCheckLimits, Timeouts
from benchmaker.errors import BenchmakerError, ConfigError, ConnectTimeout, RateSpecError, RunInvalid, TransportError
from benchmaker.load_models import (
    Burst, ClosedLoop, Constant, Gamma, LoadModel, Poisson, Ramp, Stages, Trace, parse_duration_s, parse_rate_spec,
)
from benchmaker.records import Outcome, Phase, RequestSpec, Sample, TimeoutKind
from benchmaker.runner import BenchRunner, Lane, RunResult
from benchmaker.summary import summarize_samples
from benchmaker.transport import AiohttpTransport, HttpxTransport, NullTransport

# Built-in workload types, re-exported for the public API (DESIGN §2). Loaded on first
# access (PEP 562): workloads import the engine, so an eager import here would be circular.
_WORKLOAD_EXPORTS = {
    "HttpWorkload": "workloads.http",
    "JsonlDataset": "workloads.datasets",
    "OpenAIChatWorkload": "workloads.openai_chat",
    "OpenAICompletionsWorkload": "workloads.openai_completions",
    "ShareGPTDataset": "workloads.datasets",
    "StaticDataset": "workloads.datasets",
    "SyntheticDataset": "workloads.datasets",
}


def __getattr__(name: str):
    module = _WORKLOAD_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'benchmaker' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

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
