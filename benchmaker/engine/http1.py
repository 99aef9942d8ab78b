"""`RawTransport`: the engine's own HTTP/1.1 client (`--transport raw`, the default), an
asyncio Protocol over httptools' response parser (llhttp, the parser of Node.js), with a
keep-alive pool.

    RawTransport()                         # connect deadline 10 s, unbounded pool
    RawTransport(connect_timeout_s=2.0, limit=256, verify_tls=False)

Why: on a loopback stream of 200 token events, aiohttp alone costs 115-140 us
of client CPU per stream against 430-550 us for the engine's whole path on a transport
without I/O, capping any aiohttp-based client near 0.8 of it; per non-streaming request
aiohttp costs 78-90 us beside the engine's own 9. This client does what the engine needs
and no more: one write per request, one llhttp pass per socket read, one future per wait.
`benchmarks/engine.py` measures it beside aiohttp and the null transport.

Behaviour, the same as `AiohttpTransport` unless said otherwise:
- Requests: `METHOD path?query HTTP/1.1` with `Host`, `Accept: */*`, `Accept-Encoding:
  gzip, deflate`, `User-Agent: benchmaker`, `Content-Type: application/octet-stream`
  for a body without one (aiohttp's defaults for bytes data), then the spec's headers
  (a header the spec names replaces the default) and `Content-Length` of the body.
  Header names or values holding CR or LF raise ValueError (as aiohttp does), which the
  runner records as a protocol_error. The head is cached per (method, URL, headers,
  empty body or not) without its Content-Length line, which is added per request.
  The body is bytes, or a list or tuple of bytes-like pieces sent as their join (a
  body of 64 KB or more goes by one writelines of the head and the pieces, not copied
  here: benchmaker.agent.model_client.MessageLog sends a conversation's kept bytes so).
  Redirects (301, 302, 303, 307, 308 with a Location) are followed as aiohttp follows
  them, up to 10; as with aiohttp the sample's times then span the hops and its
  bytes_received is the last body's.
- Bodies: Content-Length, chunked (trailers skipped) and close-delimited (HTTP/1.0 style:
  the body ends when the server closes; a reset there is a cut body, a TransportError,
  where aiohttp takes it for the body's end); `Content-Encoding: gzip`/`deflate` decoded with
  zlib as it arrives (aiohttp's auto_decompress), so `bytes_received` counts decoded
  bytes as with aiohttp; other codings pass through undecoded. A decoded body over
  MAX_DECODED_BODY_BYTES (64 MiB) ends the request with TransportError("decoded body
  over ... (Content-Encoding gzip): a compression bomb?"): a 4 MB gzip of 4 GiB never
  reaches memory (zlib is asked for at most the room left). 1xx interim responses
  are skipped. A HEAD response ends at its headers and its connection is not reused.
- Reads: `chunks()` yields, per wait, every body byte that arrived since the last one
  (llhttp's pieces of one or more socket reads joined), never b"" (as aiohttp's
  `readany`); the runner stamps each with perf_counter_ns when it gets it.
- Pool: idle connections per (scheme, host, port), most recently used first, reused
  while the server keeps them alive (`Connection: close`, HTTP/1.0 without keep-alive or
  a close by the server end them) and for at most `keepalive_s` idle (aiohttp: 15 s).
  `limit` caps connections open or opening over all hosts (0 = no cap; the runner's
  max_in_flight is the cap that is measured): at the cap an idle connection of another
  host is closed, else the request waits for one to be released.
  `connections_opened` counts TCP (or TLS) connections made.
- Retry: as aiohttp, a request with an idempotent method (GET, HEAD, OPTIONS, TRACE, PUT,
  DELETE) sent on a reused connection that the server closed before any response byte
  is sent once more on a new connection (the server closed an idle connection as the
  request went out). Never for POST.
- Errors: the connect deadline (`connect_timeout_s`, over DNS, TCP and TLS handshake)
  raises ConnectTimeout("connect timeout after S s to URL"); a refused or failed
  connect TransportError("cannot connect to URL: OSError text"); a close before the
  status line TransportError("ServerDisconnectedError: Server disconnected"); a close or
  reset inside a body TransportError("response body cut: ..."); a response llhttp
  refuses TransportError("bad HTTP response: ..."). TTFT, idle and total deadlines are
  the runner's (it cancels the request's task); a cancelled or failed exchange closes
  its connection, a complete one returns it to the pool.
- Heap: `start()` sets glibc's malloc to keep the freed top of the heap (process-wide,
  once; see `keep_heap`): each loop pass frees the body bytes of every stream it read,
  which the default trim returned to the kernel and faulted back in on the next pass.
- TLS: asyncio's ssl with `ssl.create_default_context()` (or no verification when
  `verify_tls=False`), SNI = the URL's host. HTTP/1.1 only (no ALPN h2).

Source for the wire rules: RFC 9112 (HTTP/1.1 message syntax: section 6.3 message body
length; section 9.3 persistence); aiohttp 3.14 client_reqrep.py and client.py for the
defaults and the retry this mirrors.
"""

