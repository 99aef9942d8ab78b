"""An instant loopback HTTP/1.1 server: pre-built responses, no work per request (raw
asyncio protocol, on uvloop when installed). It measures the client, not the server:
`benchmaker calibrate` and benchmarks/peers.py run it in a separate process.

    python -m benchmaker.testing.instant_server [--port 0] [--sse-chunks 200] [--sse-writes 4]

Prints `PORT <n>` on its first stdout line, then serves until SIGTERM/SIGINT. Binds
127.0.0.1. Routes (method ignored, keep-alive always, request bodies read by
Content-Length, so GET and POST both work):

    /json                 200, a fixed 27-byte JSON body `{"ok":true,"n":1,"v":"abc"}`
    /sse, /v1/chat/completions
                          200, chunked `text/event-stream`: an OpenAI chat stream of a
                          role chunk, `--sse-chunks` one-token content chunks, a finish
                          chunk, a usage-only chunk (completion_tokens = sse-chunks) and
                          `data: [DONE]`, written as `--sse-writes` HTTP chunks at once
    /v1/models            200, `{"object":"list","data":[{"id":"m",...}]}` (peer tools probe it)
    anything else         404, empty body

`start_instant_server(...)` runs it as a child process and returns an `InstantServer`
(process, port, base URL); use it as a context manager to stop it. The same wire format
as benchmarks/_servers.py (the engine benchmarks), kept in the package so the CLI can
start it from an installed wheel.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["InstantServer", "main", "sse_body", "sse_events", "start_instant_server"]

_JSON = b'{"ok":true,"n":1,"v":"abc"}'
_MODELS = b'{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"benchmaker"}]}'
_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
_CHUNK = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}'
)


def _fixed(content_type: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: "
        + content_type
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _event(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


def sse_events(n_content: int) -> list[bytes]:
    """The framed SSE events of /sse: role, `n_content` one-token content chunks (~150 B
    each), finish, usage-only chunk (completion_tokens = n_content), [DONE]."""
    out = [_event(_CHUNK % (b'{"role":"assistant","content":""}', b"null"))]
    for i in range(n_content):
        out.append(_event(_CHUNK % (b'{"content":" tok%d"}' % (i % 1000), b"null")))
    out.append(_event(_CHUNK % (b"{}", b'"stop"')))
    out.append(
        _event(
            b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
            b'"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}' % (n_content, n_content + 10)
        )
    )
    out.append(_event(b"[DONE]"))
    return out


def sse_body(n_content: int) -> bytes:
    """The whole SSE byte stream of /sse (without HTTP chunked framing)."""
    return b"".join(sse_events(n_content))


def _chunked(data: bytes, parts: int) -> bytes:
    size = -(-len(data) // max(parts, 1))
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


class _Proto(asyncio.Protocol):
    __slots__ = ("transport", "buf", "routes")

    def __init__(self, routes: dict[bytes, bytes]) -> None:
        self.transport: Any = None
        self.buf = b""
        self.routes = routes

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
            path = head[sp + 1 : head.find(b" ", sp + 1)].split(b"?", 1)[0]
            buf = buf[total:]
            self.transport.write(self.routes.get(path, _NOT_FOUND))
        self.buf = buf


async def _serve(port: int, sse_chunks: int, sse_writes: int) -> None:
    sse = _SSE_HEAD + _chunked(sse_body(sse_chunks), sse_writes)
    routes = {
        b"/json": _fixed(b"application/json", _JSON),
        b"/sse": sse,
        b"/v1/chat/completions": sse,
        b"/v1/models": _fixed(b"application/json", _MODELS),
    }
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Proto(routes), "127.0.0.1", port, backlog=8192)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description="Instant loopback HTTP server (benchmaker calibration).")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--sse-chunks", type=int, default=200)
    ap.add_argument("--sse-writes", type=int, default=4)
    args = ap.parse_args(argv)
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))
    coro = _serve(args.port, args.sse_chunks, args.sse_writes)
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


@dataclass
class InstantServer:
    """A running instant server child process: `port`, `url` (http://127.0.0.1:PORT).
    `stop()` (or leaving the `with` block) terminates it and waits."""

    proc: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> InstantServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_instant_server(*, sse_chunks: int = 200, sse_writes: int = 4) -> InstantServer:
    """Start the server as a child process (`python -m benchmaker.testing.instant_server`)
    and wait for its port. Raises RuntimeError when it does not print `PORT <n>`."""
    cmd = [
        sys.executable,
        "-m",
        "benchmaker.testing.instant_server",
        "--sse-chunks",
        str(sse_chunks),
        "--sse-writes",
        str(sse_writes),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        raise RuntimeError(f"instant server did not start (got {line!r})")
    return InstantServer(proc, int(line.split()[1]))


if __name__ == "__main__":
    main()
