"""The model calls of command mode on the wire APIs other than OpenAI chat completions:
which API a request path is, whether it streams, its turn index, and a parser that
measures the response into the call's engine `Sample` and keeps the assistant message
(content, reasoning, tool calls, raw usage), as the chat client's own parser does.

    call = wire_call("/v1/messages", "", body_bytes)   # None: not a model call path
    call.api, call.stream, call.turn_index             # "messages", True, 2
    stream = client.forward(path_qs, body_bytes, stream=call.stream, headers=h, parser=call.parser)

The APIs and their paths (each API's rules live in its benchmaker.apis module):
- OpenAI Responses, `POST /v1/responses` (and `/responses`): streams when the body's
  `stream` is true; measured by benchmaker.apis.openai_responses.OpenAIResponsesParser.
- Anthropic Messages, `POST /v1/messages` (and `/messages`; a `?beta=true` query is
  kept): streams when `stream` is true; measured by
  benchmaker.apis.anthropic_messages.AnthropicMessagesParser.
- Gemini, `POST /v1beta/models/M:streamGenerateContent` (SSE with `alt=sse`, else one
  JSON array) and `:generateContent` (one JSON object); reassembled by
  benchmaker.apis.gemini.GeminiAssembler, its stamps and usageMetadata put on the Sample
  here (prompt = promptTokenCount, output = candidates + thoughts tokens).

The turn index of a request is its number of assistant messages once the request is
read as a chat message list (each API module's `chat_messages` / `request_messages`),
so a call lines up with the recorded turn the replay server answers with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from benchmaker.agent.model_client import ToolCallDelta
from benchmaker.apis import gemini
from benchmaker.apis.anthropic_messages import AnthropicMessagesParser
from benchmaker.apis.anthropic_messages import chat_messages as messages_chat_messages
from benchmaker.apis.generated import settle
from benchmaker.apis.openai_responses import OpenAIResponsesParser
from benchmaker.apis.openai_responses import chat_messages as responses_chat_messages
from benchmaker.engine.records import Outcome, Sample

__all__ = ["WireCall", "wire_call", "RESPONSES_PATHS", "MESSAGES_PATHS", "GEMINI_PATH_PREFIXES"]

RESPONSES_PATHS = ("/v1/responses", "/responses")
MESSAGES_PATHS = ("/v1/messages", "/messages")
GEMINI_PATH_PREFIXES = ("/v1beta/models/", "/v1/models/")


class ResponsesMessageParser(OpenAIResponsesParser):
    """OpenAIResponsesParser that also gives the assistant message: `content`,
    `reasoning` (None when the response had no such item), `tool_calls` (function and
    custom tool calls, arguments as sent) and `raw_usage()` (the response's usage)."""

    __slots__ = ()

    @property
    def content(self) -> str | None:
        out = self.output()
        return None if out is None else out.content

    @property
    def reasoning(self) -> str | None:
        out = self.output()
        return None if out is None else out.reasoning

    @property
    def tool_calls(self) -> list[ToolCallDelta]:
        out = self.output()
        calls = () if out is None else out.calls
        return [ToolCallDelta(i, c.call_id, "function", c.name, c.arguments) for i, c in enumerate(calls)]

    def raw_usage(self) -> dict[str, Any] | None:
        usage = self.usage
        return usage if isinstance(usage, dict) else None


class MessagesMessageParser(AnthropicMessagesParser):
    """AnthropicMessagesParser that also gives the assistant message: `content` (the text
    blocks; None without one), `reasoning` (the thinking blocks; None without one),
    `tool_calls` (tool_use blocks, arguments the streamed `partial_json` joined, or the
    whole body's `input` as JSON) and `raw_usage()` (the merged usage object)."""

    __slots__ = ()

    def _kind(self, kind: str) -> list[dict[str, Any]]:
        return [b for _, b in sorted(self.blocks.items(), key=lambda kv: kv[0]) if b.get("type") == kind]

    @property
    def content(self) -> str | None:
        return self.text if self._kind("text") else None

    @property
    def reasoning(self) -> str | None:  # type: ignore[override]
        return "".join(b.get("thinking", "") for b in self._kind("thinking")) if self._kind("thinking") else None

    @property
    def tool_calls(self) -> list[ToolCallDelta]:
        calls = []
        for i, b in enumerate(self._kind("tool_use")):
            args = b.get("input_json")
            if not isinstance(args, str):
                args = orjson.dumps(b.get("input", {})).decode()
            calls.append(ToolCallDelta(i, b.get("id"), "function", str(b.get("name") or ""), args))
        return calls

    def raw_usage(self) -> dict[str, Any] | None:
        return self.usage


class GeminiMessageParser:
    """A Gemini response (SSE, a JSON array or one JSON object) measured into a Sample:
    `first_token_ns` and `token_event_ns` are the reads that brought new text or function
    calls, `first_content_ns` the first with non-thought text; at finish the
    usageMetadata gives prompt, output (candidates + thoughts), cached and reasoning
    tokens, and the outcome is ok, protocol_error (a body GeminiAssembler could not
    read, or a stream cut before any event), empty_output (nothing generated) or aborted
    (a failing finishReason). Gives the assistant message as the other parsers do."""

    def __init__(self, *, sse: bool, stream: bool) -> None:
        self.stream = stream
        self._asm = gemini.GeminiAssembler(sse=sse)
        self._seen = 0  # generated characters + calls seen so far

    def _generated(self) -> int:
        asm = self._asm
        return len(asm.content or "") + len(asm.reasoning or "") + len(asm.calls)

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """Parse one transport read that arrived at `t_ns` (ns from run t0)."""
        had_content = bool(self._asm.content)
        self._asm.feed(data, t_ns)
        seen = self._generated()
        if seen > self._seen and self.stream:
            if sample.first_token_ns is None:
                sample.first_token_ns = t_ns
                sample.token_event_ns = []
            assert sample.token_event_ns is not None
            sample.token_event_ns.append(t_ns)
            sample.n_token_events += 1
            if not had_content and self._asm.content and sample.first_content_ns is None:
                sample.first_content_ns = t_ns
        self._seen = seen

    def finish(self, sample: Sample) -> None:
        """Body ended (status < 400): set usage, finish_reason, output_chars, outcome."""
        asm = self._asm
        complete = asm.finish()
        counts = asm.usage_counts()
        if counts is not None:
            sample.prompt_tokens, sample.output_tokens, sample.cached_tokens, sample.reasoning_tokens, _ = counts
            sample.usage_present = sample.output_tokens is not None
        sample.output_chars = len(asm.content or "") + len(asm.reasoning or "")
        if asm.model_version is not None and sample.model is None:
            sample.model = asm.model_version
        if not complete:
            sample.outcome, sample.error = Outcome.PROTOCOL_ERROR.value, asm.error or "incomplete response"
            return
        reason = asm.trajectory_finish()
        failed = settle(
            sample,
            reason,
            reasoning_seen=asm.reasoning is not None,
            total_tokens=(asm.usage or {}).get("totalTokenCount"),
        )
        if failed is not None:
            sample.outcome, sample.error = Outcome.ABORTED.value, failed
        elif not self._generated():
            sample.outcome, sample.error = Outcome.EMPTY_OUTPUT.value, "response without generated text"
        else:
            sample.outcome = Outcome.OK.value

    @property
    def content(self) -> str | None:
        return self._asm.content

    @property
    def reasoning(self) -> str | None:
        return self._asm.reasoning

    @property
    def tool_calls(self) -> list[ToolCallDelta]:
        return [
            ToolCallDelta(i, call_id, "function", name, orjson.dumps(args).decode())
            for i, (call_id, name, args) in enumerate(self._asm.calls)
        ]

    def raw_usage(self) -> dict[str, Any] | None:
        return self._asm.usage


@dataclass(frozen=True, slots=True)
class WireCall:
    """One model call on a non-chat API: `api` (responses, messages, gemini), `stream`
    (the response is an event stream with a token timeline), `turn_index` (assistant
    messages in the request) and `parser`, a fresh parser for ChatStream (feed/finish on
    the Sample; content, reasoning, tool_calls, raw_usage())."""

    api: str
    stream: bool
    turn_index: int
    parser: Any


def _assistants(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def wire_call(path: str, query: str, body: bytes) -> WireCall | None:
    """The WireCall of a POST to `path` (no query) with query string `query` and JSON
    `body`, None when `path` is no model call of these APIs (module docstring). Raises
    ValueError naming the problem when the body is not a JSON object."""
    api: str
    parsed = gemini.parse_path(path) if path.startswith(GEMINI_PATH_PREFIXES) else None
    if path in RESPONSES_PATHS:
        api = "responses"
    elif path in MESSAGES_PATHS:
        api = "messages"
    elif parsed is not None and parsed[1] in ("generateContent", "streamGenerateContent"):
        api = "gemini"
    else:
        return None
    try:
        req = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: request body is not JSON: {exc}") from None
    if not isinstance(req, dict):
        raise ValueError(f"{path}: request body is not a JSON object")
    if api == "responses":
        stream = req.get("stream") is True
        return WireCall(api, stream, _assistants(responses_chat_messages(req)), ResponsesMessageParser(stream=stream))
    if api == "messages":
        stream = req.get("stream") is True
        return WireCall(api, stream, _assistants(messages_chat_messages(req)), MessagesMessageParser(stream=stream))
    assert parsed is not None
    sse = parsed[1] == "streamGenerateContent" and gemini.wants_sse(query)
    return WireCall(api, sse, _assistants(gemini.request_messages(req)), GeminiMessageParser(sse=sse, stream=sse))
