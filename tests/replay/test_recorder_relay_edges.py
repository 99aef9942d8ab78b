"""The recording proxy (benchmaker.replay_server.recorder over
benchmaker.replay_server.relay) used as an agent uses it, against a scripted upstream on
127.0.0.1: 32 concurrent streams relayed byte-exact and each recorded once; a client
gone mid-stream closes the upstream exchange and its turn is not recorded; a slow
client is not cut by the idle deadline; error, empty-bodied, HEAD, trailer-carrying and
cut responses; large, empty and gzip request bodies; repeated query keys; non-ASCII
header bytes."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.replay.test_recorder import _proxy
from tests.replay.test_recorder_relay import Seen, scripted_upstream

NON_STREAMED = (
    b'{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}]}'
)


def _where(url: str) -> tuple[int, bytes]:
    """The proxy's port and its secret path prefix (b"/<secret>") from its base URL."""
    parts = urlsplit(url)
    assert parts.port is not None
    return parts.port, parts.path.encode()


def _event(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
STOP = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


def _chat(prompt: str, stream: bool = True) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], "stream": stream}


def _answer_of(req: Seen) -> list[bytes]:
    """The events a streamed answer to `req` is made of: its prompt echoed in 8 pieces."""
    prompt = json.loads(req.body)["messages"][0]["content"]
    return [_event(f"{prompt}/{k} ") for k in range(8)] + [STOP]


async def _echo_stream(req: Seen, writer: asyncio.StreamWriter) -> None:
    writer.write(STREAM_HEAD)
    for event in _answer_of(req):
        writer.write(_chunk(event))
        await writer.drain()
        await asyncio.sleep(0.005)
    writer.write(b"0\r\n\r\n")


