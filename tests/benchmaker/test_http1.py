"""RawTransport (benchmaker/engine/http1.py) against aiohttp, over real sockets on 127.0.0.1.

Golden tests: the same scripted server answers the same workload once through
AiohttpTransport and once through RawTransport, and every sample must say the same
(outcome, timeout kind, status, token events, usage, finish reason, text, bytes); only
the times differ. Then RawTransport's own rules: every byte split of Content-Length
and chunked bodies, keep-alive reuse, the pool cap, the idempotent retry, HEAD, 1xx,
TLS, header injection.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
import struct
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from benchmaker import BenchConfig, BenchRunner, OpenAIChatWorkload, StaticDataset
from benchmaker.engine.errors import ConnectTimeout, TransportError
from benchmaker.engine.http1 import RawTransport
from benchmaker.engine.records import RequestSpec
from benchmaker.engine.transport import AiohttpTransport


def _event(obj: dict | str) -> bytes:
    return b"data: " + (obj.encode() if isinstance(obj, str) else orjson.dumps(obj)) + b"\n\n"


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


ROLE = _event(_chunk({"role": "assistant", "content": ""}))
TOKENS = [_event(_chunk({"content": t})) for t in ("Hel", "lo \u2028", " w\u00f6rld")]
TAIL = (
    _event(_chunk({}, "stop"))
    + _event(
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }
    )
    + _event("[DONE]")
)
SSE = ROLE + b"".join(TOKENS) + TAIL
HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"


def _length(body: bytes, ctype: bytes = b"text/event-stream", status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status,
        ctype,
        len(body),
        extra,
        body,
    )


CHUNKED_RESPONSE = HEAD_CHUNKED + _chunked([ROLE, TOKENS[0] + TOKENS[1][:9], TOKENS[1][9:] + TOKENS[2], TAIL])


class Scripted:
    """A loopback HTTP/1.1 server answering by path and query (see `_answer`); counts
    connections accepted and requests read, and keeps every split position it used."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.open_now = 0
        self.open_max = 0
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.url = ""
        self._handlers: set[asyncio.Task] = set()

    async def start(self, ssl_ctx: ssl.SSLContext | None = None) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ssl_ctx)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"{'https' if ssl_ctx else 'http'}://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        """Stop listening; handlers still running (a stalled answer) are cancelled."""
        self.server.close()
        await self.server.wait_closed()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=1.0)
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        self.connections += 1
        self.open_now += 1
        self.open_max = max(self.open_max, self.open_now)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                self.requests += 1
                target = head.split(b" ", 2)[1].decode()
                keep = await self._answer(urlsplit(target).path, parse_qs(urlsplit(target).query), writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # a stalled answer cancelled by stop(): nothing to report
        finally:
            self.open_now -= 1
            if not writer.is_closing():
                writer.close()

    async def _answer(self, path: str, q: dict[str, list[str]], writer: asyncio.StreamWriter) -> bool:
        """Write the response for `path`; return whether to keep the connection."""
        n = self.requests
        if path == "/split":  # the chunked response cut in two at byte n (1, 2, ...)
            cut = n % len(CHUNKED_RESPONSE) or 1
            writer.write(CHUNKED_RESPONSE[:cut])
            await writer.drain()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            writer.write(CHUNKED_RESPONSE[cut:])
        elif path == "/length":
            writer.write(_length(SSE))
        elif path == "/close":  # close-delimited body (RFC 9112 6.3 rule 8)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            for piece in (ROLE, *TOKENS, TAIL):
                writer.write(piece)
                await writer.drain()
            return False
        elif path == "/gzip":
            writer.write(HEAD_CHUNKED[:-2] + b"Content-Encoding: gzip\r\n\r\n" + _chunked([gzip.compress(SSE)]))
        elif path == "/conn-close":  # says Connection: close, then closes
            writer.write(_length(SSE, extra=b"Connection: close\r\n"))
            await writer.drain()
            return False
        elif path == "/drop":  # closes after the response without saying so
            writer.write(CHUNKED_RESPONSE)
            await writer.drain()
            return False
        elif path == "/nothing":  # closes without any response
            return False
        elif path == "/close-reset":  # a close-delimited body cut by a reset
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + ROLE + TOKENS[0]
            )
            await writer.drain()
            await asyncio.sleep(0.02)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        elif path == "/redirect":  # to `to` with status `code`, with a small body
            code, to = int(q["code"][0]), q["to"][0]
            writer.write(b"HTTP/1.1 %d Moved\r\nLocation: %s\r\nContent-Length: 3\r\n\r\nbye" % (code, to.encode()))
        elif path == "/loop":  # redirects to itself
            writer.write(
                b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nbye\r\n0\r\n\r\n"
            )
        elif path == "/upgrade":
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        elif path in ("/cut", "/reset"):  # head and half the body, then close or reset
            writer.write(CHUNKED_RESPONSE[: CHUNKED_RESPONSE.index(TOKENS[0]) + len(TOKENS[0]) + 3])
            await writer.drain()
            await asyncio.sleep(0.02)
            if path == "/reset":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            return False
        elif path == "/error":
            status = int(q["status"][0])
            body = b'{"error": {"message": "overloaded \xc3\xa9", "code": %d}}' % status
            if q.get("chunked"):
                writer.write(
                    b"HTTP/1.1 %d Oops\r\nTransfer-Encoding: chunked\r\n\r\n" % status + _chunked([body[:5], body[5:]])
                )
            else:
                writer.write(_length(body, b"application/json", b"%d Oops" % status))
        elif path == "/stall":  # some events, then nothing for `hold` s (or a slow drip)
            upto = q["upto"][0]
            writer.write(HEAD_CHUNKED)
            if upto in ("role", "content"):
                writer.write(_chunked([ROLE, *(TOKENS[:1] if upto == "content" else [])])[:-5])
                await writer.drain()
                await asyncio.sleep(float(q["hold"][0]))
            else:  # drip: a token every 50 ms, forever (the total deadline ends it)
                writer.write(_chunked([ROLE])[:-5])
                for _ in range(200):
                    writer.write(_chunked([TOKENS[0]])[:-5])
                    await writer.drain()
                    await asyncio.sleep(0.05)
            return False
        elif path == "/plain":  # a plain GET target for the transport-level tests
            writer.write(_length(b"x" * int(q.get("n", ["5"])[0]), b"text/plain"))
        else:
            writer.write(_length(b"no route", b"text/plain", b"404 Not Found"))
        await writer.drain()
        return True


# -- golden: aiohttp and raw give the same samples ---------------------------------

_COMPARED = (
    "outcome",
    "timeout_kind",
    "http_status",
    "n_token_events",
    "token_event_tokens",
    "usage_present",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "output_chars",
    "finish_reason",
    "model",
    "finish_class",
    "refusal",
    "bytes_sent",
    "bytes_received",
)


def _view(sample: dict, text: str) -> dict:
    v = {k: sample[k] for k in _COMPARED}
    v["text"] = text
    v["got_first_byte"] = sample["first_byte_ns"] is not None
    v["got_first_token"] = sample["first_token_ns"] is not None
    if sample["outcome"] == "http_error":
        v["error"] = sample["error"]
    return v


async def _run(
    tmp_path: Path,
    kind: str,
    path: str,
    *,
    n: int = 3,
    load: str = "closed:1",
    timeouts: dict | None = None,
    ssl_ctx: ssl.SSLContext | None = None,
) -> tuple[list[dict], dict, Scripted]:
    """One run of `n` chat requests to `path` through transport `kind`, each with a fresh
    server: (compared views in seq order, self_checks, the server)."""
    server = await Scripted().start(ssl_ctx)
    texts: dict[int, str] = {}

    def keep_text(spec: RequestSpec, sample, text: str) -> None:
        texts[sample.seq] = text

    transport = None
    if ssl_ctx is not None:
        transport = AiohttpTransport(verify_tls=False) if kind == "aiohttp" else RawTransport(verify_tls=False)
    cfg = BenchConfig(
        load=load,
        max_requests=n,
        out_dir=tmp_path / kind,
        transport=kind,
        timeouts=timeouts or {},
        checks={"max_error_rate": 1.0},
    )
    workload = OpenAIChatWorkload(server.url + path, "m", StaticDataset(["Say hello."]), max_tokens=8)
    try:
        result = await BenchRunner(cfg, workload=workload, transport=transport, post_hooks=[keep_text]).run()
    finally:
        await server.stop()
    samples = sorted(
        (orjson.loads(line) for line in result.samples_path.read_bytes().splitlines()), key=lambda s: s["seq"]
    )
    return [_view(s, texts.get(s["seq"], "")) for s in samples], result.summary["self_checks"], server


async def _both(tmp_path: Path, path: str, *, timed: tuple[str, ...] = (), **kw) -> tuple[list[dict], dict, dict]:
    """Run through aiohttp, then raw; assert equal views except the `timed` fields (those
    that depend on when a deadline fired); return (raw views, aiohttp's and raw's checks)."""
    a, a_checks, _ = await _run(tmp_path, "aiohttp", path, **kw)
    r, r_checks, _ = await _run(tmp_path, "raw", path, **kw)
    assert [{k: v for k, v in x.items() if k not in timed} for x in r] == [
        {k: v for k, v in x.items() if k not in timed} for x in a
    ]
    return r, a_checks, r_checks


OK_VIEW = {
    "outcome": "ok",
    "timeout_kind": None,
    "http_status": 200,
    "n_token_events": 3,
    "token_event_tokens": None,
    "usage_present": True,
    "prompt_tokens": 7,
    "output_tokens": 3,
    "cached_tokens": None,
    "reasoning_tokens": None,
    "output_chars": 13,
    "finish_reason": "stop",
    "model": "m",
    "finish_class": "stop",
    "refusal": False,
    "bytes_received": len(SSE),
    "text": "Hello \u2028 w\u00f6rld",
    "got_first_byte": True,
    "got_first_token": True,
}


async def test_chunked_stream_split_at_every_byte_gives_the_same_samples(tmp_path):
    n = len(CHUNKED_RESPONSE) - 1  # request k is cut after byte k: every boundary once
    views, a_checks, r_checks = await _both(tmp_path, "/split", n=n)
    assert len(views) == n
    for v in views:
        assert {k: v[k] for k in OK_VIEW} == OK_VIEW
    assert a_checks["connections_opened"] == r_checks["connections_opened"] == 1  # kept alive throughout


@pytest.mark.parametrize("path", ["/length", "/close", "/gzip", "/conn-close"])
async def test_body_framings_give_the_same_samples(tmp_path, path):
    views, a_checks, r_checks = await _both(tmp_path, path, n=4)
    for v in views:
        assert {k: v[k] for k in OK_VIEW} == OK_VIEW  # gzip: bytes_received counts decoded bytes (aiohttp's)
    reused = path in ("/length", "/gzip")
    assert r_checks["connections_opened"] == a_checks["connections_opened"] == (1 if reused else 4)


@pytest.mark.parametrize(("code", "method"), [(307, "POST"), (308, "POST"), (302, "GET"), (301, "GET"), (303, "GET")])
async def test_redirects_are_followed_as_aiohttp_does(tmp_path, code, method):
    path = f"/redirect?code={code}&to=/length"
    a, _, a_server = await _run(tmp_path, "aiohttp", path, n=2)
    r, _, r_server = await _run(tmp_path, "raw", path, n=2)
    assert r == a
    for v in r:
        assert {k: v[k] for k in OK_VIEW} == OK_VIEW
    # POST /redirect, then the redirected request with the method aiohttp uses
    assert [h.split(b" ", 1)[0].decode() for h in r_server.heads] == ["POST", method] * 2
    assert [h.split(b" ", 1)[0] for h in a_server.heads] == [h.split(b" ", 1)[0] for h in r_server.heads]


async def test_a_redirect_loop_is_the_same_transport_error(tmp_path):
    views, _, _ = await _both(tmp_path, "/loop", n=1)
    assert views[0]["outcome"] == "transport_error"


async def test_server_closing_between_requests_opens_a_new_connection(tmp_path):
    # closed:1 with 50 ms think time: the server's close arrives before the next send
    views, a_checks, r_checks = await _both(tmp_path, "/drop", n=4, load="closed:1:0.05s")
    assert [v["outcome"] for v in views] == ["ok"] * 4
    assert r_checks["connections_opened"] == a_checks["connections_opened"] == 4


@pytest.mark.parametrize("path", ["/cut", "/reset", "/nothing"])
async def test_server_closing_during_the_request_is_a_transport_error(tmp_path, path):
    views, _, _ = await _both(tmp_path, path, n=2)
    for v in views:
        assert v["outcome"] == "transport_error"
        assert v["got_first_byte"] is (path != "/nothing")
        assert v["got_first_token"] is (path != "/nothing")  # the first 200 body bytes hold a token


@pytest.mark.parametrize("query", ["status=503", "status=404&chunked=1", "status=429"])
async def test_error_statuses_keep_the_same_body(tmp_path, query):
    views, _, _ = await _both(tmp_path, "/error?" + query, n=2)
    status = int(query.split("&")[0].split("=")[1])
    for v in views:
        assert v["outcome"] == "http_error" and v["http_status"] == status
        assert v["error"] == '{"error": {"message": "overloaded \u00e9", "code": ' + str(status) + "}}"


async def test_connection_refused_is_the_same_transport_error(tmp_path):
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    out = {}
    for kind in ("aiohttp", "raw"):
        cfg = BenchConfig(
            load="closed:1", max_requests=2, out_dir=tmp_path / kind, transport=kind, checks={"max_error_rate": 1.0}
        )
        wl = OpenAIChatWorkload(f"http://127.0.0.1:{port}/v1/chat/completions", "m", StaticDataset(["x"]))
        result = await BenchRunner(cfg, workload=wl).run()
        out[kind] = [orjson.loads(line) for line in result.samples_path.read_bytes().splitlines()]
    for kind, samples in out.items():
        assert [s["outcome"] for s in samples] == ["transport_error"] * 2, kind
    assert out["raw"][0]["error"] == out["aiohttp"][0]["error"]  # "cannot connect to URL: [Errno 111] ..."


@pytest.mark.parametrize(
    ("query", "timeouts", "kind"),
    [
        ("upto=role&hold=3", {"ttft_s": 0.3}, "ttft"),
        ("upto=content&hold=3", {"idle_s": 0.3}, "idle"),
        ("upto=drip", {"total_s": 0.4}, "total"),
    ],
)
async def test_each_timeout_kind_is_the_same(tmp_path, query, timeouts, kind):
    # the drip's token count depends on when the deadline fired (0.4 s / 50 ms: ~8)
    timed = ("n_token_events", "text") if kind == "total" else ()
    views, _, _ = await _both(tmp_path, "/stall?" + query, n=2, timeouts=timeouts, timed=timed)
    for v in views:
        assert (v["outcome"], v["timeout_kind"]) == ("timeout", kind)
        assert v["n_token_events"] >= (1 if kind != "ttft" else 0)
        assert v["got_first_byte"] is True
        assert v["got_first_token"] is (kind != "ttft")


def _unreachable_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A listener that never accepts, its backlog filled: a further connect stalls in SYN."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(0)
    fillers = []
    for _ in range(8):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(lst.getsockname())
        except BlockingIOError:
            pass
        fillers.append(s)
    return lst, fillers


async def test_connect_timeout_is_the_same(tmp_path):
    lst, fillers = _unreachable_listener()
    port = lst.getsockname()[1]
    try:
        probe = RawTransport(connect_timeout_s=0.3)
        try:
            await probe.stream(RequestSpec("GET", f"http://127.0.0.1:{port}/")).__aenter__()
        except ConnectTimeout:
            pass
        else:  # pragma: no cover - depends on the kernel's SYN handling
            pytest.skip("this kernel completes connects beyond a full backlog")
        finally:
            await probe.aclose()
        out = {}
        for kind in ("aiohttp", "raw"):
            cfg = BenchConfig(
                load="closed:1",
                max_requests=1,
                out_dir=tmp_path / kind,
                transport=kind,
                timeouts={"connect_s": 0.3},
                checks={"max_error_rate": 1.0},
            )
            wl = OpenAIChatWorkload(f"http://127.0.0.1:{port}/v1/chat/completions", "m", StaticDataset(["x"]))
            result = await BenchRunner(cfg, workload=wl).run()
            out[kind] = orjson.loads(result.samples_path.read_bytes().splitlines()[0])
        for s in out.values():
            # `client` when this busy host's loop lagged a tenth of the deadline (selfcheck)
            assert s["outcome"] == "timeout" and s["timeout_kind"] in ("connect", "client")
            said = f"connect timeout after 0.3 s to http://127.0.0.1:{port}/v1/chat/completions"
            if s["timeout_kind"] == "connect":
                assert s["error"] == said, s["error"]
            else:  # the same timeout, said to be the client's (seen with a CPU hog on each core)
                assert s["error"].startswith(
                    "client-side overload: the connect deadline (0.3 s) passed while this client's event loop lagged "
                ), s["error"]
                assert s["error"].endswith(f"({said})"), s["error"]
    finally:
        for s in fillers:
            s.close()
        lst.close()


@pytest.fixture(scope="module")
def tls_server_ctx(tmp_path_factory) -> ssl.SSLContext:
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(d / "k.pem"),
            "-out",
            str(d / "c.pem"),
        ],
        check=True,
        capture_output=True,
    )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(d / "c.pem", d / "k.pem")
    return ctx


async def test_tls_stream_gives_the_same_samples(tmp_path, tls_server_ctx):
    views, a_checks, r_checks = await _both(tmp_path, "/split", n=5, ssl_ctx=tls_server_ctx)
    for v in views:
        assert {k: v[k] for k in OK_VIEW} == OK_VIEW
    assert r_checks["connections_opened"] == a_checks["connections_opened"] == 1


async def test_tls_unverified_certificate_is_refused(tls_server_ctx):
    server = await Scripted().start(tls_server_ctx)
    tr = RawTransport()  # verifies: the self-signed certificate is not trusted
    try:
        with pytest.raises(TransportError, match="cannot connect to https://127.0.0.1:.*CERTIFICATE_VERIFY_FAILED"):
            async with tr.stream(RequestSpec("GET", server.url + "/plain")):
                pass
    finally:
        await tr.aclose()
        await server.stop()


# -- RawTransport's own rules -------------------------------------------------------


async def _raw_server(responses: list[bytes], split: int | str | None) -> tuple[asyncio.Server, int, list[bytes]]:
    """A server that answers the k-th request (from 1) with responses[k - 1], written in
    two parts cut after byte `split` (after byte k when split is "each"), the second
    after two loop passes; in one write when split is None."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                heads.append(await reader.readuntil(b"\r\n\r\n"))
                resp = responses[len(heads) - 1]
                cut = len(heads) if split == "each" else split
                if cut is None:
                    writer.write(resp)
                else:
                    writer.write(resp[:cut])
                    await writer.drain()
                    await asyncio.sleep(0)
                    await asyncio.sleep(0)
                    writer.write(resp[cut:])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], heads


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_every_split_yields_the_exact_body_on_one_connection(framing):
    body = b'data: {"a": "\xc3\xa9"}\n\n' * 3
    resp = _length(body) if framing == "length" else HEAD_CHUNKED + _chunked([body[:5], body[5:30], body[30:]])
    n = len(resp) - 1  # request k is cut after byte k: every boundary once
    server, port, heads = await _raw_server([resp] * n, "each")
    tr = RawTransport()
    reads = 0
    try:
        for _ in range(n):
            async with tr.stream(RequestSpec("GET", f"http://127.0.0.1:{port}/x")) as r:
                assert r.status == 200
                pieces = [p async for p in r.chunks()]
            assert all(pieces) and b"".join(pieces) == body
            reads += len(pieces)
        assert tr.connections_opened == 1 and len(heads) == n
        assert reads > n  # the cuts inside the body did reach the client as separate reads
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("cut", [1, 17, 40, 64, 90])
async def test_a_split_response_is_read_whole(cut):
    body = b"0123456789" * 5
    resp = HEAD_CHUNKED + _chunked([body[:20], body[20:]])
    server, port, _ = await _raw_server([resp] * 2, cut)
    tr = RawTransport()
    try:
        for _ in range(2):
            async with tr.stream(RequestSpec("GET", f"http://127.0.0.1:{port}/x")) as r:
                assert b"".join([p async for p in r.chunks()]) == body
        assert tr.connections_opened == 1
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()


