"""vLLM's own request histograms as the referee of a client's figures: scrape /metrics
before and after one client run (nothing else on the server meanwhile), and the
difference of each histogram's `_sum` and `_count` is the server's own mean over exactly
that run's requests.

    before = scrape(base_url)
    ... one client run ...
    server = server_means(before, scrape(base_url))
    server["ttft_ms"], server["n"], server["generation_tokens"]

The histograms (vLLM 0.32.0, vllm/v1/metrics/stats.py and loggers.py; all in seconds):

- `vllm:time_to_first_token_seconds`: per request, first token out of the engine core -
  the request's arrival at the API server (after the HTTP body was read).
- `vllm:request_time_per_output_token_seconds`: per request, (last token - first token)
  / (generated tokens - 1), engine-core step timestamps.
- `vllm:inter_token_latency_seconds`: per decode step of each request, the time since
  its previous step (one token per step without speculative decoding).
- `vllm:e2e_request_latency_seconds`: per request, finish - arrival.

Counters: `vllm:generation_tokens_total`, `vllm:prompt_tokens_total`. A histogram's
mean is the summed `_sum` delta / `_count` delta over every label set (one engine
here). The server's clocks start after the request reached it and stop before its
answer is written, so client minus server is what lies outside the engine: the
network, HTTP and JSON on both sides, the API server's templating and detokenizing, and
the client's own timestamps; two clients on one server differ only in the last part.
"""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["HISTOGRAMS", "scrape", "server_means"]

HISTOGRAMS = {
    "ttft_ms": "vllm:time_to_first_token_seconds",
    "tpot_ms": "vllm:request_time_per_output_token_seconds",
    "itl_ms": "vllm:inter_token_latency_seconds",
    "e2e_ms": "vllm:e2e_request_latency_seconds",
}
COUNTERS = {
    "generation_tokens": "vllm:generation_tokens_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
}


def scrape(base_url: str, timeout_s: float = 30.0) -> dict[str, float]:
    """GET <base_url>/metrics: {sample name: value summed over label sets} for the `_sum`
    and `_count` samples of HISTOGRAMS and the COUNTERS. Raises urllib.error.URLError
    when unreachable, ValueError when the text does not parse, KeyError naming a
    metric the server does not export."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=timeout_s) as r:
        text = r.read().decode("utf-8")
    wanted = {f"{h}{s}" for h in HISTOGRAMS.values() for s in ("_sum", "_count")} | set(COUNTERS.values())
    got: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                got[sample.name] = got.get(sample.name, 0.0) + sample.value
    missing = sorted(wanted - set(got))
    if missing:
        raise KeyError(f"{base_url}/metrics lacks {', '.join(missing)}")
    return got


def server_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """The server's figures over the requests between two scrapes: `ttft_ms`, `tpot_ms`,
    `itl_ms`, `e2e_ms` (histogram means in ms; None when no observation), `n` (the e2e
    count: finished requests), `n_itl` (decode steps), and the token counters' deltas
    `generation_tokens`, `prompt_tokens`."""
    out: dict[str, float | None] = {}
    for key, name in HISTOGRAMS.items():
        count = after[name + "_count"] - before[name + "_count"]
        total = after[name + "_sum"] - before[name + "_sum"]
        out[key] = total / count * 1000.0 if count > 0 else None
    out["n"] = after[HISTOGRAMS["e2e_ms"] + "_count"] - before[HISTOGRAMS["e2e_ms"] + "_count"]
    out["n_itl"] = after[HISTOGRAMS["itl_ms"] + "_count"] - before[HISTOGRAMS["itl_ms"] + "_count"]
    for key, name in COUNTERS.items():
        out[key] = after[name] - before[name]
    return out
