"""Transports for the engine's hot path (see `benchmaker.engine.types.Transport`).

Measured on this machine: concurrency 64 against a loopback server, httpx's
own pool gives 158 req/s, httpx over aiohttp 2,545 req/s, bare aiohttp 8,731 req/s; and
the engine on RawTransport 2.5x bare aiohttp's requests per client CPU s. So:

    RawTransport      `raw`, the default: the engine's own HTTP/1.1 client on httptools'
                      parser (benchmaker/engine/http1.py), ~1/4 of aiohttp's CPU per request
    AiohttpTransport  `aiohttp`: one aiohttp ClientSession, keep-alive pool, no
                      client-side timeouts except connect (the runner owns the rest);
                      the same samples (tests/benchmaker/test_http1.py), the same cap
                      on a decoded body (http1.MAX_DECODED_BODY_BYTES)
    HttpxTransport    httpx.AsyncClient, for users who need its features
    NullTransport     answers every request at once with a canned body, no I/O:
                      measures the engine itself (scheduler accuracy, events/s)

Connection reuse is counted (`connections_opened`) so a run can tell whether it paid a
TCP handshake per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from benchmaker.engine.errors import ConnectTimeout, TransportError
from benchmaker.engine.http1 import MAX_DECODED_BODY_BYTES, compression_bomb
from benchmaker.engine.records import RequestSpec

_AIOHTTP_DECODES = frozenset({"gzip", "deflate", "br", "zstd"})
"""The Content-Encodings aiohttp's auto_decompress decodes (aiohttp/http_parser.py):
others reach the caller as sent."""


class _AiohttpResponse:
    """One aiohttp exchange as an async context manager (a plain class: cheaper than an
    @asynccontextmanager generator on the hot path). Entering sends the request and
    returns self with `status` and `headers`; leaving releases the connection.

    A body aiohttp decodes (gzip, deflate, br, zstd) is counted as it is read: past
    MAX_DECODED_BODY_BYTES the read raises `compression_bomb` (aiohttp decodes in
    bounded pieces as the reader drains, so the bomb never reaches memory whole)."""

    __slots__ = ("_transport", "_spec", "_resp", "_room", "status", "headers")

    def __init__(self, transport: AiohttpTransport, spec: RequestSpec):
        self._transport = transport
        self._spec = spec
        self._resp: Any = None
        self._room: int | None = None  # decoded bytes still allowed; None: not decoded
        self.status = 0
        self.headers: Any = None

    async def __aenter__(self) -> _AiohttpResponse:
        spec = self._spec
        tr = self._transport
        try:
            resp = await tr._ensure_session().request(
                spec.method, spec.url, headers=spec.headers, data=spec.body, timeout=tr._timeout
            )
        except aiohttp.ServerTimeoutError as exc:
            raise ConnectTimeout(f"connect timeout after {tr._connect_timeout_s} s to {spec.url}") from exc
        except aiohttp.ClientConnectorError as exc:
            raise TransportError(f"cannot connect to {spec.url}: {exc.os_error or exc}") from exc
        except (aiohttp.ClientError, ConnectionError, OSError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:  # sock_connect surfaces as this on some paths
            raise ConnectTimeout(f"connect timeout after {tr._connect_timeout_s} s to {spec.url}") from exc
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers  # a read-only multidict; not copied on the hot path
        coding = resp.headers.get("Content-Encoding")
        if coding is not None and coding.strip().lower() in _AIOHTTP_DECODES:
            self._room = MAX_DECODED_BODY_BYTES
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._resp.release()

    def chunks(self) -> _AiohttpResponse:
        """The body as byte chunks, one per socket read (an async iterator; a class
        rather than an async generator, which costs a WeakSet entry per request)."""
        return self

    def __aiter__(self) -> _AiohttpResponse:
        return self

    async def __anext__(self) -> bytes:
        content = self._resp.content
        if content.at_eof():  # the body is complete and drained: no read that returns b""
            raise StopAsyncIteration
        try:
            data = await content.readany()
        except aiohttp.ClientPayloadError as exc:
            raise TransportError(f"response body cut: {exc}") from exc
        except (aiohttp.ClientError, ConnectionError, OSError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        if not data:
            raise StopAsyncIteration
        if self._room is not None:
            self._room -= len(data)
            if self._room < 0:
                raise compression_bomb(self.headers.get("Content-Encoding"))
        return data

    async def read(self) -> bytes:
        """The whole body; a decoded one over MAX_DECODED_BODY_BYTES raises
        `compression_bomb` (read by chunks, never held whole)."""
        if self._room is not None:
            return b"".join([data async for data in self])
        try:
            return await self._resp.read()
        except (aiohttp.ClientError, ConnectionError, OSError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc


class _CountingConnector(aiohttp.TCPConnector):
    """A TCPConnector that counts the connections it opens. Cheaper than a TraceConfig,
    which makes aiohttp create trace objects and await hooks on every request (measured
    ~14 us/request here, benchmarks/engine.py)."""

    def __init__(self, owner: AiohttpTransport, **kwargs: Any):
        super().__init__(**kwargs)
        self._owner = owner

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        proto = await super()._create_connection(req, traces, timeout)
        self._owner.connections_opened += 1
        return proto


class AiohttpTransport:
    """aiohttp transport (`--transport aiohttp`; the default before RawTransport).

    AiohttpTransport(connect_timeout_s=5.0)   # connect deadline 5 s
    AiohttpTransport(limit=0)                 # no cap on pooled connections

    `limit` caps open connections (0 = unbounded; the runner's `max_in_flight` is the
    cap that is measured). `session`: a ClientSession to send with instead of one of
    its own (its pool, with the transport's timeouts; left open by aclose, and its
    connections are not counted). Raises ConnectTimeout / TransportError from `stream`.
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float | None = 10.0,
        limit: int = 0,
        verify_tls: bool = True,
        session: aiohttp.ClientSession | None = None,
    ):
        self._connect_timeout_s = connect_timeout_s
        self._limit = limit
        self._verify_tls = verify_tls
        self._session: Any = session
        self._own_session = session is None
        # every request's timeouts (a given session's own are not used): connect only
        self._timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect_timeout_s, sock_read=None)
        self.connections_opened = 0

    def _ensure_session(self) -> Any:
        if self._session is None:
            connector = _CountingConnector(
                self,
                limit=self._limit,
                limit_per_host=0,
                ssl=None if self._verify_tls else False,
                force_close=False,
                enable_cleanup_closed=False,
            )
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, auto_decompress=True)
        return self._session

    async def start(self) -> None:
        """Create the session now (inside the running loop), before the clock starts."""
        self._ensure_session()

    def stream(self, spec: RequestSpec) -> _AiohttpResponse:
        """An async context manager that sends `spec` on entering (see Transport)."""
        return _AiohttpResponse(self, spec)

    async def aclose(self) -> None:
        if self._session is not None and self._own_session:
            await self._session.close()
            self._session = None


