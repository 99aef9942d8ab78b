"""The same prompts through chat, Responses and Messages on one vLLM server, and vLLM's
own client beside ours, each run refereed by the server's histograms
(conformance/referee.py).

    runs = compare_apis(base_url, prompts, n=48, concurrency=2, output_len=32, rounds=3,
                        work=work, tokenizer=model_dir)
    runs["responses"][0].client.metrics["ttft_mean_ms"], runs["responses"][0].server["ttft_ms"]
    text = tables(runs)

Kinds (KINDS): `chat`, `responses`, `messages` (ours: `benchmaker run` with `api:` set,
ignore_eos, Responses with `store: false`), `peer responses` (`vllm bench serve
--backend openai-responses`) and `peer chat` (`--backend openai-chat`). Each round runs
every kind once, one at a time, the order rotated by one kind per round so no kind
always follows the same one; each run starts with an empty prefix cache, and /metrics is
scraped right before and after it, so the histogram deltas cover exactly its requests.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.clients import ClientRun, reset_prefix_cache, run_ours, run_vllm_bench
from conformance.referee import scrape, server_means

__all__ = ["FIGURES", "KINDS", "Refereed", "compare_apis", "gap", "tables"]

KINDS = ("chat", "responses", "messages", "peer responses", "peer chat")
FIGURES = ("ttft", "tpot", "itl", "e2e")


@dataclass
class Refereed:
    """One client run and the server's figures over the same requests (referee.server_means)."""

    client: ClientRun
    server: dict[str, float | None]


def gap(run: Refereed, figure: str) -> float | None:
    """Client mean - server mean of `figure` (ttft, tpot, itl, e2e) in ms, None when
    either is missing. ITL: the client's per-token pooled figure (clients.pooled_itl_ms), as
    the server pools its decode steps; the clients' own per-event ITL counts a chunk of
    several tokens as one gap, which the server never does."""
    key = "itl_pooled_ms" if figure == "itl" else f"{figure}_mean_ms"
    c, s = run.client.metrics.get(key), run.server.get(f"{figure}_ms")
    return None if c is None or s is None else c - s


def compare_apis(
    base_url: str,
    prompts: Path,
    *,
    n: int,
    concurrency: int,
    output_len: int,
    rounds: int,
    work: Path,
    tokenizer: Path,
    kinds: tuple[str, ...] = KINDS,
) -> dict[str, list[Refereed]]:
    """{kind: one Refereed per round} (module docstring). Raises RuntimeError when a
    client fails, KeyError when the server lacks a referee metric."""
    out: dict[str, list[Refereed]] = {k: [] for k in kinds}
    for r in range(rounds):
        order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
        for kind in order:
            reset_prefix_cache(base_url)
            before = scrape(base_url)
            if kind.startswith("peer "):
                run = run_vllm_bench(
                    base_url,
                    prompts,
                    n=n,
                    concurrency=concurrency,
                    output_len=output_len,
                    work=work,
                    tokenizer=tokenizer,
                    api=kind.removeprefix("peer "),
                )
            else:
                run = run_ours(
                    base_url,
                    prompts,
                    n=n,
                    concurrency=concurrency,
                    output_len=output_len,
                    work=work,
                    label=f"conformance-{kind}",
                    api=kind,
                )
            out[kind].append(Refereed(run, server_means(before, scrape(base_url))))
    return out


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _stats(xs: list[float | None]) -> tuple[float | None, float | None]:
    vals = [x for x in xs if x is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None


def tables(runs: dict[str, list[Refereed]]) -> str:
    """Two markdown tables: the kinds side by side (means over rounds of each run's p50s
    and means, tokens, client CPU), and the referee (client - server per figure: mean
    over rounds, ± the standard deviation across rounds)."""
    kinds = list(runs)
    lines = ["| metric | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]

    def row(label: str, values: list[Any]) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + " |")

    for fig in FIGURES:
        row(
            f"{fig.upper()} p50 (ms)",
            [_fmt(_stats([r.client.metrics.get(f"{fig}_p50_ms") for r in runs[k]])[0]) for k in kinds],
        )
        row(
            f"{fig.upper()} mean (ms)",
            [_fmt(_stats([r.client.metrics.get(f"{fig}_mean_ms") for r in runs[k]])[0]) for k in kinds],
        )
        if fig == "itl":
            row(
                "ITL pooled per token (ms)",
                [_fmt(_stats([r.client.metrics.get("itl_pooled_ms") for r in runs[k]])[0]) for k in kinds],
            )
        row(
            f"server {fig.upper()} mean (ms)",
            [_fmt(_stats([r.server[f"{fig}_ms"] for r in runs[k]])[0]) for k in kinds],
        )
    row("requests per run (server)", [_fmt(_stats([r.server["n"] for r in runs[k]])[0], 0) for k in kinds])
    row(
        "generated tokens per request (server)",
        [
            _fmt(_stats([r.server["generation_tokens"] / r.server["n"] for r in runs[k] if r.server["n"]])[0])
            for k in kinds
        ],
    )
    row(
        "prompt tokens per request (server)",
        [_fmt(_stats([r.server["prompt_tokens"] / r.server["n"] for r in runs[k] if r.server["n"]])[0]) for k in kinds],
    )
    row("client CPU per run (s)", [_fmt(_stats([r.client.cpu_s for r in runs[k]])[0], 1) for k in kinds])
    lines += ["", "client - server (ms; mean over rounds ± sd across rounds):", ""]
    lines += ["| figure | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for fig in FIGURES:
        cells = []
        for k in kinds:
            m, sd = _stats([gap(r, fig) for r in runs[k]])
            cells.append(f"{_fmt(m)} ± {_fmt(sd)}")
        row(fig.upper(), cells)
    return "\n".join(lines) + "\n"
