"""A minimal, fast loopback HTTP/1.1 server for the engine benchmarks (raw asyncio
protocol on uvloop; not a general server).

    python benchmarks/_servers.py [--port 0] [--cpu 1] [--sse-chunks 200[,800...]] [--sse-writes 4]

Prints `PORT <n>` on its first stdout line, then serves until SIGTERM/SIGINT. Routes
(method ignored, keep-alive always, request bodies read by Content-Length):

    /json   200, a fixed 27-byte JSON body `{"ok":true,"n":1,"v":"abc"}` (Content-Length)
    /sse    200, chunked `text/event-stream`: an OpenAI chat stream of a role chunk,
            n content chunks (one token each; n the first of `--sse-chunks`), a finish
            chunk, a usage-only chunk and `data: [DONE]`, written as `--sse-writes` HTTP
            chunks at once
    /sse/n  the same stream with n content chunks, for each n of `--sse-chunks`
    /hold   200, chunked `text/event-stream`: a role chunk and one content chunk, then
            nothing until the client closes the connection (an open stream)

`start_server(...)` runs it as a child process and returns (Popen, port).
`sse_body(n)` is the exact SSE byte stream of /sse (also used with NullTransport).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

_JSON = b'{"ok":true,"n":1,"v":"abc"}'
_JSON_RESP = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(_JSON)).encode()
    + b"\r\n\r\n"
    + _JSON
)
_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
# The SSE payload builders are the package's instant server's (one definition).
from benchmaker.testing.instant_server import sse_body, sse_events  # noqa: E402


def split_even(data: bytes, parts: int) -> list[bytes]:
    """`data` cut into `parts` pieces of near-equal size (cuts may fall inside events)."""
    size = -(-len(data) // parts)
    return [data[i : i + size] for i in range(0, len(data), size)]


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


class _Proto(asyncio.Protocol):
    __slots__ = ("transport", "buf", "sse", "hold")

    def __init__(self, sse: dict[bytes, bytes], hold: bytes) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.sse = sse  # path -> the whole response
        self.hold = hold

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end]
            body_len = 0
            low = head.lower()
            i = low.find(b"content-length:")
            if i >= 0:
                j = low.find(b"\r\n", i)
                body_len = int(low[i + 15 : j if j >= 0 else len(low)])
            total = end + 4 + body_len
            if len(buf) < total:
                break
            sp = head.find(b" ")
            path = head[sp + 1 : head.find(b" ", sp + 1)]
            buf = buf[total:]
            if path == b"/json":
                self.transport.write(_JSON_RESP)
            elif path in self.sse:
                self.transport.write(self.sse[path])
            elif path == b"/hold":
                self.transport.write(self.hold)
            else:
                self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        self.buf = buf


async def _serve(port: int, sse_chunks: list[int], sse_writes: int) -> None:
    sse = {b"/sse/%d" % n: _SSE_HEAD + _chunked(split_even(sse_body(n), sse_writes)) for n in sse_chunks}
    sse[b"/sse"] = sse[b"/sse/%d" % sse_chunks[0]]
    first = sse_events(1)
    hold = _SSE_HEAD + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in first[:2])
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Proto(sse, hold), "127.0.0.1", port, backlog=8192)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--cpu", type=int, default=None, help="pin to this CPU (sched_setaffinity)")
    ap.add_argument("--sse-chunks", default="200", help="content chunks per /sse stream, comma-separated lengths")
    ap.add_argument("--sse-writes", type=int, default=4)
    args = ap.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))
    import uvloop

    uvloop.run(_serve(args.port, [int(n) for n in args.sse_chunks.split(",")], args.sse_writes))


def start_server(
    *, cpu: int | None = None, sse_chunks: tuple[int, ...] = (200,), sse_writes: int = 4
) -> tuple[subprocess.Popen, int]:
    """Start this server as a child process serving /sse/n for each n of `sse_chunks`
    (/sse: the first); return (process, port). Stop it with `proc.terminate();
    proc.wait()`. Raises RuntimeError when it does not print its port."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--sse-chunks",
        ",".join(map(str, sse_chunks)),
        "--sse-writes",
        str(sse_writes),
    ]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"benchmark server did not start (got {line!r})")
    return proc, int(line.split()[1])


if __name__ == "__main__":
    main()