class _HttpxResponse:
    __slots__ = ("_resp", "status", "headers")

    def __init__(self, resp: Any):
        self._resp = resp
        self.status: int = resp.status_code
        self.headers: dict[str, str] = dict(resp.headers)

    async def chunks(self) -> AsyncIterator[bytes]:
        import httpx

        try:
            async for data in self._resp.aiter_raw():
                if data:
                    yield data
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    async def read(self) -> bytes:
        import httpx

        try:
            return await self._resp.aread()
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc


class HttpxTransport:
    """httpx.AsyncClient transport: slower than aiohttp on the hot path (see module
    docstring), offered for its features (HTTP/2 with the h2 extra, proxies)."""

    def __init__(self, *, connect_timeout_s: float | None = 10.0, limit: int | None = None, verify_tls: bool = True):
        import httpx

        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=limit or None, max_keepalive_connections=limit or None),
            verify=verify_tls,
        )
        self._connect_timeout_s = connect_timeout_s
        self.connections_opened: int | None = None

    @asynccontextmanager
    async def stream(self, spec: RequestSpec) -> AsyncIterator[_HttpxResponse]:
        import httpx

        req = self._client.build_request(spec.method, spec.url, headers=spec.headers, content=spec.body)
        try:
            resp = await self._client.send(req, stream=True)
        except httpx.ConnectTimeout as exc:
            raise ConnectTimeout(f"connect timeout after {self._connect_timeout_s} s to {spec.url}") from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        try:
            yield _HttpxResponse(resp)
        finally:
            await resp.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()


class _NullResponse:
    __slots__ = ("status", "headers", "_chunks")

    def __init__(self, status: int, chunks: tuple[bytes, ...]):
        self.status = status
        self.headers: dict[str, str] = {}
        self._chunks = chunks

    async def chunks(self) -> AsyncIterator[bytes]:
        for c in self._chunks:
            yield c

    async def read(self) -> bytes:
        return b"".join(self._chunks)


class NullTransport:
    """No I/O: every request gets `status` and `chunks` at once (after `delay_s` if set).

    NullTransport()                                    # 200, body b"{}"
    NullTransport(chunks=(b"data: {...}\\n\\n",) * 100)  # a 100-event stream per request
    """

    def __init__(self, *, status: int = 200, chunks: tuple[bytes, ...] = (b"{}",), delay_s: float = 0.0):
        self._status = status
        self._chunks = tuple(chunks)
        self._delay_s = delay_s
        self.connections_opened = 0
        self.requests = 0

    @asynccontextmanager
    async def stream(self, spec: RequestSpec) -> AsyncIterator[_NullResponse]:
        self.requests += 1
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        yield _NullResponse(self._status, self._chunks)

    async def aclose(self) -> None:
        return None


def make_transport(kind: str, *, connect_timeout_s: float | None, limit: int = 0) -> Any:
    """Build a transport by name: `raw` (default), `aiohttp`, `httpx`, `null`.
    Raises ConfigError on an unknown name."""
    from benchmaker.engine.errors import ConfigError

    if kind == "aiohttp":
        return AiohttpTransport(connect_timeout_s=connect_timeout_s, limit=limit)
    if kind == "raw":
        from benchmaker.engine.http1 import RawTransport

        return RawTransport(connect_timeout_s=connect_timeout_s, limit=limit)
    if kind == "httpx":
        return HttpxTransport(connect_timeout_s=connect_timeout_s, limit=limit or None)
    if kind == "null":
        return NullTransport()
    raise ConfigError(f"transport: unknown transport {kind!r} (expected raw, aiohttp, httpx, null)")
