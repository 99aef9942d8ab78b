"""The recording proxy: an OpenAI-compatible pass-through that writes every
conversation it relays as a trajectory in our schema (benchmaker.trajectories.trajectory), so any
agent's traffic becomes replayable by benchmaker.replay_server.server.

    app = create_recorder_app("http://127.0.0.1:8000", Path("trajectories.jsonl"), secret=secret)
    # or: benchmaker record --upstream http://127.0.0.1:8000 -o trajectories.jsonl

Authentication: every path below is under a secret first segment,
`http://127.0.0.1:PORT/<secret>/v1/chat/completions` (benchmaker.replay_server.secret_path:
the callers' Authorization and API key headers are their own, forwarded upstream, so
the secret travels in the base URL); a request without it is answered 401 JSON,
neither relayed nor recorded (counted skipped `unauthorized`). The secret segment is
removed before the paths below are matched and never forwarded. `serve_recorder` makes
a fresh secret per process (`secrets.token_urlsafe(32)`), never written to a file: the
URL line it prints is the one place it appears.

Endpoints (under the secret):
- POST /v1/chat/completions, POST /chat/completions: forwarded to
  `<upstream>/v1/chat/completions` with the request's query string, and the answer
  relayed back read by read (benchmaker.replay_server.relay: the headers either way,
  the transport, deadlines and failures); the exchange is recorded.
- POST /v1/responses, POST /responses: the same for OpenAI Responses, forwarded to
  `<upstream>/v1/responses`; the request's input items are read as chat messages
  (benchmaker.apis.openai_responses.chat_messages) for the grouping below, the response
  by ResponsesAssembler.
- POST /v1/messages (Anthropic Messages, also `?beta=true`), POST /messages: forwarded
  to `<upstream>/v1/messages` and recorded the same way: the request's chat-shaped
  messages (benchmaker.apis.anthropic_messages.chat_messages) place it, and
  `MessagesAssembler` reassembles the response, complete at `message_stop`.
- POST /v1beta/models/{model}:generateContent and :streamGenerateContent (also /v1/,
  /v1alpha/): the Gemini API, forwarded to the same path and query upstream (its root:
  `upstream` without a trailing /v1) and recorded the same way, the request read as
  chat messages by benchmaker.apis.gemini.request_messages and the answer assembled by
  its GeminiAssembler. A function call the upstream sent without `id` is recorded
  under the id the client's next request answers it with. A non-streamed call asking
  for a JSON answer (Gemini CLI's router) is relayed, not recorded (`side_request`).
- any other method/path under /v1/ (GET, POST, PUT, DELETE, PATCH, with its query
  string): forwarded the same way, not recorded (/v1/models, /v1/messages/count_tokens).
- POST /flush: writes the output file now; answers {"path", "trajectories", "turns",
  "skipped"}. The file is also written at shutdown (lifespan). Each write replaces
  the whole file atomically (temp file + rename) with every conversation so far.
- GET /health: {"status": "ok", "conversations": N, "turns": M}.

Grouping. A request belongs to the conversation of its task key: the replay match
key (`match_key_for_messages`) over the flattened texts of its user messages before
the first assistant message; the turn index is its number of assistant messages
(the rule benchmaker.replay_server.server matches with). Per key the latest conversation is extended:
- turn index == recorded turns: the response becomes the next turn; the request's
  messages after its last assistant message are the previous turn's observations
  (`tool` messages: content (and its content parts when it holds an image), tool_call_id,
  name (else the called tool's name), the non-standard `is_error` and `exit_code` when
  present) and follow-up prompts (`user` messages → `user_after`);
  with `text_actions=True` and a previous turn without tool calls, the first such
  user message is its observation instead (SWE-agent / mini-swe-agent style).
- turn index 0 with turns recorded: a new conversation with the same key (the same
  task run again); the replay server serves the first of them.
- 0 < turn index < recorded turns: a retry; the later turns are dropped and the
  response recorded at that index (counted as skipped `superseded_turns`).
- turn index > recorded turns: the proxy missed earlier turns (started mid-run);
  relayed, not recorded (`unseen_turns`).
- a chat title request (benchmaker.replay_server.side: opencode's title call, no tools,
  the title prompt as system text): side traffic, relayed, not recorded
  (`title_request`); it repeats the user's task, so it would open the task's
  conversation with its own system text and messages.
With `canned_replies=True` (`benchmaker record --canned-replies`, for agents that write
exchanges of their own into every request, as aider does): before the rules above, each
assistant message without tool calls whose text (stripped of surrounding whitespace) is
no answer the proxy relayed is a canned reply; the request is placed without its canned
exchanges (benchmaker.trajectories.trajectory.without_canned: the canned reply and the
user message before it) and the texts go into the trajectory's `canned_replies`, which
the replay server strips the same way. So a request with only canned exchanges before the
task opens a conversation at turn 0 (a proxy started mid-run of an agent then records the
rest as a conversation of its own instead of counting `unseen_turns`).
Concurrent conversations with the same key are not told apart (the replay server
could not tell them apart either). The tool definitions a conversation's requests
carry (the first that has any) become the trajectory's `tools`, in chat shape
whatever the API (the apis modules' `chat_tools`: Responses function/custom tools,
Messages client tools, Gemini function declarations); a first user message holding an
image is kept as content parts too (`first_user_parts`).

A turn is recorded from the response bytes as they pass (the API's answer reader:
ChatAssembler, ResponsesAssembler, MessagesAssembler, GeminiAssembler) the moment the
answer is complete (`data: [DONE]`, the API's terminal event, or the whole JSON body),
before those bytes are relayed, so a client that sends its next request right after
`[DONE]` finds the turn recorded. Not recorded: a response with status >= 400 (relayed
whole) and a failure to reach the upstream (relay's 502 JSON error, code
`upstream_error`), both `upstream_errors`; a body that ends without its terminal
event, does not parse, or is cut after the head by the upstream or a deadline (the
relayed body is cut too), and the answer to a client that left before it ended (relay
closes the upstream exchange at once), all `incomplete`. A request body sent with
Content-Encoding gzip or deflate is read decoded (relayed as received). Deadlines
(`benchmaker record --connect-timeout, --idle-timeout, --total-timeout`):
create_recorder_app. Timing per turn: `started_at` (UTC wall clock when the request
arrived), `ttft_ms` (first token-bearing chunk after arrival, streams only) and
`duration_ms` (until complete), measured at the proxy.

Secrets: request headers (Authorization, api keys) are forwarded, never recorded; the
proxy's own secret is neither forwarded nor recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from benchmaker.apis import gemini
from benchmaker.apis.anthropic_messages import STOP_CLASSES, AnthropicMessagesParser, finish_reason_of
from benchmaker.apis.anthropic_messages import chat_messages as messages_chat_messages
from benchmaker.apis.anthropic_messages import chat_tools as messages_chat_tools
from benchmaker.apis.generated import token_count
from benchmaker.apis.openai_chat import OpenAIChatAssembler, chat_tools
from benchmaker.apis.openai_responses import OpenAIResponsesParser
from benchmaker.apis.openai_responses import chat_messages as responses_chat_messages
from benchmaker.apis.openai_responses import chat_tools as responses_chat_tools
from benchmaker.engine.http1 import MAX_DECODED_BODY_BYTES
from benchmaker.engine.records import Outcome, Sample
from benchmaker.replay_server.relay import CLIENT_GONE, RelayResponse, RelaySink, Upstream
from benchmaker.replay_server.secret_path import SecretPath, check_secret
from benchmaker.replay_server.side import is_title_request
from benchmaker.trajectories.converters.openai_messages import FINISH_REASONS
from benchmaker.trajectories.converters.tool_calls import parse_arguments
from benchmaker.trajectories.trajectory import (
    FinishReason,
    Observation,
    Source,
    Timing,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    content_parts,
    flatten_content,
    match_key_for_messages,
    without_canned,
)
from benchmaker.trajectories.trajectory import (
    Response as TrajResponse,
)

__all__ = ["FORMAT", "ChatAssembler", "MessagesAssembler", "Recorder", "ResponsesAssembler", "create_recorder_app"]

FORMAT = "recording-proxy"
"""`Source.format` of recorded trajectories."""


class _Answer:
    """One response as the recorder reads it from its body bytes, through its API's
    parser in benchmaker.apis (the engine's), with a recording sample of its own.

        asm = ChatAssembler(stream=True)   # or ResponsesAssembler, MessagesAssembler
        asm.feed(data, now_ns)             # per chunk of body bytes; True once complete
        asm.finish()                       # at end of body; True when complete
        asm.response(), asm.usage          # the recorded Response and Usage (None: none sent)

    Streams: complete at the API's terminal event (the parser's `ended`); a protocol
    error (bad JSON, an error object or event) makes it unrecordable. Non-streamed
    bodies: complete when the parser reads them without a protocol error (checked when
    `content_length` bytes arrived, else at finish()). `error` says why an incomplete
    or bad body was not recordable (the parser's error). `first_token_ns` is the first
    token event's stamp (the parser's rule). Usage: the sample's counts (prompt,
    output, cached, reasoning tokens) plus the usage object's `total_tokens` and
    `cache_creation_input_tokens`; None when no count was sent."""

    PARSER: Any
    """The API's parser class in benchmaker.apis, made with `stream=`."""

    def __init__(self, *, stream: bool, content_length: int | None = None) -> None:
        self.stream = stream
        self.content_length = content_length
        self.complete = False
        self.error: str | None = None
        self.first_token_ns: int | None = None
        self.usage: Usage | None = None
        self._parser = self.PARSER(stream=stream)
        self._sample = Sample(run_id="record", seq=0)
        self._n = 0

    def feed(self, data: bytes, now_ns: int) -> bool:
        """Take one chunk of body bytes that arrived at `now_ns`; returns `complete`."""
        if self.complete or self.error:
            return self.complete
        self._parser.feed(data, now_ns, self._sample)
        if not self.stream:
            self._n += len(data)
            if self.content_length is not None and self._n >= self.content_length:
                self._end()
        elif self._parser.error is not None:
            self.error = self._parser.error
        elif self._parser.ended:
            self._end()
        return self.complete

    def finish(self) -> bool:
        """End of body; returns `complete` (a stream cut before its terminal event is
        incomplete)."""
        if not self.complete and not self.error:
            self._end()
        return self.complete

    def _end(self) -> None:
        sample = self._sample
        self._parser.finish(sample)
        if sample.outcome == Outcome.PROTOCOL_ERROR.value:
            self.error = sample.error
            return
        self.first_token_ns = sample.first_token_ns
        raw = self._parser.usage if isinstance(self._parser.usage, dict) else {}
        usage = Usage(
            prompt_tokens=sample.prompt_tokens,
            completion_tokens=sample.output_tokens,
            cached_tokens=sample.cached_tokens,
            cache_creation_tokens=token_count(raw.get("cache_creation_input_tokens")),
            reasoning_tokens=sample.reasoning_tokens,
            total_tokens=token_count(raw.get("total_tokens")),
        )
        self.usage = usage if any(v is not None for v in usage.model_dump().values()) else None
        self.complete = True


