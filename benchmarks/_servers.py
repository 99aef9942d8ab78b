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
    /responses/n, /messages/n
            the same n one-token deltas as an OpenAI Responses stream and an Anthropic
            Messages stream (responses_events, messages_events: the event shapes and
            fields vLLM 0.32.0 sends, captured from its /v1/responses and /v1/messages),
            for each n of `--sse-chunks`
    /hold   200, chunked `text/event-stream`: a role chunk and one content chunk, then
            nothing until the client closes the connection (an open stream)

`start_server(...)` runs it as a child process and returns (Popen, port).
`sse_body(n)` is the exact SSE byte stream of /sse (also used with NullTransport);
`api_body("responses" | "messages", n)` those of /responses/n and /messages/n.
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

_RESP = (
    b'"id":"resp_bc673792fa9863f0","created_at":1796331466,"incomplete_details":%s,"instructions":null,'
    b'"metadata":null,"model":"m","object":"response","output":%s,"parallel_tool_calls":true,'
    b'"temperature":1.0,"tool_choice":"none","tools":[],"top_p":1.0,"background":false,"max_output_tokens":%d,'
    b'"max_tool_calls":null,"previous_response_id":null,"prompt":null,"reasoning":null,"service_tier":"auto",'
    b'"status":"%s","text":null,"top_logprobs":null,"truncation":"disabled","usage":%s,"user":null,'
    b'"presence_penalty":0.0,"frequency_penalty":0.0,"kv_transfer_params":null,"ec_transfer_params":null,'
    b'"input_messages":null,"output_messages":null'
)
_ITEM = b'"msg_8a000bb706ab359a"'


def _typed(event: bytes, data: bytes) -> bytes:
    return b"event: " + event + b"\ndata: " + data + b"\n\n"


def responses_events(n: int) -> list[bytes]:
    """An OpenAI Responses stream of `n` one-token text deltas, as vLLM 0.32.0 frames it
    (`event:` + `data:` lines; response.created, in_progress, output_item.added,
    content_part.added, n x output_text.delta, output_text.done, content_part.done,
    output_item.done, response.completed with usage output_tokens = n)."""
    text = b"".join(b" tok%d" % (i % 1000) for i in range(n))
    seq = iter(range(n + 10))
    part = b'{"annotations":[],"text":"%s","type":"output_text","logprobs":%s}'
    item = b'{"id":' + _ITEM + b',"content":%s,"role":"assistant","status":"%s","type":"message","phase":null}'
    head = b"{" + _RESP % (b"null", b"[]", n, b"in_progress", b"null")
    out = [
        _typed(
            b"response.created", b'{"response":%s},"sequence_number":%d,"type":"response.created"}' % (head, next(seq))
        ),
        _typed(
            b"response.in_progress",
            b'{"response":%s},"sequence_number":%d,"type":"response.in_progress"}' % (head, next(seq)),
        ),
        _typed(
            b"response.output_item.added",
            b'{"item":%s,"output_index":0,"sequence_number":%d,"type":"response.output_item.added"}'
            % (item % (b"[]", b"in_progress"), next(seq)),
        ),
        _typed(
            b"response.content_part.added",
            b'{"content_index":0,"item_id":%s,"output_index":0,"part":%s,"sequence_number":%d,'
            b'"type":"response.content_part.added"}' % (_ITEM, part % (b"", b"[]"), next(seq)),
        ),
    ]
    for i in range(n):
        out.append(
            _typed(
                b"response.output_text.delta",
                b'{"content_index":0,"delta":" tok%d","item_id":%s,"logprobs":[],"output_index":0,'
                b'"sequence_number":%d,"type":"response.output_text.delta"}' % (i % 1000, _ITEM, next(seq)),
            )
        )
    done_part = part % (text, b"null")
    usage = (
        b'{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":%d,'
        b'"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}' % (n, n + 10)
    )
    out += [
        _typed(
            b"response.output_text.done",
            b'{"content_index":0,"item_id":%s,"logprobs":[],"output_index":0,"sequence_number":%d,"text":"%s",'
            b'"type":"response.output_text.done"}' % (_ITEM, next(seq), text),
        ),
        _typed(
            b"response.content_part.done",
            b'{"content_index":0,"item_id":%s,"output_index":0,"part":%s,"sequence_number":%d,'
            b'"type":"response.content_part.done"}' % (_ITEM, done_part, next(seq)),
        ),
        _typed(
            b"response.output_item.done",
            b'{"item":%s,"output_index":0,"sequence_number":%d,"type":"response.output_item.done"}'
            % (item % (b"[" + done_part + b"]", b"completed"), next(seq)),
        ),
        _typed(
            b"response.completed",
            b'{"response":{%s},"sequence_number":%d,"type":"response.completed"}'
            % (
                _RESP
                % (
                    b'{"reason":"max_output_tokens"}',
                    b"[" + item % (b"[" + done_part + b"]", b"completed") + b"]",
                    n,
                    b"incomplete",
                    usage,
                ),
                next(seq),
            ),
        ),
    ]
    return out


def messages_events(n: int) -> list[bytes]:
    """An Anthropic Messages stream of `n` one-token text deltas, as vLLM 0.32.0 frames
    it (message_start, content_block_start, n x content_block_delta, content_block_stop,
    message_delta with stop_reason max_tokens and usage output_tokens = n, message_stop)."""
    out = [
        _typed(
            b"message_start",
            b'{"type":"message_start","message":{"id":"chatcmpl-ab976f93822a37ef","type":"message",'
            b'"role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,'
            b'"usage":{"input_tokens":10,"output_tokens":0}}}',
        ),
        _typed(
            b"content_block_start",
            b'{"type":"content_block_start","content_block":{"type":"text","text":""},"index":0}',
        ),
    ]
    for i in range(n):
        out.append(
            _typed(
                b"content_block_delta",
                b'{"type":"content_block_delta","delta":{"type":"text_delta","text":" tok%d"},"index":0}' % (i % 1000),
            )
        )
    out += [
        _typed(b"content_block_stop", b'{"type":"content_block_stop","index":0}'),
        _typed(
            b"message_delta",
            b'{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},'
            b'"usage":{"input_tokens":10,"output_tokens":%d,"cache_creation_input_tokens":0,'
            b'"cache_read_input_tokens":0}}' % n,
        ),
        _typed(b"message_stop", b'{"type":"message_stop"}'),
    ]
    return out


def api_body(api: str, n: int) -> bytes:
    """The whole SSE byte stream of /<api>/n: `api` "chat" (sse_body), "responses" or
    "messages". Raises KeyError for another api."""
    return b"".join({"chat": sse_events, "responses": responses_events, "messages": messages_events}[api](n))


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
    for api in ("responses", "messages"):
        sse.update(
            {
                b"/%s/%d" % (api.encode(), n): _SSE_HEAD + _chunked(split_even(api_body(api, n), sse_writes))
                for n in sse_chunks
            }
        )
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
