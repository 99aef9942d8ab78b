"""Streaming chat: benchmark an OpenAI-compatible chat endpoint and print TTFT, ITL, TPOT.

    python examples/streaming_chat.py http://127.0.0.1:8000/v1/chat/completions --model M \\
        [--requests 20] [--rate poisson:4] [--input-words 128] [--max-tokens 64] [--out-dir runs]

Sends `stream: true` requests (OpenAIChatWorkload, synthetic prompts of --input-words
words, seeded) with `stream_options.include_usage`, so token counts come from the
server's usage. Reads the API key from $OPENAI_API_KEY when set (never written to the
bundle). Prints, per metric, p50 / p99 in ms with their counts (docs/metrics.md):
TTFT = first token-bearing event - sent; ITL = gap between token-bearing events;
TPOT = (end - first token) / (output tokens - 1); E2E = end - sent.
Exit code: 0 valid run, 1 invalid (reasons printed), 2 usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.runner import BenchRunner
from benchmaker.recipes.bench import load_of
from benchmaker.workloads.datasets import SyntheticDataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload

METRICS = ("ttft_ms", "itl_event_ms", "tpot_ms", "e2e_ms")


def run_chat(
    url: str,
    model: str,
    *,
    requests: int = 20,
    rate: str = "closed:1",
    input_words: int = 128,
    max_tokens: int | None = 64,
    out_dir: Path = Path("runs"),
    api_key: str | None = None,
):
    """Stream `requests` chat completions from `url` at `rate`; returns the RunResult."""
    workload = OpenAIChatWorkload(
        url,
        model,
        SyntheticDataset(input_words, count=max(requests, 1), seed=1),
        stream=True,
        max_tokens=max_tokens,
        api_key=api_key,
    )
    config = BenchConfig(load=rate, max_requests=requests, out_dir=out_dir, kind="llm", label="example-streaming")
    return BenchRunner(config, workload=workload).run_sync()


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring); returns the exit code."""
    ap = argparse.ArgumentParser(prog="python examples/streaming_chat.py", description=__doc__.split("\n")[0])
    ap.add_argument("url", nargs="?", help="chat endpoint, e.g. http://127.0.0.1:8000/v1/chat/completions")
    ap.add_argument("--model", default="my-model", help="model name sent in the body")
    ap.add_argument("--requests", type=int, default=20, help="requests to send (default 20)")
    ap.add_argument("--concurrency", type=int, help="requests in flight, each sent as one ends (default 1)")
    ap.add_argument("--rate", help="open-loop arrivals instead of --concurrency: constant:R, poisson:R, ...")
    ap.add_argument("--input-words", type=int, default=128, help="synthetic prompt length in words (default 128)")
    ap.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request (default 64)")
    ap.add_argument("--out-dir", type=Path, default=Path("runs"), help="folder for run bundles (default runs)")
    args = ap.parse_args(argv)
    try:
        rate = load_of(args.rate, args.concurrency)  # the CLI's rule: one of the two, closed:1 without
    except ConfigError as exc:
        ap.error(str(exc))
    if args.url is None:
        ap.print_usage()
        return 2
    result = run_chat(
        args.url,
        args.model,
        requests=args.requests,
        rate=rate,
        input_words=args.input_words,
        max_tokens=args.max_tokens,
        out_dir=args.out_dir,
        api_key=os.environ.get("OPENAI_API_KEY"),
    )
    run = result.summary["run"]
    print(f"run {result.run_id}: {run['n_ok']} ok of {run['n_samples']}, output tokens {run['output_tokens_total']}")
    for name in METRICS:
        m = run[name]
        if m["count"]:
            print(f"{name:>13}: p50 {m['p50']:8.2f}  p99 {m['p99']:8.2f}  (n={m['count']})")
        else:
            print(f"{name:>13}: - (n=0)")
    print(f"bundle: {result.bundle_dir}")
    if not result.valid:
        print("verdict: INVALID - " + "; ".join(result.summary["verdict"]["reasons"]))
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
