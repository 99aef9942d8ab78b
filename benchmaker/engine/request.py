"""One request's exchange: send it over a transport, read its body under the engine's
deadlines, feed the API's stream parser, stamp every read, record the outcome.

The runner (benchmaker.engine.runner) sends every request through it; the agent's model
client (benchmaker.agent.model_client) too, so a replayed turn and a `benchmaker llm`
request are timed, cut and recorded by one set of rules.

    deadlines = Deadlines(total_s=600.0, idle_s=30.0)   # one per event loop and rules
    ex = RequestExchange(sample, t0_ns, deadlines, asyncio.current_task())
    ex.start()                                   # sample.sent_ns; the deadlines apply
    try:
        await ex.run(transport, spec, parser)    # the whole body (the runner)
    except Exception as exc:
        ex.record(exc)                           # the outcome of a failed exchange
    ex.stop()

or read by read, when a consumer handles each read as it comes (the model client, the
recording proxy's relay):

    status = await ex.open(transport, spec)      # accepts=: error bodies read too
    ex.hold()                                    # when the consumer takes the head (a proxy)
    while data := await ex.read(parser):
        ...                                      # the consumer's time: not the exchange's
    parser.finish(sample)                        # when ex.body_read
    await ex.close()

Stamps: `time.perf_counter_ns()`; the sample's are offsets from `t0_ns` (docs/metrics.md):
`sent_ns` just before the transport is called, `first_byte_ns` the first body read,
each read's stamp handed to `parser.feed`, `end_ns` when the body ended or the exchange
failed (on RawTransport, which knows when a body is complete, the read that completed it;
elsewhere the read that found no more). `bytes_received` is the body's size once it
ended (0 for a body cut or timed out, as its parser's totals are not taken then).

Deadlines (the config's `timeouts`, in s; each None for none), from the send:

    total  until the body ended
    ttft   until the first token event (sample.first_token_ns)
    idle   the longest wait for the body's next bytes: from the send, then from each
           read's stamp; time a consumer holds a read (between `read` returning and the
           next `read` call) is not waiting and does not count

One periodic check per Deadlines (every min(deadline)/20 s, clamped to 1-50 ms) cancels
an exchange past its earliest deadline while it waits, so a deadline fires within one
period of its time; a timer per request would cost ~12 us of CPU each on the hot path
(benchmarks/engine.py). A held exchange is never cancelled (the consumer's own code runs
then); its next `read` raises DeadlineExceeded at once when the total or TTFT deadline
passed meanwhile.

Outcomes (`record`, `record_failure`, `record_http_error`): status >= 400 not accepted
-> http_error with the body kept; a deadline -> timeout with its timeout_kind (total,
ttft, idle) and no error text; ConnectTimeout -> timeout (connect); TransportError (refused,
lost, a body cut short, a decoded body over the cap) -> transport_error; anything else (a
parser bug) -> protocol_error "<Type>: <text>". A cancellation that is not a deadline's
is no outcome: the caller records it and lets it propagate.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

from benchmaker.engine.errors import ConnectTimeout, TransportError
from benchmaker.engine.http1 import RawTransport
from benchmaker.engine.records import Outcome, RequestSpec, Sample, TimeoutKind

__all__ = [
    "DeadlineExceeded",
    "Deadlines",
    "RequestExchange",
    "record_failure",
    "record_http_error",
    "shared_deadlines",
]

_ERROR_BODY_MAX = 4096
_NS_PER_S = 1_000_000_000
_TIMEOUT = Outcome.TIMEOUT.value


def record_http_error(sample: Sample, status: int, body: bytes, end_ns: int) -> None:
    """Record on `sample` a response of status >= 400 that its request did not accept:
    outcome http_error, `error` the body's first 4096 bytes as UTF-8 (bad bytes
    replaced; "HTTP <status>" for an empty body), bytes_received, end_ns (ns from t0)
    and first_byte_ns (end_ns when the body had bytes, else None)."""
    sample.end_ns = end_ns
    sample.first_byte_ns = end_ns if body else None
    sample.bytes_received = len(body)
    sample.outcome = Outcome.HTTP_ERROR.value
    sample.error = body[:_ERROR_BODY_MAX].decode("utf-8", "replace") or f"HTTP {status}"


def record_failure(sample: Sample, exc: Exception) -> None:
    """Record on `sample` the outcome of a request that raised `exc` instead of ending
    (a cancellation is not one):

        ConnectTimeout   timeout, timeout_kind connect, `error` its text
        TimeoutError     timeout, timeout_kind total, `error` "timeout"
        TransportError   transport_error, `error` its text
        any other        protocol_error, `error` "<Type>: <text>" (a parser or
                         workload bug becomes a sample)
    """
    if isinstance(exc, ConnectTimeout):
        sample.outcome, sample.timeout_kind, sample.error = _TIMEOUT, TimeoutKind.CONNECT.value, str(exc)
    elif isinstance(exc, TimeoutError):
        sample.outcome, sample.timeout_kind, sample.error = _TIMEOUT, TimeoutKind.TOTAL.value, "timeout"
    elif isinstance(exc, TransportError):
        sample.outcome, sample.error = Outcome.TRANSPORT_ERROR.value, str(exc)
    else:
        sample.outcome, sample.error = Outcome.PROTOCOL_ERROR.value, f"{type(exc).__name__}: {exc}"


class DeadlineExceeded(Exception):
    """An exchange's deadline passed: `kind` is its TimeoutKind value (total, ttft, idle)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"{kind} deadline passed")
        self.kind = kind


