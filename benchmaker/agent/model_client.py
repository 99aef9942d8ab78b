"""Streaming OpenAI chat client for the agent harness, measured (docs/metrics.md).

`ModelClient.chat(messages)` posts `/v1/chat/completions` (`stream: true`,
`stream_options.include_usage: true`) and returns a `ChatResult`: the assistant message
as received (for the next request) and the call's engine `Sample` (one line of a
point's samples.jsonl). `ModelClient.stream(messages)` yields each body read (bytes) as
it arrives and fills the same `ChatResult` (`.result`) as it goes.

HTTP: an engine transport (benchmaker.engine.transport): the engine's own HTTP/1.1 client
by default (benchmaker.engine.http1.RawTransport, one keep-alive pool per ModelClient),
any engine transport given as `transport=`, or the engine's AiohttpTransport over a
given aiohttp `session=` (its pool). A 0.13 MB request costs ~1x its orjson
serialisation on RawTransport against ~3x on aiohttp (benchmarks/long_session.py).
A conversation kept in a `MessageLog` (the harness's) is sent from its messages' kept
JSON bytes: a turn serialises only its new messages.

One exchange, one instrument: each call is the engine's RequestExchange (read by read,
under the engine's deadlines: `timeout_s` total and `idle_timeout_s` idle, in s; a
deadline that passed while the consumer held a read ends the call at its next read),
its failures mapped to outcomes as the runner's, its body parsed by the engine's
OpenAI stream parser (benchmaker.apis.openai_chat.OpenAIChatParser), so a replayed turn
and a `benchmaker llm` request follow the same rules (docs/stream-rules.md; outcomes and
stamps: docs/metrics.md): usage with the DeepSeek cached-token fallback, a non-streamed
body without a token timeline (no TTFT), a body cut short or a decoded body over the cap
a transport_error. The parser sees body bytes only; the response headers are seen
here: a complete response (ok, aborted or empty_output) carrying
`x-replay-recorded-error` gets outcome `recorded_error`, set after the parser's finish.
This module only adds what a conversation needs and the engine does not keep: the
assistant message of choice 0 (content, reasoning, tool calls reassembled by index,
arguments byte-exact), the raw usage object and the model time.

Model time: the time spent *inside the awaits* on the model's response: the await that
sends the request and receives the status line + headers, and every await on a body
read. The time the consumer spends on what a read yields
(a tool run, logging, a 200 ms sleep) is outside those awaits and never counted. httpx's
`Response.elapsed` stops at the stream's close, so it would include the consumer's time
(the transport times nothing); this client times the awaits themselves.

Stamps of the Sample are `time.perf_counter_ns() - t0_ns` (`ModelClient(t0_ns=...)`,
the run's origin; default 0, i.e. absolute stamps), as the engine's: `first_byte_ns`
is the first body read returned, `end_ns` the read that completed the body (before the
consumer holds it) or the failure. `ChatResult.sent_ns`, `first_token_ns`,
`first_visible_ns` (= first_content), `end_ns` give the same stamps as absolute
perf_counter_ns values.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from benchmaker.apis.openai_chat import OpenAIChatAssembler, ToolCallDelta
from benchmaker.engine.http1 import RawTransport
from benchmaker.engine.records import Outcome, RequestSpec, Sample
from benchmaker.engine.request import RequestExchange, shared_deadlines
from benchmaker.engine.transport import AiohttpTransport

RECORDED_ERROR_HEADER = "x-replay-recorded-error"
"""Response header of the replay server on a turn that failed in the original run
(value: the recorded finish_reason; benchmaker/replay_server/server.py)."""

# parser outcomes of a complete response that a recorded failure is served as: the
# recorded finish reason (aborted), or no text at all; a cut or malformed stream stays
# the failure it is
_AS_RECORDED = frozenset({Outcome.OK.value, Outcome.ABORTED.value, Outcome.EMPTY_OUTPUT.value})


@dataclass(slots=True)
class ChatResult:
    """The outcome of one chat call: its engine `sample` and the assistant message.

    `sample` is a benchmaker.engine.records.Sample whose outcome, status, stamps (offsets from
    `t0_ns`), token events, usage, finish_reason and bytes follow the engine's rules
    (docs/stream-rules.md); the caller fills run_id, seq, lane, sweep_point and meta before
    writing it. `outcome` is an Outcome value: ok, http_error (status >= 400; `error`
    holds the error body), transport_error, timeout (`timeout_kind` connect, total or
    idle), protocol_error, empty_output, aborted, recorded_error (docs/metrics.md). `content`/`reasoning` are None when no delta
    carried the field, "" when deltas carried it empty. `usage` is the server's usage
    object, None when it sent none (never zeros). `model_time_ns` is the time spent
    inside the awaits on the response only. `headers` keeps the response's `x-replay-*`
    headers (lower-cased names).
    """

    sample: Sample = field(default_factory=lambda: Sample(run_id="", seq=0, lane="agent"))
    t0_ns: int = 0
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    model_time_ns: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    # -- the sample's fields, under the names the harness reads -----------------------

    @property
    def status(self) -> int | None:
        return self.sample.http_status

    @property
    def outcome(self) -> str:
        return self.sample.outcome

    @property
    def timeout_kind(self) -> str | None:
        return self.sample.timeout_kind

    @property
    def error(self) -> str | None:
        return self.sample.error

    @property
    def finish_reason(self) -> str | None:
        return self.sample.finish_reason

    @property
    def ok(self) -> bool:
        return self.sample.outcome == Outcome.OK.value

    def _abs(self, offset: int | None) -> int | None:
        return None if offset is None else offset + self.t0_ns

    def _stamped(self, offset: int | None, what: str) -> int:
        if offset is None:
            raise RuntimeError(f"the call has no {what} stamp (it has not run)")
        return offset + self.t0_ns

    @property
    def sent_ns(self) -> int:
        """Absolute perf_counter_ns just before the request was sent."""
        return self._stamped(self.sample.sent_ns, "send")

    @property
    def first_byte_ns(self) -> int | None:
        return self._abs(self.sample.first_byte_ns)

    @property
    def first_token_ns(self) -> int | None:
        """Absolute stamp of the first token event (None: no token, or not streamed)."""
        return self._abs(self.sample.first_token_ns)

    @property
    def first_visible_ns(self) -> int | None:
        """Absolute stamp of the first non-empty `content` (TTFC)."""
        return self._abs(self.sample.first_content_ns)

    @property
    def end_ns(self) -> int:
        """Absolute perf_counter_ns when the body ended or the call failed."""
        return self._stamped(self.sample.end_ns, "end")

    @property
    def prompt_tokens(self) -> int | None:
        return self.sample.prompt_tokens

    @property
    def output_tokens(self) -> int | None:
        return self.sample.output_tokens

    @property
    def cached_tokens(self) -> int | None:
        return self.sample.cached_tokens

    def message(self, *, include_reasoning: bool = True) -> dict[str, Any]:
        """The assistant message as received, in OpenAI request shape:
        {"role": "assistant", "content": str|None, "tool_calls": [...]} (tool_calls only
        when there are some), plus "reasoning_content" when reasoning was received and
        `include_reasoning`."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if include_reasoning and self.reasoning is not None:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": tc.id, "type": tc.type, "function": {"name": tc.name, "arguments": tc.arguments}}
                for tc in self.tool_calls
            ]
        return msg


