"""The replay server: answers chat, Responses, Messages and Gemini requests from recordings.

    python -m benchmaker.replay_server.server trajectories.jsonl --port 0 --latency fixed:200:20
    # first stdout line: the bound base URL, e.g. http://127.0.0.1:41873

This module owns the HTTP routes, the status codes and error bodies, the divergence
policy and the paced sending; it reads each API's wire through `benchmaker.apis` and
finds turns through the store (`store.py`). Its contract (routes, matching, status
codes, the divergence check, tools, latency): docs/replay-server.md. Matching is
stateless: a request's task key and assistant count find its turn. SSE event groups go
out at absolute deadlines on time.perf_counter() (response start = the moment the
request body has been read), never early and without accumulating lateness.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hmac
import itertools
import operator
import os
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from benchmaker.apis import anthropic_messages, gemini
from benchmaker.apis.openai_responses import chat_messages
from benchmaker.replay_server.latency import load_splitter, parse_latency
from benchmaker.replay_server.side import TITLE_TEXT, is_title_request, schema_answer
from benchmaker.replay_server.store import (
    DEFAULT_MODEL,
    PreparedTurn,
    RecordedObservation,
    ReplayStore,
    StoredTrajectory,
    StreamBytes,
    exit_code_in,
    head_texts,
    stable_text,
)
from benchmaker.trajectories.trajectory import flatten_content, match_key_for_messages

__all__ = [
    "CoalescedWrites",
    "DIVERGENCE_POLICIES",
    "HTTP_PARSERS",
    "ReplayStats",
    "SERVED_ROUTES",
    "UNKNOWN_PATHS_KEPT",
    "create_app",
    "latency_notice",
    "main",
    "one_send_protocol",
    "run_uvicorn",
    "serve",
    "uvicorn_config",
]

DIVERGENCE_POLICIES = ("off", "status", "content")
"""Valid values of the divergence policy (module doc)."""

HTTP_PARSERS = ("auto", "httptools", "h11")
"""Valid values of `http` in run_uvicorn (and `--http` of the CLI)."""

_JSON = (b"content-type", b"application/json")
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class _TrajectoryCounters:
    __slots__ = ("served", "beyond_turns", "diverged", "div_status", "div_content", "tools_differ", "bytes_out")

    def __init__(self) -> None:
        self.zero()

    def zero(self) -> None:
        self.served = self.beyond_turns = self.diverged = 0
        self.div_status = self.div_content = self.tools_differ = self.bytes_out = 0


class ReplayStats:
    """Counters of one server process, reset by `reset()`. Bytes are HTTP body bytes
    (request bodies in, response bodies out), headers not included."""

    def __init__(self, store: ReplayStore) -> None:
        # per trajectory, by StoredTrajectory.ordinal (the hot path: a list index) and by
        # id; the same objects for the life of the stats (`reset` zeroes them in place),
        # so the app's prepared replies hold them
        self.by_ordinal = [_TrajectoryCounters() for _ in store.trajectories]
        self.per_traj = {t.trajectory_id: c for t, c in zip(store.trajectories, self.by_ordinal, strict=True)}
        self.reset()

    def reset(self) -> None:
        """Zero every counter and restart the clock of `uptime_s`."""
        self.started = time.monotonic()
        self.requests = self.served = self.served_stream = 0
        self.bad_requests = self.unauthorized = 0
        self.unknown_key = self.beyond_turns = self.diverged = 0
        self.div_status = self.div_content = 0
        self.tools_differ = 0
        self.bytes_in = self.bytes_out = 0
        self.recent_unknown_keys: deque[str] = deque(maxlen=20)
        self.requests_by_api: dict[str, int] = {}
        self.misses_by_api: dict[str, dict[str, int]] = {}
        self.side_requests: dict[str, int] = {}
        self.unknown_paths: dict[str, int] = {}
        for counters in self.by_ordinal:
            counters.zero()

    def snapshot(self) -> dict[str, Any]:
        """The /stats JSON: {"requests" (model requests received, every API, all outcomes),
        "served", "served_stream", "bad_requests", "unauthorized",
        "misses": {"unknown_key", "beyond_turns", "diverged", "total"},
        "divergences": {"status", "content", "total"}, "tools_differ" (served requests
        that lack a recorded tool definition), "bytes_in", "bytes_out", "recent_unknown_keys": [<= 20 keys, latest last], "requests_by_api" (requests
        per wire API other than chat completions, e.g. {"gemini": 3}), "misses_by_api":
        {api: {miss kind: count}} for every API ("chat_completions" included),
        "side_requests": {kind: count} (benchmaker.replay_server.side), "unknown_paths":
        {"METHOD /path": count} (at most UNKNOWN_PATHS_KEPT distinct, the rest under
        "other"), "uptime_s",
        "trajectories": {trajectory_id: {"served", "misses": {"beyond_turns",
        "diverged"}, "divergences": {"status", "content"}, "tools_differ", "bytes_out"}}}."""
        misses = self.unknown_key + self.beyond_turns + self.diverged
        return {
            "requests": self.requests,
            "served": self.served,
            "served_stream": self.served_stream,
            "bad_requests": self.bad_requests,
            "unauthorized": self.unauthorized,
            "misses": {
                "unknown_key": self.unknown_key,
                "beyond_turns": self.beyond_turns,
                "diverged": self.diverged,
                "total": misses,
            },
            "divergences": {
                "status": self.div_status,
                "content": self.div_content,
                "total": self.div_status + self.div_content,
            },
            "tools_differ": self.tools_differ,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "recent_unknown_keys": list(self.recent_unknown_keys),
            "requests_by_api": dict(self.requests_by_api),
            "misses_by_api": {api: dict(kinds) for api, kinds in self.misses_by_api.items()},
            "side_requests": dict(self.side_requests),
            "unknown_paths": dict(self.unknown_paths),
            "uptime_s": round(time.monotonic() - self.started, 3),
            "trajectories": {
                tid: {
                    "served": c.served,
                    "misses": {"beyond_turns": c.beyond_turns, "diverged": c.diverged},
                    "divergences": {"status": c.div_status, "content": c.div_content},
                    "tools_differ": c.tools_differ,
                    "bytes_out": c.bytes_out,
                }
                for tid, c in self.per_traj.items()
            },
        }

    def count_miss(self, api: str, kind: str) -> None:
        """Add 1 to the misses of kind `kind` on the wire API `api`."""
        kinds = self.misses_by_api.setdefault(api, {})
        kinds[kind] = kinds.get(kind, 0) + 1

    def count_side(self, kind: str) -> None:
        """Add 1 to the side requests of kind `kind` (benchmaker.replay_server.side)."""
        self.side_requests[kind] = self.side_requests.get(kind, 0) + 1

    def count_unknown_path(self, method: str, path: str) -> None:
        """Add 1 to the requests for `method path`, which no route serves."""
        name = f"{method} {path}"
        if name not in self.unknown_paths and len(self.unknown_paths) >= UNKNOWN_PATHS_KEPT:
            name = "other"
        self.unknown_paths[name] = self.unknown_paths.get(name, 0) + 1


UNKNOWN_PATHS_KEPT = 100
"""Distinct unknown paths /stats names; more are counted under "other"."""


SERVED_ROUTES = (
    "POST /v1/chat/completions",
    "POST /chat/completions",
    "POST /v1beta/models/{model}:generateContent",
    "POST /v1beta/models/{model}:streamGenerateContent",
    "POST /v1beta/models/{model}:countTokens",
    "GET /v1/models",
    "GET /models",
    "GET /v1beta/models",
    "GET /health",
    "GET /stats",
    "POST /stats/reset",
)
"""The routes the server answers (named in the unknown-path error)."""


def _error_body(status: int, code: str, message: str) -> bytes:
    kind = "invalid_request_error" if status < 404 else "replay_miss"
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


def _api_error_body(status: int, code: str, message: str, api: str) -> bytes:
    """The error body a client of `api` expects: Anthropic's for messages, Google's for
    gemini (the code leads the message), else OpenAI's (chat, responses)."""
    if api == "messages":
        return anthropic_messages.error_body(status, code, message)
    if api == "gemini":
        return gemini.error_body(status, f"{code}: {message}")
    return _error_body(status, code, message)