async def test_request_head_carries_defaults_body_and_spec_headers():
    server, port, heads = await _raw_server([_length(b"ok")], None)
    tr = RawTransport()
    try:
        spec = RequestSpec(
            "POST", f"http://127.0.0.1:{port}/v1/x?a=1", headers={"Accept": "text/event-stream"}, body=b'{"k": 1}'
        )
        async with tr.stream(spec) as r:
            assert await r.read() == b"ok"
            assert r.headers == {"content-type": "text/event-stream", "content-length": "2"}
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()
    assert (
        heads[0]
        == (
            f"POST /v1/x?a=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept-Encoding: gzip, deflate\r\n"
            "User-Agent: benchmaker\r\nContent-Type: application/octet-stream\r\n"
            "Accept: text/event-stream\r\nContent-Length: 8\r\n\r\n"
        ).encode()
    )


async def test_reset_inside_a_close_delimited_body_is_a_cut_not_an_end(tmp_path):
    # aiohttp reads a reset there as the body's end (its parser then finds no [DONE]:
    # protocol_error, with the body's bytes and chars counted); RawTransport says what
    # happened: the body was cut (a transport_error, which the runner records without
    # the parser's totals). One deliberate difference; token events and text equal.
    a, _, _ = await _run(tmp_path, "aiohttp", "/close-reset", n=1)
    r, _, _ = await _run(tmp_path, "raw", "/close-reset", n=1)
    differ = {k: (a[0][k], r[0][k]) for k in a[0] if a[0][k] != r[0][k]}
    assert differ == {
        "outcome": ("protocol_error", "transport_error"),
        "output_chars": (3, 0),
        "bytes_received": (len(ROLE + TOKENS[0]), 0),
    }
    assert r[0]["text"] == "Hel" and r[0]["n_token_events"] == 1