from __future__ import annotations

import asyncio
import ctypes
import ssl
import time
import zlib
from base64 import b64encode
from collections import deque
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

import httptools

from benchmaker.engine.errors import ConnectTimeout, TransportError
from benchmaker.engine.records import RequestSpec

__all__ = ["MAX_DECODED_BODY_BYTES", "RawTransport", "compression_bomb", "keep_heap"]

_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
_HIGH_WATER = 1 << 20  # body bytes buffered unread before the socket is paused
MAX_DECODED_BODY_BYTES = 64 << 20
"""The most bytes a response body decoded from its Content-Encoding may hold, for every
transport of the engine: more ends the request with `compression_bomb(coding)`."""
_JOIN_MAX = 1 << 16  # a smaller body is sent in one write with its head; a larger one by writelines
_DEFAULTS = (
    ("accept", "Accept: */*\r\n"),
    ("accept-encoding", "Accept-Encoding: gzip, deflate\r\n"),
    ("user-agent", "User-Agent: benchmaker\r\n"),
)
_DISCONNECTED = "ServerDisconnectedError: Server disconnected"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10  # aiohttp's max_redirects
_FRAMING_LENGTHS = frozenset({14, 16, 17})  # len(b"content-length"), content-encoding, transfer-encoding


_TRIM_THRESHOLD = 32 << 20  # glibc M_TRIM_THRESHOLD set by keep_heap(): free heap top kept, bytes
_MMAP_THRESHOLD = 4 << 20  # glibc M_MMAP_THRESHOLD set by keep_heap(): smaller blocks come from the heap
_heap_kept: bool | None = None  # keep_heap()'s outcome in this process (None: not tried yet)


def keep_heap() -> bool:
    """Stop glibc's malloc from handing the top of the heap back to the kernel after each
    batch of reads (process-wide, once; called by `RawTransport.start`). Returns True when
    the setting took (glibc), False elsewhere (musl, macOS: nothing is changed).

    Why: each loop pass reads every ready socket before any reader runs, so 64 streams of
    32 KB hold ~2-4 MB of body bytes that are freed a moment later; with glibc's default
    128 KB trim threshold the freed top of the heap goes back to the kernel and comes back
    as page faults on the next pass. Measured on the 200-event loopback stream of
    benchmarks/engine.py (bare RawTransport loop, 64 streams): ~6 page faults and 37-45
    us of system CPU per stream before, ~0 faults and 17-23 us after; the engine's first
    run in a fresh process: 7.5 faults per stream before, 0.3 after. The heap keeps at
    most 32 MB free at its top; blocks from 4 MB up are mmap'ed as before (setting the
    trim threshold fixes glibc's otherwise adaptive mmap threshold, so both are set).
    """
    global _heap_kept
    if _heap_kept is None:
        _heap_kept = False
        try:
            mallopt = ctypes.CDLL(None).mallopt
            gnu = ctypes.CDLL(None).gnu_get_libc_version  # glibc only: musl has a no-op mallopt
        except (OSError, AttributeError):
            return False
        del gnu
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        # M_TRIM_THRESHOLD = -1, M_MMAP_THRESHOLD = -3 (malloc.h); mallopt returns 1 on success
        _heap_kept = mallopt(-3, _MMAP_THRESHOLD) == 1 and mallopt(-1, _TRIM_THRESHOLD) == 1
    return _heap_kept


class _Disconnected(TransportError):
    """The server closed the connection before any byte of the response."""


