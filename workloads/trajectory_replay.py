"""Prefix-cache trajectory replay: recorded conversations replayed turn by turn as
multi-turn sessions, each request carrying the growing prefix.

    convs = read_conversations("convs.jsonl")
    wl = TrajectoryReplayWorkload(url, "m", convs, concurrency=8, sessions="interleaved",
                                  active_sessions=16, think=parse_think("exp:2s"), seed=1)
    BenchRunner(BenchConfig(load="closed:8", max_requests=wl.total_turns),
                workload=wl, post_hooks=[wl.copy_meta])

Input: JSONL, one conversation per row: a JSON array of OpenAI chat messages, or an
object whose `messages` is such an array or a JSON string of one (optional `id`).
Each assistant message at index i becomes one request whose `messages` are the
conversation's messages[:i] (the growing prefix: what a client would resend); the
recorded assistant text itself is never sent as a request's answer. Assistant
messages with no message before them are skipped (counted in `skipped_turns`).

Sessions (closed loop of `concurrency` workers; the engine calls `next_think_s(seq)`
after every request of a worker, whatever its outcome, and waits what it returns):

    contiguous   `concurrency` sessions open: each worker plays one conversation's turns
                 one after another, then opens the next conversation
    interleaved  `active_sessions` (>= concurrency) sessions open at once; a free worker
                 sends the next turn of whichever open session is ready first, so the
                 turns of many sessions alternate on the server

Between two turns of a session there is a think gap drawn from `think` (const:1s,
exp:2s = exponential with mean 2 s, uniform:0.5..3 in s), seeded per (seed, session,
turn) with integer/str seeds only, so it is the same on every run and process. A turn
that failed (HTTP error, timeout, a raising pre-request hook or workload) still
advances its session: sessions never stall. When no open session is left, a worker
stops (`next_think_s` returns None).

Cache accounting (meta of each request, copied onto the sample by `copy_meta`):
`expected_cached_tokens` = the token estimate of the previous turn's prompt in the same
session (the prefix a prefix cache can hold: the server's own answer may differ from
the recording, so the recorded reply is not counted), 0 on a session's first turn;
the server's count is `sample.cached_tokens` (usage.prompt_tokens_details.
cached_tokens). Estimates count words, or a tokenizer.json's ids (optional
`tokenizers`), summed per message (`benchmaker.workloads.tokens`). Only hashes and lengths of
prompts go to meta, never their text: `prompt_sha256` (of the exact JSON bytes of the
`messages` array sent), `prefix_sha256` (the previous turn's prompt_sha256).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import random
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from benchmaker.apis.openai_chat import OpenAIChatParser, openai_headers
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import RequestSpec, Sample
from benchmaker.workloads.datasets import DatasetError, check_messages, read_jsonl, short_repr
from benchmaker.workloads.tokens import TokenCounter, messages_text

__all__ = ["Conversation", "ThinkTime", "TrajectoryReplayWorkload", "parse_think", "read_conversations"]


def _cached_vs_expected(meta: dict[str, Any], cached: int | None) -> float | None:
    expected = meta.get("expected_cached_tokens")
    return cached / expected if cached is not None and expected else None


class _PrefixCacheParser(OpenAIChatParser):
    """The chat parser plus `cached_vs_expected` in sample.meta at finish."""

    def finish(self, sample: Sample) -> None:
        super().finish(sample)
        if sample.meta is not None:
            sample.meta["cached_vs_expected"] = _cached_vs_expected(sample.meta, sample.cached_tokens)


@dataclass(frozen=True, slots=True)
class Conversation:
    """One recorded conversation: `id` (row `id` or `row<N>`), its 1-based `row`, its
    `messages`, and `turn_ends`: for each replayed assistant turn, the number of
    messages its request sends (the index of that assistant message)."""

    id: str
    row: int
    messages: list[dict[str, Any]]
    turn_ends: list[int]


def read_conversations(path: str | Path) -> list[Conversation]:
    """Read conversations (module docstring format). Rows without a replayable
    assistant turn are dropped. Raises DatasetError `path:line: field: problem` at the
    first bad row, or when no row has a turn."""
    path = Path(path)
    out: list[Conversation] = []
    for lineno, row in read_jsonl(path):
        where = f"{path}:{lineno}"
        conv_id = f"row{lineno}"
        messages = row
        if isinstance(row, dict):
            if "id" in row:
                conv_id = str(row["id"])
            messages = row.get("messages")
            if isinstance(messages, str):
                try:
                    messages = orjson.loads(messages)
                except orjson.JSONDecodeError as exc:
                    raise DatasetError(
                        f"{where}: messages: bad JSON string: {exc} (got {short_repr(messages)})"
                    ) from None
        if not isinstance(messages, list):
            raise DatasetError(
                f"{where}: messages: expected a list of messages or a JSON string of one (got {short_repr(messages)})"
            )
        check_messages(messages, where, "messages")
        ends = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
        if ends:
            out.append(Conversation(conv_id, lineno, messages, ends))
    if not out:
        raise DatasetError(f"{path}: no conversation with an assistant turn after a message")
    return out


# ---------------------------------------------------------------------------- think time

_NUM = r"([0-9]*\.?[0-9]+)\s*(ms|s)?"
_THINK = re.compile(rf"^(const|exp|uniform):{_NUM}(?:\.\.{_NUM})?$")


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """A think-time distribution in s: `const` (a), `exp` (mean a), `uniform` (a..b)."""

    kind: Literal["const", "exp", "uniform"]
    a_s: float
    b_s: float = 0.0

    def draw(self, rng: random.Random) -> float:
        """One gap in s (>= 0) drawn with `rng`."""
        if self.kind == "const":
            return self.a_s
        if self.kind == "exp":
            return rng.expovariate(1.0 / self.a_s) if self.a_s > 0 else 0.0
        return rng.uniform(self.a_s, self.b_s)

    @property
    def spec(self) -> str:
        return f"uniform:{self.a_s:g}..{self.b_s:g}" if self.kind == "uniform" else f"{self.kind}:{self.a_s:g}s"


_THINK_KINDS: dict[str, Literal["const", "exp", "uniform"]] = {"const": "const", "exp": "exp", "uniform": "uniform"}


def parse_think(spec: str | None) -> ThinkTime:
    """Parse `const:1s`, `exp:2s`, `uniform:0.5..3` (units s or ms; bare numbers are s;
    None or `0` = no think time). Raises ConfigError naming the spec and the forms."""
    if spec is None or spec.strip() in ("", "0", "none"):
        return ThinkTime("const", 0.0)
    m = _THINK.match(spec.strip())
    forms = "expected const:1s, exp:2s or uniform:0.5..3"
    if not m:
        raise ConfigError(f"think time {spec!r}: {forms}")
    kind, a, ua, b, ub = m.groups()
    a_s = float(a) * (0.001 if ua == "ms" else 1.0)
    if (kind == "uniform") != (b is not None):
        raise ConfigError(f"think time {spec!r}: {forms}")
    b_s = float(b) * (0.001 if ub == "ms" else 1.0) if b is not None else 0.0
    if kind == "uniform" and b_s < a_s:
        raise ConfigError(f"think time {spec!r}: uniform needs lo <= hi (got {a_s:g}..{b_s:g})")
    if not math.isfinite(a_s) or not math.isfinite(b_s):
        raise ConfigError(f"think time {spec!r}: {forms}")
    return ThinkTime(_THINK_KINDS[kind], a_s, b_s)


# ---------------------------------------------------------------------------- workload


@dataclass(slots=True)
class _Turn:
    end: int  # messages sent
    body_messages: bytes  # orjson of messages[:end]
    meta: dict[str, Any]


def _turns(conv: Conversation, count: TokenCounter) -> list[_Turn]:
    """Per-turn request messages and meta (hashes, lengths, token estimates)."""
    per_msg = [count(messages_text([m])) for m in conv.messages]
    out: list[_Turn] = []
    prev_tokens, prev_sha = 0, None
    for k, end in enumerate(conv.turn_ends):
        raw = orjson.dumps(conv.messages[:end])
        sha = hashlib.sha256(raw).hexdigest()
        tokens = sum(per_msg[:end])
        meta = {
            "session": conv.id,
            "row": conv.row,
            "turn": k,
            "turns": len(conv.turn_ends),
            "prompt_messages": end,
            "prompt_sha256": sha,
            "prefix_sha256": prev_sha,
            "prompt_bytes": len(raw),
            "prompt_tokens_est": tokens,
            "expected_cached_tokens": prev_tokens if k else 0,
            "token_method": count.method,
        }
        out.append(_Turn(end, raw, meta))
        prev_tokens, prev_sha = tokens, sha
    return out


class TrajectoryReplayWorkload:
    """Multi-turn session replay over `/v1/chat/completions` (see module docstring);
    implements `benchmaker.engine.types.Workload` plus the closed-loop hook `next_think_s`.

    Needs a closed loop of `concurrency` workers (`closed:N`); under an open loop no
    think hook runs and every request opens or continues sessions in claim order.
    `total_turns` is the number of requests a full replay sends. Body: `{"model",
    "messages", "stream"}` + stream_options.include_usage when streaming, `max_tokens`,
    `temperature` when given, `extra_body` last. Raises ConfigError on a bad mode,
    concurrency < 1, or active_sessions < concurrency.
    """

    name = "trajectory-replay"

    def __init__(
        self,
        url: str,
        model: str,
        conversations: list[Conversation],
        *,
        concurrency: int = 1,
        sessions: Literal["contiguous", "interleaved"] = "contiguous",
        active_sessions: int | None = None,
        think: ThinkTime | None = None,
        seed: int = 0,
        tokenizer: str | Path | None = None,
        stream: bool = True,
        max_tokens: int | None = None,
        temperature: float | None = None,
        extra_body: dict[str, Any] | None = None,
        api_key: str | None = None,
        include_usage: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        if sessions not in ("contiguous", "interleaved"):
            raise ConfigError(f"sessions: expected contiguous or interleaved (got {sessions!r})")
        if concurrency < 1:
            raise ConfigError(f"concurrency: expected >= 1 (got {concurrency})")
        open_n = concurrency if sessions == "contiguous" else (active_sessions or 2 * concurrency)
        if open_n < concurrency:
            raise ConfigError(f"active_sessions: expected >= concurrency {concurrency} (got {open_n})")
        self.url, self.model, self.stream = url, model, stream
        self.sessions_mode = sessions
        self.concurrency = concurrency
        self.active_sessions = open_n
        self.think = think or ThinkTime("const", 0.0)
        self.seed = seed
        self.conversations = conversations
        count = TokenCounter(tokenizer)
        self._turns = [_turns(c, count) for c in conversations]
        self.total_turns = sum(len(t) for t in self._turns)
        head: dict[str, Any] = {"model": model, "stream": stream}
        if stream and include_usage:
            head["stream_options"] = {"include_usage": True}
        if max_tokens is not None:
            head["max_tokens"] = max_tokens
        if temperature is not None:
            head["temperature"] = temperature
        head.update(extra_body or {})
        head.pop("messages", None)
        # body = {"messages": <prefix bytes>, ...head}: the prefix bytes are spliced in
        self._head = orjson.dumps(head)[1:]  # '"model":...}' without the opening brace
        self._headers = openai_headers(api_key, stream, headers)
        # session state (one event loop; no locks needed)
        self._pending: deque[int] = deque(range(len(conversations)))
        self._next_turn = [0] * len(conversations)
        self._think_before = [0.0] * len(conversations)
        self._tie = 0
        self._pool: list[tuple[float, int, int]] = []  # open sessions no worker claimed: (ready_at_s, tie, s)
        self._claimed: list[tuple[float, int, int]] = []  # sessions a sleeping worker will send next
        self._by_seq: dict[int, int] = {}  # in-flight seq -> session
        self.sessions_done = 0
        for _ in range(min(open_n, len(conversations))):
            self._open(0.0)

    # -- session state ------------------------------------------------------------------

    def _push(self, heap: list[tuple[float, int, int]], ready_at: float, session: int) -> None:
        self._tie += 1
        heapq.heappush(heap, (ready_at, self._tie, session))

    def _open(self, ready_at: float) -> None:
        """Open the next pending conversation into the pool (no-op when none is left)."""
        if self._pending:
            self._push(self._pool, ready_at, self._pending.popleft())

    def _gap_s(self, session: int, turn: int) -> float:
        rng = random.Random(f"{self.seed}:{self.conversations[session].id}:{session}:{turn}")
        return self.think.draw(rng)

    def next_think_s(self, seq: int) -> float | None:
        """Engine hook, after request `seq` ended (any outcome): advance its session, park
        it (ready after a think gap) or close it and open the next conversation, then
        claim the open session that is ready first for this worker. Returns the wait in s
        until that session is ready, or None when no open session is left (the worker
        stops). Never raises."""
        now = time.perf_counter()
        session = self._by_seq.pop(seq, None)
        if session is not None:
            turn = self._next_turn[session]
            if turn < len(self._turns[session]):
                gap = self._gap_s(session, turn)
                self._think_before[session] = gap
                self._push(self._pool, now + gap, session)
            else:
                self.sessions_done += 1
                self._open(now)
        if not self._pool:
            return None
        ready_at, tie, s = heapq.heappop(self._pool)
        heapq.heappush(self._claimed, (ready_at, tie, s))
        return max(0.0, ready_at - now)

    def _take(self, seq: int) -> int:
        """The session request `seq` plays: the earliest claimed one (the waking
        worker's own claim: it slept until its ready time), else the first open one
        (a worker's first request). Raises ConfigError when none is open."""
        heap = self._claimed or self._pool
        if not heap:
            raise ConfigError("no open session for this request (more workers than conversations)")
        session = heapq.heappop(heap)[2]
        self._by_seq[seq] = session
        return session

    # -- Workload -------------------------------------------------------------------------

    def request(self, seq: int) -> RequestSpec:
        """The next turn of the session this request plays (see `_take`); its meta holds
        the turn's hashes, lengths and token estimates, `think_before_s` and `seq`."""
        session = self._take(seq)
        turn_index = self._next_turn[session]
        self._next_turn[session] = turn_index + 1
        turn = self._turns[session][turn_index]
        body = b'{"messages":' + turn.body_messages + b"," + self._head
        meta = dict(turn.meta)
        meta["think_before_s"] = self._think_before[session] if turn_index else 0.0
        return RequestSpec("POST", self.url, dict(self._headers), body, self.stream, meta)

    def parser(self, spec: RequestSpec) -> OpenAIChatParser:
        """A fresh chat parser for the response to `spec`; at finish it adds
        `cached_vs_expected` to the sample's meta (the runner copied the request's meta
        there), so the figure exists without the `copy_meta` hook too (YAML runs)."""
        return _PrefixCacheParser(stream=spec.stream)

    def copy_meta(self, spec: RequestSpec, sample: Sample, text: str) -> None:
        """Post-response hook: put the request's meta on the sample, with
        `cached_vs_expected` = server cached_tokens / expected_cached_tokens (None when
        either is unknown or expected is 0)."""
        meta = dict(spec.meta)
        meta["cached_vs_expected"] = _cached_vs_expected(meta, sample.cached_tokens)
        sample.meta = {**(sample.meta or {}), **meta}

    def describe(self) -> dict[str, Any]:
        """Manifest entry of this workload (no prompts, no keys)."""
        return {
            "type": self.name,
            "url": self.url,
            "model": self.model,
            "sessions": self.sessions_mode,
            "concurrency": self.concurrency,
            "active_sessions": self.active_sessions,
            "think": self.think.spec,
            "seed": self.seed,
            "conversations": len(self.conversations),
            "total_turns": self.total_turns,
        }
