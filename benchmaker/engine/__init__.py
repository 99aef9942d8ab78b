"""The load engine: configuration, load models (request rate, concurrency), the runner
and its event loop, one request's exchange under the deadlines (the runner's and the
agent model client's: benchmaker.engine.request), HTTP transports and the SSE parser, samples, self-checks, the run
bundle and the summary SQL (benchmaker/engine/sql/summary.sql, the one definition of
every figure). It owns how a request is timed; nothing above it changes a stamp.
It imports nothing of benchmaker outside itself, but benchmaker.progress.
"""

from benchmaker.lazy_exports import lazy_getattr

_EXPORTS = {
    "BenchConfig": "benchmaker.engine.config",
    "BenchRunner": "benchmaker.engine.runner",
    "Deadlines": "benchmaker.engine.request",
    "RequestExchange": "benchmaker.engine.request",
    "RunResult": "benchmaker.engine.runner",
    "Sample": "benchmaker.engine.records",
    "Outcome": "benchmaker.engine.records",
    "RequestSpec": "benchmaker.engine.records",
    "summarize_samples": "benchmaker.engine.summary",
    "parse_rate_spec": "benchmaker.engine.load_models",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
