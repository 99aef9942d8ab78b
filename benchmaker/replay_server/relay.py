"""The recording proxy's way to its upstream: one client request forwarded and its
response relayed back, through the engine's exchange
(benchmaker.engine.request.RequestExchange, read by read, as the agent's model client
sends) on the engine's HTTP/1.1 client (benchmaker.engine.http1.RawTransport), under
the engine's deadlines (benchmaker.engine.request.Deadlines).

    upstream = Upstream(connect_timeout_s=10.0, idle_timeout_s=600.0)  # no total deadline
    response = await upstream.relay(request, "https://api.example.com/v1/models", body)
    response.sink = sink     # when a RelayResponse (else a 502 JSONResponse): see below
    return response          # streams the body to the client
    await upstream.aclose()  # at shutdown

Transport: RawTransport serves `https://` upstreams (a provider's API) as it serves
`http://`: TLS by Python's ssl module with the system's CA store and SNI, HTTP/1.1 (every
OpenAI-compatible, Anthropic and Gemini endpoint speaks it). It is the model client's
transport too, so the proxy and a replayed turn send by the same code; its header list
keeps every response header line as sent (a repeated header stays repeated), and a
relayed read costs one llhttp pass, no copy.

Request: the client's method, the URL given (with the client's query string), the body
bytes as received and the client's headers as given, their bytes too (a value that is
not ASCII reaches the upstream as the client sent it; Authorization and API keys are
forwarded, never kept; a name given twice is sent once, its values joined by ", ",
Cookie's by "; "), minus the hop-by-hop ones (`HOP_BY_HOP`); Host and Content-Length
are the transport's (the upstream's host, the body's length), and Accept-Encoding is
`identity`, so the body comes as the upstream wrote it.

Deadlines, in s, each None for none (the engine's rules, benchmaker.engine.request):

    connect  until the TCP (and TLS) connection is made
    idle     the longest wait for the upstream's next bytes: from the send (the wait for
             the status line and headers too), then from each read; the time the proxy
             spends handing a read to its client is not waiting and does not count
    total    from the send until the body ended

Response: the upstream's status and headers (in order, hop-by-hop ones removed,
Content-Length kept but for a 204 or 304), then its body read by read, each read
relayed as one chunk, every byte of an error body too. Each read is first handed to
the response's `sink` (`RelaySink.feed`, so a recorder records a turn before the bytes
that completed it reach the client), `finish` follows the body's end, `cut` a body
that did not end.

Failures: before the response head (refused, the connect deadline, the idle or total
deadline, a close) the client gets a 502 JSON error {"error": {"message", "type":
"upstream_error", "param": null, "code": "upstream_error"}}. After it (a deadline, the
upstream's body cut short) the relayed body is cut too: the response raises out of the
ASGI app after `sink.cut()`, so the server closes the client's connection without the
body's end (a cut body, never one that looks complete).

A client that leaves (its connection closed: ASGI `http.disconnect`) ends the exchange
at once, wherever it waits: the upstream connection is closed (an answer nobody reads
is not generated on), and the relay ends without error: before the head, `relay`
returns an empty 499 response (nginx's "client closed request"; nothing is sent), after
it the body stops and `sink.cut()` is called; so too when it left after the body's last
read, before its end was sent (the cancellation then reached no await: it is dropped,
ClientWatch.settle, rather than raised by the next one).

Two things the transport does that a byte-for-byte relay would not, both for an upstream
that ignores the request's `identity`/methods: a gzip or deflate body is decoded (then
relayed without its Content-Encoding and Content-Length, as the bytes relayed are the
decoded ones), and a redirect is followed (aiohttp's rules; benchmaker/engine/http1.py).
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from benchmaker.engine.errors import TransportError
from benchmaker.engine.http1 import RawTransport
from benchmaker.engine.records import RequestSpec, Sample
from benchmaker.engine.request import DeadlineExceeded, RequestExchange, shared_deadlines

__all__ = ["CLIENT_GONE", "HOP_BY_HOP", "ClientWatch", "RelayResponse", "RelaySink", "Upstream"]

CLIENT_GONE = 499
"""The status of the (unsent) response `Upstream.relay` returns when its client left
before the upstream's head arrived (module docstring)."""

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
    }
)
"""Header names (lower-case) not relayed either way: the hop-by-hop ones of RFC 9110
section 7.6.1, and the framing ones each hop sets itself (Host, Content-Length,
Accept-Encoding); the Content-Length of a response is relayed as the upstream sent it."""

