"""Episode and turn records: one agent episode (episodes.jsonl) and its model calls
(turns.jsonl) of a sweep point's files (docs/architecture.md).

Every `*_ns` stamp is an integer offset in ns from the run's t0, taken with
`time.perf_counter_ns()` (docs/metrics.md). Unknown is None, never 0: token totals of an
episode are set only when every model call of it (including failed ones) carried
server usage (`usage_complete`), otherwise they are None.

    Episode     one line of episodes.jsonl
    TurnRecord  one line of turns.jsonl: what only a turn has (its model call is a
                request, a line of samples.jsonl, joined by episode_id and turn_index)
    EPISODE_COLUMNS / TURN_COLUMNS   DuckDB column types of those files, so a column
                that is null in every line still has its type when read back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(slots=True)
class TurnRecord:
    """What only a turn has, beside its model call (a line of turns.jsonl).

    The model call itself is a request: the engine Sample in the point's samples.jsonl
    (warehouse `requests`) carries its timings, outcome, HTTP status, usage, finish
    reason, bytes and response model, with `meta.episode_id` / `meta.turn_index`
    (requests.episode_id / turn_index, migration 0007). A turn is keyed to it by
    (run_id, sweep_point, episode_id, turn_index). In command mode
    `turn_index` is the number of assistant messages in the agent's request, so an
    agent that resends a call gives two turns (and two requests) of one index.

    `miss_kind` is the replay server's reason for refusing the call (its status code:
    benchmaker.agent.harness.MISS_BY_STATUS), None when served. `tool_time_ns` is the time spent
    running this turn's tool calls (0 in recorded mode). `n_tool_calls` counts the tool
    calls of the received response. `byte_equal` compares the received response with
    the recorded one (content, reasoning, tool-call ids/names/raw arguments); None when
    there is no recorded turn to compare with (command mode, beyond the recording,
    failed call).

    Bundles written before this shape also hold sent_ns, first_token_ns, end_ns,
    outcome, http_status, prompt_tokens, output_tokens, cached_tokens and model per
    turn; readers ignore them (the same figures are in samples.jsonl).
    """

    run_id: str
    sweep_point: str | None
    episode_id: str
    turn_index: int
    miss_kind: str | None = None
    tool_time_ns: int = 0
    n_tool_calls: int = 0
    byte_equal: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Episode:
    """One agent episode (a line of episodes.jsonl).

    `model_time_ns` sums, over the episode's model calls, the time spent awaiting the
    model's stream only (connect + headers + each body read), never the time the
    harness spends on what a chunk yields. `tool_time_ns` sums tool executions.
    `first_token_ns_sum` sums TTFT (first_token - sent) over the calls, None when any
    call produced no token. `misses_*` count model calls refused by the replay server
    by miss kind; `divergences` counts observations (execute mode) that differ from the
    recorded ones. `resolved`/`reverified`: a verifier ran (`reverified` true) or the
    recorded outcome was carried (false). `diff_sha256` is the sha256 of the final
    workspace `git diff` restricted to the task's files (benchmaker.agent.harness.task_diff;
    None without a workspace). `outcome`: ok, error, timeout, cancelled, or diverged (command
    mode: the agent sent a request the replay server refused, and was stopped).
    """

    run_id: str
    sweep_point: str | None
    concurrency: int | None
    episode_id: str
    trajectory_id: str
    task_id: str | None
    mode: str
    worker: int
    started_ns: int
    ended_ns: int
    n_turns: int = 0
    n_requests: int = 0
    model_time_ns: int = 0
    tool_time_ns: int = 0
    first_token_ns_sum: int | None = None
    misses_unknown_key: int = 0
    misses_beyond_turns: int = 0
    misses_diverged: int = 0
    divergences: int = 0
    outcome: str = "ok"
    error: str | None = None
    resolved: bool | None = None
    reverified: bool = False
    usage_complete: bool = False
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    diff_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _duckdb_columns(record: type) -> dict[str, str]:
    """The DuckDB column type of each field of the dataclass `record`, in field order: a
    str is VARCHAR, a bool BOOLEAN, an int BIGINT when its name ends in _ns, _ns_sum or
    _tokens (stamps and sums in ns, token counts), else INTEGER."""
    columns = {}
    for f in fields(record):
        kind = str(f.type).split(" | ")[0]  # annotations are strings here (__future__)
        if kind == "int":
            columns[f.name] = "BIGINT" if f.name.endswith(("_ns", "_ns_sum", "_tokens")) else "INTEGER"
        else:
            columns[f.name] = {"str": "VARCHAR", "bool": "BOOLEAN"}[kind]
    return columns


EPISODE_COLUMNS = _duckdb_columns(Episode)
TURN_COLUMNS = _duckdb_columns(TurnRecord)
