"""Plain HTTP requests (any method, headers, body) judged by their status.

    HttpWorkload("http://127.0.0.1:8080/health")                        # GET, expects 200
    HttpWorkload(url, "POST", body={"q": 1}, expected_status=(200, 201))  # JSON body
    HttpWorkload(url, "PUT", body=b"raw", headers={"Content-Type": "application/octet-stream"})

There are no tokens: first_token_ns, token_event_ns stay None; `output_chars` stays 0.
The parser counts the body bytes into `bytes_received` (body only, headers excluded).

Status semantics:
- status >= 400: the runner reads the error body and records `http_error` itself (the
  parser is not called), whatever `expected_status` says. A workload that expects a 4xx
  must be honoured by the runner via `accepts_status(status)`.
- status < 400 and in `expected_status`: `ok` (an empty body is ok: no `empty_output`
  for plain HTTP).
- status < 400 and not in `expected_status`: the parser's finish() sets `http_error`
  with `error = "status 204 not in expected (200)"`. It reads `sample.http_status`,
  which the runner sets before calling finish().
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from benchmaker.engine.records import Outcome, RequestSpec, Sample

__all__ = ["HttpParser", "HttpWorkload"]

_OK = Outcome.OK.value


class HttpParser:
    """Counts body bytes; judges the status at finish(). `text` is the body decoded as
    UTF-8 (replacement on bad bytes) when `keep_body`, else ""."""

    __slots__ = ("expected_status", "keep_body", "body_bytes", "_chunks")

    def __init__(self, expected_status: frozenset[int], keep_body: bool = False) -> None:
        self.expected_status = expected_status
        self.keep_body = keep_body
        self.body_bytes = 0
        self._chunks: list[bytes] = []

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """Count one read's bytes (t_ns unused: no token events in plain HTTP)."""
        self.body_bytes += len(data)
        if self.keep_body:
            self._chunks.append(data)

    def finish(self, sample: Sample) -> None:
        """Set bytes_received and the outcome from `sample.http_status` (see module doc)."""
        sample.bytes_received = self.body_bytes
        status = sample.http_status
        if status is not None and status not in self.expected_status:
            sample.outcome = Outcome.HTTP_ERROR.value
            expected = ", ".join(str(s) for s in sorted(self.expected_status))
            sample.error = f"status {status} not in expected ({expected})"
        else:
            sample.outcome = _OK


class HttpWorkload:
    """The same HTTP request every time; implements `benchmaker.engine.types.Workload`.

    `body`: bytes sent as-is, a str sent as UTF-8, or a dict/list sent as JSON (orjson)
    with `Content-Type: application/json` unless headers set one. `expected_status`: one
    status or several (default 200). `keep_body` keeps response bodies for graders
    (memory grows with the body size; off by default).
    Raises ValueError on an empty method or a status outside 100..599.
    """

    name = "http"

    def __init__(
        self,
        url: str,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        body: bytes | str | dict[str, Any] | list[Any] | None = None,
        expected_status: int | Iterable[int] = 200,
        *,
        keep_body: bool = False,
    ) -> None:
        if not method:
            raise ValueError("method: expected an HTTP method such as GET (got '')")
        statuses = frozenset([expected_status] if isinstance(expected_status, int) else expected_status)
        bad = [s for s in statuses if not isinstance(s, int) or not 100 <= s <= 599]
        if not statuses or bad:
            raise ValueError(f"expected_status: expected HTTP status codes 100..599 (got {expected_status!r})")
        self.url = url
        self.method = method.upper()
        self.expected_status = statuses
        self.keep_body = keep_body
        self.headers = dict(headers or {})
        if isinstance(body, (dict, list)):
            self.body: bytes | None = orjson.dumps(body)
            if not any(k.lower() == "content-type" for k in self.headers):
                self.headers["Content-Type"] = "application/json"
        elif isinstance(body, str):
            self.body = body.encode()
        else:
            self.body = body

    def accepts_status(self, status: int) -> bool:
        """True when `status` is one of the expected ones (for runners that let a
        workload expect a 4xx/5xx)."""
        return status in self.expected_status

    def request(self, seq: int) -> RequestSpec:
        """The request (identical for every seq); meta is empty."""
        return RequestSpec(method=self.method, url=self.url, headers=dict(self.headers), body=self.body)

    def parser(self, spec: RequestSpec) -> HttpParser:
        """A fresh parser for the response to `spec`."""
        return HttpParser(self.expected_status, self.keep_body)