class ChatAssembler(_Answer):
    """A chat completion response, read by benchmaker.apis.openai_chat.OpenAIChatAssembler
    (content and reasoning of choice 0, tool calls by `index` with their argument
    fragments byte-exact); complete at `data: [DONE]`."""

    PARSER = OpenAIChatAssembler

    def response(self) -> tuple[TrajResponse, bool]:
        """The assistant Response, and whether its finish reason was one we know
        (an unknown or missing one maps to tool_calls when there are calls, else stop)."""
        parser = self._parser
        calls = [
            ToolCall(
                id=c.id or f"call_{c.index}",
                name=c.name,
                arguments_raw=c.arguments,
                arguments=parse_arguments(c.arguments),
            )
            for c in sorted(parser.tool_calls, key=lambda c: c.index)
        ]
        sent = self._sample.finish_reason
        mapped = FINISH_REASONS.get(sent) if sent is not None else None
        reason: FinishReason = mapped if mapped is not None else ("tool_calls" if calls else "stop")
        return TrajResponse(
            content=parser.content, reasoning=parser.reasoning, tool_calls=calls, finish_reason=reason
        ), mapped is not None or sent is None


class ResponsesAssembler(_Answer):
    """An OpenAI Responses response (`/v1/responses`), read by
    benchmaker.apis.openai_responses.OpenAIResponsesParser; complete at the terminal
    event (`response.completed`, `.incomplete`, `.failed`). The output is the terminal
    response's `output` items, else the `response.output_item.done` items. A call
    recorded from a `custom_tool_call` keeps `type` "custom"."""

    PARSER = OpenAIResponsesParser

    def response(self) -> tuple[TrajResponse, bool]:
        """The assistant Response, and True (every Responses end state maps to one)."""
        out = self._parser.output()
        calls = [
            ToolCall(
                id=c.call_id,
                name=c.name,
                arguments_raw=c.arguments,
                arguments=None if c.custom else parse_arguments(c.arguments),
                type="custom" if c.custom else None,
            )
            for c in out.calls
        ]
        return TrajResponse(
            content=out.content, reasoning=out.reasoning, tool_calls=calls, finish_reason=out.finish_reason
        ), True


