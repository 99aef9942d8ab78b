"""`benchmaker trajectory-replay FILE`: prefix-cache replay of recorded conversations.

    benchmaker trajectory-replay convs.jsonl --url http://127.0.0.1:8000/v1/chat/completions \\
        --model m --sessions interleaved --concurrency 8 --active-sessions 32 --think exp:2s

Runs the engine in a closed loop of `--concurrency` workers over
`benchmaker.workloads.trajectory_replay.TrajectoryReplayWorkload` until every turn was sent (or
`--duration`), prints the usual summary plus a prefix-cache table (expected cacheable
prompt tokens vs the server's cached tokens) and returns 0 (valid run), 1 (invalid), 2
(bad input), 130/143/129 (stopped by Ctrl-C/SIGTERM/SIGHUP), as `benchmaker llm`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from rich.table import Table

from benchmaker.engine.config import check_http_url
from benchmaker.engine.runner import BenchRunner
from benchmaker.recipes.app import ON_BY_DEFAULT, app, within
from benchmaker.recipes.bench import execute_run, make_config, resolve_api_key
from benchmaker.recipes.display import console
from benchmaker.workloads.trajectory_replay import TrajectoryReplayWorkload, parse_think, read_conversations

__all__ = ["cache_report", "trajectory_replay"]


def cache_report(samples_path: Path) -> dict[str, Any]:
    """Prefix-cache totals over a run's samples.jsonl (rows with meta from
    `TrajectoryReplayWorkload.copy_meta`): `samples`, `expected_cached_tokens` (sum),
    `cached_tokens` (sum over samples that reported it), `reported` (samples with a
    server cached_tokens), `ratio` = cached / expected over the reporting samples (None
    when none reported or their expected sum is 0)."""
    n = reported = expected_all = expected_rep = cached = 0
    with samples_path.open("rb") as fh:
        for line in fh:
            row = orjson.loads(line)
            meta = row.get("meta") or {}
            if "expected_cached_tokens" not in meta:
                continue
            n += 1
            expected_all += meta["expected_cached_tokens"]
            if row.get("cached_tokens") is not None:
                reported += 1
                cached += row["cached_tokens"]
                expected_rep += meta["expected_cached_tokens"]
    return {
        "samples": n,
        "reported": reported,
        "expected_cached_tokens": expected_all,
        "cached_tokens": cached if reported else None,
        "ratio": cached / expected_rep if reported and expected_rep else None,
    }


def _print_cache(report: dict[str, Any]) -> None:
    table = Table(title="prefix cache (expected = previous turn's prompt, client estimate)")
    for col in ("samples", "server reported", "expected cached tokens", "server cached tokens", "cached / expected"):
        table.add_column(col, justify="right")
    ratio = report["ratio"]
    table.add_row(
        str(report["samples"]),
        str(report["reported"]),
        str(report["expected_cached_tokens"]),
        "-" if report["cached_tokens"] is None else str(report["cached_tokens"]),
        "-" if ratio is None else f"{ratio:.3f}",
    )
    console.print(table)


@app.command(name="trajectory-replay")
def trajectory_replay(
    file: Path,
    *,
    url: str,
    model: str,
    sessions: Literal["contiguous", "interleaved"] = "contiguous",
    concurrency: int = 1,
    active_sessions: Annotated[int | None, within(1, 1_000_000)] = None,
    think: str | None = None,
    max_tokens: Annotated[int | None, within(1, 10_000_000)] = None,
    temperature: Annotated[float | None, within(0, 100)] = None,
    stream: Annotated[bool, ON_BY_DEFAULT] = True,
    tokenizer: Path | None = None,
    duration: str | None = None,
    total_timeout: str | None = None,
    api_key_env: str | None = None,
    seed: int = 0,
    label: str | None = None,
    out_dir: Path = Path("runs"),
    progress: Annotated[bool | None, ON_BY_DEFAULT] = None,
) -> int:
    """Replay recorded conversations turn by turn with growing prefixes (prefix caching).

    Args:
        file: JSONL, one conversation per row: a messages array, or `{"messages": [...] or "<json>", "id": ...}`.
        url: Chat completions URL, e.g. http://127.0.0.1:8000/v1/chat/completions.
        model: Model name sent in the body.
        sessions: contiguous (a worker plays a conversation to its end, then the next) or interleaved (--active-sessions open at once, turns alternate).
        concurrency: Closed-loop workers (requests in flight at most).
        active_sessions: Open sessions in interleaved mode (default 2 x concurrency).
        think: Think time between a session's turns: const:1s, exp:2s (mean), uniform:0.5..3 (default none).
        max_tokens: max_tokens sent with each request.
        temperature: temperature sent with each request.
        stream: Stream responses (TTFT needs it).
        tokenizer: tokenizer.json for exact token estimates (needs the `tokenizers` package); default words.
        duration: Stop sending after this long (default: when every turn was sent).
        total_timeout: Deadline per request.
        api_key_env: Name of the environment variable holding the API key.
        seed: Seed of the think-time draws.
        label: Run label stored with the run.
        out_dir: Folder for run bundles (OUT_DIR/<run_id>/).
        progress: Live progress display (default: on when stdout is a terminal).
    """
    api_key = resolve_api_key(None, api_key_env)
    check_http_url(url, "--url")
    conversations = read_conversations(file)
    wl = TrajectoryReplayWorkload(
        url,
        model,
        conversations,
        concurrency=min(concurrency, len(conversations)),
        sessions=sessions,
        active_sessions=active_sessions,
        think=parse_think(think),
        seed=seed,
        tokenizer=tokenizer,
        stream=stream,
        max_tokens=max_tokens,
        temperature=temperature,
        api_key=api_key,
    )
    cfg = make_config(
        load=f"closed:{wl.concurrency}",
        max_requests=wl.total_turns,
        duration_s=duration,
        seed=seed,
        label=label,
        kind="trajectory-replay",
        out_dir=out_dir,
        timeouts={"total_s": total_timeout},
    )
    runner = BenchRunner(cfg, workload=wl, post_hooks=[wl.copy_meta], manifest_extra={"workload": wl.describe()})
    return execute_run(runner, progress, then=lambda result: _print_cache(cache_report(result.samples_path)))