class ModelClient:
    """An OpenAI-compatible chat client bound to one base URL.

        client = ModelClient("http://127.0.0.1:8000", timeout_s=600.0)  # 600 s per call
        result = await client.chat([{"role": "user", "content": "hi"}])
        result.sample.first_token_ns - result.sample.sent_ns   # TTFT in ns
        await client.aclose()

    `base_url` may end in `/v1` or not; requests go to `<base>/v1/chat/completions`.
    `api_key` becomes a bearer token. `timeout_s` (s) bounds each whole call (total) and
    `idle_timeout_s` (s) each wait for the body's next bytes (None: no such deadline);
    a fired deadline gives outcome `timeout` (module docstring).
    `session`: an aiohttp ClientSession to send with (through the engine's
    AiohttpTransport; left open); else `transport`: an engine transport
    (benchmaker.engine.transport; left open); else the client's own RawTransport,
    closed by `aclose()`.
    `t0_ns`: the perf_counter_ns origin of the samples' stamps (the run's t0).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout_s: float = 600.0,
        idle_timeout_s: float | None = 300.0,
        session: aiohttp.ClientSession | None = None,
        transport: Any = None,
        t0_ns: int = 0,
    ) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.base_url = base
        self.url = base + "/v1/chat/completions"
        self.api_key = api_key
        self.model = model
        self.t0_ns = t0_ns
        self.timeout_s = timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._headers = {"Content-Type": "application/json"}  # per call: never changed
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._own_transport = session is None and transport is None
        if session is not None:  # the engine's aiohttp transport over it; the deadlines are the exchange's
            transport = AiohttpTransport(connect_timeout_s=None, session=session)
        self._transport = transport
        # see stream(): (model, stream, id of the tools list) -> (that list, frame)
        self._frames: dict[tuple[str | None, bool, int], tuple[Any, tuple[bytes, bytes]]] = {}

    async def _started_transport(self) -> Any:
        if self._transport is None:  # the engine's HTTP/1.1 client; the deadlines are the exchange's
            self._transport = RawTransport(connect_timeout_s=None)
            await self._transport.start()
        return self._transport

    async def aclose(self) -> None:
        """Close the client's own connections (a given session or transport is the caller's)."""
        if self._own_transport and self._transport is not None:
            await self._transport.aclose()
            self._transport = None

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def body(
        self, messages: list[dict[str, Any]], *, stream: bool = True, model: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        """The JSON request body: model (when known), messages, stream (+ include_usage)."""
        body: dict[str, Any] = {}
        m = model or self.model
        if m is not None:
            body["model"] = m
        body["messages"] = messages
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(extra)
        return body

    async def chat(
        self,
        messages: list[dict[str, Any]] | MessageLog,
        *,
        stream: bool = True,
        model: str | None = None,
        **extra: Any,
    ) -> ChatResult:
        """One call, consumed whole. Never raises for HTTP/transport/protocol failures:
        they become the result's `outcome`."""
        s = self.stream(messages, stream=stream, model=model, **extra)
        async for _ in s:
            pass
        return s.result

    def stream(
        self,
        messages: list[dict[str, Any]] | MessageLog,
        *,
        stream: bool = True,
        model: str | None = None,
        **extra: Any,
    ) -> ChatStream:
        """A `ChatStream`: iterate it to get each body read (bytes) as it arrives (an
        error body is not yielded); its `.result` is complete once the iteration ended.
        `messages` may be a MessageLog: its kept bytes are sent (the same bytes)."""
        if isinstance(messages, MessageLog):
            # the bytes around the messages depend on model, stream and extra only: kept
            # per (model, stream) when there is no extra, and per (model, stream, the
            # tools list) when `tools` is the only extra (a replayed trajectory's: one
            # list object per trajectory, held by the entry, so its id stays its own)
            tools = extra.get("tools") if len(extra) == 1 else None
            key = (model or self.model, stream, id(tools)) if not extra or tools is not None else None
            cached = self._frames.get(key) if key is not None else None
            frame = cached[1] if cached is not None and cached[0] is tools else None
            if frame is None:
                frame = MessageLog.frame(self.body([], stream=stream, model=model, **extra))
                if key is not None and frame is not None and len(self._frames) < 64:
                    self._frames[key] = (tools, frame)
            payload: bytes | list[bytes]
            if frame is not None and messages._kept:
                payload = messages._pieces(frame)
            else:
                payload = self.encode(self.body(messages.messages, stream=stream, model=model, **extra))
        else:
            payload = self.encode(self.body(messages, stream=stream, model=model, **extra))
        caps = [v for v in (extra.get("max_tokens"), extra.get("max_completion_tokens")) if type(v) is int]
        return ChatStream(self, payload, stream, min(caps) if caps else None)

    def forward(self, path: str, payload: bytes, *, stream: bool, headers: dict[str, str], parser: Any) -> ChatStream:
        """A `ChatStream` of `payload` posted as it is to `<base>path` (`path` with its
        query string) with `headers`, its response read by `parser` (any API's parser:
        `feed(data, t_ns, sample)`, `finish(sample)`, and the assistant message as
        `content`, `reasoning`, `tool_calls`, `raw_usage()`; benchmaker.agent.wire_calls),
        under the client's deadlines: command mode's proxy for the non-chat APIs."""
        return ChatStream(self, payload, stream, url=self.base_url + path, headers=headers, parser=parser)

    @staticmethod
    def encode(body: dict[str, Any]) -> bytes:
        """The request bytes of `body`: compact UTF-8 JSON by orjson (
        4.67 -> 2.52 ms per turn at turn 400 of a long session against json.dumps).
        What orjson refuses (a lone surrogate in a string, an int beyond 64 bits) is
        written by json.dumps (ASCII, `\\udXXX` escapes), so no body fails to encode."""
        try:
            return orjson.dumps(body)
        except orjson.JSONEncodeError:
            return json.dumps(body).encode()