_DECODED = frozenset({"gzip", "x-gzip", "deflate"})
"""Content-Encodings RawTransport decodes (benchmaker/engine/http1.py, `_Conn._framing`)."""


class RelaySink:
    """Where a relayed body's reads go besides the client; this base keeps nothing
    (a passthrough). A recorder's subclass reads the answer in them."""

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """One body read, stamped `t_ns` (perf_counter_ns), before it is relayed."""

    def finish(self, sample: Sample) -> None:
        """The body ended (every byte fed)."""

    def cut(self) -> None:
        """The body did not end: a deadline fired or the upstream cut it."""


def relay_headers(pairs: list[tuple[str, str]], status: int = 200) -> list[tuple[str, str]]:
    """The response headers to relay of the upstream's `pairs` ((lower-case name,
    value), in order) for a response of `status`: hop-by-hop ones removed,
    Content-Length kept unless the body came chunked or is relayed decoded (module
    docstring), or the status has no body (204, 304: a 304's Content-Length is the
    length of a body it does not send, which an ASGI server takes for the relayed
    body's and fails on)."""
    names = {k for k, _ in pairs}
    coding = next((v.strip().lower() for k, v in pairs if k == "content-encoding"), None)
    decoded = coding in _DECODED
    keep_length = "transfer-encoding" not in names and not decoded and status not in (204, 304)
    dropped = HOP_BY_HOP - {"content-length"} if keep_length else HOP_BY_HOP
    if decoded:
        dropped |= {"content-encoding"}
    return [(k, v) for k, v in pairs if k not in dropped]


class ClientWatch:
    """Cancels `task` when its client leaves (the ASGI `http.disconnect` message on
    `receive`, read after the request's body was) until `stop()`.

        watch = ClientWatch(request.receive, asyncio.current_task())
        ...                       # awaits: the client's leaving cancels them
        if watch.stop(): ...      # it left: end quietly (after an await that did not
                                  # raise, `await watch.settle()` first)"""

    def __init__(self, receive: Receive, task: asyncio.Task) -> None:
        self.task = task
        self.armed = True
        self.cancelled = False
        self._watcher = asyncio.get_running_loop().create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.client_left()

    def client_left(self) -> None:
        """What the watch does at `http.disconnect`: unless stopped, cancel the task."""
        if self.armed:
            self.cancelled = True
            self.task.cancel()

    def stop(self) -> bool:
        """Stop watching; True when the client left and cancelled the task (the
        cancellation, raised or about to be, is taken back: the caller ends quietly)."""
        self.armed = False
        self._watcher.cancel()
        if not self.cancelled:
            return False
        self.cancelled = False
        self.task.uncancel()
        return True

    async def settle(self) -> None:
        """In the task, after `stop()` returned True while no await had raised the
        cancellation (the client left after the task's last await): drop it. Python
        3.11's Task.uncancel() leaves such a cancellation pending, so the next await
        would raise it (3.13 drops it in uncancel()). A cancellation someone else
        requested (`task.cancelling()` > 0) is left to raise."""
        if self.task.cancelling():
            return
        try:
            await asyncio.sleep(0)  # raises the pending cancellation, if any
        except asyncio.CancelledError:
            if self.task.cancelling():
                raise


def _request_headers(request: Request) -> dict[str, str]:
    """The headers to forward of `request` (module docstring): their bytes kept (a value
    decoded as UTF-8 with surrogateescape, which RawTransport encodes back to the same
    bytes), a repeated name's values joined by ", " (Cookie's by "; ", RFC 6265 section 5.4)."""
    out: dict[str, str] = {}
    for k, v in request.headers.raw:
        name = k.decode("latin-1").lower()
        if name in HOP_BY_HOP:
            continue
        value = v.decode("utf-8", "surrogateescape")
        out[name] = f"{out[name]}{'; ' if name == 'cookie' else ', '}{value}" if name in out else value
    out["accept-encoding"] = "identity"
    return out