class _Target:
    """A URL split once: pool key, address, TLS context, request target (percent-encoded),
    Host line, and an Authorization line from user:password@ in the URL."""

    __slots__ = ("key", "host", "port", "ssl", "target", "host_line", "auth_line", "url")

    def __init__(self, url: str, ssl_ctx: Any) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise TransportError(f"cannot connect to {url}: expected an http:// or https:// URL with a host")
        default = 443 if u.scheme == "https" else 80
        self.host = u.hostname
        self.port = u.port or default
        self.key = (u.scheme, self.host, self.port)
        self.ssl = ssl_ctx if u.scheme == "https" else None
        # percent-encode what may not appear raw (spaces, non-ASCII), keeping existing
        # escapes, as aiohttp's yarl requotes (RFC 3986 section 2)
        path = quote(u.path or "/", safe="/%:@!$&'()*+,;=~")
        self.target = path + (f"?{quote(u.query, safe='/?%:@!$&()*+,;=~')}" if u.query else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_line = f"Host: {host}\r\n" if u.port in (None, default) else f"Host: {host}:{self.port}\r\n"
        self.auth_line = ""
        if u.username is not None:  # user:password@ in the URL: Basic auth, as aiohttp
            cred = b64encode(f"{unquote(u.username)}:{unquote(u.password or '')}".encode("latin-1")).decode()
            self.auth_line = f"Authorization: Basic {cred}\r\n"
        self.url = url


class _Conn(asyncio.Protocol):
    """One connection and the state of the exchange on it (one at a time)."""

    __slots__ = (
        "_owner",
        "key",
        "transport",
        "_parser",
        "closed",
        "idle_since",
        "active",
        "head_only",
        "status",
        "raw_headers",
        "headers_done",
        "done",
        "keep_alive",
        "exc",
        "waiter",
        "chunks",
        "paused",
        "received",
        "nbody",
        "consumed",
        "_length",
        "_chunked",
        "_decoder",
        "_interim",
    )

    def __init__(self, owner: RawTransport, key: tuple[str, str, int]) -> None:
        self._owner = owner
        self.key = key
        self.transport: Any = None
        self._parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self.active = False
        self.waiter: asyncio.Future[None] | None = None
        self.chunks: list[bytes] = []
        self._reset(False)

    def _reset(self, head_only: bool) -> None:
        """Fresh exchange state before a request is written."""
        self.head_only = head_only
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.done = False
        self.keep_alive = False
        self.exc: TransportError | None = None
        self.paused = False
        self.received = False
        self.nbody = 0  # body bytes delivered by the parser (decoded)
        self.consumed = 0  # of which handed to the reader
        self._length: int | None = None
        self._chunked = False
        self._decoder: Any = None
        self._interim = False

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.active or self.done:  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(TransportError("bad HTTP response: a protocol upgrade (101), which this client does not do"))
            self.close()
        except httptools.HttpParserError as exc:
            self._fail(TransportError(f"bad HTTP response: {exc}"))
            self.close()
        if self.nbody - self.consumed > _HIGH_WATER and not self.paused and not self.done:
            self.paused = True
            self.transport.pause_reading()
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def eof_received(self) -> None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._owner._lost(self)
        if self.active and not self.done:
            if self.headers_done and self._length is None and not self._chunked and exc is None:
                self._complete()  # a close-delimited body ends here (a reset cuts it: below)
                self.keep_alive = False
            elif self.headers_done:
                why = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed by the server"
                of = f" of {self._length}" if self._length is not None else ""
                self._fail(TransportError(f"response body cut: {why} after {self.nbody}{of} body bytes"))
            elif self.received:
                self._fail(TransportError(f"response head cut: {type(exc).__name__ if exc else 'connection closed'}"))
            else:
                self._fail(_Disconnected(_DISCONNECTED if exc is None else f"{type(exc).__name__}: {exc}"))
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    # -- httptools callbacks -------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))
        if len(name) in _FRAMING_LENGTHS:  # only these lengths can name a framing header
            self._framing(name, value)

    def _framing(self, name: bytes, value: bytes) -> None:
        """Content-Length, Transfer-Encoding and Content-Encoding, as each header arrives
        (a later one of a name wins); other names pass. Kept here rather than in a walk
        of every header at their end (one length test per header)."""
        n = len(name)
        if n == 14 and name.lower() == b"content-length":
            try:
                self._length = int(value)
            except ValueError:
                pass  # llhttp refuses it
        elif n == 17 and name.lower() == b"transfer-encoding":
            self._chunked = b"chunked" in value.lower()
        elif n == 16 and name.lower() == b"content-encoding":
            enc = value.strip().lower()
            if enc in (b"gzip", b"x-gzip"):
                self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif enc == b"deflate":
                self._decoder = _Deflate()

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim response (100 Continue, 103): skip it
            self._interim = True
            self.raw_headers = []
            self._length, self._chunked, self._decoder = None, False, None  # its headers frame nothing
            return
        self.status = status
        if self._chunked:
            self._length = None
        if status in (204, 304):
            self._length = 0
        self.headers_done = True
        if self.head_only:  # a HEAD response has no body whatever its headers say
            self._length = 0
            self._complete()
            self.keep_alive = False

    def on_body(self, body: bytes) -> None:
        if self._decoder is not None:
            room = MAX_DECODED_BODY_BYTES - self.nbody
            body = self._decoder.decompress(body, room + 1)
            if len(body) > room:  # zlib stopped at room + 1: the rest would be more
                self._decoder = None
                self._fail(compression_bomb(_header(self.raw_headers, b"content-encoding")))
                self.close()
                return
            if not body:
                return
        elif self.done:
            return
        self.nbody += len(body)
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        if self.done or self.exc is not None:  # a refused body (a bomb) never completes
            return
        self._complete()
        self.keep_alive = self._parser.should_keep_alive()

    # -- exchange ------------------------------------------------------------------

    def _complete(self) -> None:
        d = self._decoder
        if d is not None:
            self._decoder = None
            tail = d.flush()
            if tail:
                self.nbody += len(tail)
                self.chunks.append(tail)
        self.done = True

    def _fail(self, exc: TransportError) -> None:
        if self.exc is None and not self.done:
            self.exc = exc

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    async def wait(self) -> None:
        """Wait for the next read (or close); a cancellation propagates."""
        fut = self.waiter = self._owner._loop.create_future()
        await fut


def compression_bomb(coding: str | None) -> TransportError:
    """The error that ends a request whose body decodes to more than
    MAX_DECODED_BODY_BYTES (`coding`: its Content-Encoding header, as sent)."""
    return TransportError(
        f"decoded body over {MAX_DECODED_BODY_BYTES} bytes (Content-Encoding {coding}): a compression bomb?"
    )


class _Deflate:
    """`Content-Encoding: deflate` is zlib-wrapped by RFC 9110 but raw deflate from some
    servers: the first bytes decide (as aiohttp and browsers do)."""

    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d: Any = None

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        if self._d is None:
            raw = not (len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0)
            self._d = zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
        return self._d.decompress(data, max_length)

    def flush(self) -> bytes:
        return self._d.flush() if self._d is not None else b""


def _header(raw: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of header `name` (lower-case bytes) in `raw`, or None."""
    for k, v in raw:
        if len(k) == len(name) and k.lower() == name:
            return v.decode("latin-1")
    return None


def _headers_dict(raw: list[tuple[bytes, bytes]], prefix: bytes = b"") -> dict[str, str]:
    """Response headers as a dict: lower-case names, repeated ones joined with ", "; only
    those whose lower-case name starts with `prefix` (lower-case) when one is given."""
    out: dict[str, str] = {}
    n = len(prefix)
    for name, value in raw:
        if n and name[:n].lower() != prefix:
            continue
        k = name.decode("latin-1").lower()
        v = value.decode("latin-1")
        out[k] = f"{out[k]}, {v}" if k in out else v
    return out


def _head(spec: RequestSpec, target: _Target, has_body: bool) -> tuple[str, bool]:
    """The request line and headers of `spec` up to, not including, the Content-Length
    line and the blank line that ends the head: (text, whether a Content-Length line
    follows). `has_body`: the body is not empty (a `Content-Type` default is added then).
    The bytes sent are the text's UTF-8 (as aiohttp encodes headers; with
    surrogateescape, so a value decoded from bytes that way, a relayed header that is
    not UTF-8, is sent as those bytes), then `Content-Length: N\r\n` when the flag
    says so, then `\r\n` (`_head_bytes`).
    Raises ValueError when a header name or value holds CR or LF."""
    headers = spec.headers
    parts = [spec.method, " ", target.target, " HTTP/1.1\r\n"]
    names = {k.lower() for k in headers} if headers else ()
    if "host" not in names:
        parts.append(target.host_line)
    if target.auth_line and "authorization" not in names:
        parts.append(target.auth_line)
    for name, line in _DEFAULTS:
        if name not in names:
            parts.append(line)
    if has_body and "content-type" not in names:
        parts.append("Content-Type: application/octet-stream\r\n")
    n_lines = len(parts) - 3
    if headers:
        for k, v in headers.items():
            if k.lower() in ("content-length", "transfer-encoding"):
                continue
            parts.append(f"{k}: {v}\r\n")
            n_lines += 1
    text = "".join(parts)
    if text.count("\n") != n_lines or text.count("\r") != n_lines:  # one per line
        raise ValueError(f"newline or carriage return in a header of the request to {spec.url}")
    return text, has_body or spec.method in ("POST", "PUT", "PATCH")


def _body_parts(body: Any) -> tuple[int, tuple[Any, ...] | None]:
    """(length in bytes, pieces) of a request body: `bytes` (or another bytes-like
    object) gives (len, None); a list or tuple of bytes-like pieces, sent one after the
    other as if joined, gives (their total length, the pieces as a tuple); None is an
    empty body."""
    if body is None:
        return 0, None
    if type(body) is list or type(body) is tuple:
        return sum(map(len, body)), tuple(body)
    return len(body), None


class _RawResponse:
    """One exchange as an async context manager (see `Transport`): entering sends the
    request and returns self once status and headers arrived (`status`; `headers`: a dict
    of lower-case names, repeated headers joined with ", ", built when first read);
    leaving returns the connection to the pool when its response is complete, else
    closes it."""

    __slots__ = ("_tr", "_spec", "_conn", "status", "_raw", "_headers")

    def __init__(self, transport: RawTransport, spec: RequestSpec) -> None:
        self._tr = transport
        self._spec = spec
        self._conn: _Conn | None = None
        self.status = 0
        self._raw: list[tuple[bytes, bytes]] = []
        self._headers: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = _headers_dict(self._raw)
        return self._headers

    async def __aenter__(self) -> _RawResponse:
        spec = self._spec
        conn = await self._send(spec)
        hops = 0
        while conn.status in _REDIRECTS:  # aiohttp's rules (client.py), up to 10 hops
            location = _header(conn.raw_headers, b"location")
            if location is None:
                break
            spec = await self._redirected(conn, spec, location, hops)
            hops += 1
            conn = await self._send(spec)
        self._conn = conn
        self.status = conn.status
        self._raw = conn.raw_headers  # the list stays this exchange's: _reset makes a new one
        return self

    async def _send(self, spec: RequestSpec) -> _Conn:
        """Write `spec` on a pooled or new connection; return it once the response head
        arrived (retried once on a new connection, see the module docstring)."""
        tr = self._tr
        target = tr._targets.get(spec.url)
        if target is None:
            target = tr._target(spec.url)
        body: Any = spec.body  # bytes-like, or a list of pieces (_body_parts)
        n, pieces = _body_parts(body)
        head = tr._head_bytes(spec, target, n)
        if n >= _JOIN_MAX:  # head and body by one writelines: the body is not copied here
            data = None
            out = (head, *pieces) if pieces is not None else (head, body)
        elif pieces is not None:
            data = b"".join((head, *pieces))
        else:
            data = head + body if body else head
        head_only = spec.method == "HEAD"
        for attempt in (0, 1):
            idle = tr._pop_idle(target.key) if tr._idle.get(target.key) else None
            reused = idle is not None
            conn = idle if idle is not None else await tr._new_conn(target)
            conn._reset(head_only)
            conn.active = True
            try:
                if data is None:
                    conn.transport.writelines(out)
                else:
                    conn.transport.write(data)
                while not conn.headers_done:
                    if conn.exc is not None:
                        raise conn.exc
                    await conn.wait()
            except _Disconnected:
                conn.active = False
                conn.close()
                if attempt == 0 and reused and spec.method in _IDEMPOTENT:
                    continue
                raise
            except BaseException:
                conn.active = False
                conn.close()
                raise
            break
        return conn

    async def _redirected(self, conn: _Conn, spec: RequestSpec, location: str, hops: int) -> RequestSpec:
        """The request a redirect response on `conn` asks for, after its body was read
        and its connection released. As aiohttp: 303 (not after HEAD), and 301/302 after
        POST, become a GET without body; Authorization is dropped when the origin
        changes; more than 10 hops raise TransportError("TooManyRedirects: ...")."""
        try:
            while not conn.done:
                if conn.exc is not None:
                    raise conn.exc
                conn.chunks.clear()
                await conn.wait()
        except BaseException:
            conn.active = False
            conn.close()
            raise
        conn.active = False
        conn.chunks.clear()
        if conn.keep_alive and not conn.closed and not conn.paused:
            self._tr._release(conn)
        else:
            conn.close()
        if hops >= _MAX_REDIRECTS:
            raise TransportError(f"TooManyRedirects: more than {_MAX_REDIRECTS} redirects from {self._spec.url}")
        url = urljoin(spec.url, location)
        new, old = urlsplit(url), urlsplit(spec.url)
        if new.scheme not in ("http", "https"):
            raise TransportError(f"InvalidUrlRedirectClientError: {url}: not http(s)")
        method, body, headers = spec.method, spec.body, spec.headers
        if (conn.status == 303 and method != "HEAD") or (conn.status in (301, 302) and method == "POST"):
            method, body = "GET", None
        if (new.scheme, new.hostname, new.port) != (old.scheme, old.hostname, old.port):
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        return RequestSpec(method, url, headers=headers, body=body)

    async def __aexit__(self, *exc: object) -> None:
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        conn.active = False
        conn.chunks.clear()
        if conn.done and conn.keep_alive and not conn.closed and not conn.paused:
            self._tr._release(conn)
        else:
            conn.close()

    def headers_with_prefix(self, prefix: str) -> dict[str, str]:
        """The headers whose lower-case name starts with `prefix` (lower-case), as
        `headers` gives them, without building the whole dict."""
        return _headers_dict(self._raw, prefix.encode("latin-1"))

    def header_items(self) -> list[tuple[str, str]]:
        """Every header as (lower-case name, value), in the order received, a repeated
        one once per line (as sent; `headers` joins them)."""
        return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in self._raw]

    @property
    def complete(self) -> bool:
        """True when the body ended and every byte of it was read (the next read raises
        StopAsyncIteration)."""
        conn = self._conn
        return conn is not None and conn.done and not conn.chunks

    def chunks(self) -> _RawResponse:
        """The body as byte chunks, each all the bytes that arrived since the last one
        (an async iterator; never yields b"")."""
        return self

    def __aiter__(self) -> _RawResponse:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        if conn is None:
            raise RuntimeError("the body is read inside the exchange's `async with` only")
        while True:
            chunks = conn.chunks
            if chunks:
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                conn.consumed = conn.nbody
                if conn.paused:
                    conn.paused = False
                    conn.transport.resume_reading()
                return data
            if conn.done:
                raise StopAsyncIteration
            if conn.exc is not None:
                raise conn.exc
            await conn.wait()

    async def read(self) -> bytes:
        """The whole (rest of the) body; raises TransportError when it is cut."""
        out = [data async for data in self]
        return b"".join(out)


class RawTransport:
    """The engine's HTTP/1.1 client (see the module docstring for its behaviour).

    RawTransport()                                 # connect deadline 10 s, no pool cap
    RawTransport(connect_timeout_s=None)           # no connect deadline
    RawTransport(limit=64, keepalive_s=5.0)        # at most 64 connections, 5 s idle

    `stream(spec)` raises ConnectTimeout / TransportError (on entering or while reading).
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float | None = 10.0,
        limit: int = 0,
        verify_tls: bool = True,
        keepalive_s: float = 15.0,
    ) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._limit = limit
        self._verify_tls = verify_tls
        self._keepalive_s = keepalive_s
        self._ssl: ssl.SSLContext | None = None
        self._targets: dict[str, _Target] = {}
        self._heads: dict[tuple[Any, ...], tuple[bytes, bool]] = {}
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._conns: set[_Conn] = set()
        self._open = 0  # connections open or being opened
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: Any = None
        self.connections_opened = 0

    async def start(self) -> None:
        """Bind to the running loop now, before the clock starts, and keep the heap
        (`keep_heap`: no page faults per batch of reads)."""
        self._loop = asyncio.get_running_loop()
        keep_heap()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the transport is bound to (by start() or its first
        connection), None before."""
        return self._loop

    def stream(self, spec: RequestSpec) -> _RawResponse:
        """An async context manager that sends `spec` on entering (see Transport)."""
        return _RawResponse(self, spec)

    async def aclose(self) -> None:
        """Close every connection, idle or in use; waiters for a connection get TransportError."""
        for conn in list(self._conns):
            conn.close()
        self._conns.clear()
        self._idle.clear()
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_exception(TransportError("transport closed"))
        await asyncio.sleep(0)  # let the transports run connection_lost

    # -- pool ----------------------------------------------------------------------

    def _target(self, url: str) -> _Target:
        if self._ssl is None and url.startswith("https:"):
            self._ssl = ssl.create_default_context()
            if not self._verify_tls:
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        t = _Target(url, self._ssl)
        if len(self._targets) < 4096:  # a workload with ever-new URLs does not grow this
            self._targets[url] = t
        return t

    def _head_bytes(self, spec: RequestSpec, target: _Target, n: int) -> bytes:
        """The request line and headers of `spec` for a body of `n` bytes, with the blank
        line that ends them. All but the Content-Length line is cached per (method, URL,
        headers, body or not): a workload sends the same headers each time, whatever its
        bodies' lengths (at most 4,096 entries)."""
        headers = spec.headers
        key = (spec.method, spec.url, tuple(headers.items()) if headers else (), n > 0)
        cached = self._heads.get(key)
        if cached is None:
            text, with_length = _head(spec, target, n > 0)
            cached = (text.encode("utf-8", "surrogateescape"), with_length)
            if len(self._heads) < 4096:
                self._heads[key] = cached
        head, with_length = cached
        return head + b"Content-Length: %d\r\n\r\n" % n if with_length else head + b"\r\n"

    def _pop_idle(self, key: tuple[str, str, int]) -> _Conn | None:
        """The most recently released live idle connection to `key`, or None."""
        idle = self._idle.get(key)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.closed or conn.transport.is_closing():
                continue
            if now - conn.idle_since > self._keepalive_s:
                conn.close()
                continue
            return conn
        return None

    async def _new_conn(self, target: _Target) -> _Conn:
        """A new connection to `target`, within `limit` (waiting for a free slot or an
        idle connection of `target` released meanwhile)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        while self._limit and self._open >= self._limit and not self._close_other_idle():
            fut = self._loop.create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._wake_one()  # pass the slot on
                raise
            conn = self._pop_idle(target.key)
            if conn is not None:
                return conn
        self._open += 1
        try:
            return await self._connect(target)
        except BaseException:
            self._open -= 1
            self._wake_one()
            raise

    async def _connect(self, target: _Target) -> _Conn:
        loop = self._loop
        conn = _Conn(self, target.key)
        cm = asyncio.timeout(self._connect_timeout_s)
        try:
            async with cm:
                await loop.create_connection(
                    lambda: conn,
                    target.host,
                    target.port,
                    ssl=target.ssl,
                    server_hostname=target.host if target.ssl is not None else None,
                )
        except TimeoutError as exc:
            if cm.expired():
                raise ConnectTimeout(f"connect timeout after {self._connect_timeout_s} s to {target.url}") from exc
            raise TransportError(f"cannot connect to {target.url}: {exc}") from exc
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"cannot connect to {target.url}: {exc}") from exc
        self.connections_opened += 1
        self._conns.add(conn)
        return conn

    def _release(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, []).append(conn)
        if self._waiters:
            self._wake_one()

    def _lost(self, conn: _Conn) -> None:
        """A connection closed (called by its connection_lost)."""
        self._lost_now(conn)
        if self._waiters:
            self._wake_one()

    def _close_other_idle(self) -> bool:
        """At the cap: close one idle connection (of any host) to make room; True if one was."""
        for idle in self._idle.values():
            while idle:
                conn = idle.pop(0)
                if not conn.closed:
                    conn.close()
                    conn.closed = True  # its slot is free now; connection_lost will not count it twice
                    self._lost_now(conn)
                    return True
        return False

    def _lost_now(self, conn: _Conn) -> None:
        self._open -= 1
        self._conns.discard(conn)

    def _wake_one(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return
