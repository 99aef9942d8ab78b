"""AiohttpTransport's body iteration over real HTTP on 127.0.0.1: every framing yields
the exact body bytes and ends without a trailing empty read (a drained,
complete body ends the iteration at once)."""

from __future__ import annotations

import asyncio

import pytest

from benchmaker.engine.records import RequestSpec
from benchmaker.engine.transport import AiohttpTransport

BODY = b'data: {"a": 1}\n\n' * 50 + b"data: [DONE]\n\n"


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


RESPONSES = {
    b"/length": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
    b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + _chunked([BODY[:7], BODY[7:400], BODY[400:]]),
    b"/empty": b"HTTP/1.1 204 No Content\r\n\r\n",
}


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            if path == b"/slow":  # the body in two writes 50 ms apart (two reads at least)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (10, BODY[:10])
                )
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(_chunked([BODY[10:]]))
            else:
                writer.write(RESPONSES[path])
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.mark.parametrize("path", ["/length", "/chunked", "/slow", "/empty"])
async def test_chunks_yield_the_exact_body_and_end(path):
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = AiohttpTransport()
    try:
        for _ in range(2):  # the second exchange reuses the kept-alive connection
            async with transport.stream(RequestSpec("GET", f"http://127.0.0.1:{port}{path}")) as resp:
                pieces = [p async for p in resp.chunks()]
            assert all(pieces)  # never an empty read
            assert b"".join(pieces) == (b"" if path == "/empty" else BODY)
            if path == "/slow":
                assert len(pieces) >= 2
        assert transport.connections_opened == 1
    finally:
        await transport.aclose()
        server.close()
        await server.wait_closed()
