"""The recording proxy's upstream exchange (benchmaker.replay_server.relay): the engine's
exchange and deadlines between the proxy and a scripted upstream on 127.0.0.1. A stalled
stream is cut by the idle deadline (the client sees a cut body), a stall before the head
is a 502; an error body over 4096 bytes is relayed whole; any method, path and query
pass through with the caller's headers (never recorded); the upstream's headers are
relayed, repeated ones apart, hop-by-hop ones not."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request

from benchmaker.engine.records import Sample
from benchmaker.replay_server.relay import RelayResponse, RelaySink, Upstream
from tests.replay.test_recorder import _proxy


@dataclass
class Seen:
    """One request as the upstream read it: request line parts, headers (lower-case
    names, in order), body."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)


Answer = Callable[[Seen, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def scripted_upstream(answer: Answer) -> AsyncIterator[tuple[str, list[Seen]]]:
    """An HTTP/1.1 server on 127.0.0.1 that reads each request and lets `answer` write
    the response bytes (one request per connection); yields (base URL, requests seen)."""
    seen: list[Seen] = []
    handlers: set[asyncio.Task] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.add(asyncio.current_task())
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ")
            headers = [(k.lower(), v.strip()) for k, _, v in (line.partition(":") for line in head[1:] if line)]
            n = int(dict(headers).get("content-length", "0"))
            req = Seen(method, target, headers, await reader.readexactly(n))
            seen.append(req)
            await answer(req, writer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # a client gone, or the test's end
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


CHAT = {"model": "m", "messages": [{"role": "user", "content": "Say hi"}], "stream": True}
FIRST_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'


async def _stall(req: Seen, writer: asyncio.StreamWriter) -> None:
    """A stream's head and first event, then nothing (until the proxy gives up)."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    writer.write(b"%x\r\n%s\r\n" % (len(FIRST_EVENT), FIRST_EVENT))
    await writer.drain()
    await asyncio.sleep(30)


async def test_a_stalled_stream_is_cut_by_the_idle_deadline_and_counted_incomplete(tmp_path: Path):
    got = b""
    async with scripted_upstream(_stall) as (upstream, seen):
        async with _proxy(upstream, tmp_path / "r.jsonl", idle_timeout_s=0.5) as (url, app):
            async with httpx.AsyncClient() as c:
                sent_at = time.perf_counter()  # the idle deadline runs from the proxy's read of the event, later
                async with c.stream("POST", url + "/v1/chat/completions", json=CHAT) as r:
                    assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
                    with pytest.raises(httpx.RemoteProtocolError):  # the body ends without its last chunk
                        async for data in r.aiter_raw():
                            got += data
                    cut_after_s = time.perf_counter() - sent_at
    assert got == FIRST_EVENT
    assert 0.5 <= cut_after_s < 5.0  # the idle deadline (0.5 s) plus a busy machine's margin
    assert dict(app.state.recorder.skipped) == {"incomplete": 1}
    assert app.state.recorder.conversations[0].turns == []
    assert len(seen) == 1


async def test_a_stall_before_the_head_is_a_502_and_an_upstream_error(tmp_path: Path):
    async def silent(req: Seen, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    async with scripted_upstream(silent) as (upstream, _seen):
        async with _proxy(upstream, tmp_path / "r.jsonl", idle_timeout_s=0.5) as (url, app):
            async with httpx.AsyncClient() as c:
                t = time.perf_counter()
                r = await c.post(url + "/v1/chat/completions", json=CHAT)
                waited_s = time.perf_counter() - t
    assert r.status_code == 502
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_error")
    assert error["message"] == (
        f"recording proxy: upstream {upstream}/v1/chat/completions: DeadlineExceeded: idle deadline passed"
    )
    assert 0.5 <= waited_s < 5.0
    assert dict(app.state.recorder.skipped) == {"upstream_errors": 1}


async def test_an_error_body_over_4096_bytes_is_relayed_whole_and_not_recorded(tmp_path: Path):
    body = json.dumps({"error": {"message": "context too long: " + "x" * 10_000, "type": "invalid_request"}}).encode()

    async def too_long(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    async with scripted_upstream(too_long) as (upstream, _seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient() as c:
                r = await c.post(url + "/v1/chat/completions", json={**CHAT, "stream": False})
    assert len(body) == 10_071
    assert (r.status_code, r.content, r.headers["content-length"]) == (400, body, "10071")
    assert dict(app.state.recorder.skipped) == {"upstream_errors": 1}
    assert app.state.recorder.conversations[0].turns == []


async def test_get_passthrough_keeps_method_path_query_and_headers(tmp_path: Path):
    models = b'{"object":"list","data":[{"id":"m","object":"model"}]}'

    async def listing(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: req-1\r\n")
        writer.write(b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nKeep-Alive: timeout=5\r\n")
        writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(models), models))

    async with scripted_upstream(listing) as (upstream, seen):
        async with _proxy(upstream + "/v1", tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient() as c:
                r = await c.get(
                    url + "/v1/models?limit=2&after=m%201",
                    headers={"Authorization": "Bearer sk-secret", "OpenAI-Organization": "org-1"},
                )
    assert (r.status_code, r.content) == (200, models)
    assert r.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert (r.headers["x-request-id"], r.headers["content-length"]) == ("req-1", str(len(models)))
    assert "keep-alive" not in r.headers  # hop-by-hop: not relayed
    (req,) = seen
    assert (req.method, req.target, req.body) == ("GET", "/v1/models?limit=2&after=m%201", b"")
    assert req.header("authorization") == "Bearer sk-secret"
    assert req.header("openai-organization") == "org-1"
    assert req.header("accept-encoding") == "identity"
    assert req.header("host") == upstream.removeprefix("http://")
    assert dict(app.state.recorder.skipped) == {}


async def test_a_recorded_call_forwards_its_credentials_and_never_writes_them(tmp_path: Path):
    answer = (
        b'{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}]}'
    )

    async def chat(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Ratelimit-Remaining: 99\r\n")
        writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer))

    out = tmp_path / "r.jsonl"
    async with scripted_upstream(chat) as (upstream, seen):
        async with _proxy(upstream, out) as (url, _app):
            async with httpx.AsyncClient() as c:
                r = await c.post(
                    url + "/v1/chat/completions?api-version=2",
                    json={**CHAT, "stream": False},
                    headers={"Authorization": "Bearer sk-secret", "x-api-key": "sk-other"},
                )
                flushed = (await c.post(url + "/flush")).json()
    assert (r.content, r.headers["x-ratelimit-remaining"]) == (answer, "99")
    (req,) = seen
    assert (req.method, req.target, json.loads(req.body)) == (
        "POST",
        "/v1/chat/completions?api-version=2",
        CHAT | {"stream": False},
    )
    assert (req.header("authorization"), req.header("x-api-key")) == ("Bearer sk-secret", "sk-other")
    assert (flushed["trajectories"], flushed["turns"], flushed["skipped"]) == (1, 1, {})
    text = out.read_text()
    assert '"content":"Hi"' in text and "sk-secret" not in text and "sk-other" not in text


class _Events(RelaySink):
    """A sink that lists what the relay hands it: ("feed", bytes), ("finish",), ("cut",)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        self.events.append(("feed", data))

    def finish(self, sample: Sample) -> None:
        self.events.append(("finish",))

    def cut(self) -> None:
        self.events.append(("cut",))


async def test_a_client_gone_after_the_last_read_ends_the_relay_quietly():
    """The client leaves after the body's last read and before the relay stops watching
    for it. The ordering is forced: the ASGI send of the last chunk runs the watch's own
    step at `http.disconnect` (ClientWatch.client_left), so the cancellation is requested
    while the relaying task runs and reaches no await before `stop()`. The relay ends
    without error and without sending the body's end, the sink is cut (not finished),
    and no cancellation is left pending in the task (Python 3.11's uncancel() keeps it)."""
    body = b'{"id":"c1","choices":[]}'

    async def whole(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
    }
    inbox: asyncio.Queue = asyncio.Queue()  # the client's messages: its body, then nothing (it stays silent)
    inbox.put_nowait({"type": "http.request", "body": b"{}", "more_body": False})
    sent: list[dict] = []
    sink = _Events()
    relayed: list[RelayResponse] = []

    async def send(message: dict) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and message["body"]:
            watch = relayed[0].watch
            assert watch is not None
            watch.client_left()  # the client leaves here: after the last read, before stop()

    async with scripted_upstream(whole) as (upstream, seen):
        side = Upstream()

        async def relay_once() -> str:
            request = Request(scope, inbox.get)
            resp = await side.relay(request, upstream + "/v1/chat/completions", await request.body())
            assert isinstance(resp, RelayResponse)
            resp.sink = sink
            relayed.append(resp)
            await resp(scope, inbox.get, send)
            await asyncio.sleep(0)  # a cancellation left pending would be raised at this await
            return "ended"

        try:
            assert await asyncio.create_task(relay_once()) == "ended"
        finally:
            await side.aclose()
    assert [(m["type"], m.get("body")) for m in sent] == [("http.response.start", None), ("http.response.body", body)]
    assert sink.events == [("feed", body), ("cut",)]
    assert len(seen) == 1
