"""The replay server: an OpenAI-compatible chat completions service that answers from
recorded trajectories (docs/replay-an-agent.md). Self-contained: imports nothing from `benchmaker/`.

    python -m benchmaker.replay_server.server trajectories.jsonl --port 0 --latency fixed:200:20
    # first stdout line: the bound base URL, e.g. http://127.0.0.1:41873

Endpoints (all answer JSON; all but /health need `Authorization: Bearer TOKEN` when a
token is set, else 401 with an OpenAI error body):
- POST /v1/chat/completions, POST /chat/completions: the replayed response.
- GET /v1/models, GET /models: the recorded model names.
- GET /health: readiness, {"status": "ok", "trajectories": N, "turns": M}.
- GET /stats: counters (see ReplayStats.snapshot); POST /stats/reset zeroes them.

Matching is stateless: the task key is `match_key_for_messages([flatten_content(m.content)
for m in <messages with role "user" before the first message with role "assistant">])`
(a request whose user messages all come after an assistant message uses its first user
message), the turn index the number of messages with role "assistant" in the request;
a turn recorded after a context edit (a pi compaction: a summary replaced the earlier
history) is found by the key and assistant count of its recorded request instead
(`ReplayStore.lookup_turn`), and its divergence check uses the turn before it.
The trajectory is chosen by `ReplayStore.lookup` (first in file order, or the first
whose system prompt equals the request's when several share the key).

Status codes of a request that cannot be served (OpenAI error body {"error":
{"message", "type", "param": null, "code"}}, header `x-replay-miss` on misses):
- 400 `bad_json` (body is not JSON), `bad_request` (not an object, `messages` missing,
  not a list, a message not an object, or no user message). Counted as bad_requests.
- 401 `unauthorized` (token set and missing/wrong). Counted as unauthorized.
- 404 `unknown_key`: no trajectory has the task key.         Miss kind unknown_key.
- 409 `beyond_turns`: turn index >= the trajectory's turns.  Miss kind beyond_turns.
- 412 `diverged`: divergence policy `content` and a divergence. Miss kind diverged.

Divergence policy (`--divergence`), checked from turn 1 on against the observations
recorded after the previous turn (`turns[t-1].observations`; after a context edit that
went back, e.g. a pi branch or retry, the turn the recorded request goes on from:
`PreparedTurn.previous`); the request's observations are the messages after its last
assistant message:
- When the recorded observations carry tool_call_ids, each is paired with the request
  message of role "tool" with that tool_call_id; else they are paired in order with
  the request's messages of role "tool" or "user" after the last assistant message
  (extra user messages are follow-ups, not observations).
- status mismatch: a recorded observation with no request message; (when the
  recorded observations carry ids) a role "tool" message after the last assistant
  message whose tool_call_id no recorded observation has; the message's `is_error`
  (non-standard field, when it is a bool) differs from the recorded is_error; or both
  sides state an exit code (the message's non-standard `exit_code` field, else one
  stated in its text as a mini-swe-agent 2.x JSON `{"returncode": N, ...}` /
  `<returncode>N</returncode>` / `exit code N` (benchmaker.replay_server.store.exit_code_in); the recorded
  exit_code, else the one its text states) and they differ.
- content mismatch: the message's flattened content differs from the recorded content.
- `off`: nothing is checked. `status`: a request with a status mismatch adds 1 to
  divergences.status (per trajectory and total) and is served normally, with header
  `x-replay-divergence: status`. `content`: a request with a status or content mismatch
  adds 1 to divergences.status (if any status mismatch) else divergences.content, and
  gets 412 `diverged` (counted as a miss of kind diverged), not the recorded turn.

Latency: groups of SSE events are sent at absolute deadlines on time.perf_counter()
(response start + offset, response start = the moment the request body has been
read), never before and without accumulating lateness; events already due when the
server wakes go out in one write. A non-streaming body is sent at the offset of the
last event. Headers are sent at once.
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

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from benchmaker.replay_server.latency import load_splitter, parse_latency
from benchmaker.replay_server.store import RecordedObservation, ReplayStore, StoredTrajectory, StreamBytes, exit_code_in
from benchmaker.trajectories.trajectory import flatten_content, match_key_for_messages

__all__ = ["CoalescedWrites", "DIVERGENCE_POLICIES", "HTTP_PARSERS", "ReplayStats", "create_app", "main", "one_send_protocol",
           "run_uvicorn", "serve", "uvicorn_config"]

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
    __slots__ = ("served", "beyond_turns", "diverged", "div_status", "div_content", "bytes_out")

    def __init__(self) -> None:
        self.zero()

    def zero(self) -> None:
        self.served = self.beyond_turns = self.diverged = 0
        self.div_status = self.div_content = self.bytes_out = 0


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
        self.bytes_in = self.bytes_out = 0
        self.recent_unknown_keys: deque[str] = deque(maxlen=20)
        for counters in self.by_ordinal:
            counters.zero()

    def snapshot(self) -> dict[str, Any]:
        """The /stats JSON: {"requests" (chat requests received, all outcomes),
        "served", "served_stream", "bad_requests", "unauthorized",
        "misses": {"unknown_key", "beyond_turns", "diverged", "total"},
        "divergences": {"status", "content", "total"}, "bytes_in", "bytes_out",
        "recent_unknown_keys": [<= 20 keys, latest last], "uptime_s",
        "trajectories": {trajectory_id: {"served", "misses": {"beyond_turns",
        "diverged"}, "divergences": {"status", "content"}, "bytes_out"}}}."""
        misses = self.unknown_key + self.beyond_turns + self.diverged
        return {
            "requests": self.requests,
            "served": self.served,
            "served_stream": self.served_stream,
            "bad_requests": self.bad_requests,
            "unauthorized": self.unauthorized,
            "misses": {"unknown_key": self.unknown_key, "beyond_turns": self.beyond_turns,
                       "diverged": self.diverged, "total": misses},
            "divergences": {"status": self.div_status, "content": self.div_content,
                            "total": self.div_status + self.div_content},
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "recent_unknown_keys": list(self.recent_unknown_keys),
            "uptime_s": round(time.monotonic() - self.started, 3),
            "trajectories": {
                tid: {"served": c.served,
                      "misses": {"beyond_turns": c.beyond_turns, "diverged": c.diverged},
                      "divergences": {"status": c.div_status, "content": c.div_content},
                      "bytes_out": c.bytes_out}
                for tid, c in self.per_traj.items()
            },
        }


def _error_body(status: int, code: str, message: str) -> bytes:
    kind = "invalid_request_error" if status < 404 else "replay_miss"
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


async def _read_body(receive: Any, message: Any = None) -> bytes | None:
    """The whole request body (from `message`, the first one received, when given), or
    None when the client disconnected first."""
    if message is None:
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
        if any(m.get("tool_call_id") not in known for m in tool_msgs):
            status = True
        pairs = [(r, by_id.get(r.tool_call_id)) for r in recorded]
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
        if text != rec.content:
            content = True
    return status, content


_CHAT_PATHS = frozenset(("/v1/chat/completions", "/chat/completions"))


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

    def __init__(self, store: ReplayStore, stats: ReplayStats, auth: bytes | None, policy: str,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.stats = stats
        self.auth = auth
        self.policy = policy
        self._keys = _known_keys(store)
        # head user texts (a `_keys` key) -> per turn index: its prepared reply (built on
        # the first request for it), None where `_serve` must answer, or _UNPREPARED
        self._replies: dict[Any, list[Any]] = {  # a _Reply, _UNPREPARED or None per turn
            _head_texts(entry): [_UNPREPARED] * len(entry.turns) for entry in store.trajectories}

    async def _reply(self, send: Any, status: int, body: bytes, extra: list | None = None) -> None:
        headers = [_JSON, (b"content-length", str(len(body)).encode())]
        if extra:
            headers.extend(extra)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        self.stats.bytes_out += len(body)

    async def _fail(self, send: Any, status: int, code: str, message: str) -> None:
        extra = [(b"x-replay-miss", code.encode())] if status in (404, 409, 412) else None
        await self._reply(send, status, _error_body(status, code, message), extra)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in _CHAT_PATHS or scope["method"] != "POST" \
                or scope.get("root_path"):
            await super().__call__(scope, receive, send)
            return
        stats = self.stats
        stats.requests += 1
        if self.auth is not None and not _authorized(scope, self.auth):
            stats.unauthorized += 1
            await self._reply(send, 401, _UNAUTHORIZED, [(b"www-authenticate", b"Bearer")])
            return
        message = await receive()
        if message.get("more_body") or message["type"] != "http.request":
            raw = await _read_body(receive, message)
            if raw is None:
                return
        else:
            raw = message.get("body", b"")  # the whole body in one message (the usual case)
        t0 = time.perf_counter()
        stats.bytes_in += len(raw)
        try:
            req = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            stats.bad_requests += 1
            await self._fail(send, 400, "bad_json", f"request body is not valid JSON: {exc}")
            return
        try:  # the roles by itemgetter over the list, in C; anything malformed raises
            messages = req["messages"]
            roles = list(map(_ROLE, messages))
        except (TypeError, KeyError):
            problem, messages, roles = _scan_messages(req)  # names the problem
            if problem:
                stats.bad_requests += 1
                await self._fail(send, 400, "bad_request", problem)
                return
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
            head = tuple(flatten_content(messages[i].get("content"))
                         for i in range(first_assistant) if roles[i] == "user")
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

    def _prepare_reply(self, head: Any, turn_index: int) -> _Reply | None:
        """The reply of turn `turn_index` of the trajectory whose head user texts are
        `head` (a `_known_keys` key) to a non-streaming request with that many assistant
        messages, when it needs nothing from the request: its key is unique (no system
        text to compare), the turn is found by key and index (no context edit indexes
        the pair), it is sent at once (instant latency) and the divergence policy checks
        nothing on it; else None (`_serve` answers)."""
        key = self._keys[head]
        store = self.store
        entry = store.lookup(key, None)
        if entry is None or store.needs_system(key) or store.lookup_turn(key, turn_index) is not None:
            return None
        turn = entry.turns[turn_index]
        if turn.final_offset_s > 0 or (self.policy != "off" and turn_index > 0 and turn.previous is not None):
            return None
        body = turn.body
        headers = [_JSON, (b"content-length", str(len(body)).encode()), *turn.headers]
        # the same two ASGI messages for every request of this turn (uvicorn only reads them)
        return ({"type": "http.response.start", "status": 200, "headers": headers},
                {"type": "http.response.body", "body": body}, len(body), self.stats.by_ordinal[entry.ordinal])

    async def _serve(self, send: Any, t0: float, req: dict[str, Any], messages: list[Any], roles: list[Any],
                     n_assistant: int, head: Any) -> None:
        """Answer a chat request the prepared replies do not cover (module doc): match,
        misses, divergence check, latency, streaming."""
        stats = self.stats
        key = self._keys.get(head) or match_key_for_messages([head] if type(head) is str else list(head))
        if roles[0] == "system":  # where agents put it
            system = messages[0]
        else:
            system = messages[roles.index("system")] if "system" in roles else None
        hit = self.store.match(key, n_assistant, system, messages)  # a turn after a context edit, else by key
        if hit is None:
            stats.unknown_key += 1
            stats.recent_unknown_keys.append(key)
            await self._fail(send, 404, "unknown_key", f"no recorded trajectory has task key {key}")
            return
        entry, turn_index = hit
        counters = stats.by_ordinal[entry.ordinal]
        if turn_index >= len(entry.turns):
            stats.beyond_turns += 1
            counters.beyond_turns += 1
            await self._fail(
                send, 409, "beyond_turns",
                f"trajectory {entry.trajectory_id} has {len(entry.turns)} recorded turns; "
                f"the request asks for turn {turn_index} (its assistant message count)",
            )
            return
        turn = entry.turns[turn_index]
        extra = turn.headers
        if self.policy != "off" and n_assistant > 0 and turn.previous is not None:
            last_assistant = len(roles) - 1 - roles[::-1].index("assistant")
            status_bad, content_bad = _observation_mismatch(  # the turn the request goes on from
                entry.turns[turn.previous].observations, messages, last_assistant)
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
                        send, 412, "diverged",
                        f"trajectory {entry.trajectory_id} turn {turn_index}: the request's "
                        f"observations differ in {what} from the recording",
                    )
                    return
                extra = [*extra, (b"x-replay-divergence", b"status")]
        stats.served += 1
        counters.served += 1
        stream = req.get("stream") is True
        if not stream:
            if turn.final_offset_s > 0:
                await _sleep_until(t0 + turn.final_offset_s)
            body = turn.body
            headers = [_JSON, (b"content-length", str(len(body)).encode()), *extra]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            stats.bytes_out += len(body)
            counters.bytes_out += len(body)
            return
        stats.served_stream += 1
        opts = req.get("stream_options")
        with_usage = isinstance(opts, dict) and opts.get("include_usage") is True
        sent = await _stream(send, t0, self.store.stream(entry, turn_index), with_usage, extra)
        stats.bytes_out += sent
        counters.bytes_out += sent


_UNAUTHORIZED = _error_body(401, "unauthorized", "missing or wrong bearer token")


def _authorized(scope: Any, expected: bytes) -> bool:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return hmac.compare_digest(value, expected)
    return False


_ROLE = operator.itemgetter("role")
_UNPREPARED = object()
_Reply = tuple[dict[str, Any], dict[str, Any], int, _TrajectoryCounters]
"""A prepared 200 reply: (http.response.start message, http.response.body message,
body bytes, the trajectory's counters)."""


def _head_texts(entry: StoredTrajectory) -> Any:
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
        head = _head_texts(entry)
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
    send: Any, t0: float, turn: StreamBytes, with_usage: bool, extra: list[tuple[bytes, bytes]],
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
    re-enters the app's front door with the path as routed."""

    app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app({**scope, "path": "/v1/chat/completions", "root_path": ""}, receive, send)


def create_app(
    store: ReplayStore, *, token: str | None = None, divergence: str = "off"
) -> Starlette:
    """The Starlette app serving `store` (endpoints and rules in the module doc).
    `token`: bearer token required on every endpoint but /health (None: no auth).
    Raises ValueError for a divergence policy not in DIVERGENCE_POLICIES."""
    if divergence not in DIVERGENCE_POLICIES:
        raise ValueError(
            f"divergence: unknown policy {divergence!r} (expected {', '.join(DIVERGENCE_POLICIES)})"
        )
    stats = ReplayStats(store)
    auth = None if token is None else b"Bearer " + token.encode("utf-8")
    created = int(time.time())
    models_body = orjson.dumps({"object": "list", "data": [
        {"id": m, "object": "model", "created": created, "owned_by": "replay"}
        for m in store.models
    ]})
    health_body = orjson.dumps(
        {"status": "ok", "trajectories": len(store.trajectories), "turns": store.n_turns})

    def guard(request: Request) -> Response | None:
        if auth is None or _authorized(request.scope, auth):
            return None
        return Response(_UNAUTHORIZED, status_code=401, media_type="application/json",
                        headers={"www-authenticate": "Bearer"})

    async def models(request: Request) -> Response:
        return guard(request) or Response(models_body, media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(health_body, media_type="application/json")

    async def get_stats(request: Request) -> Response:
        return guard(request) or Response(orjson.dumps(stats.snapshot()),
                                          media_type="application/json")

    async def reset_stats(request: Request) -> Response:
        denied = guard(request)
        if denied:
            return denied
        stats.reset()
        return Response(orjson.dumps(stats.snapshot()), media_type="application/json")

    chat = _ChatRoute()
    app = _ReplayApp(store, stats, auth, divergence, routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/stats", get_stats, methods=["GET"]),
        Route("/stats/reset", reset_stats, methods=["POST"]),
    ])
    chat.app = app
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


def run_uvicorn(app: Any, sock: socket.socket, *, http: str = "auto",
                lifespan: Literal["auto", "on", "off"] = "off") -> None:
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
    return type(name, (base,), {
        "connection_made": connection_made, "__qualname__": name, "__module__": __name__,
        "__doc__": f"uvicorn's {base.__name__}, its writes through CoalescedWrites.",
    })


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
        app, http=one_send_protocol(http), loop=loop, lifespan=lifespan, access_log=False, log_level="warning",
        timeout_graceful_shutdown=2, server_header=False, date_header=False, timeout_keep_alive=75,
    )


def _announce(url: str, store: ReplayStore) -> None:
    print(url, flush=True)
    print(
        f"replay server: {url} serving {len(store.trajectories)} trajectories, "
        f"{store.n_turns} turns from {store.path} (latency {store.latency.describe()})",
        file=sys.stderr, flush=True,
    )


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
    parser = argparse.ArgumentParser(prog="python -m benchmaker.replay_server.server", description=__doc__.split("\n")[0])
    parser.add_argument("trajectories", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", default="instant")
    parser.add_argument("--token", default=None)
    parser.add_argument("--divergence", default="off", choices=DIVERGENCE_POLICIES)
    parser.add_argument("--tokenizer", type=Path, default=None)
    parser.add_argument("--http", default="auto", choices=HTTP_PARSERS,
                        help="HTTP parser: auto (httptools + uvloop when installed), httptools, h11")
    args = parser.parse_args(argv)
    try:
        serve(args.trajectories, host=args.host, port=args.port, latency=args.latency,
              token=resolve_token(args.token), divergence=args.divergence,
              tokenizer=args.tokenizer, http=args.http)
    except (ValueError, RuntimeError, OSError, ImportError) as exc:
        print(f"replay server: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
