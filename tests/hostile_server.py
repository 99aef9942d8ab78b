"""A hostile HTTP server on 127.0.0.1 for break-it tests: compression bombs and a body
that never ends. Real sockets (http.server in a thread); started per test.

    with HostileServer() as srv:
        srv.url + "/bomb-gzip"       # 200, Content-Encoding gzip: 100 MiB of zeros in ~100 KB
                                     # (also at /bomb-gzip/v1/..., for clients given a base URL)
        srv.url + "/bomb-deflate"    # the same as zlib-wrapped deflate
        srv.url + "/metrics-bomb"    # gzip of 20 MiB of Prometheus comment lines
        srv.url + "/metrics-endless" # 200, then one comment line every 50 ms, never ending
        srv.url + "/metrics"         # a small valid exposition
"""

from __future__ import annotations

import functools
import gzip
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@functools.cache
def _bodies() -> dict[str, tuple[bytes, str]]:
    zeros = b"\0" * (100 << 20)
    lines = b"# filler comment line of a metrics page\n" * ((20 << 20) // 40)
    return {
        "/bomb-gzip": (gzip.compress(zeros, 9), "gzip"),
        "/bomb-deflate": (zlib.compress(zeros, 9), "deflate"),
        "/metrics-bomb": (gzip.compress(lines, 9), "gzip"),
        "/metrics": (b"# TYPE up gauge\nup 1\n", "identity"),
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        if path == "/metrics-endless":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while not self.server.stopping.is_set():  # type: ignore[attr-defined]
                    self.wfile.write(b"4\r\n# x\n\r\n")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
            self.close_connection = True
            return
        body, coding = _bodies().get(path.split("/v1/")[0], (b"", "identity"))  # a base URL's API path too
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain")
        if coding != "identity":
            self.send_header("Content-Encoding", coding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass

    do_GET = do_POST = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up mid-answer (what these tests make clients do) is no
        error to print; anything else is printed as socketserver does."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class HostileServer:
    """The server above on an ephemeral port; `url` is http://127.0.0.1:PORT."""

    def __init__(self) -> None:
        _bodies()  # compressed before the server answers (about a second)
        self._srv = _Server(("127.0.0.1", 0), _Handler)
        self._srv.stopping = threading.Event()  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._srv.stopping.set()  # type: ignore[attr-defined]
        self._srv.shutdown()
        self._srv.server_close()