class MessagesAssembler(_Answer):
    """An Anthropic Messages response, read by
    benchmaker.apis.anthropic_messages.AnthropicMessagesParser; complete at
    `message_stop`. The Response: thinking blocks' text joined -> reasoning (None
    without thinking blocks), text blocks' text joined -> content (None without text
    blocks), tool_use blocks -> tool calls (arguments_raw: the streamed `partial_json`
    joined, or the body's `input` as compact JSON); stop_reason by `finish_reason_of`.
    Usage: the parser's counts (anthropic_messages module doc), cache_creation_tokens."""

    PARSER = AnthropicMessagesParser

    def response(self) -> tuple[TrajResponse, bool]:
        """The assistant Response, and whether its stop reason was one we know."""
        blocks = [b for _, b in sorted(self._parser.blocks.items())]
        thinking = [b.get("thinking") or "" for b in blocks if b.get("type") == "thinking"]
        texts = [b.get("text") or "" for b in blocks if b.get("type") == "text"]
        calls = []
        for i, b in enumerate(b for b in blocks if b.get("type") == "tool_use"):
            raw = b["input_json"] if "input_json" in b else json.dumps(b.get("input") or {}, separators=(",", ":"))
            calls.append(
                ToolCall(
                    id=b.get("id") or f"toolu_{i}",
                    name=b.get("name") or "",
                    arguments_raw=raw,
                    arguments=parse_arguments(raw) if raw else {},
                )
            )
        reason = self._parser.stop_reason
        known = reason in STOP_CLASSES
        finish: FinishReason = finish_reason_of(reason) if known else ("tool_calls" if calls else "stop")  # type: ignore[assignment]
        return TrajResponse(
            content="".join(texts) if texts else None,
            reasoning="".join(thinking) if thinking else None,
            tool_calls=calls,
            finish_reason=finish,
        ), known or reason is None