async def test_protocol_upgrade_ends_the_response_and_its_connection():
    server = await Scripted().start()
    tr = RawTransport()
    try:
        async with tr.stream(RequestSpec("GET", server.url + "/upgrade")) as r:
            assert (r.status, await r.read()) == (101, b"")
        async with tr.stream(RequestSpec("GET", server.url + "/plain")) as r:
            assert await r.read() == b"xxxxx"
        assert tr.connections_opened == 2
    finally:
        await tr.aclose()
        await server.stop()


async def test_url_is_percent_encoded_and_its_userinfo_becomes_basic_auth():
    server, port, heads = await _raw_server([_length(b"ok")] * 2, None)
    tr = RawTransport()
    try:
        for url in (f"http://u%40x:p%C3%A9@127.0.0.1:{port}/v1/a b/\u00e9?q=%20x y", f"http://u:p@127.0.0.1:{port}/"):
            headers = {} if "x:" in url else {"Authorization": "Bearer k"}  # the spec's own wins
            async with tr.stream(RequestSpec("GET", url, headers=headers)) as r:
                assert await r.read() == b"ok"
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()
    # "u@x:p\u00e9" as Basic credentials: base64 of b"u@x:p\xe9" (latin-1, as aiohttp's BasicAuth)
    assert heads[0].split(b"\r\n")[:3] == [
        b"GET /v1/a%20b/%C3%A9?q=%20x%20y HTTP/1.1",
        b"Host: 127.0.0.1:%d" % port,
        b"Authorization: Basic dUB4OnDp",
    ]
    assert b"Authorization: Bearer k\r\n" in heads[1] and b"Basic" not in heads[1]