_UNAUTHORIZED_MESSAGES = {
    "messages": "missing or wrong API key",
    "gemini": "missing or wrong API key (x-goog-api-key, key= or bearer token)",
}
"""The 401 message per API (default: the chat and responses APIs' bearer token)."""


async def _read_body(receive: Any) -> bytes | None:
    """The whole request body, or None when the client disconnected first."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    body = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def _observation_mismatch(
    recorded: tuple[RecordedObservation, ...], messages: list[Any], last_assistant: int
) -> tuple[bool, bool]:
    """(status mismatch, content mismatch) of the request's observations after message
    index `last_assistant` against `recorded` (rules in the module doc)."""
    after = [m for m in messages[last_assistant + 1 :] if isinstance(m, dict)]
    status = content = False
    if any(r.tool_call_id is not None for r in recorded):
        tool_msgs = [m for m in after if m.get("role") == "tool"]
        by_id = {m.get("tool_call_id"): m for m in tool_msgs}
        known = {r.tool_call_id for r in recorded}
        # a tool message without an id (a Gemini functionResponse the client sent
        # without one) answers, in order, the recorded observations no id answered
        anonymous = [m for m in tool_msgs if m.get("tool_call_id") is None]
        if any(m.get("tool_call_id") not in known for m in tool_msgs if m.get("tool_call_id") is not None):
            status = True
        pairs = []
        for r in recorded:
            msg = by_id.get(r.tool_call_id) if r.tool_call_id is not None else None
            if msg is None and anonymous:
                msg = anonymous.pop(0)
            pairs.append((r, msg))
        if anonymous:
            status = True
    else:
        obs_msgs = [m for m in after if m.get("role") in ("tool", "user")]
        pairs = [(r, obs_msgs[i] if i < len(obs_msgs) else None) for i, r in enumerate(recorded)]
    for rec, msg in pairs:
        if msg is None:
            status = True
            continue
        text = flatten_content(msg.get("content"))
        is_error = msg.get("is_error")
        if isinstance(is_error, bool) and is_error != rec.is_error:
            status = True
        code = msg.get("exit_code")
        if not isinstance(code, int) or isinstance(code, bool):
            code = exit_code_in(text)
        if code is not None and rec.exit_code is not None and code != rec.exit_code:
            status = True
        if text != rec.content and stable_text(text) != rec.stable:
            content = True
    return status, content


_CHAT_PATHS = frozenset(("/v1/chat/completions", "/chat/completions"))


def _request_tool_names(req: Any) -> frozenset[str]:
    """The names of the tools a request of any API offers: each `tools[i]` object's
    name under its type's key (chat completions: `function.name`, `custom.name`), else
    its own `name` (Responses, Messages), and each Gemini `functionDeclarations[j].name`."""
    tools = req.get("tools") if isinstance(req, dict) else None
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        decls = tool.get("functionDeclarations", tool.get("function_declarations"))
        if isinstance(decls, list):
            names.update(d["name"] for d in decls if isinstance(d, dict) and isinstance(d.get("name"), str))
            continue
        kind = tool.get("type")
        inner = tool.get(kind) if isinstance(kind, str) else None
        name = inner.get("name") if isinstance(inner, dict) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return frozenset(names)


class _ReplayApp(Starlette):
    """The Starlette app whose front door is the hot path: a POST to a chat path is
    answered right in `__call__` (raw ASGI: no router, no middleware, no Request object,
    no pydantic; one orjson parse, the roles read in C, one dict lookup of the head user
    texts). A non-streaming request for a turn that needs nothing from the request
    beyond its key and assistant count gets that turn's prepared reply (the same two
    ASGI messages each time, built on its first request: `_prepare_reply`); every other
    chat request goes on to `_serve`. Everything else, and a chat path under a
    root_path, goes through Starlette's routes (the chat routes re-enter the front
    door)."""

    def __init__(self, store: ReplayStore, stats: ReplayStats, auth: bytes | None, policy: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.stats = stats
        self.auth = auth
        self.policy = policy
        self._keys = _known_keys(store)
        self._canned = store.canned_replies
        # head user texts (a `_keys` key) -> per turn index: its prepared reply (built on
        # the first request for it), None where `_serve` must answer, or _UNPREPARED
        self._replies: dict[Any, list[Any]] = {  # a _Reply, _UNPREPARED or None per turn
            _recorded_head(entry): [_UNPREPARED] * len(entry.turns) for entry in store.trajectories
        }

    async def _reply(self, send: Any, status: int, body: bytes, extra: list | None = None) -> None:
        headers = [_JSON, (b"content-length", str(len(body)).encode())]
        if extra:
            headers.extend(extra)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        self.stats.bytes_out += len(body)

    async def _fail(self, send: Any, status: int, code: str, message: str, api: str = "chat") -> None:
        extra = None
        if status in (404, 409, 412):
            extra = [(b"x-replay-miss", code.encode())]
            self.stats.count_miss("chat_completions" if api == "chat" else api, code)
        await self._reply(send, status, _api_error_body(status, code, message, api), extra)

    async def _read_json(self, scope: Any, receive: Any, send: Any, api: str) -> tuple[Any, float] | None:
        """Auth, body and JSON of a model request of `api` (chat, responses, messages,
        gemini; counted in `requests`, messages and gemini in `requests_by_api` too):
        (parsed body, t0 perf_counter s), or None when answered (401 unauthorized, 400
        bad_json, in the API's error shape: _api_error_body) or the client left."""
        stats = self.stats
        stats.requests += 1
        if api == "messages" or api == "gemini":
            stats.requests_by_api[api] = stats.requests_by_api.get(api, 0) + 1
        if self.auth is not None and not (_authorized_gemini if api == "gemini" else _authorized)(scope, self.auth):
            stats.unauthorized += 1
            body = _api_error_body(401, "unauthorized", _UNAUTHORIZED_MESSAGES.get(api, _BEARER_MESSAGE), api)
            await self._reply(send, 401, body, None if api == "gemini" else [(b"www-authenticate", b"Bearer")])
            return None
        raw = await _read_body(receive)
        if raw is None:
            return None
        t0 = time.perf_counter()
        stats.bytes_in += len(raw)
        try:
            return orjson.loads(raw), t0
        except orjson.JSONDecodeError as exc:
            stats.bad_requests += 1
            await self._fail(send, 400, "bad_json", f"request body is not valid JSON: {exc}", api)
            return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
            await super().__call__(scope, receive, send)
            return
        path = scope["path"]
        if path not in _CHAT_PATHS:  # the other model APIs, else Starlette's routes
            answer = _POST_ROUTES.get(path)
            if answer is None:
                method = (gemini.parse_path(path) or ("", ""))[1]
                if method in gemini.GEMINI_METHODS:
                    answer = _ReplayApp.serve_gemini
                elif method == "countTokens":
                    answer = _ReplayApp.count_tokens
                else:
                    answer = Starlette.__call__
            await answer(self, scope, receive, send)
            return
        got = await self._read_json(scope, receive, send, "chat")
        if got is None:
            return
        req, t0 = got
        stats = self.stats
        try:  # the roles by itemgetter over the list, in C; anything malformed raises
            messages = req["messages"]
            roles = list(map(_ROLE, messages))
        except (TypeError, KeyError):
            problem, messages, roles = _scan_messages(req)  # names the problem
            if problem:
                stats.bad_requests += 1
                await self._fail(send, 400, "bad_request", problem)
                return
        if self._canned:  # the agent's own exchanges are no turns (module doc)
            messages = self.store.without_canned(messages)
            roles = [m.get("role") for m in messages]
        # list methods in C over the roles, no per-message Python loop
        n_assistant = roles.count("assistant")
        first_assistant = roles.index("assistant") if n_assistant else len(roles)
        if roles[:first_assistant].count("user") <= 1:
            # one user message before the first assistant one (else the first user message)
            try:
                content = messages[roles.index("user")].get("content")
            except ValueError:
                stats.bad_requests += 1
                await self._fail(send, 400, "bad_request", "messages: no message with role 'user'")
                return
            head: Any = content if type(content) is str else flatten_content(content)
        else:
            head = tuple(
                flatten_content(messages[i].get("content")) for i in range(first_assistant) if roles[i] == "user"
            )
        replies = self._replies.get(head)
        if replies is not None and n_assistant < len(replies) and req.get("stream") is not True:
            reply = replies[n_assistant]
            if reply is _UNPREPARED:
                reply = replies[n_assistant] = self._prepare_reply(head, n_assistant)
            if reply is not None:  # the recorded turn, as it is, at once: no check to make
                start, body, size, counters = reply
                stats.served += 1
                counters.served += 1
                await send(start)
                await send(body)
                stats.bytes_out += size
                counters.bytes_out += size
                return
        await self._serve(send, t0, req, messages, roles, n_assistant, head)

    async def _responses(self, scope: Any, receive: Any, send: Any) -> None:
        """Answer a POST to an OpenAI Responses path: the request's items as chat messages
        (benchmaker.apis.openai_responses.chat_messages), then the chat rules (`_serve`),
        the turn written back in the Responses shape; counted as chat requests are."""
        got = await self._read_json(scope, receive, send, "responses")
        if got is None:
            return
        req, t0 = got
        stats = self.stats
        try:
            messages = chat_messages(req)
        except ValueError as exc:
            stats.bad_requests += 1
            await self._fail(send, 400, "bad_request", str(exc))
            return
        previous = req.get("previous_response_id")
        if previous is not None:  # the history is the turn that answered with that id, then the new input
            before = self.store.continued_messages(previous) if type(previous) is str else None
            if before is None:
                stats.unknown_key += 1
                stats.recent_unknown_keys.append(f"previous_response_id:{previous}")
                await self._fail(
                    send, 404, "unknown_key", f"previous_response_id: no recorded turn answered with id {previous!r}"
                )
                return
            messages = [*before, *(m for m in messages if m["role"] != "system")]
        shaped = await self._chat_shaped(send, messages, "input: no message with role 'user'", "responses")
        if shaped is not None:
            await self._serve(send, t0, req, *shaped, "responses")

    def _prepare_reply(self, head: Any, turn_index: int) -> _Reply | None:
        """The reply of turn `turn_index` of the trajectory whose head user texts are
        `head` (a `_known_keys` key) to a non-streaming request with that many assistant
        messages, when it needs nothing from the request: its key is unique (no system
        text to compare), the turn is found by key and index (no context edit indexes
        the pair), it is sent at once (instant latency), the divergence policy checks
        nothing on it and its trajectory has no recorded tools to check; else None
        (`_serve` answers)."""
        key = self._keys[head]
        store = self.store
        entry = store.lookup(key, None)
        if entry is None or store.needs_system(key) or store.lookup_turn(key, turn_index) is not None:
            return None
        turn = entry.turns[turn_index]
        if turn.final_offset_s > 0 or (self.policy != "off" and turn_index > 0 and turn.previous is not None):
            return None
        if entry.tool_names is not None:
            return None
        body = turn.body
        headers = [_JSON, (b"content-length", str(len(body)).encode()), *turn.headers]
        # the same two ASGI messages for every request of this turn (uvicorn only reads them)
        return (
            {"type": "http.response.start", "status": 200, "headers": headers},
            {"type": "http.response.body", "body": body},
            len(body),
            self.stats.by_ordinal[entry.ordinal],
        )

    async def _messages(self, scope: Any, receive: Any, send: Any) -> None:
        """Answer `POST /v1/messages` (module doc): the request's chat-shaped messages
        (benchmaker.apis.anthropic_messages.chat_messages) go through `_serve`."""
        got = await self._read_json(scope, receive, send, "messages")
        if got is None:
            return
        req, t0 = got
        try:
            messages = anthropic_messages.chat_messages(req)
        except ValueError as exc:
            self.stats.bad_requests += 1
            await self._fail(send, 400, "bad_request", str(exc), "messages")
            return
        shaped = await self._chat_shaped(send, messages, "messages: no user message with text", "messages")
        if shaped is not None:
            await self._serve(send, t0, req, *shaped, "messages")

    async def _chat_shaped(
        self, send: Any, messages: list[Any], no_user: str, api: str
    ) -> tuple[list[Any], list[Any], int, Any] | None:
        """(messages, their roles, assistant count, head user texts: `head_texts`) of a
        request of `api` read as chat `messages`, stripped of canned exchanges; None after
        a 400 `bad_request` with message `no_user` when it has no user message."""
        messages = self.store.without_canned(messages)
        roles = [m["role"] for m in messages]
        head = head_texts(messages, roles)
        if head is None:
            self.stats.bad_requests += 1
            await self._fail(send, 400, "bad_request", no_user, api)
            return None
        return messages, roles, roles.count("assistant"), head

    async def _count_tokens(self, scope: Any, receive: Any, send: Any) -> None:
        """Answer `POST /v1/messages/count_tokens` (module doc) as side traffic."""
        stats = self.stats
        stats.count_side("count_tokens")
        if self.auth is not None and not _authorized(scope, self.auth):
            stats.unauthorized += 1
            await self._reply(send, 401, anthropic_messages.error_body(401, "unauthorized", "missing or wrong API key"))
            return
        raw = await _read_body(receive)
        if raw is None:
            return
        stats.bytes_in += len(raw)
        try:
            messages = anthropic_messages.chat_messages(orjson.loads(raw))
        except (orjson.JSONDecodeError, ValueError) as exc:
            await self._fail(send, 400, "bad_request", str(exc), "messages")
            return
        matched = self.store.without_canned(messages)
        roles = [m["role"] for m in matched]
        head = head_texts(matched, roles)
        n_tokens = None
        if head is not None:
            key = self._keys.get(head) or match_key_for_messages([head] if type(head) is str else list(head))
            system = matched[0] if roles and roles[0] == "system" else None
            hit = self.store.match(key, roles.count("assistant"), system, matched)
            if hit is not None and hit[1] < len(hit[0].turns):
                usage = hit[0].turns[hit[1]].turn.usage
                n_tokens = usage.prompt_tokens if usage is not None else None
        if n_tokens is None:
            n_tokens = sum(len(self.store.splitter(flatten_content(m.get("content")))) for m in messages)
        await self._reply(send, 200, orjson.dumps({"input_tokens": n_tokens}))

    async def _serve(
        self,
        send: Any,
        t0: float,
        req: dict[str, Any],
        messages: list[Any],
        roles: list[Any],
        n_assistant: int,
        head: Any,
        api: str = "chat",
        sse: bool | None = None,
        array: bool = False,
    ) -> None:
        """Answer a chat request the prepared replies do not cover (module doc): match,
        misses, divergence check, latency, streaming. `api`: the wire API the request
        came in (chat, responses, messages, gemini): the shape of the reply and of its
        errors. `sse`: stream the reply as SSE (None: when the request's `stream` is
        true); `array`: a non-streamed body goes inside a JSON array (Gemini's
        streamGenerateContent without alt=sse)."""

        async def title() -> bool:
            # a title request is a chat completions call without tools (opencode's): most
            # requests stop at this test, asked on every matched chat request
            if req.get("tools"):
                return False
            system = messages[roles.index("system")] if "system" in roles else None
            text = None if system is None else flatten_content(system.get("content"))
            if not is_title_request(text, False):
                return False
            await self._side_chat(send, req, "title", TITLE_TEXT)
            return True

        on_unknown = title if api == "chat" else None
        found = await self._resolve(send, req, messages, roles, n_assistant, head, api, on_unknown)
        if found is None:
            return
        entry, turn_index, turn, counters, extra = found
        stats = self.stats
        stats.served += 1
        counters.served += 1
        if req.get("stream") is True if sse is None else sse:
            stats.served_stream += 1
            opts = req.get("stream_options")  # chat's; the other APIs always send their usage
            with_usage = isinstance(opts, dict) and opts.get("include_usage") is True
            sent = await _stream(send, t0, self.store.stream(entry, turn_index, api), with_usage, extra)
            stats.bytes_out += sent
        else:
            body = self.store.body(entry, turn_index, api)
            if array:
                body = b"[" + body + b"]"
            if turn.final_offset_s > 0:  # sent at the last event's offset from t0 (module doc)
                await _sleep_until(t0 + turn.final_offset_s)
            await self._reply(send, 200, body, extra)  # counts stats.bytes_out
            sent = len(body)
        counters.bytes_out += sent

    async def _side_chat(self, send: Any, req: dict[str, Any], kind: str, text: str) -> None:
        """Answer a chat request as side traffic of `kind` with the assistant text `text`
        (streamed when asked), counted in stats.side_requests."""
        self.stats.count_side(kind)
        model = req.get("model") if isinstance(req.get("model"), str) else DEFAULT_MODEL
        head = {"id": "chatcmpl-replay-side", "created": int(time.time()), "model": model}
        extra = [(b"x-replay-side", kind.encode())]
        if req.get("stream") is not True:
            body = orjson.dumps(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "logprobs": None,
                            "finish_reason": "stop",
                        }
                    ],
                }
            )
            await self._reply(send, 200, body, extra)
            return
        chunk = {**head, "object": "chat.completion.chunk"}
        body = b"".join(
            b"data: "
            + orjson.dumps({**chunk, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": fin}]})
            + b"\n\n"
            for delta, fin in (({"role": "assistant", "content": text}, None), ({}, "stop"))
        )
        body += b"data: [DONE]\n\n"
        await send({"type": "http.response.start", "status": 200, "headers": [*_SSE_HEADERS, *extra]})
        await send({"type": "http.response.body", "body": body})
        self.stats.bytes_out += len(body)

    async def count_tokens(self, scope: Any, receive: Any, send: Any) -> None:
        """Answer a Gemini `countTokens` request as side traffic ("count_tokens"):
        {"totalTokens": benchmaker.apis.gemini.estimate_tokens(body)} (0 for a body that is
        not JSON)."""
        if self.auth is not None and not _authorized_gemini(scope, self.auth):
            self.stats.unauthorized += 1
            await self._reply(send, 401, gemini.error_body(401, "unauthorized: missing or wrong API key"))
            return
        raw = await _read_body(receive)
        if raw is None:
            return
        self.stats.bytes_in += len(raw)
        self.stats.count_side("count_tokens")
        try:
            total = gemini.estimate_tokens(orjson.loads(raw))
        except orjson.JSONDecodeError:
            total = 0
        await self._reply(send, 200, orjson.dumps({"totalTokens": total}), [(b"x-replay-side", b"count_tokens")])

    async def serve_gemini(self, scope: Any, receive: Any, send: Any) -> None:
        """Answer a Gemini `generateContent` / `streamGenerateContent` request (module doc):
        the request's contents as chat messages (benchmaker.apis.gemini.request_messages)
        matched as a chat request is, the turn written back in the Gemini shape; errors
        as Google API error bodies with the chat route's status codes and header
        `x-replay-miss`."""
        got = await self._read_json(scope, receive, send, "gemini")
        if got is None:
            return
        req, t0 = got
        stats = self.stats
        model, method = gemini.parse_path(scope["path"]) or ("", "")
        try:
            messages = gemini.request_messages(req)
        except ValueError as exc:
            stats.bad_requests += 1
            await self._fail(send, 400, "bad_request", str(exc), "gemini")
            return
        shaped = await self._chat_shaped(
            send, messages, "contents: no content with role 'user' and a text part", "gemini"
        )
        if shaped is None:
            return
        stream = method == "streamGenerateContent"
        if not stream and gemini.wants_json_answer(req):  # a utility call: never in a session log
            config = req["generationConfig"]
            schema = config.get("responseJsonSchema", config.get("responseSchema"))
            text = orjson.dumps(schema_answer(schema)).decode("utf-8")
            stats.count_side("json_answer")
            body = orjson.dumps(
                gemini.response_json([{"text": text}], "STOP", None, model or DEFAULT_MODEL, "replay-side")
            )
            await self._reply(send, 200, body, [(b"x-replay-side", b"json_answer")])
            return
        sse = stream and gemini.wants_sse(scope.get("query_string", b""))
        await self._serve(send, t0, req, *shaped, "gemini", sse, stream and not sse)

    async def _resolve(
        self,
        send: Any,
        req: dict[str, Any],
        messages: list[Any],
        roles: list[Any],
        n_assistant: int,
        head: Any,
        api: str,
        on_unknown: Any = None,
    ) -> tuple[StoredTrajectory, int, PreparedTurn, _TrajectoryCounters, list] | None:
        """The recorded turn a request of any API is answered with, as chat `messages`
        (their `roles`, assistant count, head user texts): (trajectory, turn index, the
        prepared turn, its counters, extra headers); or None after counting the miss
        (or divergence) and answering it in the shape of `api` (`_fail`). When
        no trajectory has the key, or the one it matches is no recorded title call (its
        system text a title prompt), and `await on_unknown()` returns True, that call
        answered the request as side traffic (no miss counted) and None is returned."""
        stats = self.stats
        key = self._keys.get(head) or match_key_for_messages([head] if type(head) is str else list(head))
        if roles[0] == "system":  # where agents put it
            system = messages[0]
        else:
            system = messages[roles.index("system")] if "system" in roles else None
        hit = self.store.match(key, n_assistant, system, messages)  # a turn after a context edit, else by key
        # side traffic: when no trajectory has the key, or the one it matches is no recorded
        # side call itself (opencode's title request repeats the task, so its key is known)
        if on_unknown is not None and (hit is None or not _is_recorded_title(hit[0])) and await on_unknown():
            return None
        if hit is None:
            stats.unknown_key += 1
            stats.recent_unknown_keys.append(key)
            await self._fail(send, 404, "unknown_key", f"no recorded trajectory has task key {key}", api)
            return None
        entry, turn_index = hit
        counters = stats.by_ordinal[entry.ordinal]
        if turn_index >= len(entry.turns):
            stats.beyond_turns += 1
            counters.beyond_turns += 1
            await self._fail(
                send,
                409,
                "beyond_turns",
                f"trajectory {entry.trajectory_id} has {len(entry.turns)} recorded turns; "
                f"the request asks for turn {turn_index} (its assistant message count)",
                api,
            )
            return None
        turn = entry.turns[turn_index]
        extra = turn.headers
        names = entry.tool_names
        if names is not None and not names <= _request_tool_names(req):
            stats.tools_differ += 1
            counters.tools_differ += 1
            extra = [*extra, (b"x-replay-tools", b"differ")]
        if self.policy != "off" and n_assistant > 0 and turn.previous is not None:
            last_assistant = len(roles) - 1 - roles[::-1].index("assistant")
            status_bad, content_bad = _observation_mismatch(  # the turn the request goes on from
                entry.turns[turn.previous].observations, messages, last_assistant
            )
            if self.policy == "status":
                content_bad = False
            if status_bad or content_bad:
                if status_bad:
                    stats.div_status += 1
                    counters.div_status += 1
                else:
                    stats.div_content += 1
                    counters.div_content += 1
                if self.policy == "content":
                    stats.diverged += 1
                    counters.diverged += 1
                    what = "status" if status_bad else "content"
                    await self._fail(
                        send,
                        412,
                        "diverged",
                        f"trajectory {entry.trajectory_id} turn {turn_index}: the request's "
                        f"observations differ in {what} from the recording",
                        api,
                    )
                    return None
                extra = [*extra, (b"x-replay-divergence", b"status")]
        return entry, turn_index, turn, counters, extra


_BEARER_MESSAGE = "missing or wrong bearer token"
_UNAUTHORIZED = _error_body(401, "unauthorized", _BEARER_MESSAGE)


def _is_recorded_title(entry: StoredTrajectory) -> bool:
    """True when `entry` is a recorded title call: its system text is a title prompt."""
    return is_title_request(entry.trajectory.system, False)


def _authorized_gemini(scope: Any, expected: bytes) -> bool:
    """The Gemini clients' ways to send the key: header `x-goog-api-key`, query `key=`,
    or the bearer token; `expected` is b"Bearer " + token."""
    token = expected[len(b"Bearer ") :]
    for name, value in scope["headers"]:
        if name == b"x-goog-api-key":
            return hmac.compare_digest(value, token)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("key")
    if query:
        return hmac.compare_digest(query[-1].encode(), token)
    return _authorized(scope, expected)


def _authorized(scope: Any, expected: bytes) -> bool:
    """The request's `authorization` header is `expected` (b"Bearer TOKEN"), or its
    `x-api-key` header (Anthropic clients) is the TOKEN."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            return hmac.compare_digest(value, expected)
        if name == b"x-api-key":
            return hmac.compare_digest(b"Bearer " + value, expected)
    return False


_ROLE = operator.itemgetter("role")
_POST_ROUTES: dict[str, Any] = {
    "/v1/responses": _ReplayApp._responses,
    "/responses": _ReplayApp._responses,
    **{path: _ReplayApp._messages for path in anthropic_messages.MESSAGES_PATHS},
    "/v1/messages/count_tokens": _ReplayApp._count_tokens,
}
"""The POST paths the front door answers beside the chat paths (Gemini's by parse_path)."""
_UNPREPARED = object()
_Reply = tuple[dict[str, Any], dict[str, Any], int, _TrajectoryCounters]
"""A prepared 200 reply: (http.response.start message, http.response.body message,
body bytes, the trajectory's counters)."""


def _recorded_head(entry: StoredTrajectory) -> Any:
    """The head user texts of a trajectory as `_known_keys` keys them: the first user
    text alone, or the tuple of it and the user texts before the first turn."""
    traj = entry.trajectory
    return traj.first_user if not traj.user_before_turns else (traj.first_user, *traj.user_before_turns)


def _known_keys(store: ReplayStore) -> dict[Any, str]:
    """The task key of each trajectory's head user texts ([first_user, *user_before_turns]:
    the one text, or the tuple of several) -> `match_key_for_messages` of them. A request
    whose head texts are a recorded trajectory's gets its key by one dict lookup instead
    of the task-id search and sha256 over the texts; the key is the same function of the
    same texts, so the lookup is exact. Holds references to the store's strings only."""
    keys: dict[Any, str] = {}
    for entry in store.trajectories:
        head = _recorded_head(entry)
        keys[head] = match_key_for_messages([head] if type(head) is str else list(head))
    return keys


def _scan_messages(req: Any) -> tuple[str | None, list[dict[str, Any]], list[Any]]:
    """(problem or None, messages, the role of each message) of a parsed request body."""
    if not isinstance(req, dict):
        return f"request body must be a JSON object (got {type(req).__name__})", [], []
    messages = req.get("messages")
    if messages is None:
        return "messages: missing (a list of chat messages is required)", [], []
    if not isinstance(messages, list):
        return f"messages: must be a list (got {type(messages).__name__})", [], []
    try:  # dict.get over the list in C; raises TypeError on a message that is no dict
        return None, messages, list(map(dict.get, messages, itertools.repeat("role")))
    except TypeError:
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict):
                return f"messages[{i}]: must be an object (got {type(msg).__name__})", [], []
        raise


_SPIN_S = 0.001


async def _sleep_until(deadline: float) -> None:
    """Sleep until time.perf_counter() >= `deadline` (s), never returning early.

    uvloop rounds timer delays to whole ms (a 1.4 ms sleep can end after 1.0 ms) and
    its loop.time() is ms-quantized, so the deadline is kept on perf_counter; the
    timer sleeps until 1 ms before it and the rest is spent in asyncio.sleep(0)
    steps (yielding to other streams), which keeps sub-ms ITLs accurate.
    """
    remaining = deadline - time.perf_counter()
    while remaining > 0:
        await asyncio.sleep(remaining - _SPIN_S if remaining > _SPIN_S else 0)
        remaining = deadline - time.perf_counter()


async def _stream(
    send: Any,
    t0: float,
    turn: StreamBytes,
    with_usage: bool,
    extra: list[tuple[bytes, bytes]],
) -> int:
    """Send the SSE response `turn`: headers now, event groups at t0 + offset
    (perf_counter s), groups already due coalesced into one write. Returns the body
    bytes sent."""
    await send({"type": "http.response.start", "status": 200, "headers": [*_SSE_HEADERS, *extra]})
    groups = turn.groups
    tail = turn.tail_usage if with_usage else turn.tail
    n = len(groups)
    i = 0
    sent = 0
    perf = time.perf_counter
    while i < n:
        offset, data = groups[i]
        if offset > 0:
            await _sleep_until(t0 + offset)
        i += 1
        if i < n and t0 + groups[i][0] <= perf():
            now = perf()
            parts = [data]
            while i < n and t0 + groups[i][0] <= now:
                parts.append(groups[i][1])
                i += 1
            data = b"".join(parts)
        if i == n:
            data += tail
        await send({"type": "http.response.body", "body": data, "more_body": i < n})
        sent += len(data)
    return sent


class _ChatRoute:
    """ASGI endpoint of the chat routes (a chat path under a root_path): the request
    re-enters the app's front door with the path as routed (`path`: the chat path, or
    the Responses path for the Responses routes)."""

    app: Any = None

    def __init__(self, path: str = "/v1/chat/completions") -> None:
        self.path = path

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app({**scope, "path": self.path, "root_path": ""}, receive, send)


def create_app(store: ReplayStore, *, token: str | None = None, divergence: str = "off") -> Starlette:
    """The Starlette app serving `store` (endpoints and rules in the module doc).
    `token`: bearer token required on every endpoint but /health (None: no auth).
    Raises ValueError for a divergence policy not in DIVERGENCE_POLICIES."""
    if divergence not in DIVERGENCE_POLICIES:
        raise ValueError(f"divergence: unknown policy {divergence!r} (expected {', '.join(DIVERGENCE_POLICIES)})")
    stats = ReplayStats(store)
    auth = None if token is None else b"Bearer " + token.encode("utf-8")
    created = int(time.time())
    models_body = orjson.dumps(
        {
            "object": "list",
            "data": [{"id": m, "object": "model", "created": created, "owned_by": "replay"} for m in store.models],
        }
    )
    health_body = orjson.dumps({"status": "ok", "trajectories": len(store.trajectories), "turns": store.n_turns})

    def guard(request: Request) -> Response | None:
        if auth is None or _authorized(request.scope, auth):
            return None
        return Response(
            _UNAUTHORIZED, status_code=401, media_type="application/json", headers={"www-authenticate": "Bearer"}
        )

    async def models(request: Request) -> Response:
        return guard(request) or Response(models_body, media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(health_body, media_type="application/json")

    async def get_stats(request: Request) -> Response:
        return guard(request) or Response(orjson.dumps(stats.snapshot()), media_type="application/json")

    async def reset_stats(request: Request) -> Response:
        denied = guard(request)
        if denied:
            return denied
        stats.reset()
        return Response(orjson.dumps(stats.snapshot()), media_type="application/json")

    gemini_models_body = orjson.dumps(gemini.model_listing(store.models))

    async def gemini_models(request: Request) -> Response:
        return guard(request) or Response(gemini_models_body, media_type="application/json")

    async def unknown(request: Request) -> Response:
        if request.method == "HEAD":  # a probe (Claude Code's HEAD /api/hello): side traffic
            stats.count_side("head_probe")
            return Response(b"", headers={"x-replay-side": "head_probe"})
        stats.count_unknown_path(request.method, request.url.path)
        allowed = known_paths.get(request.url.path)  # a path served with another method
        body = orjson.dumps(
            {
                "error": {
                    "message": f"the replay server has no route for {request.method} {request.url.path} (it serves "
                    f"{', '.join(SERVED_ROUTES)})",
                    "type": "replay_unknown_path",
                    "param": None,
                    "code": "unknown_path",
                    "method": request.method,
                    "path": request.url.path,
                }
            }
        )
        headers = {"x-replay-miss": "unknown_path", **({"allow": allowed} if allowed else {})}
        return Response(body, status_code=405 if allowed else 404, media_type="application/json", headers=headers)

    chat = _ChatRoute()
    responses = _ChatRoute("/v1/responses")
    app = _ReplayApp(
        store,
        stats,
        auth,
        divergence,
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/responses", responses, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/stats", get_stats, methods=["GET"]),
            Route("/stats/reset", reset_stats, methods=["POST"]),
            Route("/v1beta/models", gemini_models, methods=["GET"]),
            Route("/{path:path}", unknown, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
        ],
    )
    chat.app = responses.app = app
    known_paths = {
        route.path: ", ".join(sorted(route.methods or ()))
        for route in app.routes
        if isinstance(route, Route) and "{" not in route.path
    }
    app.state.store = store
    app.state.stats = stats
    return app


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> tuple[socket.socket, str]:
    """A listening TCP socket on host:port (port 0: an ephemeral port) and its base URL
    (e.g. "http://127.0.0.1:41873"; IPv6 hosts in brackets). Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return sock, f"http://{shown}:{bound_port}"


def serve(
    trajectories: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    latency: str = "instant",
    token: str | None = None,
    divergence: str = "off",
    tokenizer: Path | None = None,
    announce: Any = None,
    http: str = "auto",
) -> None:
    """Load `trajectories`, bind host:port, call `announce(url, store)` (default: print
    the URL as the first stdout line, then a summary on stderr), and serve until
    SIGINT/SIGTERM with `run_uvicorn` (`http`: the parser, see there). Raises
    TrajectoryFormatError, LatencySpecError, TokenizerUnavailable, ValueError
    (divergence policy, http) or OSError (bind) before serving."""
    if http not in HTTP_PARSERS:
        raise ValueError(f"http: unknown parser {http!r} (expected {', '.join(HTTP_PARSERS)})")
    model = parse_latency(latency)
    store = ReplayStore.load(Path(trajectories), latency=model, splitter=load_splitter(tokenizer))
    app = create_app(store, token=token, divergence=divergence)
    # the store lives as long as the process: out of the cyclic GC's sight, so its
    # collections while serving do not walk millions of store objects (a request's cost
    # stays flat in the corpus size, benchmarks/corpus.py). Frozen without a collection
    # first: on the 500-session corpus (2.6M tracked objects) a full collection here
    # found 15 unreachable objects and cost 1.8 of the start's ~9 CPU s
    gc.freeze()
    sock, url = bind_socket(host, port)
    (announce or _announce)(url, store)
    try:
        run_uvicorn(app, sock, http=http)
    finally:
        sock.close()


def run_uvicorn(
    app: Any, sock: socket.socket, *, http: str = "auto", lifespan: Literal["auto", "on", "off"] = "off"
) -> None:
    """Serve the ASGI `app` with uvicorn on the listening `sock` until SIGINT/SIGTERM
    (graceful shutdown up to 2 s; no access log, Server or Date header).

    http: "httptools" (uvicorn's C parser: the fast stack), "h11" (the pure-Python h11
    parser), or "auto" (httptools when importable, else h11). The event loop is uvloop
    when importable, else asyncio's. httptools serves 2.3x the requests per CPU second
    of h11 on 2-17 KB chat requests (benchmarks/replay_server.py). Raises
    ValueError for another `http`, ImportError when "httptools" is asked for and the
    package is missing."""
    import uvicorn

    uvicorn.Server(uvicorn_config(app, http=http, lifespan=lifespan)).run(sockets=[sock])


class CoalescedWrites:
    """An asyncio transport whose writes within one step of the event loop leave in one
    send: the first write of a step is held and a flush scheduled (loop.call_soon),
    later writes of the step join it. uvicorn writes a response's status line and
    headers at `http.response.start` and its body at `http.response.body`: two sends,
    so a client whose loop wakes between them pays a second wake-up and read (and on
    loopback the server's second send runs the client's receive path). A reply the app
    sends in one step (every non-streamed reply, a stream at instant latency) leaves in
    one send; a streamed reply's chunks each leave at the end of the step that writes
    them (the flush is the loop's next pass). Measured on the 453-turn pi session
    replayed non-streamed (benchmarks/long_session.py, 6 alternating pairs at load ~2):
    the client's CPU from the reply's headers to its end 0.080 -> 0.045 ms per turn at
    turn 10, its whole turn 0.295 -> 0.260 ms (medians).

    close() flushes first; abort() drops the held bytes; a flush on a closing transport
    drops them (the connection is gone, as a write would find it). Every other
    attribute is the wrapped transport's."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:
            self._held = [data]
            self._loop.call_soon(self._flush)
        else:
            self._held.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def one_send_protocol(http: str) -> type[asyncio.Protocol]:
    """uvicorn's protocol class for the parser `http` ("httptools" or "h11") writing
    through CoalescedWrites: a response the app sends in one step leaves in one send.
    Raises ValueError for another parser, ImportError when its package is missing."""
    base: Any
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    elif http == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = H11Protocol
    else:
        raise ValueError(f"http: expected httptools or h11, got {http!r}")

    def connection_made(self: Any, transport: asyncio.Transport) -> None:
        base.connection_made(self, CoalescedWrites(transport, self.loop))

    name = f"OneSend{base.__name__}"
    return type(
        name,
        (base,),
        {
            "connection_made": connection_made,
            "__qualname__": name,
            "__module__": __name__,
            "__doc__": f"uvicorn's {base.__name__}, its writes through CoalescedWrites.",
        },
    )


def uvicorn_config(app: Any, *, http: str = "auto", lifespan: Literal["auto", "on", "off"] = "off") -> Any:
    """The uvicorn.Config `run_uvicorn` serves with (its doc gives the rules): `.http`
    is the chosen parser's protocol class writing each response in one send
    (one_send_protocol), `.loop` names the loop. Raises ValueError, ImportError as
    run_uvicorn."""
    import importlib.util

    import uvicorn

    if http not in HTTP_PARSERS:
        raise ValueError(f"http: unknown parser {http!r} (expected {', '.join(HTTP_PARSERS)})")
    has_httptools = importlib.util.find_spec("httptools") is not None
    if http == "auto":
        http = "httptools" if has_httptools else "h11"
    elif http == "httptools" and not has_httptools:
        raise ImportError("http: httptools is not installed (pip install httptools)")
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    # keep-alive 75 s (nginx's default), not uvicorn's 5 s: an agent's connection idles
    # while its tools run or its client is busy, and a server closing it just as the next
    # turn is sent makes that turn a "Server disconnected" transport error (measured at
    # 1,024 episodes in flight: 1,432 of 7,013 calls, benchmarks/replay_scale.py)
    return uvicorn.Config(
        app,
        http=one_send_protocol(http),
        loop=loop,
        lifespan=lifespan,
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=2,
        server_header=False,
        date_header=False,
        timeout_keep_alive=75,
    )


def latency_notice(store: ReplayStore) -> str | None:
    """The warning printed at start when the latency model is "recorded" and some turns
    have no recorded timing (their log kept none: they are sent at once, as under
    "instant"), naming how many, the source formats and the trajectories (their ids in
    file order, the first 5 and how many more); None otherwise."""
    if store.latency.kind != "recorded":
        return None
    untimed = store.untimed_turns
    if not untimed:
        return None
    trajs = [t.trajectory for t in store.trajectories if any(p.untimed for p in t.turns)]
    formats = sorted({t.source.format for t in trajs})
    named = ", ".join(t.trajectory_id for t in trajs[:_NAMED])
    more = f" and {len(trajs) - _NAMED} more" if len(trajs) > _NAMED else ""
    return (
        f"replay server: warning: latency recorded: {untimed} of {store.n_turns} turns have no recorded timing "
        f"(format {', '.join(formats)} logged none: trajectories {named}{more}); "
        "they are sent at once, as with latency instant"
    )


_NAMED = 5
"""Trajectories latency_notice names before it says how many more."""


def _announce(url: str, store: ReplayStore) -> None:
    print(url, flush=True)
    print(
        f"replay server: {url} serving {len(store.trajectories)} trajectories, "
        f"{store.n_turns} turns from {store.path} (latency {store.latency.describe()})",
        file=sys.stderr,
        flush=True,
    )
    notice = latency_notice(store)
    if notice is not None:
        print(notice, file=sys.stderr, flush=True)


def resolve_token(value: str | None) -> str | None:
    """The bearer token of `--token VALUE`: the value of the environment variable
    named VALUE when it is set, else VALUE itself; None/"" gives None."""
    if not value:
        return None
    return os.environ.get(value) or value


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmaker.replay_server.server TRAJ [--host H] [--port P] [--latency SPEC]
    [--token ENV_OR_VALUE] [--divergence off|status|content] [--tokenizer tokenizer.json]
    [--http auto|httptools|h11]`.
    Returns 0 after a clean shutdown, 2 on bad input (one line on stderr)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmaker.replay_server.server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("trajectories", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", default="instant")
    parser.add_argument("--token", default=None)
    parser.add_argument("--divergence", default="off", choices=DIVERGENCE_POLICIES)
    parser.add_argument("--tokenizer", type=Path, default=None)
    parser.add_argument(
        "--http",
        default="auto",
        choices=HTTP_PARSERS,
        help="HTTP parser: auto (httptools + uvloop when installed), httptools, h11",
    )
    args = parser.parse_args(argv)
    try:
        serve(**{**vars(args), "token": resolve_token(args.token)})  # each flag is serve's keyword
    except (ValueError, RuntimeError, OSError, ImportError) as exc:
        print(f"replay server: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