class Deadlines:
    """The total, TTFT and idle deadlines (s, each None for none; module docstring) of
    the exchanges in flight on one event loop, kept by one periodic check (a task on
    the loop of the first exchange watched).

    The check task starts with the first exchange watched and ends at a check that
    finds none (so a client at rest keeps no task); `aclose()` ends it at once.
    `period_s` is min(deadline)/20 clamped to 1-50 ms. Raises ValueError when a
    deadline is not positive. Times are perf_counter_ns values (absolute)."""

    __slots__ = ("total_ns", "ttft_ns", "idle_ns", "period_s", "_watched", "_task")

    def __init__(
        self,
        *,
        total_s: float | None = None,
        ttft_s: float | None = None,
        idle_s: float | None = None,
    ) -> None:
        given = [t for t in (total_s, ttft_s, idle_s) if t is not None]
        if any(t <= 0 for t in given):
            raise ValueError(f"deadlines must be positive s (total {total_s}, ttft {ttft_s}, idle {idle_s})")
        self.total_ns = round(total_s * _NS_PER_S) if total_s is not None else None
        self.ttft_ns = round(ttft_s * _NS_PER_S) if ttft_s is not None else None
        self.idle_ns = round(idle_s * _NS_PER_S) if idle_s is not None else None
        self.period_s = min(max(min(given) / 20, 0.001), 0.05) if given else 0.05
        self._watched: set[RequestExchange] = set()
        self._task: asyncio.Task[None] | None = None

    def due(self, ex: RequestExchange, now: int) -> str | None:
        """The kind of the first deadline of `ex` passed at `now` (perf_counter_ns):
        total, else ttft (no token yet), else idle (since its last read); None when none."""
        total = self.total_ns
        if total is not None and now >= ex.sent_at + total:
            return TimeoutKind.TOTAL.value
        ttft = self.ttft_ns
        if ttft is not None and ex.sample.first_token_ns is None and now >= ex.sent_at + ttft:
            return TimeoutKind.TTFT.value
        idle = self.idle_ns
        if idle is not None and now >= ex.read_at + idle:
            return TimeoutKind.IDLE.value
        return None

    def check(self, now: int) -> None:
        """Cancel each watched exchange that waits past a deadline at `now`
        (perf_counter_ns), recording the deadline's kind on it (`fired`); held ones are
        left to their next read."""
        due = self.due
        for ex in list(self._watched):
            if ex.held_at:
                continue
            kind = due(ex, now)
            if kind is not None:
                ex.fired = kind
                self._watched.discard(ex)
                if ex.task is not None:
                    ex.task.cancel()

    def watch(self, ex: RequestExchange) -> None:
        """Keep `ex`'s deadlines until `unwatch` (a deadline cancels `ex.task`, on its
        loop; an exchange without a task is not cut)."""
        task = ex.task
        if task is None:
            return
        self._watched.add(ex)
        if self._task is None:
            self._task = task.get_loop().create_task(self._run())

    def unwatch(self, ex: RequestExchange) -> None:
        self._watched.discard(ex)

    async def _run(self) -> None:
        pc = time.perf_counter_ns
        try:
            while self._watched:
                await asyncio.sleep(self.period_s)
                self.check(pc())
        finally:
            self._task = None

    async def aclose(self) -> None:
        """End the check task (exchanges still watched are no longer cut)."""
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple[float | None, ...], Deadlines]] = weakref.WeakKeyDictionary()