class MessageLog:
    """A conversation's request messages, each message's JSON kept as bytes when it is
    appended, so that sending turn k costs the serialisation of the
    messages new since turn k-1, where encoding the whole body each turn re-serialises
    the history (0.6 ms at turn 400 of the 453-turn pi session, 0.58 MB; quadratic over
    a session).

        log = MessageLog(initial_messages)          # list-like: len, iteration, [i]
        log.append(response); log.extend(observation_messages)
        result = await client.chat(log)             # ModelClient.stream(log) likewise

    `body_bytes(body)` is byte for byte `ModelClient.encode(body)` of the body with these
    messages in it (compact orjson: each message's bytes joined by ","); `body_pieces(body)`
    the same bytes as a list of pieces, which the engine's HTTP/1.1 client sends without
    joining them (benchmaker.engine.http1). The kept bytes are immutable segments whose sizes
    at least halve from one to the next (a send joins the messages new since the last
    one into a segment and merges it into the previous segment while that one is not
    over twice its size), so a body is O(log n) pieces and a byte is copied O(log n)
    times over a session, not once per turn. A message is not to be changed once
    appended (its bytes are kept). A message orjson refuses (a lone surrogate in a
    string, an int beyond 64 bits) stops the keeping: from then on the body is encoded
    whole (ModelClient.encode, with its json.dumps fallback)."""

    __slots__ = ("messages", "_segments", "_new", "_kept")

    def __init__(self, messages: Any = ()) -> None:
        self.messages: list[dict[str, Any]] = []
        self._segments: list[bytes] = []  # b'm0,m1', b',m2,m3', ...: the kept messages sent so far
        self._new: list[bytes] = []  # the kept messages appended since (their bytes, no commas)
        self._kept = True
        self.extend(messages)

    def append(self, message: dict[str, Any]) -> None:
        self.extend((message,))

    def extend(self, messages: Any) -> None:
        """Append each of `messages` (an iterable) and keep its bytes (class docstring)."""
        msgs = self.messages
        for m in messages:
            msgs.append(m)
            if self._kept:
                try:
                    self._new.append(orjson.dumps(m))
                except orjson.JSONEncodeError:
                    self._kept = False
                    self._segments, self._new = [], []

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Any:
        return iter(self.messages)

    def __getitem__(self, index: Any) -> Any:
        return self.messages[index]

    def _kept_segments(self) -> list[bytes]:
        """The kept messages' bytes joined by ",", as segments (class docstring)."""
        segments, new = self._segments, self._new
        if new:
            seg = b",".join(new) if not segments else b",".join((b"", *new))
            new.clear()
            while segments and len(segments[-1]) <= 2 * len(seg):
                seg = segments.pop() + seg
            segments.append(seg)
        return segments

    @staticmethod
    def frame(body: dict[str, Any]) -> tuple[bytes, bytes] | None:
        """(the bytes before, the bytes after) the messages' bytes in the encoding of
        `body` (a ModelClient.body output): `{"model":"m","messages":[` and
        `],"stream":false}`; None when `body` has no "messages" or orjson refuses the rest."""
        keys = list(body)
        if "messages" not in body:
            return None
        at = keys.index("messages")
        head = {k: body[k] for k in keys[:at]}
        tail = {k: body[k] for k in keys[at + 1 :]}
        try:
            start = orjson.dumps(head)[:-1] + (b',"messages":[' if head else b'"messages":[')
            end = b"]," + orjson.dumps(tail)[1:] if tail else b"]}"
        except orjson.JSONEncodeError:
            return None
        return start, end

    def _pieces(self, frame: tuple[bytes, bytes]) -> list[bytes]:
        """The body's pieces in `frame` (kept messages only)."""
        return [frame[0], *self._kept_segments(), frame[1]]

    def body_pieces(self, body: dict[str, Any]) -> list[bytes]:
        """The request bytes of `body` (ModelClient.body output) with this log's messages
        as its "messages" (whatever `body["messages"]` holds is left aside), as a list of
        byte strings to send one after the other (joined: `body_bytes`)."""
        if self._kept:
            frame = self.frame(body)
            if frame is not None:
                return self._pieces(frame)
        return [ModelClient.encode({**body, "messages": self.messages})]

    def body_bytes(self, body: dict[str, Any]) -> bytes:
        """`body_pieces(body)` joined: byte for byte `ModelClient.encode` of the body."""
        return b"".join(self.body_pieces(body))