async def test_32_concurrent_streams_are_relayed_byte_exact_and_each_recorded_once(tmp_path: Path):
    prompts = [f"task {k}" for k in range(32)]
    async with scripted_upstream(_echo_stream) as (upstream, seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient(timeout=30) as c:

                async def one(prompt: str) -> bytes:
                    async with c.stream("POST", url + "/v1/chat/completions", json=_chat(prompt)) as r:
                        assert r.status_code == 200
                        return b"".join([data async for data in r.aiter_raw()])

                bodies = await asyncio.gather(*(one(p) for p in prompts))
            recorder = app.state.recorder
            for prompt, body in zip(prompts, bodies, strict=True):
                assert body == b"".join(_answer_of(Seen("POST", "/", [], json.dumps(_chat(prompt)).encode())))
            assert len(seen) == 32 and dict(recorder.skipped) == {}
            by_prompt = {c.first_user: c for c in recorder.conversations}
            assert sorted(by_prompt) == sorted(prompts)
            for prompt, conv in by_prompt.items():
                (turn,) = conv.turns
                assert turn.response.content == "".join(f"{prompt}/{k} " for k in range(8))


async def test_a_client_gone_mid_stream_closes_the_upstream_and_records_no_turn(tmp_path: Path):
    closed_after: list[int] = []  # events the upstream wrote before it saw its connection closed

    async def endless(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD)
        for k in range(10_000):
            writer.write(_chunk(_event(f"w{k} ")))
            try:
                await writer.drain()
            except ConnectionError:
                closed_after.append(k)
                return
            if writer.is_closing() or writer.transport.get_extra_info("socket") is None:
                closed_after.append(k)
                return
            await asyncio.sleep(0.01)
        closed_after.append(-1)

    async with scripted_upstream(endless) as (upstream, _seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            port, prefix = _where(url)
            sock = socket.create_connection(("127.0.0.1", port))
            body = json.dumps(_chat("go")).encode()
            sock.sendall(
                b"POST %s/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (prefix, len(body), body)
            )
            got = b""
            while got.count(b"data: ") < 3:
                got += await asyncio.to_thread(sock.recv, 65536)
            sock.close()  # the agent gives up (Ctrl-C, its own timeout)
            gone_at = time.perf_counter()
            while not closed_after and time.perf_counter() - gone_at < 10:
                await asyncio.sleep(0.05)
            waited_s = time.perf_counter() - gone_at
            recorder = app.state.recorder
            assert closed_after and closed_after[0] >= 0, "the upstream stream ran on after the client left"
            assert waited_s < 5.0  # at once, plus a busy machine's margin (the stream would run 100 s)
            assert dict(recorder.skipped) == {"incomplete": 1}
            assert recorder.conversations[0].turns == []


async def test_clients_gone_among_concurrent_streams_cut_only_their_own_turns(tmp_path: Path):
    async def long_stream(req: Seen, writer: asyncio.StreamWriter) -> None:
        prompt = json.loads(req.body)["messages"][0]["content"]
        writer.write(STREAM_HEAD)
        for k in range(40):
            writer.write(_chunk(_event(f"{prompt}/{k} ")))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(_chunk(STOP) + b"0\r\n\r\n")

    async with scripted_upstream(long_stream) as (upstream, _seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient(timeout=30) as c:

                async def one(k: int) -> bytes:
                    got = b""
                    async with c.stream("POST", url + "/v1/chat/completions", json=_chat(f"p{k}")) as r:
                        async for data in r.aiter_raw():
                            got += data
                            if k % 2 and got.count(b"data: ") >= 3:
                                break  # leaving the block closes this connection: the client left
                    return got

                bodies = await asyncio.gather(*(one(k) for k in range(8)))
                await asyncio.sleep(0.5)  # the proxy sees the closes
            recorder = app.state.recorder
            for k in range(0, 8, 2):
                assert bodies[k] == b"".join(_event(f"p{k}/{n} ") for n in range(40)) + STOP
            assert dict(recorder.skipped) == {"incomplete": 4}
            recorded = {c.first_user: len(c.turns) for c in recorder.conversations}
            assert recorded == {f"p{k}": (0 if k % 2 else 1) for k in range(8)}


async def test_a_client_gone_before_the_head_closes_the_upstream_and_records_no_turn(tmp_path: Path):
    upstream_saw_close = asyncio.Event()

    async def thinking(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        n = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
        await reader.readexactly(n)
        try:
            if await asyncio.wait_for(reader.read(1), 3.0) == b"":  # the proxy closed the connection
                upstream_saw_close.set()
        except TimeoutError:  # still asked: the answer comes (to nobody)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(NON_STREAMED), NON_STREAMED))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(thinking, "127.0.0.1", 0)
    upstream = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
        port, prefix = _where(url)
        sock = socket.create_connection(("127.0.0.1", port))
        body = json.dumps(_chat("slow model", stream=False)).encode()
        sock.sendall(
            b"POST %s/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (prefix, len(body), body)
        )
        await asyncio.sleep(0.3)  # the request is upstream, its answer not begun
        sock.close()
        await asyncio.wait_for(upstream_saw_close.wait(), 5.0)  # at once, plus a busy machine's margin
        recorder = app.state.recorder
        assert dict(recorder.skipped) == {"incomplete": 1}
        assert recorder.conversations[0].turns == []
    server.close()
    await server.wait_closed()


async def test_a_slow_client_is_not_cut_by_the_idle_deadline(tmp_path: Path):
    events = [_event("x" * 60_000 + f" {k}") for k in range(64)] + [STOP]  # ~3.8 MB: more than the buffers

    async def fast(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD)
        for event in events:
            writer.write(_chunk(event))
        writer.write(b"0\r\n\r\n")

    async with scripted_upstream(fast) as (upstream, _seen):
        async with _proxy(upstream, tmp_path / "r.jsonl", idle_timeout_s=0.3) as (url, app):
            async with httpx.AsyncClient(timeout=30) as c:
                got = []
                async with c.stream("POST", url + "/v1/chat/completions", json=_chat("slow")) as r:
                    async for data in r.aiter_raw(65536):
                        got.append(data)
                        if len(got) in (1, 8):
                            await asyncio.sleep(1.0)  # the client busy: the proxy's writes wait on it
    assert b"".join(got) == b"".join(events)
    recorder = app.state.recorder
    assert dict(recorder.skipped) == {}
    (turn,) = recorder.conversations[0].turns
    assert turn.response.content == "".join("x" * 60_000 + f" {k}" for k in range(64))


ERROR = b'{"error":{"message":"Rate limit reached","type":"rate_limit_error","code":"rate_limit"}}'


@pytest.mark.parametrize("status", [b"429 Too Many Requests", b"500 Internal Server Error"])
async def test_an_error_status_with_a_json_body_is_relayed_exactly(tmp_path: Path, status: bytes):
    async def error(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nRetry-After: 7\r\n" % status)
        writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(ERROR), ERROR))

    async with scripted_upstream(error) as (upstream, _seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient() as c:
                r = await c.post(url + "/v1/chat/completions", json=_chat("hi"))
    assert (r.status_code, r.content) == (int(status[:3]), ERROR)
    assert (r.headers["retry-after"], r.headers["content-length"]) == ("7", str(len(ERROR)))
    assert dict(app.state.recorder.skipped) == {"upstream_errors": 1}


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 204 No Content\r\nX-Id: a\r\n\r\n",
        b'HTTP/1.1 304 Not Modified\r\nX-Id: a\r\nETag: "v1"\r\nContent-Length: 57\r\n\r\n',
    ],
)
async def test_a_response_without_body_is_relayed_and_the_connection_stays_usable(tmp_path: Path, head: bytes):
    async def empty(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(head)

    async with scripted_upstream(empty) as (upstream, seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, _app):
            port, prefix = _where(url)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            heads = []
            for _ in range(2):  # two requests on one client connection: the first left it usable
                writer.write(b'GET %s/v1/files/f1 HTTP/1.1\r\nHost: x\r\nIf-None-Match: "v1"\r\n\r\n' % prefix)
                heads.append(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0))
            writer.close()
    for got in heads:
        lines = got.decode("latin-1").split("\r\n")
        assert lines[0] == head.decode("latin-1").split("\r\n")[0]
        assert "x-id: a" in lines and not any(line.startswith("content-length") for line in lines)
    assert len(seen) == 2 and seen[0].header("if-none-match") == '"v1"'


async def test_head_is_relayed_with_the_upstream_content_length_and_no_body(tmp_path: Path):
    async def head(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1234\r\n\r\n")

    async with scripted_upstream(head) as (upstream, seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, _app):
            async with httpx.AsyncClient() as c:
                r = await c.head(url + "/v1/models")
                again = await c.head(url + "/v1/models")
    for resp in (r, again):
        assert (resp.status_code, resp.content, resp.headers["content-length"]) == (200, b"", "1234")
    assert [(s.method, s.target) for s in seen] == [("HEAD", "/v1/models")] * 2


async def test_a_chunked_body_with_trailers_is_relayed_and_recorded(tmp_path: Path):
    events = _answer_of(Seen("POST", "/", [], json.dumps(_chat("t")).encode()))

    async def trailers(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD.replace(b"\r\n\r\n", b"\r\nTrailer: X-Checksum\r\n\r\n"))
        for event in events:
            writer.write(_chunk(event))
        writer.write(b"0\r\nX-Checksum: abc\r\n\r\n")

    async with scripted_upstream(trailers) as (upstream, _seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient() as c:
                r = await c.post(url + "/v1/chat/completions", json=_chat("t"))
    assert (r.status_code, r.content) == (200, b"".join(events))
    assert "trailer" not in r.headers
    (turn,) = app.state.recorder.conversations[0].turns
    assert turn.response.content == "".join(f"t/{k} " for k in range(8))


async def test_a_body_closed_before_its_content_length_is_cut_for_the_client_too(tmp_path: Path):
    async def short(req: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(NON_STREAMED), NON_STREAMED[:40]))

    async with scripted_upstream(short) as (upstream, _seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient() as c:
                with pytest.raises(httpx.RemoteProtocolError):
                    await c.post(url + "/v1/chat/completions", json=_chat("hi", stream=False))
                health = (await c.get(url + "/health")).json()
    assert dict(app.state.recorder.skipped) == {"incomplete": 1}
    assert (health["conversations"], health["turns"]) == (1, 0)


async def _ok(req: Seen, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
    writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(NON_STREAMED), NON_STREAMED))


async def test_a_10_mb_request_body_reaches_the_upstream_byte_exact_and_is_recorded(tmp_path: Path):
    body = json.dumps(_chat("big: " + "é" * 5_000_000, stream=False), ensure_ascii=False).encode()
    async with scripted_upstream(_ok) as (upstream, seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient(timeout=30) as c:
                r = await c.post(url + "/v1/chat/completions", content=body)
    assert len(body) == 10_000_083
    assert (r.status_code, r.content) == (200, NON_STREAMED)
    (req,) = seen
    assert req.body == body and req.header("content-length") == "10000083"
    (turn,) = app.state.recorder.conversations[0].turns
    assert turn.response.content == "Hi"


async def test_an_empty_post_is_relayed_with_content_length_0_and_not_recorded(tmp_path: Path):
    async with scripted_upstream(_ok) as (upstream, seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient() as c:
                r = await c.post(url + "/v1/chat/completions")
    assert (r.status_code, r.content) == (200, NON_STREAMED)
    (req,) = seen
    assert (req.method, req.body, req.header("content-length")) == ("POST", b"", "0")
    assert dict(app.state.recorder.skipped) == {"bad_request": 1}


async def test_a_gzip_request_body_is_relayed_as_sent_and_recorded(tmp_path: Path):
    body = gzip.compress(json.dumps(_chat("zipped", stream=False)).encode(), mtime=0)
    async with scripted_upstream(_ok) as (upstream, seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, app):
            async with httpx.AsyncClient() as c:
                r = await c.post(
                    url + "/v1/chat/completions",
                    content=body,
                    headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
                )
    assert (r.status_code, r.content) == (200, NON_STREAMED)
    (req,) = seen
    assert (req.body, req.header("content-encoding")) == (body, "gzip")
    recorder = app.state.recorder
    assert dict(recorder.skipped) == {}
    (conv,) = recorder.conversations
    assert (conv.first_user, conv.turns[0].response.content) == ("zipped", "Hi")


async def test_repeated_query_keys_and_non_ascii_header_bytes_reach_the_upstream_as_sent(tmp_path: Path):
    async with scripted_upstream(_ok) as (upstream, seen):
        async with _proxy(upstream, tmp_path / "r.jsonl") as (url, _app):
            async with httpx.AsyncClient() as c:
                await c.post(
                    url + "/v1/chat/completions?tag=a&tag=b&empty=&x=%C3%A9",
                    json=_chat("q", stream=False),
                    headers=[
                        ("X-Title", "caf\xc3\xa9".encode("latin-1")),  # UTF-8 bytes
                        ("X-Raw", b"\xe9t\xe9"),  # latin-1 bytes
                        ("X-Tag", b"a"),
                        ("X-Tag", b"b"),
                        ("Cookie", b"a=1"),
                        ("Cookie", b"b=2"),
                    ],
                )
    (req,) = seen
    assert req.target == "/v1/chat/completions?tag=a&tag=b&empty=&x=%C3%A9"
    # Seen decodes the bytes as latin-1: each value is the client's bytes
    assert (req.header("x-title"), req.header("x-raw")) == ("caf\xc3\xa9", "\xe9t\xe9")
    assert [(k, v) for k, v in req.headers if k in ("x-tag", "cookie")] == [("x-tag", "a, b"), ("cookie", "a=1; b=2")]