@dataclass
class _Conversation:
    key: str
    number: int
    system: str | None
    first_user: str
    user_before_turns: list[str]
    model: str | None
    tools: list[dict[str, Any]] | None = None
    canned_replies: list[str] = field(default_factory=list)
    first_user_parts: list[dict[str, Any]] | None = None
    turns: list[Turn] = field(default_factory=list)
    digest: Any = field(default_factory=hashlib.sha256)


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
"""zlib's wbits for each request Content-Encoding the recorder reads (deflate: the zlib
wrapper, as RFC 9110 section 8.4.1.2 names it)."""


def _request_json_bytes(body: bytes, coding: str | None) -> bytes:
    """The bytes of a request `body` to read as JSON: the body itself without a
    Content-Encoding (`coding`, the header's value, None when absent), decoded when it
    is gzip, x-gzip or deflate (as sent, a client's compressed request), b"" (a request
    that cannot be read) for another coding, a broken stream or one that decodes to
    more than MAX_DECODED_BODY_BYTES. The body relayed is always the one received."""
    coding = (coding or "").strip().lower()
    if coding in ("", "identity"):
        return body
    try:
        decoder = zlib.decompressobj(_WBITS[coding])
        out = decoder.decompress(body, MAX_DECODED_BODY_BYTES + 1)
    except (KeyError, zlib.error):
        return b""
    return out if len(out) <= MAX_DECODED_BODY_BYTES and decoder.eof else b""


def _chat_messages(req: Any) -> list[dict[str, Any]]:
    """The messages (the objects of its `messages` list) of a chat completions request;
    raises ValueError when it has no `messages` list."""
    if not isinstance(req, dict) or not isinstance(req.get("messages"), list):
        raise ValueError("messages: expected a list")
    return [m for m in req["messages"] if isinstance(m, dict)]


_APIS: dict[str, tuple[Callable[[Any], list[dict[str, Any]]], Callable[[Any], Any], str, type[_Answer] | None]] = {
    "chat": (_chat_messages, chat_tools, "/chat/completions", ChatAssembler),
    "responses": (responses_chat_messages, responses_chat_tools, "/responses", ResponsesAssembler),
    "messages": (messages_chat_messages, messages_chat_tools, "/messages", MessagesAssembler),
    "gemini": (gemini.request_messages, gemini.chat_tools, "", None),
}
"""Each recorded API's readers of a parsed request body (its chat messages, raising
ValueError when the body is no request of the API; its tool definitions in chat
shape), its path under the upstream's /v1 (Gemini's: the request's own path) and its
answer reader (Gemini's: _GeminiAnswer)."""


