"""Streaming OpenAI chat client for the agent harness, measured (DESIGN §4, issue #6.2).

`ModelClient.chat(messages)` posts `/v1/chat/completions` with aiohttp (`stream: true`,
`stream_options.include_usage: true`), reassembles the assistant message and returns a
`ChatResult`. `ModelClient.stream(messages)` yields each parsed chunk as it arrives and
fills the same `ChatResult` (`.result`) as it goes.

Model time: the time spent *inside the awaits* on the model's response: the await that
sends the request and receives the status line + headers, and every await on a body
read (`resp.content.readany()`). The time the consumer spends on what a chunk yields
(a tool run, logging, a 200 ms sleep) is outside those awaits and never counted. httpx's
`Response.elapsed` stops at the stream's close, so it would include the consumer's time
(STYLE §3); this client times the awaits themselves.

Stamps are absolute `time.perf_counter_ns()` values:

    sent_ns           just before the request is handed to aiohttp
    first_byte_ns     the first body read returned
    first_token_ns    the read carrying the first generated token of any kind returned:
                      `content`, `reasoning_content`/`reasoning`, tool-call name or
                      arguments; a role-only or empty delta is not a token (provider TTFT)
    first_visible_ns  the read carrying the first non-empty `content` returned (what a
                      user would see first; TTFC)
    end_ns            the stream ended (`[DONE]` or EOF), or the call failed

SSE framing follows the WHATWG event-stream rules: lines end at CR, LF or CRLF only
(never U+2028), `data:` lines of one event are joined with LF, `:` lines are comments,
an empty line dispatches the event. Source: https://html.spec.whatwg.org/multipage/server-sent-events.html
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from benchmaker.records import Outcome, TimeoutKind

_ERROR_BODY_LIMIT = 4000


@dataclass(slots=True)
class ToolCallDelta:
    """A tool call reassembled from stream deltas (by `index`); `arguments` is the
    concatenation of every argument fragment, byte-exact."""

    index: int
    id: str | None = None
    type: str = "function"
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class ChatResult:
    """The outcome of one chat call.

    `outcome` is a `benchmaker.records.Outcome` value: ok, http_error (status >= 400;
    `error` holds the error body), transport_error, timeout (`timeout_kind` total or
    idle), protocol_error (bad JSON, stream cut before `[DONE]`), empty_output (2xx
    with no generated token and no tool call). `content`/`reasoning` are None when no
    delta carried the field, "" when deltas carried it empty. `usage` is the server's
    usage object, None when it sent none (never zeros). Times: see module docstring;
    `model_time_ns` is the time spent inside the awaits on the response only.
    `headers` keeps the response's `x-replay-*` headers (lower-cased names).
    """

    status: int | None = None
    outcome: str = Outcome.OK.value
    timeout_kind: str | None = None
    error: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    sent_ns: int = 0
    first_byte_ns: int | None = None
    first_token_ns: int | None = None
    first_visible_ns: int | None = None
    end_ns: int = 0
    model_time_ns: int = 0
    n_chunks: int = 0
    done: bool = False
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.OK.value

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

    def _usage_int(self, key: str) -> int | None:
        if self.usage is None:
            return None
        v = self.usage.get(key)
        return v if isinstance(v, int) else None

    @property
    def prompt_tokens(self) -> int | None:
        return self._usage_int("prompt_tokens")

    @property
    def output_tokens(self) -> int | None:
        return self._usage_int("completion_tokens")

    @property
    def cached_tokens(self) -> int | None:
        if self.usage is None:
            return None
        details = self.usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            return details["cached_tokens"]
        return None


class _SSEDecoder:
    """Incremental event-stream decoder: `feed(bytes)` returns the `data` payloads of
    the events completed by these bytes. Splits on CR, LF, CRLF only; a CR at the end
    of a read waits for the next read (it may be the first half of a CRLF)."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, data: bytes) -> list[str]:
        self._buf += data
        out: list[str] = []
        buf = self._buf
        start = 0
        n = len(buf)
        i = 0
        while i < n:
            c = buf[i]
            if c == 0x0A or c == 0x0D:
                if c == 0x0D:
                    if i + 1 == n:
                        break  # maybe CRLF split across reads
                    end = i + 2 if buf[i + 1] == 0x0A else i + 1
                else:
                    end = i + 1
                self._line(buf[start:i], out)
                start = i = end
                continue
            i += 1
        self._buf = buf[start:]
        return out

    def _line(self, line: bytes, out: list[str]) -> None:
        if not line:
            if self._data:
                out.append(b"\n".join(self._data).decode("utf-8"))
                self._data = []
            return
        if line.startswith(b":"):
            return
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)

    def close(self) -> list[str]:
        """Flush at EOF: a pending line and event (a stream without a final blank line)."""
        out: list[str] = []
        if self._buf:
            self._line(self._buf.rstrip(b"\r"), out)
            self._buf = b""
        self._line(b"", out)
        return out