class ChatStream:
    """Async iterator over the body reads of one call; `.result` is the ChatResult.
    Model time is accumulated inside the awaits only (module docstring)."""

    def __init__(
        self,
        client: ModelClient,
        payload: bytes | list[bytes],
        stream: bool,
        max_tokens: int | None = None,
        *,
        url: str | None = None,
        headers: dict[str, str] | None = None,
        parser: Any = None,
    ) -> None:
        self._client = client
        self._max_tokens = max_tokens  # the body's cap: a usage count above it is flagged
        self._payload = payload
        self._stream = stream
        self._url = url  # None: the client's chat URL and headers, read by OpenAIChatAssembler
        self._headers = headers
        self._parser = parser
        self.result = ChatResult(Sample("", 0, "agent"), client.t0_ns)  # (sample, t0_ns), no default factory
        self.status: int | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._run()

    async def _run(self) -> AsyncIterator[bytes]:
        r = self.result
        s = r.sample
        client = self._client
        transport = client._transport
        loop = transport.loop if type(transport) is RawTransport else None
        if loop is None:  # asyncio.get_running_loop costs a getpid() system call (CPython 3.11)
            loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("ModelClient: a call runs inside a task (its deadlines cancel it)")
        timeout_s, idle_s = client.timeout_s, client.idle_timeout_s
        deadlines = (
            shared_deadlines(loop, total_s=timeout_s, idle_s=idle_s)
            if timeout_s is not None or idle_s is not None
            else None
        )
        parser = self._parser or OpenAIChatAssembler(stream=self._stream, max_tokens=self._max_tokens)
        payload = self._payload
        s.bytes_sent = len(payload) if isinstance(payload, bytes) else sum(map(len, payload))
        ex = RequestExchange(s, client.t0_ns, deadlines, task)
        try:
            ex.start()
            s.intended_ns = s.sent_ns
            if transport is None:
                transport = await client._started_transport()
            if type(transport) is not RawTransport and type(payload) is list:  # RawTransport sends pieces as they are
                payload = b"".join(payload)
            url, headers = self._url or client.url, self._headers if self._headers is not None else client._headers
            self.status = await ex.open(transport, RequestSpec("POST", url, headers, payload, self._stream))
            r.headers = ex.headers_with_prefix("x-replay-")
            while data := await ex.read(parser):
                yield data
            if ex.body_read and s.http_status is not None and s.http_status < 400:
                parser.finish(s)
                recorded = r.headers.get(RECORDED_ERROR_HEADER)
                if recorded is not None and s.outcome in _AS_RECORDED:
                    s.outcome = Outcome.RECORDED_ERROR.value
                    s.error = f"failed in the original run (finish_reason {recorded}), served as recorded"
        except Exception as exc:  # the engine's mapping: a deadline, connect, transport, a parser bug
            ex.record(exc)
        finally:
            r.model_time_ns += ex.wait_ns
            await ex.close()
            if s.end_ns is None:
                s.end_ns = time.perf_counter_ns() - client.t0_ns
            if not ex.body_read and s.outcome == Outcome.OK.value:  # cancelled, or the consumer stopped reading
                s.outcome, s.error = Outcome.CANCELLED.value, "cancelled before the body ended"
            r.content, r.reasoning, r.tool_calls = parser.content, parser.reasoning, parser.tool_calls
            r.usage = parser.raw_usage()