class Recorder:
    """Groups relayed exchanges into conversations and writes them as trajectories
    (rules in the module docstring). Not thread-safe: used from one event loop.

    `output`: the trajectories.jsonl to write; `text_actions`, `canned_replies`: the
    grouping's options (module docstring)."""

    def __init__(self, output: Path, *, text_actions: bool = False, canned_replies: bool = False) -> None:
        self.output = Path(output)
        self.text_actions = text_actions
        self.canned_replies = canned_replies
        self._answered: set[str] = set()  # the relayed answers' texts, stripped
        self.conversations: list[_Conversation] = []
        self._latest: dict[str, _Conversation] = {}
        self._numbers: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()

    # -- grouping -------------------------------------------------------------------

    def begin(
        self, messages: list[dict[str, Any]], model: str | None, tools: list[dict[str, Any]] | None = None
    ) -> tuple[_Conversation, int] | None:
        """Place a request: returns (conversation, turn index) the response will be
        recorded at, or None when it cannot be recorded (counted in `skipped`). Sets
        the previous turn's observations from the request's messages. `tools`: the
        request's tool definitions in chat shape (the apis modules' `chat_tools`),
        kept as the conversation's when it has none yet."""
        canned: list[str] = []
        if self.canned_replies:  # an assistant message without tool calls that is no relayed answer
            texts = [
                flatten_content(m.get("content"))
                for m in messages
                if m.get("role") == "assistant" and not m.get("tool_calls")
            ]
            canned = [t for t in texts if t.strip() not in self._answered]
            messages = without_canned(messages, frozenset(canned))
        placed = self._place(messages, model, tools)
        if placed is not None:
            have = placed[0].canned_replies
            have.extend(t for t in dict.fromkeys(canned) if t not in have)
        return placed

    def _place(
        self, messages: list[dict[str, Any]], model: str | None, tools: list[dict[str, Any]] | None
    ) -> tuple[_Conversation, int] | None:
        """`begin` on messages without canned exchanges."""
        head: list[str] = []
        first_content: Any = None
        system = None
        n_assistant = 0
        last_assistant = -1
        for i, m in enumerate(messages):
            role = m.get("role")
            if role == "assistant":
                n_assistant += 1
                last_assistant = i
            elif role == "user" and not n_assistant:
                if not head:
                    first_content = m.get("content")
                head.append(flatten_content(m.get("content")))
            elif role == "system" and system is None:
                system = flatten_content(m.get("content"))
        if not head:
            self.skipped["no_user_before_assistant"] += 1
            return None
        key = match_key_for_messages(head)
        conv = self._latest.get(key)
        if conv is None or (n_assistant == 0 and conv.turns):
            if n_assistant > 0:
                self.skipped["unseen_turns"] += 1
                return None
            self._numbers[key] += 1
            conv = _Conversation(key, self._numbers[key], system, head[0], head[1:], model, tools)
            conv.first_user_parts = content_parts(first_content)
            self._latest[key] = conv
            self.conversations.append(conv)
            return conv, 0
        if not self._next_turn(conv, n_assistant):
            return None
        if n_assistant > 0:
            self._observe(conv.turns[n_assistant - 1], messages[last_assistant + 1 :])
        if conv.tools is None:
            conv.tools = tools
        return conv, n_assistant

    def _next_turn(self, conv: _Conversation, index: int) -> bool:
        """Make turn `index` the next of `conv`: False (counted `unseen_turns`) when turns
        before it are missing, else True, the turns from it on dropped (`superseded_turns`)."""
        if index > len(conv.turns):
            self.skipped["unseen_turns"] += 1
            return False
        if index < len(conv.turns):
            self.skipped["superseded_turns"] += len(conv.turns) - index
            del conv.turns[index:]
        return True

    def _observe(self, turn: Turn, after: list[dict[str, Any]]) -> None:
        observations: list[Observation] = []
        user_after: list[str] = []
        text_obs = self.text_actions and not turn.response.tool_calls
        tool_names: dict[str | None, str] = {tc.id: tc.name for tc in turn.response.tool_calls}
        for m in after:
            role = m.get("role")
            text = flatten_content(m.get("content"))
            parts = content_parts(m.get("content"))  # a result with an image: kept whole
            if role == "tool":
                is_error = m.get("is_error")
                code = m.get("exit_code")
                call_id = m.get("tool_call_id") if isinstance(m.get("tool_call_id"), str) else None
                observations.append(
                    Observation(
                        tool_call_id=call_id,
                        name=m.get("name") if isinstance(m.get("name"), str) else tool_names.get(call_id),
                        content=text,
                        is_error=is_error if isinstance(is_error, bool) else False,
                        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                        parts=parts,
                    )
                )
            elif role == "user":
                if text_obs and not observations and not user_after:
                    observations.append(Observation(content=text, parts=parts))
                else:
                    user_after.append(text)
        turn.observations = observations
        turn.user_after = user_after

    def record(
        self,
        conv: _Conversation,
        index: int,
        asm: ChatAssembler | ResponsesAssembler | MessagesAssembler | _GeminiAnswer,
        started_at: str,
        t_start_ns: int,
        t_end_ns: int,
        raw: bytes,
    ) -> None:
        """Record the completed response `asm` as turn `index` of `conv` (replacing a
        superseded one). `raw` is the upstream body (hashed into the source sha256)."""
        response, known = asm.response()
        self._answered.add((response.content or "").strip())
        if not known:
            self.skipped["unknown_finish_reason"] += 1
        if not self._next_turn(conv, index):  # a racing retry moved the conversation meanwhile
            return
        ttft_ms = None if asm.first_token_ns is None else (asm.first_token_ns - t_start_ns) / 1e6
        conv.turns.append(
            Turn(
                index=index,
                response=response,
                usage=asm.usage,
                timing=Timing(ttft_ms=ttft_ms, duration_ms=(t_end_ns - t_start_ns) / 1e6, started_at=started_at),
            )
        )
        conv.digest.update(raw)

    # -- output ---------------------------------------------------------------------

    def trajectories(self) -> list[Trajectory]:
        """Every conversation with at least one turn, in the order they began."""
        out = []
        for line, conv in enumerate((c for c in self.conversations if c.turns), 1):
            key_hash = hashlib.sha256(conv.key.encode("utf-8")).hexdigest()[:12]
            task_id = conv.key[len("task:") :] if conv.key.startswith("task:") else None
            out.append(
                Trajectory(
                    trajectory_id=f"rec-{key_hash}-{conv.number}",
                    source=Source(format=FORMAT, path=str(self.output), sha256=conv.digest.hexdigest(), line=line),
                    task_id=task_id,
                    match_key=conv.key,
                    model=conv.model,
                    system=conv.system,
                    first_user=conv.first_user,
                    first_user_parts=conv.first_user_parts,
                    user_before_turns=list(conv.user_before_turns),
                    terminated_by=conv.turns[-1].response.finish_reason,
                    tools=conv.tools,
                    turns=[t.model_copy(deep=True) for t in conv.turns],
                    skipped={},
                    canned_replies=list(conv.canned_replies),
                )
            )
        return out

    def write(self) -> dict[str, Any]:
        """Write every trajectory to `output` atomically (temp file, fsync, rename);
        returns {"path", "trajectories", "turns", "skipped"}. Raises OSError."""
        trajs = self.trajectories()
        self.output.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.output.with_name(self.output.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for t in trajs:
                f.write(t.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.output)
        return {
            "path": str(self.output),
            "trajectories": len(trajs),
            "turns": sum(len(t.turns) for t in trajs),
            "skipped": dict(self.skipped),
        }


_GEMINI_CALL_ID = "gemini_call_"
"""Prefix of the id recorded for a Gemini function call the upstream sent without one."""


class _GeminiAnswer:
    """A Gemini answer (`sse`: SSE-framed), read by benchmaker.apis.gemini.GeminiAssembler
    as the recorder reads the other APIs' answers: `feed`, `finish`, then `response()`,
    `usage`, `first_token_ns`. A function call without id gets "gemini_call_<turn>_<k>"
    until the client's next request names its own id (`_adopt_client_call_ids`)."""

    def __init__(self, sse: bool, turn_index: int) -> None:
        self.asm = gemini.GeminiAssembler(sse=sse)
        self.turn_index = turn_index
        self.feed = self.asm.feed
        self.finish = self.asm.finish

    @property
    def first_token_ns(self) -> int | None:
        return self.asm.first_token_ns

    @property
    def usage(self) -> Usage | None:
        counts = self.asm.usage_counts()
        if counts is None:
            return None
        prompt, completion, cached, reasoning, total = counts
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            reasoning_tokens=reasoning,
            total_tokens=total,
        )

    def response(self) -> tuple[TrajResponse, bool]:
        asm = self.asm
        calls = [
            ToolCall(
                id=call_id or f"{_GEMINI_CALL_ID}{self.turn_index}_{k}",
                name=name,
                arguments_raw=json.dumps(args, ensure_ascii=False, separators=(",", ":")),
                arguments=args,
            )
            for k, (call_id, name, args) in enumerate(asm.calls)
        ]
        known = asm.finish_reason is None or asm.finish_reason in gemini.TRAJECTORY_FINISH
        return TrajResponse(
            content=asm.content, reasoning=asm.reasoning, tool_calls=calls, finish_reason=asm.trajectory_finish()
        ), known


