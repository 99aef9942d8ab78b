"""Request and sample records: what one request was meant to be, and what happened to it.

A `Sample` is one line of `samples.jsonl` (docs/metrics.md). Every timestamp is an integer
number of nanoseconds from `time.perf_counter_ns()` on the client, stored as an offset
from the run's start (`t0`, taken once per run or per worker shard), so samples of one
run share one timeline. Unknown is `None`, never 0.

Timestamps of one request, in order:

    intended_ns      when the load model wanted it sent (open loop: the schedule;
                     closed loop: when the worker became ready)
    sent_ns          just before the request bytes were handed to the transport
    first_byte_ns    the first response body bytes arrived (streams: first read)
    first_token_ns   the first token-bearing event arrived (any generated output:
                     content, reasoning, refusal, tool-call name/arguments; the one
                     rule of benchmaker/apis/generated.py)
    first_content_ns the first `content` token arrived (TTFC)
    end_ns           the response ended (stream closed / body read) or failed

`token_event_ns` holds the arrival time of every token-bearing event (the first one
equals `first_token_ns`); events that arrive in one socket read share one stamp.
`token_event_tokens` holds, per event, its token count when the protocol states it
(e.g. SGLang meta_info), else None.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    """One outcome per request (docs/metrics.md).

    ok               a complete, well-formed response with output
    http_error       status >= 400; the error body is kept in `error`
    transport_error  connect refused/reset, DNS, TLS, connection closed mid-body
    timeout          a deadline fired; which one is in `timeout_kind`
    protocol_error   bad SSE framing or JSON, stream cut before its terminator
    empty_output     a 2xx response that carried no generated token
    graded_wrong     a grader judged the output wrong
    grading_error    the grader itself failed
    cancelled        still in flight at the run deadline or at Ctrl-C
    aborted          the server ended the response with a finish reason that says it
                     gave up (class abort, error or cancelled; see `finish_class`), with
                     or without output; the reason is in `error`. A reason the product
                     does not know completes the response (class `unknown`)
    dropped          an open-loop arrival refused by the in-flight cap (policy "drop");
                     never sent, so `sent_ns` is None
    recorded_error   a replayed model call that failed in the original run (aborted or
                     errored there), served as recorded by the replay server and flagged
                     with its `x-replay-recorded-error` header (benchmaker/replay_server/server.py): not
                     an error of the system under test, so counted apart
                     (`n_recorded_error`), out of the error rate and out of every
                     latency and throughput figure over successes; `error` names the
                     recorded finish reason
    """

    OK = "ok"
    HTTP_ERROR = "http_error"
    TRANSPORT_ERROR = "transport_error"
    TIMEOUT = "timeout"
    PROTOCOL_ERROR = "protocol_error"
    EMPTY_OUTPUT = "empty_output"
    GRADED_WRONG = "graded_wrong"
    GRADING_ERROR = "grading_error"
    CANCELLED = "cancelled"
    DROPPED = "dropped"
    ABORTED = "aborted"
    RECORDED_ERROR = "recorded_error"


class TimeoutKind(str, enum.Enum):
    """Which per-request deadline fired: connect, first token (ttft), gap between reads
    (idle), or the whole request (total). `client` is a connect deadline that passed
    while the client itself was overloaded (its event loop lagging by a tenth of the
    connect timeout or more): the client, not the endpoint, is the likely cause."""

    CLIENT = "client"
    CONNECT = "connect"
    TTFT = "ttft"
    IDLE = "idle"
    TOTAL = "total"


class Phase(str, enum.Enum):
    """Where a sample's intended send falls in the run: inside the declared warm-up,
    the measured window, or the declared cool-down. Summaries use `measure` only."""

    WARMUP = "warmup"
    MEASURE = "measure"
    COOLDOWN = "cooldown"


@dataclass(slots=True)
class RequestSpec:
    """One HTTP request to send, built by a workload before the timed span starts.

    `body` is the exact bytes sent; a list of byte pieces is sent as if joined, by the
    raw transport (benchmaker.engine.http1) only. `meta` travels to the sample (prompt hash, dataset
    row id, expected answer for grading); it is never sent. `stream` tells the workload's
    parser to expect an event stream.
    """

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | list[bytes] | None = None
    stream: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Sample:
    """One finished (or failed, cancelled, dropped) request: one line of samples.jsonl.

    Times are ns offsets from the run's t0 (see module docstring). Token counts come from
    the server's usage report (`usage_present`); they are None when it sent none.
    `model` is the `model` field of the response as sent (None when it named none).

    `finish_reason` is the last value the server sent (`null` and `""` are not
    values: not finished yet); `finish_class` its class (stop, length, tool_calls,
    content_filter, abort, error, cancelled, unknown; benchmaker/apis/generated.py), None
    when the response stated none.

    `hidden_reasoning_tokens` are the usage's reasoning tokens when the stream showed no
    reasoning delta (0 when it did, None when usage stated no reasoning count): TPOT
    leaves them out of the output tokens. `usage_invalid_reason` names why the server's
    token counts cannot be true (completion > the request's max_tokens, prompt +
    completion != total, counts summed cumulatively; benchmaker/apis/generated.py
    `usage_problem`), None when they can: such a sample's counts are kept as sent but
    never summed into totals or used for TPOT. `refusal` is True when
    the output was (or held) a refusal (`delta.refusal`, refusal content parts): such a
    response is a success flagged, not an empty one.
    """

    run_id: str
    seq: int
    lane: str = "default"
    stage: str | None = None
    sweep_point: str | None = None
    worker: int = 0
    phase: str = Phase.MEASURE.value
    outcome: str = Outcome.OK.value
    timeout_kind: str | None = None
    error: str | None = None
    http_status: int | None = None
    intended_ns: int | None = None
    sent_ns: int | None = None
    first_byte_ns: int | None = None
    first_token_ns: int | None = None
    first_content_ns: int | None = None
    end_ns: int | None = None
    token_event_ns: list[int] | None = None
    token_event_tokens: list[int | None] | None = None
    n_token_events: int = 0
    usage_present: bool = False
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    hidden_reasoning_tokens: int | None = None
    usage_invalid_reason: str | None = None
    output_chars: int = 0
    finish_reason: str | None = None
    model: str | None = None
    finish_class: str | None = None
    refusal: bool = False
    bytes_sent: int = 0
    bytes_received: int = 0
    in_flight_at_send: int | None = None
    slo_met: bool | None = None
    grade: str | None = None
    meta: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# DuckDB column types of samples.jsonl: the one schema read by the bundle summary and
# the warehouse loader, so a column that is null in every line still has its type.
SAMPLE_COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR",
    "seq": "BIGINT",
    "lane": "VARCHAR",
    "stage": "VARCHAR",
    "sweep_point": "VARCHAR",
    "worker": "INTEGER",
    "phase": "VARCHAR",
    "outcome": "VARCHAR",
    "timeout_kind": "VARCHAR",
    "error": "VARCHAR",
    "http_status": "INTEGER",
    "intended_ns": "BIGINT",
    "sent_ns": "BIGINT",
    "first_byte_ns": "BIGINT",
    "first_token_ns": "BIGINT",
    "first_content_ns": "BIGINT",
    "end_ns": "BIGINT",
    "token_event_ns": "BIGINT[]",
    "token_event_tokens": "INTEGER[]",
    "n_token_events": "INTEGER",
    "usage_present": "BOOLEAN",
    "prompt_tokens": "BIGINT",
    "output_tokens": "BIGINT",
    "cached_tokens": "BIGINT",
    "reasoning_tokens": "BIGINT",
    "hidden_reasoning_tokens": "BIGINT",
    "usage_invalid_reason": "VARCHAR",
    "output_chars": "BIGINT",
    "finish_reason": "VARCHAR",
    "model": "VARCHAR",
    "finish_class": "VARCHAR",
    "refusal": "BOOLEAN",
    "bytes_sent": "BIGINT",
    "bytes_received": "BIGINT",
    "in_flight_at_send": "INTEGER",
    "slo_met": "BOOLEAN",
    "grade": "VARCHAR",
    "meta": "JSON",
}