async def test_header_with_a_newline_is_refused():
    tr = RawTransport()
    with pytest.raises(ValueError, match="newline or carriage return"):
        async with tr.stream(RequestSpec("GET", "http://127.0.0.1:9/", headers={"X": "a\r\nEvil: 1"})):
            pass
    await tr.aclose()


async def test_interim_100_and_head_responses():
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + _length(b"after")
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"  # HEAD: no body follows
    server, port, _ = await _raw_server([interim, head, _length(b"third")], None)
    tr = RawTransport()
    try:
        async with tr.stream(RequestSpec("GET", f"http://127.0.0.1:{port}/")) as r:
            assert (r.status, await r.read()) == (200, b"after")
        async with tr.stream(RequestSpec("HEAD", f"http://127.0.0.1:{port}/")) as r:
            assert (r.status, await r.read()) == (200, b"")
        async with tr.stream(RequestSpec("GET", f"http://127.0.0.1:{port}/")) as r:  # HEAD's connection not reused
            assert await r.read() == b"third"
        assert tr.connections_opened == 2
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()


async def test_idempotent_request_is_retried_once_when_an_idle_connection_was_closed():
    server = await Scripted().start()
    tr = RawTransport()
    try:
        async with tr.stream(RequestSpec("GET", server.url + "/plain")) as r:
            assert await r.read() == b"xxxxx"
        # the server now answers /nothing on a new request by closing: the pooled
        # connection is live, the GET fails before any byte and is sent again once
        with pytest.raises(TransportError, match="ServerDisconnectedError"):
            async with tr.stream(RequestSpec("GET", server.url + "/nothing")):
                pass
        assert server.requests == 3 and tr.connections_opened == 2  # 1 + the retry's
        with pytest.raises(TransportError, match="ServerDisconnectedError"):
            async with tr.stream(RequestSpec("POST", server.url + "/nothing", body=b"{}")):
                pass
        assert server.requests == 4  # a POST on a new connection: no retry
    finally:
        await tr.aclose()
        await server.stop()