def _adopt_client_call_ids(turn: Turn) -> None:
    """Give the recorded function calls that came without id the ids the client answered
    them with (Gemini CLI names each call itself): the k-th such call takes the id of the
    k-th observation with its name, so a replayed answer carries the id the client's
    function response will name."""
    free = [(o.name, o.tool_call_id) for o in turn.observations if o.tool_call_id is not None]
    for call in turn.response.tool_calls:
        if not call.id.startswith(_GEMINI_CALL_ID):
            continue
        answer = next((pair for pair in free if pair[0] == call.name), None)
        if answer is not None:
            free.remove(answer)
            call.id = answer[1]


def _upstream_v1(upstream: str) -> str:
    base = upstream.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


@dataclass(eq=False)
class _Recording(RelaySink):
    """A relayed response read as turn `placed` of its conversation: each read fed to
    `answer` (an answer as Recorder.record reads one), the turn recorded the moment it
    is complete, before the read that completed it is relayed; a body that ends
    incomplete, or is cut, counts `incomplete`."""

    recorder: Recorder
    answer: Any
    placed: tuple[_Conversation, int]
    started_at: str
    t_start: int
    raw: list[bytes] = field(default_factory=list)
    done: bool = False

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        if self.done:
            return
        self.raw.append(data)
        if self.answer.feed(data, t_ns):
            self._record()

    def finish(self, sample: Sample) -> None:
        if self.done:
            return
        if self.answer.finish():
            self._record()
        else:
            self.cut()

    def cut(self) -> None:
        if not self.done:
            self.done = True
            self.recorder.skipped["incomplete"] += 1

    def _record(self) -> None:
        self.done = True
        end = time.perf_counter_ns()
        self.recorder.record(*self.placed, self.answer, self.started_at, self.t_start, end, b"".join(self.raw))


