"""benchmaker.agent.model_client on the engine's HTTP/1.1 client (benchmaker.engine.http1.RawTransport,
the default) and on a given aiohttp session: the deadlines the client
keeps itself (total from the call's start, idle per body read), transport failures and a
body cut short, each as the outcome the engine's runner gives (record_failure)."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from benchmaker.agent.model_client import ModelClient
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
        assert (r.outcome, r.timeout_kind, r.content) == ("timeout", "idle", "a")
        assert r.error == "idle timeout (no bytes within the read deadline)"
        async with ModelClient(srv.url, timeout_s=0.4, idle_timeout_s=None) as client:
            r = await client.chat(_MSG)
        assert (r.outcome, r.timeout_kind, r.error, r.content) == ("timeout", "total", "timeout", "a")
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
    # 8 reads 50 ms apart: 400 ms in all, each within the 150 ms idle deadline (the one
    # timer armed at the open fires early and re-arms at the deadline then in force)
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
    assert (r.outcome, r.timeout_kind, r.error) == ("timeout", "total", "timeout")


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
    assert (r.outcome, r.status, r.sample.bytes_received) == ("transport_error", 200, 8)
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

    from benchmaker.agent import model_client

    reads: list[bytes] = []
    transport_read = model_client._TransportExchange.read

    async def counted_transport_read(self):
        reads.append(await transport_read(self))
        return reads[-1]

    monkeypatch.setattr(model_client._TransportExchange, "read", counted_transport_read)
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


class _FakeLoop:
    """call_at recorded, fired by hand: (when, callback, cancelled) per handle."""

    def __init__(self) -> None:
        self.handles: list[_FakeHandle] = []

    def call_at(self, when: float, callback):
        self.handles.append(_FakeHandle(when, callback))
        return self.handles[-1]

    def live(self) -> list[float]:
        return [h.when for h in self.handles if not h.cancelled]


class _FakeHandle:
    def __init__(self, when: float, callback) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        self.cancelled = True
        self.callback()


class _FakeCall:
    """A call as the watchdog sees it: `_armed`, and `_on_timer` re-arming at `later`."""

    def __init__(self, name: str, fired: list[str], later: float | None = None) -> None:
        self.name, self.fired, self.later, self._armed = name, fired, later, None
        self.watchdog = None

    def arm(self, watchdog, at: float) -> None:
        self.watchdog, self._armed = watchdog, at
        watchdog.arm(self, at)

    def _on_timer(self) -> None:
        self._armed = None
        self.fired.append(self.name)
        if self.later is not None:
            at, self.later = self.later, None
            self.arm(self.watchdog, at)


def test_the_calls_of_a_client_share_one_timer_armed_at_the_earliest_time():
    from benchmaker.agent.model_client import _Watchdog

    loop, fired = _FakeLoop(), []
    wd = _Watchdog(loop)
    a, b, c = _FakeCall("a", fired, later=25.0), _FakeCall("b", fired), _FakeCall("c", fired)
    a.arm(wd, 10.0)
    b.arm(wd, 20.0)  # later than the timer: no new one
    assert loop.live() == [10.0]
    c.arm(wd, 5.0)  # earlier: the timer moves
    assert loop.live() == [5.0]
    wd.disarm(c)  # ended first: the timer stays, fires for nobody and re-arms for a
    loop.handles[-1].fire()
    assert (fired, loop.live()) == ([], [10.0])
    loop.handles[-1].fire()  # a's time: a re-arms at 25, the timer goes to b's 20
    assert (fired, loop.live()) == (["a"], [20.0])
    assert not wd.stop()  # calls in progress: the timer keeps running
    loop.handles[-1].fire()
    assert (fired, loop.live()) == (["a", "b"], [25.0])
    loop.handles[-1].fire()
    assert (fired, loop.live()) == (["a", "b", "a"], [])
    assert wd.stop()