class RelayResponse(Response):
    """The ASGI response of one relayed exchange (module docstring): sends the head,
    then each body read as it comes, handed to `sink` first (set it before the
    response is sent; default: a RelaySink, which keeps nothing), in the task that
    opened the exchange (its deadlines cancel that task). `headers`: the relayed ones
    (Starlette's); `watch`: the ClientWatch that ends it when the client leaves."""

    def __init__(self, ex: RequestExchange, status: int, headers: list[tuple[str, str]], watch: ClientWatch) -> None:
        self.status_code = status
        self.background = None
        self.raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        self.sink = RelaySink()
        self._ex = ex
        self.watch = watch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ex, sink, watch = self._ex, self.sink, self.watch
        try:
            try:
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                while data := await ex.read(sink):
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            except (DeadlineExceeded, TransportError):
                sink.cut()
                raise
            except asyncio.CancelledError:
                if not watch.stop():
                    raise
                sink.cut()  # the client left: nobody reads the rest
                return
            if watch.stop():  # it left after the last read: nobody reads the end
                sink.cut()
                await watch.settle()
                return
            if ex.body_read:
                sink.finish(ex.sample)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watch.stop()
            await ex.close()


class Upstream:
    """The proxy's upstream side: one RawTransport (its keep-alive pool) and the
    deadlines (s, each None for none; module docstring). Raises ValueError when a
    deadline is not positive."""

    def __init__(
        self,
        *,
        connect_timeout_s: float | None = 10.0,
        idle_timeout_s: float | None = 600.0,
        total_timeout_s: float | None = None,
    ) -> None:
        for name, value in (("connect", connect_timeout_s), ("idle", idle_timeout_s), ("total", total_timeout_s)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} deadline: expected a positive number of s (got {value})")
        self.transport = RawTransport(connect_timeout_s=connect_timeout_s)
        self.idle_timeout_s = idle_timeout_s
        self.total_timeout_s = total_timeout_s

    async def relay(self, request: Request, url: str, body: bytes) -> Response:
        """Send `request` (its method and headers, `body`) to `url` and return the
        response to relay: a RelayResponse once the upstream's head arrived, else a 502
        JSONResponse naming `url` and the failure, or an empty CLIENT_GONE response when
        the client left first. Call it after the request's body was read; the response
        must be returned from the handler's task (the exchange's deadlines and the
        client's leaving cancel it)."""
        idle, total = self.idle_timeout_s, self.total_timeout_s
        deadlines = (
            shared_deadlines(asyncio.get_running_loop(), total_s=total, idle_s=idle)
            if idle is not None or total is not None
            else None
        )
        headers = _request_headers(request)
        task = asyncio.current_task()
        assert task is not None  # an ASGI app runs in a task
        watch = ClientWatch(request.receive, task)
        ex = RequestExchange(Sample(run_id="record", seq=0), 0, deadlines, task)
        ex.start()
        try:
            # every status is the client's to see: an error body is relayed whole
            status = await ex.open(self.transport, RequestSpec(request.method, url, headers, body), lambda _: True)
        except BaseException as exc:
            gone = watch.stop()
            await ex.close()
            if isinstance(exc, asyncio.CancelledError) and gone:
                return Response(status_code=CLIENT_GONE)
            if not isinstance(exc, (DeadlineExceeded, TransportError)):
                raise
            return JSONResponse(
                {
                    "error": {
                        "message": f"recording proxy: upstream {url}: {type(exc).__name__}: {exc}",
                        "type": "upstream_error",
                        "param": None,
                        "code": "upstream_error",
                    }
                },
                status_code=502,
            )
        ex.hold()  # the head is relayed before the first read: not waiting
        return RelayResponse(ex, status, relay_headers(ex.response_headers(), status), watch)

    async def aclose(self) -> None:
        """Close the upstream connections."""
        await self.transport.aclose()