def create_recorder_app(
    upstream: str,
    output: Path,
    *,
    secret: str,
    text_actions: bool = False,
    canned_replies: bool = False,
    **deadlines: float | None,
) -> Starlette:
    """The recording proxy app (module docstring) in front of `upstream` (a base URL,
    with or without `/v1`), writing `output`, serving only paths under `/<secret>` (at
    least 22 URL-safe characters; its clients' base URL is `http://HOST:PORT/<secret>`).
    `deadlines`: the upstream exchange's, in s (None: none), Upstream's keywords
    (benchmaker.replay_server.relay): `connect_timeout_s` (default 10 s) until the
    connection is made, `idle_timeout_s` (600 s) the longest wait for the upstream's
    next bytes, `total_timeout_s` (none) from the send until the body ended.
    `app.state.recorder` is the Recorder (`text_actions`, `canned_replies`: its
    options). Raises ValueError when a deadline is not positive or `secret` is not a
    URL-safe segment of 22+ characters."""
    recorder = Recorder(output, text_actions=text_actions, canned_replies=canned_replies)

    guard = Middleware(
        SecretPath, secret=check_secret(secret), on_refused=lambda: recorder.skipped.update(["unauthorized"])
    )
    v1 = _upstream_v1(upstream)
    root = upstream.rstrip("/").removesuffix("/v1")
    upstream_side = Upstream(**deadlines)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        try:
            yield
        finally:
            await upstream_side.aclose()
            recorder.write()

    async def relay(
        request: Request,
        url: str,
        body: bytes,
        placed: tuple[_Conversation, int] | None,
        answer: Any,
        when: tuple[str, int],
    ) -> Response:
        """Relay `request` to `url` (with its query); record its answer as turn `placed`
        (None: relayed only). `when`: (started_at, t_start) of the request's arrival."""
        query = request.url.query
        resp = await upstream_side.relay(request, f"{url}?{query}" if query else url, body)
        if not isinstance(resp, RelayResponse):
            if resp.status_code != CLIENT_GONE:
                recorder.skipped["upstream_errors"] += 1
            elif placed is not None:  # the client left before the answer's head
                recorder.skipped["incomplete"] += 1
            return resp
        if resp.status_code >= 400:
            recorder.skipped["upstream_errors"] += 1
        elif placed is not None:
            length = resp.headers.get("content-length")
            resp.sink = _Recording(
                recorder, answer(int(length) if length and length.isdigit() else None), placed, *when
            )
        return resp

    async def exchange(request: Request, api: str) -> Response:
        """Relay one call of `api` (an _APIS key) and record its answer as the turn the
        request places (module docstring)."""
        when = (datetime.now(UTC).isoformat(), time.perf_counter_ns())
        body = await request.body()
        read_messages, read_tools, path, assembler = _APIS[api]
        model, method = (gemini.parse_path(request.url.path) or ("", "")) if api == "gemini" else ("", "")
        messages: list[dict[str, Any]] | None
        try:
            req = json.loads(_request_json_bytes(body, request.headers.get("content-encoding")))
            messages = read_messages(req)
        except (ValueError, UnicodeDecodeError):
            req, messages = {}, None
            recorder.skipped["bad_request"] += 1
        else:
            title = api == "chat" and is_title_request(
                next((flatten_content(m.get("content")) for m in messages if m.get("role") == "system"), None),
                bool(req.get("tools")),
            )
            if title:  # side traffic (module docstring)
                messages = None
                recorder.skipped["title_request"] += 1
            elif method == "generateContent" and gemini.wants_json_answer(req):  # a utility call, not the agent's turn
                messages = None
                recorder.skipped["side_request"] += 1
        named = (model or None) if api == "gemini" else req.get("model")
        placed: tuple[_Conversation, int] | None = None
        if messages is not None:
            placed = recorder.begin(messages, named if isinstance(named, str) else None, read_tools(req))
        if assembler is not None:
            stream = req.get("stream") is True
            return await relay(
                request, v1 + path, body, placed, lambda n: assembler(stream=stream, content_length=n), when
            )
        if placed is not None and placed[1] > 0:
            _adopt_client_call_ids(placed[0].turns[placed[1] - 1])
        sse = method == "streamGenerateContent" and gemini.wants_sse(request.url.query)
        turn = placed[1] if placed is not None else 0
        return await relay(request, root + request.url.path, body, placed, lambda n: _GeminiAnswer(sse, turn), when)

    async def passthrough(request: Request) -> Response:
        body = await request.body()
        return await relay(request, v1 + "/" + request.path_params["path"], body, None, None, ("", 0))

    async def flush(request: Request) -> Response:
        try:
            return JSONResponse(recorder.write())
        except OSError as exc:
            return JSONResponse({"error": {"message": f"cannot write {recorder.output}: {exc}"}}, status_code=500)

    async def health(request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "conversations": len(recorder.conversations),
                "turns": sum(len(c.turns) for c in recorder.conversations),
            }
        )

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", partial(exchange, api="chat"), methods=["POST"]),
            Route("/chat/completions", partial(exchange, api="chat"), methods=["POST"]),
            Route("/v1/responses", partial(exchange, api="responses"), methods=["POST"]),
            Route("/responses", partial(exchange, api="responses"), methods=["POST"]),
            Route("/v1/messages", partial(exchange, api="messages"), methods=["POST"]),
            Route("/messages", partial(exchange, api="messages"), methods=["POST"]),
            Route("/flush", flush, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/v1beta/models/{call}", partial(exchange, api="gemini"), methods=["POST"]),
            Route("/v1alpha/models/{call}", partial(exchange, api="gemini"), methods=["POST"]),
            Route("/v1/models/{call}", partial(exchange, api="gemini"), methods=["POST"]),
            Route("/v1/{path:path}", passthrough, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
        ],
        lifespan=lifespan,
        middleware=[guard],
    )
    app.state.recorder = recorder
    return app


