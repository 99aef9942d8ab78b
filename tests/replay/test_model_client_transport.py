"""benchmaker.agent.model_client on the engine's HTTP/1.1 client (benchmaker.engine.http1.RawTransport,
the default) and on a given aiohttp session: the engine's deadlines over its calls
(benchmaker.engine.request: total from the send, idle per wait for bytes, the consumer's
time between reads left out), transport failures and a body cut short, each as the
outcome the engine's runner gives."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from benchmaker.agent.model_client import ModelClient
from benchmaker.engine.http1 import RawTransport
from benchmaker.engine.records import RequestSpec
from benchmaker.engine.transport import AiohttpTransport
from tests.replay.test_harness_client import ScriptServer, _chunk

_MSG = [{"role": "user", "content": "hi"}]
_DONE = [
    (0.0, _chunk({"role": "assistant"})),
    (0.0, _chunk({"content": "ok"})),
    (0.0, _chunk(finish="stop")),
    (0.0, b"data: [DONE]\n\n"),
]


async def test_idle_deadline_fires_between_reads_and_total_deadline_over_the_call():
    stall = [(0.0, _chunk({"role": "assistant"})), (0.0, _chunk({"content": "a"})), (2.0, _chunk({"content": "b"}))]
    async with ScriptServer(stall) as srv:
        async with ModelClient(srv.url, idle_timeout_s=0.3) as client:
            r = await client.chat(_MSG)
        assert (r.outcome, r.timeout_kind, r.error, r.content) == ("timeout", "idle", None, "a")
        async with ModelClient(srv.url, timeout_s=0.4, idle_timeout_s=None) as client:
            r = await client.chat(_MSG)
        assert (r.outcome, r.timeout_kind, r.error, r.content) == ("timeout", "total", None, "a")
    before_headers = ScriptServer(_DONE)

    async def slow(request):  # nothing at all for 2 s: the total deadline covers the headers
        await asyncio.sleep(2)
        return await ScriptServer.handler(before_headers, request)

    before_headers.handler = slow
    async with before_headers as srv:
        async with ModelClient(srv.url, timeout_s=0.3) as client:
            r = await client.chat(_MSG)
        assert (r.outcome, r.timeout_kind, r.status) == ("timeout", "total", None)


async def test_a_consumer_pause_does_not_count_toward_the_idle_deadline():
    script = [
        (0.0, _chunk({"role": "assistant"})),
        (0.0, _chunk({"content": "a"})),
        (0.05, _chunk({"content": "b"})),
        (0.05, _chunk(finish="stop")),
        (0.0, b"data: [DONE]\n\n"),
    ]
    async with ScriptServer(script) as srv:
        async with ModelClient(srv.url, idle_timeout_s=0.25) as client:
            s = client.stream(_MSG)
            async for _data in s:
                await asyncio.sleep(0.4)  # longer than the idle deadline, outside the reads
    r = s.result
    assert (r.outcome, r.content, r.finish_reason) == ("ok", "ab", "stop")
    assert r.model_time_ns < 0.4e9  # the pauses are not model time


async def test_reads_within_the_idle_deadline_go_on_past_it_and_a_paused_consumer_meets_the_total_one():
    # 8 reads 50 ms apart: 400 ms in all, each within the 150 ms idle deadline (each
    # read moves the idle deadline on; the periodic check cuts no call before it)
    steady = (
        [(0.0, _chunk({"role": "assistant"}))]
        + [(0.05, _chunk({"content": "x"})) for _ in range(8)]
        + [(0.0, _chunk(finish="stop")), (0.0, b"data: [DONE]\n\n")]
    )
    async with ScriptServer(steady) as srv:
        async with ModelClient(srv.url, idle_timeout_s=0.15) as client:
            r = await client.chat(_MSG)
        assert (r.outcome, r.content, r.finish_reason) == ("ok", "x" * 8, "stop")
    async with ScriptServer(_DONE) as srv:  # the total deadline passes while the consumer pauses
        async with ModelClient(srv.url, timeout_s=0.2) as client:
            s = client.stream(_MSG)
            async for _data in s:
                await asyncio.sleep(0.3)  # outside the reads: never cancelled there
            assert not asyncio.current_task().cancelling()
    r = s.result
    assert (r.outcome, r.timeout_kind, r.error) == ("timeout", "total", None)


async def test_a_cancellation_from_outside_stays_a_cancellation_within_the_deadlines():
    stall = [(0.0, _chunk({"role": "assistant"})), (5.0, _chunk({"content": "a"}))]
    async with ScriptServer(stall) as srv:
        async with ModelClient(srv.url, timeout_s=10.0, idle_timeout_s=5.0) as client:
            s = client.stream(_MSG)

            async def consume() -> None:
                async for _data in s:
                    pass

            task = asyncio.create_task(consume())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    r = s.result
    assert (r.outcome, r.timeout_kind, r.error) == ("cancelled", None, "cancelled before the body ended")


async def test_refused_connection_and_a_body_cut_short():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with ModelClient(f"http://127.0.0.1:{port}") as client:
        r = await client.chat(_MSG)
    assert r.outcome == "transport_error"
    assert r.error.startswith(f"cannot connect to http://127.0.0.1:{port}/v1/chat/completions")

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"id": 1')
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(cut, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with ModelClient(url) as client:
            r = await client.chat(_MSG, stream=False)
    finally:
        server.close()
    # as the runner records a cut body: the parser's totals and bytes_received are the
    # body's once it ended, so none here
    assert (r.outcome, r.status, r.sample.bytes_received) == ("transport_error", 200, 0)
    assert r.error.startswith("response body cut")


async def test_a_given_aiohttp_session_is_used_and_left_open():
    async with ScriptServer(_DONE) as srv, aiohttp.ClientSession() as session:
        async with ModelClient(srv.url, session=session) as client:
            r = await client.chat(_MSG)
        assert (r.outcome, r.content) == ("ok", "ok")
        assert not session.closed
        async with ModelClient(srv.url) as client:  # the default: the engine's transport
            r2 = await client.chat(_MSG)
        assert (r2.outcome, r2.content, r2.sample.bytes_received) == ("ok", "ok", r.sample.bytes_received)


async def test_a_body_that_came_whole_takes_no_read_for_its_end(monkeypatch):
    # a non-streamed reply in one write: the body's one read ends the call (the read that
    # would return b"" is skipped); the same reply on a given aiohttp session ends with it
    body = (
        b'{"choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":3,"completion_tokens":2}}'
    )

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        n = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1])
        await reader.readexactly(n)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Replay-Turn: 7\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    reads: list[bytes] = []
    spec = RequestSpec("GET", "http://127.0.0.1:1/")
    for response_type in (type(RawTransport().stream(spec)), type(AiohttpTransport().stream(spec))):
        transport_read = response_type.__anext__

        async def counted_transport_read(self, transport_read=transport_read):
            try:
                reads.append(await transport_read(self))
            except StopAsyncIteration:
                reads.append(b"")
                raise
            return reads[-1]

        monkeypatch.setattr(response_type, "__anext__", counted_transport_read)
    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with ModelClient(url) as client:
            r = await client.chat(_MSG, stream=False)
        raw_reads = list(reads)
        reads.clear()
        async with aiohttp.ClientSession() as session:
            r_session = await ModelClient(url, session=session).chat(_MSG, stream=False)
    finally:
        server.close()
    assert raw_reads == [body]
    assert reads == [body, b""]
    for res in (r, r_session):
        assert (res.outcome, res.content, res.finish_reason, res.sample.bytes_received) == (
            "ok",
            "hi there",
            "stop",
            len(body),
        )
        assert (res.headers, res.usage) == ({"x-replay-turn": "7"}, {"prompt_tokens": 3, "completion_tokens": 2})