async def test_pool_limit_caps_open_connections():
    server = await Scripted().start()
    tr = RawTransport(limit=2)
    try:

        async def one() -> bytes:
            async with tr.stream(RequestSpec("GET", server.url + "/plain?n=3")) as r:
                return await r.read()

        assert await asyncio.gather(*(one() for _ in range(12))) == [b"xxx"] * 12
        assert server.open_max <= 2 and tr.connections_opened == 2
    finally:
        await tr.aclose()
        await server.stop()


async def test_large_body_is_paused_and_read_whole():
    body = bytes(range(256)) * 20_000  # 5 MB: over the 1 MB read-ahead limit
    server, port, _ = await _raw_server([_length(body, b"application/octet-stream")] * 2, None)
    tr = RawTransport()
    try:
        for _ in range(2):
            async with tr.stream(RequestSpec("GET", f"http://127.0.0.1:{port}/")) as r:
                got = bytearray()
                async for p in r.chunks():
                    got += p
                    await asyncio.sleep(0.001)  # a slow reader
            assert bytes(got) == body
        assert tr.connections_opened == 1
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()


_HEAP_PASSES = """
import resource, sys
from benchmaker.engine.http1 import keep_heap
if sys.argv[1] == "keep" and not keep_heap():
    print("no glibc")
    raise SystemExit
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # one loop pass of 64 streams: 64 reads of 32 KB held, then freed
    held = [bytearray(32 << 10) for _ in range(64)]
    del held
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def test_keep_heap_stops_page_faults_per_pass_of_reads() -> None:
    """keep_heap (RawTransport.start) keeps the freed top of the heap: 20 passes of 64
    x 32 KB fault their pages in once (~2 MB: ~500 faults), where glibc's default trim
    hands them back and faults them in on every pass (~9,000), in a fresh process each."""

    def faults(mode: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", _HEAP_PASSES, mode], capture_output=True, text=True, check=True
        ).stdout.strip()

    kept = faults("keep")
    if kept == "no glibc":
        pytest.skip("keep_heap changes nothing without glibc's mallopt")
    default = int(faults("default"))
    assert int(kept) < 1000 < 5000 < default, (kept, default)


async def test_start_keeps_the_heap() -> None:
    import benchmaker.engine.http1 as http1

    http1._heap_kept = None  # as in a fresh process (setting it twice is harmless)
    await RawTransport().start()
    assert http1._heap_kept is not None  # tried once per process; True on glibc
    assert http1.keep_heap() is http1._heap_kept


async def _body_server() -> tuple[asyncio.Server, int, list[bytes]]:
    """A keep-alive server that records each request whole (head and Content-Length
    body, as bytes) and answers it with a 2-byte body."""
    requests: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                requests.append(head + await reader.readexactly(n))
                writer.write(_length(b"ok"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], requests


async def test_a_body_given_as_pieces_is_sent_as_their_join_and_the_head_is_cached_whatever_the_length():
    # bytes bodies and lists/tuples of pieces, under and over the 64 KB one-write limit,
    # alternating on one connection: the same bytes on the wire, each head with its own
    # Content-Length, one cached head for them all (keyed without the length)
    big = bytes(range(256)) * 400  # 102,400 bytes
    bodies = [
        b'{"a":1}',
        [b'{"a"', b":", b"12}"],
        big,
        (big[:1000], big[1000:70000], b"", big[70000:]),
        [b"x" * 10, b"y" * 20],
        [],
        b"tail",
    ]
    server, port, requests = await _body_server()
    tr = RawTransport()
    url = f"http://127.0.0.1:{port}/v1/x"
    try:
        for body in bodies:
            async with tr.stream(RequestSpec("POST", url, {"Content-Type": "application/json"}, body)) as r:
                assert await r.read() == b"ok"
        heads = dict(tr._heads)
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()
    head = (
        f"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
        "User-Agent: benchmaker\r\nContent-Type: application/json\r\n"
    ).encode()
    joined = [body if isinstance(body, bytes) else b"".join(body) for body in bodies]
    assert requests == [head + b"Content-Length: %d\r\n\r\n" % len(b) + b for b in joined]
    assert tr.connections_opened == 1
    assert list(heads.values()) == [(head, True), (head, True)]  # one per (headers, empty body or not)


async def test_the_head_without_body_keeps_content_length_zero_only_for_methods_with_a_body():
    server, port, heads = await _raw_server([_length(b"ok"), _length(b"ok")], None)
    tr = RawTransport()
    try:
        for method in ("GET", "PUT"):
            async with tr.stream(RequestSpec(method, f"http://127.0.0.1:{port}/", {}, [])) as r:
                assert await r.read() == b"ok"
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()
    common = f"Host: 127.0.0.1:{port}\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\nUser-Agent: benchmaker\r\n"
    assert heads == [
        f"GET / HTTP/1.1\r\n{common}\r\n".encode(),
        f"PUT / HTTP/1.1\r\n{common}Content-Length: 0\r\n\r\n".encode(),
    ]


async def test_x_replay_headers_are_picked_without_the_whole_dict():
    resp = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Replay-Turn: 3\r\nx-replay-turn: 4\r\nXY: no\r\n"
        b"x-replay-trajectory: t-0\r\nX-Other: 1\r\n\r\nok"
    )
    server, port, _heads = await _raw_server([resp], None)
    tr = RawTransport()
    try:
        async with tr.stream(RequestSpec("GET", f"http://127.0.0.1:{port}/")) as r:
            picked = r.headers_with_prefix("x-replay-")
            everything = r.headers_with_prefix("")
            assert not r.complete  # the body's bytes are not read yet
            assert await r.read() == b"ok"
            assert r.complete
    finally:
        await tr.aclose()
        server.close()
        await server.wait_closed()
    assert picked == {"x-replay-turn": "3, 4", "x-replay-trajectory": "t-0"}
    assert everything == {
        "content-length": "2",
        "x-replay-turn": "3, 4",
        "xy": "no",
        "x-replay-trajectory": "t-0",
        "x-other": "1",
    }