def serve_recorder(
    upstream: str,
    output: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    announce: Any = None,
    **options: Any,
) -> None:
    """Bind host:port, make a fresh secret (`secrets.token_urlsafe(32)`, this process's
    only), call `announce(url)` with the base URL `http://HOST:PORT/<secret>` (default:
    print it as the first stdout line, the one place the secret appears; the stderr line
    leaves it out), serve until SIGINT/SIGTERM, then write `output` and return (SIGINT)
    or let uvicorn re-raise SIGTERM. `options`: create_recorder_app's keywords. Raises
    OSError (bind), ValueError (a deadline not positive)."""
    import secrets
    import sys

    from benchmaker.replay_server.server import bind_socket, run_uvicorn

    secret = secrets.token_urlsafe(32)
    app = create_recorder_app(upstream, output, secret=secret, **options)
    sock, origin = bind_socket(host, port)
    url = f"{origin}/{secret}"
    if announce is None:
        print(url, flush=True)
        print(
            f"recording proxy: {origin}/<secret> (the URL above) -> {_upstream_v1(upstream)}, writing {output} "
            f"(POST URL/flush to write now); requests without the secret path prefix are refused",
            file=sys.stderr,
            flush=True,
        )
    else:
        announce(url)
    try:  # the replay server's stack: httptools + uvloop when installed
        run_uvicorn(app, sock, lifespan="on")
    except KeyboardInterrupt:  # uvicorn re-raises SIGINT after its shutdown wrote the file
        pass
    finally:
        sock.close()