def shared_deadlines(
    loop: asyncio.AbstractEventLoop,
    *,
    total_s: float | None = None,
    ttft_s: float | None = None,
    idle_s: float | None = None,
) -> Deadlines:
    """The one Deadlines of `loop` with these deadlines (s), made on first use: the
    exchanges of every client on a loop that keep the same deadlines share one
    periodic check (64 agents' calls: one task, not 64). Forgotten with the loop."""
    by_rules = _SHARED.get(loop)
    if by_rules is None:
        by_rules = _SHARED[loop] = {}
    key = (total_s, ttft_s, idle_s)
    dl = by_rules.get(key)
    if dl is None:
        dl = by_rules[key] = Deadlines(total_s=total_s, ttft_s=ttft_s, idle_s=idle_s)
    return dl


class RequestExchange:
    """One request and its response under a Deadlines (module docstring).

    `sample` gets the stamps (ns from `t0_ns`), status, bytes and outcome; `deadlines`
    None keeps none; `task` is the task the exchange runs in (a deadline cancels it;
    None only without deadlines). `wait_ns` is the time spent inside the exchange's
    awaits (sending and the header wait, each body read), the consumer's time between
    reads left out. `body_read` is True once the body ended and is the parser's to
    finish (a status < 400, or an accepted one)."""

    __slots__ = (
        "sample",
        "t0_ns",
        "deadlines",
        "task",
        "cancelling",
        "sent_at",
        "read_at",
        "held_at",
        "ended_at",
        "fired",
        "wait_ns",
        "nbytes",
        "body_read",
        "_cm",
        "_resp",
        "_raw",
        "_chunks",
    )

    def __init__(self, sample: Sample, t0_ns: int, deadlines: Deadlines | None, task: Any = None) -> None:
        self.sample = sample
        self.t0_ns = t0_ns
        self.deadlines = deadlines
        self.task = task
        self.cancelling = 0
        self.sent_at = 0  # perf_counter_ns of the send
        self.read_at = 0  # perf_counter_ns the idle deadline runs from
        self.held_at = 0  # perf_counter_ns a consumer took the last read (0: not held)
        self.ended_at = 0  # perf_counter_ns the body was seen complete (read by read)
        self.fired: str | None = None  # the deadline that cancelled the task
        self.wait_ns = 0
        self.nbytes = 0  # body bytes read so far (the sample's bytes_received once the body ended)
        self.body_read = False
        self._cm: Any = None
        self._resp: Any = None
        self._raw: Any = None
        self._chunks: Any = None

    def start(self) -> None:
        """Stamp the send (`sample.sent_ns`) and put the exchange under its deadlines."""
        dl = self.deadlines
        if dl is not None and self.task is not None:
            self.cancelling = self.task.cancelling()
        self.sent_at = self.read_at = now = time.perf_counter_ns()
        self.sample.sent_ns = now - self.t0_ns
        if dl is not None:
            dl.watch(self)

    def stop(self) -> None:
        """Take the exchange out of its deadlines (it ended, one way or another)."""
        if self.deadlines is not None:
            self.deadlines.unwatch(self)

    async def run(self, transport: Any, spec: RequestSpec, parser: Any, accepts: Any = None) -> None:
        """Send `spec` and read the whole body into `parser` (feed per read, then
        finish). A status >= 400 is an `http_error` with its body kept, unless
        `accepts(status)` says it is expected; then the parser reads it as usual.
        Raises what the transport or parser raises (`record` maps it), CancelledError
        when a deadline fired."""
        pc = time.perf_counter_ns
        t0 = self.t0_ns
        sample = self.sample
        async with transport.stream(spec) as resp:
            status = sample.http_status = resp.status
            if status >= 400 and not (accepts is not None and accepts(status)):
                body = await resp.read()
                record_http_error(sample, status, body, pc() - t0)
                return
            feed = parser.feed
            nbytes = 0
            async for data in resp.chunks():
                now = pc()
                t = now - t0
                if nbytes == 0:
                    sample.first_byte_ns = t
                nbytes += len(data)
                feed(data, t, sample)
                self.read_at = now
            sample.end_ns = pc() - t0
            sample.bytes_received = nbytes
        self.body_read = True
        parser.finish(sample)

    async def open(self, transport: Any, spec: RequestSpec, accepts: Any = None) -> int:
        """Send `spec` (any method, URL with its query, headers as given) and wait for
        the status line and headers; returns the status. A status >= 400 has its body
        read and recorded (http_error) here, unless `accepts(status)` says it is
        expected: then `read` reads it as any body, every byte (a proxy relays it).
        Raises what the transport raises, DeadlineExceeded when a deadline fired."""
        sample = self.sample
        pc = time.perf_counter_ns
        try:
            cm = self._cm = transport.stream(spec)
            if type(transport) is RawTransport:
                self._raw = cm
            resp = self._resp = await cm.__aenter__()
            status = sample.http_status = resp.status
            if status >= 400 and (accepts is None or not accepts(status)):
                body = await resp.read()
                record_http_error(sample, status, body, pc() - self.t0_ns)
            else:
                self._chunks = resp.chunks()
        except asyncio.CancelledError:
            if self._deadline_cancelled():
                raise DeadlineExceeded(self.fired or "") from None
            raise
        finally:
            self.wait_ns += pc() - self.sent_at
        return status

    async def read(self, parser: Any) -> bytes:
        """The next body read (bytes), stamped and fed to `parser`; b"" once the body
        ended (end_ns and bytes_received set, `body_read` True) or after an error
        status. Raises what the transport raises, DeadlineExceeded when a deadline
        fired (while waiting, or passed while the consumer held the last read)."""
        pc = time.perf_counter_ns
        start = pc()
        sample = self.sample
        if self.held_at:
            self.read_at += start - self.held_at
            self.held_at = 0
            dl = self.deadlines
            if dl is not None:
                kind = dl.due(self, start)
                if kind is not None:
                    raise DeadlineExceeded(kind)
        chunks = self._chunks
        if chunks is None or self.body_read:
            return b""
        t0 = self.t0_ns
        if self.ended_at:  # the last read brought the end: no read waits for it
            sample.end_ns = self.ended_at - t0
            sample.bytes_received = self.nbytes
            self.body_read = True
            return b""
        try:
            data = await chunks.__anext__()
        except StopAsyncIteration:
            data = b""
        except asyncio.CancelledError:
            if self._deadline_cancelled():
                raise DeadlineExceeded(self.fired or "") from None
            raise
        finally:
            now = pc()
            self.wait_ns += now - start
        if not data:
            sample.end_ns = now - t0
            sample.bytes_received = self.nbytes
            self.body_read = True
            return b""
        t = now - t0
        if self.nbytes == 0:
            sample.first_byte_ns = t
        self.nbytes += len(data)
        parser.feed(data, t, sample)
        self.read_at = now
        self.held_at = after = pc()
        raw = self._raw
        if raw is not None and raw.complete:  # every byte is read: the body ended here
            self.ended_at = after
        return data

    def hold(self) -> None:
        """The consumer takes the response head after `open` (relays it, say): until
        the next `read`, as between two reads, the exchange is held (its own code runs:
        no deadline cancels it, the time is not waiting)."""
        self.held_at = time.perf_counter_ns()

    def response_headers(self) -> list[tuple[str, str]]:
        """Every response header as (lower-case name, value) in the order received, a
        repeated one once per line (two Set-Cookie lines stay two); [] before `open`
        returned. On a transport that keeps a dict of headers (httpx), repeated
        headers come joined with ", "."""
        if self._raw is not None:
            return self._raw.header_items()
        if self._resp is None:
            return []
        return [(k.lower(), v) for k, v in self._resp.headers.items()]

    def headers_with_prefix(self, prefix: str) -> dict[str, str]:
        """The response headers whose lower-case name starts with `prefix`
        (lower-case), names lower-cased; {} before `open` returned."""
        if self._raw is not None:
            return self._raw.headers_with_prefix(prefix)
        if self._resp is None:
            return {}
        return {k.lower(): v for k, v in self._resp.headers.items() if k.lower().startswith(prefix)}

    async def close(self) -> None:
        """Leave the response (its connection back to the pool when complete) and the
        deadlines."""
        self.stop()
        cm, self._cm = self._cm, None
        if cm is not None and self._resp is not None:
            await cm.__aexit__(None, None, None)

    def _deadline_cancelled(self) -> bool:
        """After a CancelledError out of an await: True when a deadline cancelled the
        task and nothing else did (that cancellation is then taken back)."""
        return self.fired is not None and self.task is not None and self.task.uncancel() <= self.cancelling

    def record(self, exc: BaseException) -> bool:
        """Record on the sample the outcome of the exchange that raised `exc` (module
        docstring), `end_ns` now (kept when set, for a parser's failure after the
        body). Returns False, recording nothing, for a cancellation that is not a
        deadline's."""
        sample = self.sample
        now = time.perf_counter_ns() - self.t0_ns
        if isinstance(exc, asyncio.CancelledError):
            if not self._deadline_cancelled():
                return False
            kind: str | None = self.fired
        elif isinstance(exc, DeadlineExceeded):
            kind = exc.kind
        else:
            kind = None
        if kind is not None:
            sample.end_ns = now
            sample.outcome, sample.timeout_kind = _TIMEOUT, kind
        elif isinstance(exc, (ConnectTimeout, TransportError)):
            sample.end_ns = now
            record_failure(sample, exc)
        else:
            sample.end_ns = sample.end_ns or now
            sample.outcome = Outcome.PROTOCOL_ERROR.value
            sample.error = f"{type(exc).__name__}: {exc}"
        return True
