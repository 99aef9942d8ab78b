"""benchmaker.engine.request: what a relay (the recording proxy) takes from the exchange,
on RawTransport against a server on 127.0.0.1: an accepted error status read by read,
every byte; every response header line in order; a head held by its consumer is not
cut by a deadline (the deadlines on an injected clock: Deadlines.check takes the time)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from benchmaker.engine.http1 import RawTransport
from benchmaker.engine.records import RequestSpec, Sample
from benchmaker.engine.request import Deadlines, RequestExchange

S = 1_000_000_000
ERROR_BODY = b'{"error":"' + b"e" * 9000 + b'"}'
RESPONSE = (
    b"HTTP/1.1 413 Payload Too Large\r\nX-A: 1\r\nContent-Type: application/json\r\nX-A: 2\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(ERROR_BODY), ERROR_BODY)
)


@contextlib.asynccontextmanager
async def answering(response: bytes) -> AsyncIterator[str]:
    """A server on 127.0.0.1 that answers each request's head with `response`; yields its URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(response)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/models?limit=2"
    finally:
        server.close()
        await server.wait_closed()


async def _read_all(ex: RequestExchange) -> list[bytes]:
    parser = _Fed()
    reads = []
    while data := await ex.read(parser):
        reads.append(data)
    assert parser.fed == reads  # each read went to the parser first
    return reads


class _Fed:
    """A parser that keeps what it was fed."""

    def __init__(self) -> None:
        self.fed: list[bytes] = []

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        self.fed.append(data)


async def test_an_accepted_error_status_is_read_whole_and_every_header_line_kept():
    tr = RawTransport()
    sample = Sample("r", 0, "l")
    ex = RequestExchange(sample, 0, None)
    async with answering(RESPONSE) as url:
        ex.start()
        status = await ex.open(tr, RequestSpec("GET", url), accepts=lambda status: status == 413)
        reads = await _read_all(ex)
        await ex.close()
    await tr.aclose()
    assert status == 413 and b"".join(reads) == ERROR_BODY
    assert (sample.outcome, sample.error, sample.bytes_received, ex.body_read) == ("ok", None, 9012, True)
    assert ex.response_headers() == [
        ("x-a", "1"),
        ("content-type", "application/json"),
        ("x-a", "2"),
        ("content-length", "9012"),
    ]


async def test_an_error_status_not_accepted_keeps_4096_bytes_and_reads_nothing_more():
    tr = RawTransport()
    sample = Sample("r", 0, "l")
    ex = RequestExchange(sample, 0, None)
    async with answering(RESPONSE) as url:
        ex.start()
        status = await ex.open(tr, RequestSpec("GET", url))
        reads = await _read_all(ex)
        await ex.close()
    await tr.aclose()
    assert (status, reads, sample.outcome, sample.bytes_received) == (413, [], "http_error", 9012)
    assert sample.error == ERROR_BODY[:4096].decode()


async def test_a_held_head_is_not_cut_and_its_time_is_not_waiting():
    dl = Deadlines(idle_s=100.0)  # the real periodic check never fires within the test
    tr = RawTransport()
    async with answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") as url:
        waiters = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(2)]
        held, open_ = (RequestExchange(Sample("r", k, "l"), 0, dl, waiters[k]) for k in range(2))
        for ex in (held, open_):
            ex.start()
            assert await ex.open(tr, RequestSpec("GET", url)) == 200
        held.hold()  # the consumer relays the head: its own code runs
        dl.check(held.sent_at + 200 * S)
        assert (held.fired, waiters[0].cancelling()) == (None, 0)
        assert (open_.fired, waiters[1].cancelling()) == ("idle", 1)  # not held: cut
        reads = await _read_all(held)  # the idle deadline runs again from here, not from the send
        for ex in (held, open_):
            await ex.close()
    await tr.aclose()
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert reads == [b"ok"] and (held.sample.outcome, held.body_read) == ("ok", True)
