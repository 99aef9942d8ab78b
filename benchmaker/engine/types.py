"""The engine's seams, as short protocol types (like starlette's `types.py`).

    Workload      builds each RequestSpec and a StreamParser for its response
    CallableWorkload  performs each unit of work itself (`execute`): several HTTP calls
                  (sandbox lifecycle), an agent episode; timed like a request
    StreamParser  turns response body bytes into token events written on a Sample
    Transport     sends a RequestSpec and yields the response body as byte chunks
    Response      one in-flight response of a Transport

The engine (runner) schedules, sends and times; it never knows what an OpenAI chunk is.
Workloads (`workloads/`) know their protocol and never schedule.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from benchmaker.engine.records import RequestSpec, Sample


@runtime_checkable
class StreamParser(Protocol):
    """Parses one response body as it arrives.

    `feed(data, t_ns, sample)` is called once per transport read with the bytes of that
    read and its arrival stamp (ns offset from the run's t0). It records token-bearing
    events on the sample: sets `first_token_ns`/`first_content_ns` on the first ones and
    appends to `token_event_ns` (and `token_event_tokens`), counts `n_token_events`.
    `finish(sample)` is called once after the body ended (status < 400): it sets usage,
    `finish_reason`, `finish_class`, `refusal`, `output_chars` and the outcome (`ok`,
    `empty_output`, `aborted` or `protocol_error` with `error`). `text` is the generated
    content so far (for graders).
    """

    @property
    def text(self) -> str: ...  # read-only: an attribute or a property

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None: ...

    def finish(self, sample: Sample) -> None: ...


@runtime_checkable
class Workload(Protocol):
    """A request source and its protocol.

    `request(seq)` returns the seq-th request (datasets cycle); it runs before the
    timed span. `parser(spec)` returns a fresh StreamParser for that request's body.
    """

    name: str

    def request(self, seq: int) -> RequestSpec: ...

    def parser(self, spec: RequestSpec) -> StreamParser: ...


@runtime_checkable
class CallableWorkload(Protocol):
    """A workload that performs each unit of work itself instead of one HTTP request.

    The runner calls `await execute(seq, sample, t0_ns)` in place of sending a request:
    `sample.sent_ns` is stamped just before the call and `sample.end_ns` just after it
    returns (E2E = the whole call), unless `execute` set `end_ns` itself. `execute` sets
    the outcome and may set `http_status`, `first_byte_ns`/`first_token_ns` (offsets
    from `t0_ns`, the run's perf_counter_ns origin), usage and `meta` (e.g. per-phase
    timings). It returns the text for post-response hooks (None: ""). An exception
    becomes a sample: TransportError -> transport_error, any other -> protocol_error.
    Optional `async start()` / `async aclose()` run before the clock starts / after the
    run (they may create and release a shared resource, e.g. a sandbox).
    """

    name: str

    async def execute(self, seq: int, sample: Sample, t0_ns: int) -> str | None: ...


class Response(Protocol):
    """One response of a Transport: status, headers, then the body as byte chunks."""

    status: int
    headers: Mapping[str, str]

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...


class Transport(Protocol):
    """Sends requests for the engine's hot path.

    `stream(spec)` is an async context manager yielding a Response once the status
    line and headers arrived. Failures raise `benchmaker.engine.errors.TransportError` or
    `ConnectTimeout`. `aclose()` releases pooled connections.
    """

    def stream(self, spec: RequestSpec) -> AbstractAsyncContextManager[Response]: ...

    async def aclose(self) -> None: ...


# Hooks run outside the timed span. A pre-request hook may return a new RequestSpec
# (e.g. signed headers) or None to keep the one it was given (mutated in place).
PreRequestHook = Callable[[RequestSpec], "RequestSpec | None | Awaitable[RequestSpec | None]"]
# A post-response hook sees the spec, the finished sample and the generated text; it may
# set `sample.grade`/`sample.outcome` (graded_wrong, grading_error) or `sample.meta`.
PostResponseHook = Callable[[RequestSpec, Sample, str], "None | Awaitable[None]"]