def _has_text(v: Any) -> bool:
    return isinstance(v, str) and v != ""


class ModelClient:
    """An OpenAI-compatible chat client bound to one base URL.

        client = ModelClient("http://127.0.0.1:8000", timeout_s=600.0)  # 600 s per call
        result = await client.chat([{"role": "user", "content": "hi"}])
        await client.aclose()

    `base_url` may end in `/v1` or not; requests go to `<base>/v1/chat/completions`.
    `api_key` becomes a bearer token. `timeout_s` bounds each whole call (total) and
    `idle_timeout_s` each body read; a fired deadline gives outcome `timeout`.
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
    ) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.url = base + "/v1/chat/completions"
        self.api_key = api_key
        self.model = model
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, sock_read=idle_timeout_s)
        self._session = session
        self._own_session = session is None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def aclose(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

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
        self, messages: list[dict[str, Any]], *, stream: bool = True, model: str | None = None, **extra: Any
    ) -> ChatResult:
        """One call, consumed whole. Never raises for HTTP/transport/protocol failures:
        they become the result's `outcome` (STYLE §4)."""
        s = self.stream(messages, stream=stream, model=model, **extra)
        async for _ in s:
            pass
        return s.result

    def stream(
        self, messages: list[dict[str, Any]], *, stream: bool = True, model: str | None = None, **extra: Any
    ) -> ChatStream:
        """A `ChatStream`: iterate it to get each parsed chunk (dict) as it arrives; its
        `.result` is complete once the iteration ended."""
        payload = json.dumps(self.body(messages, stream=stream, model=model, **extra)).encode()
        return ChatStream(self, payload, stream)


