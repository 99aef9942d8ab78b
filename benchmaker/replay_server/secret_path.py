"""A secret first path segment as a local server's authentication: the recording
proxy's (benchmaker.replay_server.recorder), whose callers' Authorization, x-api-key and
x-goog-api-key headers are their real keys and go upstream unchanged, so its own
secret cannot travel in a header. It travels in the base URL the client is given:

    secret = secrets.token_urlsafe(32)          # 43 URL-safe characters, 256 random bits
    app = Starlette(routes, middleware=[Middleware(SecretPath, secret=secret)])
    url = f"http://127.0.0.1:{port}/{secret}"   # the base URL (URL/v1 for OpenAI clients)

Every client that takes a base URL appends its API's path to the base's path, so the
secret reaches the server: the openai, anthropic and google-genai SDKs (Python and
JS; google-genai's `join_url_path`, JS `constructUrl`), Codex (`base_url` +
"/responses"), Gemini CLI (GOOGLE_GEMINI_BASE_URL through @google/genai), Claude Code
(ANTHROPIC_BASE_URL), pi (its SDKs' baseURL), opencode (the AI SDK's baseURL),
aider and mini-swe-agent (litellm's api_base, the openai SDK).

A request whose path is `/<secret>` or starts with `/<secret>/` goes on with that
segment removed from `path` and `raw_path`, so the app (and whatever it forwards)
never sees the secret; any other is answered 401 with an OpenAI-style JSON error
{"error": {"message", "type": "unauthorized", "param": null, "code": "unauthorized"}}
before the app sees it (its body unread), and `on_refused()` is called. The segment
is compared with hmac.compare_digest (time independent of where it differs). A
lifespan scope passes through; a websocket without the secret is closed (code 1008).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["SecretPath", "check_secret"]

_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{22,}")
"""A secret: one path segment of URL-safe characters, at least 22 of them (128 bits
of `secrets.token_urlsafe`)."""

_REFUSED = {
    "error": {
        "message": "missing or wrong secret path prefix: use the base URL the server printed",
        "type": "unauthorized",
        "param": None,
        "code": "unauthorized",
    }
}


def check_secret(secret: str) -> str:
    """`secret` when it is at least 22 URL-safe characters ([A-Za-z0-9_-], 128 bits of
    `secrets.token_urlsafe`); else raises ValueError (not naming it)."""
    if not _SECRET_RE.fullmatch(secret):
        raise ValueError("secret: expected at least 22 URL-safe characters [A-Za-z0-9_-]")
    return secret


def _strip_first_segment(path: bytes) -> tuple[bytes, bytes]:
    """(first segment, rest) of a path starting with "/": b"/s/v1/x" -> (b"s", b"/v1/x"),
    b"/s" -> (b"s", b"/")."""
    head, sep, tail = path[1:].partition(b"/")
    return head, (b"/" + tail) if sep else b"/"


class SecretPath:
    """ASGI middleware: passes on only requests under `/<secret>` (module docstring),
    with the segment removed. Raises ValueError when `secret` is not at least 22
    URL-safe characters ([A-Za-z0-9_-])."""

    def __init__(self, app: ASGIApp, *, secret: str, on_refused: Callable[[], None] | None = None) -> None:
        self.app = app
        self._secret = check_secret(secret).encode("ascii")
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path.startswith("/"):
            head, rest = _strip_first_segment(path.encode("utf-8", "surrogateescape"))
            if hmac.compare_digest(head, self._secret):
                raw = scope.get("raw_path")
                inner = dict(scope, path=rest.decode("utf-8", "surrogateescape"))
                if raw is not None and raw.startswith(b"/"):
                    inner["raw_path"] = _strip_first_segment(raw)[1]
                await self.app(inner, receive, send)
                return
        if self._on_refused is not None:
            self._on_refused()
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await JSONResponse(_REFUSED, status_code=401)(scope, receive, send)