class ChatStream:
    """Async iterator over the parsed chunks of one call; `.result` is the ChatResult.
    Model time is accumulated inside the awaits only (module docstring)."""

    def __init__(self, client: ModelClient, payload: bytes, stream: bool) -> None:
        self._client = client
        self._payload = payload
        self._stream = stream
        self.result = ChatResult()

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._run()

    async def _run(self) -> AsyncIterator[dict[str, Any]]:
        r = self.result
        client = self._client
        headers = {"Content-Type": "application/json"}
        if client.api_key:
            headers["Authorization"] = f"Bearer {client.api_key}"
        session = client._get_session()
        resp: aiohttp.ClientResponse | None = None
        r.sent_ns = t = time.perf_counter_ns()
        try:
            try:
                resp = await session.post(client.url, data=self._payload, headers=headers, timeout=client.timeout)
            finally:
                r.model_time_ns += time.perf_counter_ns() - t
            r.status = resp.status
            r.headers = {k.lower(): v for k, v in resp.headers.items() if k.lower().startswith("x-replay-")}
            if resp.status >= 400:
                t = time.perf_counter_ns()
                try:
                    body = await resp.read()
                finally:
                    r.model_time_ns += time.perf_counter_ns() - t
                r.outcome = Outcome.HTTP_ERROR.value
                r.error = body[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
                return
            if not self._stream:
                t = time.perf_counter_ns()
                try:
                    body = await resp.read()
                finally:
                    now = time.perf_counter_ns()
                    r.model_time_ns += now - t
                r.first_byte_ns = now
                try:
                    obj = json.loads(body)
                except ValueError as exc:
                    r.outcome = Outcome.PROTOCOL_ERROR.value
                    r.error = f"response body is not JSON: {exc}"
                    return
                self._apply_message(obj, now)
                r.done = True
                yield obj
                return
            decoder = _SSEDecoder()
            content = resp.content
            while True:
                t = time.perf_counter_ns()
                try:
                    data = await content.readany()
                finally:
                    now = time.perf_counter_ns()
                    r.model_time_ns += now - t
                payloads = decoder.feed(data) if data else decoder.close()
                if data and r.first_byte_ns is None:
                    r.first_byte_ns = now
                for p in payloads:
                    if p.strip() == "[DONE]":
                        r.done = True
                        continue
                    try:
                        chunk = json.loads(p)
                    except ValueError as exc:
                        r.outcome = Outcome.PROTOCOL_ERROR.value
                        r.error = f"event data is not JSON: {exc} (got {p[:200]!r})"
                        return
                    self._apply_chunk(chunk, now)
                    yield chunk
                if not data:
                    break
            if not r.done:
                r.outcome = Outcome.PROTOCOL_ERROR.value
                r.error = "stream ended before [DONE]"
        except aiohttp.ConnectionTimeoutError:
            r.outcome = Outcome.TIMEOUT.value
            r.timeout_kind = TimeoutKind.CONNECT.value
            r.error = "connect timeout"
        except aiohttp.SocketTimeoutError:
            r.outcome = Outcome.TIMEOUT.value
            r.timeout_kind = TimeoutKind.IDLE.value
            r.error = "idle timeout (no bytes within the read deadline)"
        except TimeoutError:
            r.outcome = Outcome.TIMEOUT.value
            r.timeout_kind = TimeoutKind.TOTAL.value
            r.error = "timeout"
        except aiohttp.ClientPayloadError as exc:
            r.outcome = Outcome.PROTOCOL_ERROR.value
            r.error = f"{type(exc).__name__}: {exc}"
        except aiohttp.ClientError as exc:
            r.outcome = Outcome.TRANSPORT_ERROR.value
            r.error = f"{type(exc).__name__}: {exc}"
        except UnicodeDecodeError as exc:
            r.outcome = Outcome.PROTOCOL_ERROR.value
            r.error = f"event data is not UTF-8: {exc}"
        finally:
            if resp is not None:
                resp.release()
            r.end_ns = time.perf_counter_ns()
            if r.outcome == Outcome.OK.value and r.first_token_ns is None and not r.tool_calls:
                r.outcome = Outcome.EMPTY_OUTPUT.value

    def _token(self, now: int, visible: bool) -> None:
        r = self.result
        if r.first_token_ns is None:
            r.first_token_ns = now
        if visible and r.first_visible_ns is None:
            r.first_visible_ns = now

    def _apply_chunk(self, chunk: dict[str, Any], now: int) -> None:
        r = self.result
        r.n_chunks += 1
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            r.usage = usage
        for choice in chunk.get("choices") or []:
            if choice.get("finish_reason"):
                r.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            c = delta.get("content")
            if isinstance(c, str):
                r.content = (r.content or "") + c
                if c:
                    self._token(now, visible=True)
            for key in ("reasoning_content", "reasoning"):
                rc = delta.get(key)
                if isinstance(rc, str):
                    r.reasoning = (r.reasoning or "") + rc
                    if rc:
                        self._token(now, visible=False)
            for tcd in delta.get("tool_calls") or []:
                idx = tcd.get("index", len(r.tool_calls))
                tc = next((x for x in r.tool_calls if x.index == idx), None)
                if tc is None:
                    tc = ToolCallDelta(index=idx)
                    r.tool_calls.append(tc)
                if tcd.get("id"):
                    tc.id = tcd["id"]
                if tcd.get("type"):
                    tc.type = tcd["type"]
                fn = tcd.get("function") or {}
                if _has_text(fn.get("name")):
                    tc.name += fn["name"]
                    self._token(now, visible=False)
                if _has_text(fn.get("arguments")):
                    tc.arguments += fn["arguments"]
                    self._token(now, visible=False)

    def _apply_message(self, obj: dict[str, Any], now: int) -> None:
        """Non-streaming body: one `message` per choice 0."""
        r = self.result
        r.n_chunks = 1
        if isinstance(obj.get("usage"), dict):
            r.usage = obj["usage"]
        choices = obj.get("choices") or []
        if not choices:
            return
        ch = choices[0]
        r.finish_reason = ch.get("finish_reason")
        msg = ch.get("message") or {}
        if isinstance(msg.get("content"), str):
            r.content = msg["content"]
            if r.content:
                self._token(now, visible=True)
        for key in ("reasoning_content", "reasoning"):
            if isinstance(msg.get(key), str):
                r.reasoning = msg[key]
                if r.reasoning:
                    self._token(now, visible=False)
                break
        for i, tc in enumerate(msg.get("tool_calls") or []):
            fn = tc.get("function") or {}
            r.tool_calls.append(
                ToolCallDelta(
                    index=i, id=tc.get("id"), type=tc.get("type", "function"),
                    name=fn.get("name") or "", arguments=fn.get("arguments") or "",
                )
            )
            self._token(now, visible=False)
