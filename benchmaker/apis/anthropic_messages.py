"""The Anthropic Messages wire API (`POST /v1/messages`, also `?beta=true`): request
headers and bodies, the request's chat-shaped messages (the replay key), the response
written back (a `message` object or its event stream), and the stream parser that turns
Messages events into token events. The one place that knows this API; the engine's
workload (benchmaker.workloads.anthropic_messages), the replay server and the recorder
use it.

Source of every shape: the Messages API reference and the official SDK's types
(anthropic-sdk-python `src/anthropic/types/raw_message_stream_event.py` and the
`raw_*_event.py`, `*_delta.py`, `usage.py`, `message_delta_usage.py` modules).

Streamed events (`event: <type>` line, then `data: <JSON with the same "type">`):

    message_start        {"message": {"id", "type": "message", "role": "assistant",
                          "model", "content": [], "stop_reason": null, "stop_sequence":
                          null, "usage": {"input_tokens", "cache_creation_input_tokens",
                          "cache_read_input_tokens", "output_tokens"}}}
    content_block_start  {"index", "content_block": {"type": "text", "text": ""} |
                          {"type": "thinking", "thinking": "", "signature": ""} |
                          {"type": "tool_use", "id", "name", "input": {}}}
    ping                 {} (after the first content_block_start)
    content_block_delta  {"index", "delta": {"type": "text_delta", "text"} |
                          {"type": "thinking_delta", "thinking"} | {"type":
                          "signature_delta", "signature"} | {"type": "input_json_delta",
                          "partial_json"}}
    content_block_stop   {"index"}
    message_delta        {"delta": {"stop_reason", "stop_sequence"}, "usage":
                          {"output_tokens", ...}} (usage counts are cumulative)
    message_stop         {}
    error                {"error": {"type", "message"}}

Usage onto a Sample: prompt_tokens = input_tokens + cache_read_input_tokens +
cache_creation_input_tokens (Anthropic's `input_tokens` counts only the uncached part;
"total input tokens in a request is the summation" of the three, SDK `usage.py`), so it
means what OpenAI's `prompt_tokens` means; cached_tokens = cache_read_input_tokens;
output_tokens = the last `output_tokens` (message_delta's, else message_start's);
reasoning_tokens = `output_tokens_details.thinking_tokens` when sent. No usage object:
all None, usage_present False.

Token events (TTFT, ITL): a `content_block_delta` whose delta carries non-empty `text`,
`thinking` or `partial_json`. A block start (also a tool_use block's name), a
signature_delta, ping and the message events are not tokens. TTFC (`first_content_ns`):
the first non-empty text_delta. Each token-bearing event is one event; events of one
read share its stamp; per-event token counts are not stated (`token_event_tokens` None).

Finish: `finish_reason` is the last non-null `stop_reason` as sent; its class by
`stop_class` (end_turn, stop_sequence, pause_turn -> stop; tool_use -> tool_calls;
max_tokens, model_context_window_exceeded -> length; refusal -> content_filter; any
other value by benchmaker.apis.generated.finish_class).

Outcome set by finish() (streaming), first match wins:
    protocol_error  a data line that is not a JSON object, an `error` event, or the
                    body ended before `message_stop`
    aborted         a stop reason of a failing class
    empty_output    a complete stream without a token event
    ok              otherwise
Non-streamed: the body is parsed at finish(): bad JSON or `"type": "error"` ->
protocol_error; a failing class -> aborted; no non-empty text, thinking or tool_use in
`content` -> empty_output; else ok. No token timeline (first_token_ns stays None).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from benchmaker.apis.generated import (
    FINISH_FAILS,
    BodyReader,
    close_whole,
    finish_class,
    finish_error,
    short,
    token_count,
    whole_object,
)
from benchmaker.apis.openai_chat import chat_assistant, openai_headers
from benchmaker.apis.recorded import RecordedAnswer, RenderedStream, ResponseLike, ToolCallLike, UsageLike
from benchmaker.engine.records import Sample

__all__ = [
    "ANTHROPIC_VERSION",
    "AnthropicMessagesParser",
    "MESSAGES_PATHS",
    "STOP_CLASSES",
    "anthropic_headers",
    "chat_messages",
    "chat_tools",
    "error_body",
    "finish_reason_of",
    "message_body",
    "message_id",
    "recorded_usage",
    "render_body",
    "render_stream",
    "stop_class",
    "stop_reason_for",
    "stream_events",
    "usage_object",
]

ANTHROPIC_VERSION = "2023-06-01"
"""The `anthropic-version` header sent with requests (the SDK's default)."""

MESSAGES_PATHS = ("/v1/messages", "/messages")
"""The request paths of this API (a `?beta=true` query string does not change the path)."""

# -- requests -----------------------------------------------------------------------------


def anthropic_headers(api_key: str | None, stream: bool, extra: dict[str, str] | None) -> dict[str, str]:
    """Request headers: JSON content type, `Accept: text/event-stream` when streaming,
    `anthropic-version: 2023-06-01`, `x-api-key: KEY` when api_key is set, then `extra`
    (wins on conflicts)."""
    headers = openai_headers(None, stream, None)  # the JSON content type and Accept
    headers["anthropic-version"] = ANTHROPIC_VERSION
    if api_key:
        headers["x-api-key"] = api_key
    if extra:
        headers.update(extra)
    return headers


def chat_tools(req: Any) -> list[dict[str, Any]] | None:
    """The tool definitions of a Messages request body (`req`, parsed JSON) in chat
    completions shape, in order: a client tool `{"name", "description", "input_schema"}`
    (`type` absent or "custom"; anthropic-sdk-python `ToolParam`) becomes `{"type":
    "function", "function": {"name", "description" (when given), "parameters":
    input_schema}}`; server tools (a versioned `type` such as "web_search_20250305" or
    "bash_20250124"), which chat completions has no shape for, are left out. None when
    no tool is left."""
    tools = req.get("tools") if isinstance(req, dict) else None
    if not isinstance(tools, list):
        return None
    out = []
    for tool in tools:
        if (
            not isinstance(tool, dict)
            or tool.get("type", "custom") != "custom"
            or not isinstance(tool.get("name"), str)
        ):
            continue
        fn: dict[str, Any] = {"name": tool["name"]}
        if "description" in tool:
            fn["description"] = tool["description"]
        if "input_schema" in tool:
            fn["parameters"] = tool["input_schema"]
        out.append({"type": "function", "function": fn})
    return out or None


def _block_text(content: Any) -> str:
    """The text of a `tool_result` content (a string or a list of blocks): text blocks
    joined with "\\n" (images and documents carry no text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def chat_messages(req: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat-completions messages a Messages request stands for, so that it maps to
    the replay key of the same conversation sent as chat (rules of the replay server):

        system (a string or text blocks)      -> {"role": "system", "content"}
        a message with role system            -> {"role": "system", "content"} in place
        user content string                   -> {"role": "user", "content": str}
        user blocks: tool_result              -> {"role": "tool", "tool_call_id":
                                                  tool_use_id, "content": its text,
                                                  "is_error"} (each, in order)
                     text, image, document... -> one {"role": "user", "content":
                                                  [the blocks]} after the tool messages
                                                  (flatten_content keeps the texts)
        assistant content string or blocks    -> {"role": "assistant", "content": text
                                                  blocks joined with "" or None,
                                                  "reasoning_content" (thinking and
                                                  redacted_thinking), "tool_calls"
                                                  (tool_use: id, name, arguments = the
                                                  input as compact JSON)}

    Raises ValueError naming the field (`messages[3].content[1]: ...`) when the request
    is not an object with a `messages` list of objects with role user, assistant or
    system."""
    if not isinstance(req, dict):
        raise ValueError(f"request body must be a JSON object (got {type(req).__name__})")
    messages = req.get("messages")
    if not isinstance(messages, list):
        raise ValueError(
            "messages: missing or not a list"
            if messages is None
            else f"messages: must be a list (got {type(messages).__name__})"
        )
    out: list[dict[str, Any]] = []
    system = req.get("system")
    if isinstance(system, str):
        out.append({"role": "system", "content": system})
    elif isinstance(system, list):
        out.append({"role": "system", "content": [b for b in system if isinstance(b, dict)]})
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"messages[{i}]: must be an object (got {type(msg).__name__})")
        role, content = msg.get("role"), msg.get("content")
        if role not in ("user", "assistant", "system"):
            raise ValueError(f"messages[{i}].role: expected user, assistant or system (got {role!r})")
        if role == "system":  # Claude Code 2.1.3xx sends its environment as a system message here
            out.append({"role": "system", "content": content})
            continue
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise ValueError(
                f"messages[{i}].content: expected a string or a list of blocks (got {type(content).__name__})"
            )
        if role == "user":
            parts = []
            for j, block in enumerate(content):
                if not isinstance(block, dict):
                    raise ValueError(f"messages[{i}].content[{j}]: must be an object (got {type(block).__name__})")
                if block.get("type") == "tool_result":
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": block.get("tool_use_id"),
                            "content": _block_text(block.get("content")),
                            "is_error": block.get("is_error") is True,
                        }
                    )
                else:
                    parts.append(block)
            if parts:
                out.append({"role": "user", "content": parts})
        else:
            out.append(_assistant(content, i))
    return out


def _assistant(blocks: list[Any], i: int) -> dict[str, Any]:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[tuple[Any, Any, str]] = []
    for j, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise ValueError(f"messages[{i}].content[{j}]: must be an object (got {type(block).__name__})")
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "thinking":
            thinking.append(block.get("thinking") or "")
        elif kind == "redacted_thinking":
            thinking.append("")
        elif kind == "tool_use":
            calls.append((block.get("id"), block.get("name"), orjson.dumps(block.get("input", {})).decode()))
    return chat_assistant("".join(texts) if texts else None, "".join(thinking) if thinking else None, calls)


# -- responses written back -----------------------------------------------------------------


_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
STOP_CLASSES = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
"""A Messages `stop_reason` -> its finish class (benchmaker.apis.generated), for the
values the API documents (the SDK's `StopReason`); each class is also the trajectory's
finish reason."""
_FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
    "abort": "aborted",
    "cancelled": "aborted",
    "error": "error",
}


def stop_reason_for(finish_reason: str) -> str:
    """The Messages `stop_reason` of a recorded chat finish reason: stop -> end_turn,
    tool_calls -> tool_use, length -> max_tokens, content_filter -> refusal; a recorded
    failure (aborted, error) -> end_turn (the replay server flags it in a header)."""
    return _STOP_REASONS.get(finish_reason, "end_turn")


def stop_class(stop_reason: Any) -> str | None:
    """The finish class (benchmaker.apis.generated) of a Messages stop_reason (module
    doc); None for None."""
    if type(stop_reason) is str and stop_reason in STOP_CLASSES:
        return STOP_CLASSES[stop_reason]
    return finish_class(stop_reason)


def finish_reason_of(stop_reason: Any) -> str:
    """The trajectory finish reason (stop, tool_calls, length, content_filter, aborted,
    error) of a Messages stop_reason; None and unknown values give stop."""
    cls = stop_class(stop_reason)
    return _FINISH_REASONS.get(cls or "stop", "stop")


def usage_object(
    prompt_tokens: int | None,
    completion_tokens: int | None,
    cached_tokens: int | None,
    cache_creation_tokens: int | None = None,
) -> dict[str, int]:
    """A Messages `usage` object of recorded counts in tokens (prompt_tokens the whole
    input, OpenAI's meaning): {"input_tokens": prompt - cached - creation (>= 0),
    "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"}; an
    unknown count is sent as 0 (the SDK requires the ints)."""
    read = cached_tokens or 0
    creation = cache_creation_tokens or 0
    return {
        "input_tokens": max((prompt_tokens or 0) - read - creation, 0),
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": read,
        "output_tokens": completion_tokens or 0,
    }


def _signature(reasoning: str) -> str:
    """A stand-in thinking signature for a recording that kept none: stable per text."""
    return "replay-" + hashlib.sha256(reasoning.encode("utf-8")).hexdigest()[:32]


def _tool_input(tc: ToolCallLike) -> dict[str, Any]:
    return tc.arguments if isinstance(tc.arguments, dict) else {}


def message_body(
    msg_id: str, model: str, resp: ResponseLike, usage: dict[str, int], signature: str | None = None
) -> dict[str, Any]:
    """The non-streamed `message` object of a recorded response: content blocks in the
    order thinking (when recorded; `signature` or a stand-in), text (when non-empty),
    tool_use (id, name, input: the parsed arguments, {} when they are not a JSON
    object); stop_reason by `stop_reason_for`; `usage` as given (`usage_object`)."""
    content: list[dict[str, Any]] = []
    if resp.reasoning is not None:
        content.append(
            {"type": "thinking", "thinking": resp.reasoning, "signature": signature or _signature(resp.reasoning)}
        )
    if resp.content:
        content.append({"type": "text", "text": resp.content})
    for tc in resp.tool_calls:
        content.append({"type": "tool_use", "id": tc.id, "name": tc.name, "input": _tool_input(tc)})
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason_for(resp.finish_reason),
        "stop_sequence": None,
        "usage": usage,
    }


def _event(kind: bytes, obj: dict[str, Any]) -> bytes:
    return b"event: " + kind + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


_PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def stream_events(
    msg_id: str,
    model: str,
    resp: ResponseLike,
    usage: dict[str, int],
    splitter: Callable[[str], Sequence[str]],
    signature: str | None = None,
) -> tuple[bytes, list[bytes], bytes]:
    """The SSE bytes of a recorded response as the API streams it: (head, token events,
    tail). head: `message_start` (message_body's usage with output_tokens 1, as the API
    sends; 0 when none were recorded) and, when there are blocks, the first
    `content_block_start` and a `ping`. Each token event is one `content_block_delta`
    (text_delta, thinking_delta, input_json_delta; the pieces of `splitter`), with the
    events that must precede it (the previous block's signature_delta and
    content_block_stop, its own content_block_start) glued before it. tail: the last
    block's stop, `message_delta` (stop_reason, usage output_tokens) and
    `message_stop`. Block order and content as in `message_body`; a block without
    pieces (empty tool arguments) rides with the next event."""
    start_usage = dict(usage, output_tokens=1 if usage.get("output_tokens") else 0)
    message = message_body(msg_id, model, resp, start_usage, signature)
    message.update(content=[], stop_reason=None)  # keys keep their place
    head = _event(b"message_start", {"type": "message_start", "message": message})
    events: list[bytes] = []
    pending = b""  # non-token events waiting for the next token event
    index = 0

    def block(start: dict[str, Any], kind: str, field: str, pieces: Sequence[str], closing: bytes = b"") -> None:
        nonlocal pending, index, head
        opening = _event(
            b"content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        )
        if index == 0:
            head += opening + _PING
        else:
            pending += opening
        for piece in pieces:
            events.append(
                pending
                + _event(
                    b"content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": {"type": kind, field: piece}},
                )
            )
            pending = b""
        pending += closing + _event(b"content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1

    if resp.reasoning is not None:
        sig = _event(
            b"content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "signature_delta", "signature": signature or _signature(resp.reasoning)},
            },
        )
        block(
            {"type": "thinking", "thinking": "", "signature": ""},
            "thinking_delta",
            "thinking",
            splitter(resp.reasoning),
            sig,
        )
    if resp.content:
        block({"type": "text", "text": ""}, "text_delta", "text", splitter(resp.content))
    for tc in resp.tool_calls:
        block(
            {"type": "tool_use", "id": tc.id, "name": tc.name, "input": {}},
            "input_json_delta",
            "partial_json",
            splitter(tc.arguments_raw),
        )
    tail = (
        pending
        + _event(
            b"message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason_for(resp.finish_reason), "stop_sequence": None},
                "usage": {"output_tokens": usage.get("output_tokens", 0)},
            },
        )
        + _STOP
    )
    return head, events, tail


def message_id(completion_id: str) -> str:
    """The Messages `id` of a turn: its chat completion id with the `msg_` prefix
    (`chatcmpl-replay-ab-3` -> `msg_replay-ab-3`)."""
    return "msg_" + completion_id.removeprefix("chatcmpl-")


def recorded_usage(usage: UsageLike | None) -> dict[str, int]:
    """The Messages usage object of recorded usage (`usage_object`; all 0 when none was
    recorded)."""
    if usage is None:
        return usage_object(None, None, None)
    return usage_object(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.cache_creation_tokens)


def render_body(answer: RecordedAnswer, *, completion_id: str, model: str, created: int) -> bytes:
    """The non-streamed `message` object of a recorded answer (`message_body`), its id
    `message_id(completion_id)`; `created` is not part of this API's shapes."""
    usage = recorded_usage(answer.usage)
    return orjson.dumps(message_body(message_id(completion_id), model, answer.response, usage))


def render_stream(
    answer: RecordedAnswer,
    *,
    completion_id: str,
    model: str,
    created: int,
    splitter: Callable[[str], list[str]],
) -> RenderedStream:
    """The event stream of a recorded answer (`stream_events`): the head rides with the
    first token event, the tail with the last."""
    head, events, tail = stream_events(
        message_id(completion_id), model, answer.response, recorded_usage(answer.usage), splitter
    )
    return RenderedStream(head=head, events=events, tail=tail)


def error_body(status: int, code: str, message: str) -> bytes:
    """A Messages error body `{"type": "error", "error": {"type", "message"}}`: the
    type of the status (400 invalid_request_error, 401 authentication_error, 404
    not_found_error, else api_error), the message prefixed with `code: `."""
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}.get(status, "api_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": f"{code}: {message}"}})


# -- the stream parser ----------------------------------------------------------------------


class AnthropicMessagesParser(BodyReader):
    """Parser of one `/v1/messages` response, streamed or not (rules in the module doc).

        parser = AnthropicMessagesParser(stream=True)
        parser.feed(read_bytes, t_ns, sample)    # once per transport read, t_ns from run t0
        parser.finish(sample)                    # at end of body (status < 400)

    `text` is the generated text (text blocks) so far; `reasoning` the thinking text;
    `blocks` the assembled content blocks (text, thinking with signature, tool_use with
    its `partial_json` joined in `input_json`), `message` the last message object seen
    (message_start's, or the whole body) and `usage` the merged usage object.
    """

    __slots__ = (
        "_stopped",
        "_events",
        "_stop_reason",
        "usage",
        "blocks",
        "message",
    )

    def __init__(self, stream: bool = True) -> None:
        super().__init__(stream)
        self._stopped = False  # saw message_stop
        self._events: list[int] | None = None
        self._stop_reason: Any = None
        self.usage: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.message: dict[str, Any] | None = None

    @property
    def ended(self) -> bool:
        """True once `message_stop` arrived (the stream is complete)."""
        return self._stopped

    @property
    def stop_reason(self) -> Any:
        """The last non-null `stop_reason` sent (None so far)."""
        return self._stop_reason

    @property
    def text(self) -> str:
        """The text blocks' text so far, in block order."""
        return "".join(b.get("text", "") for _, b in sorted(self.blocks.items()) if b.get("type") == "text")

    @property
    def reasoning(self) -> str:
        """The thinking blocks' text so far, in block order."""
        return "".join(b.get("thinking", "") for _, b in sorted(self.blocks.items()) if b.get("type") == "thinking")

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage = {**(self.usage or {}), **{k: v for k, v in usage.items() if v is not None}}

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """Parse one transport read that arrived at `t_ns` (ns from run t0)."""
        for event, payload in self._read(data):
            if self._stopped:
                continue
            obj = self._object(payload)
            if obj is None:
                continue
            kind = obj.get("type")
            if kind == "content_block_delta":
                delta = obj.get("delta")
                if (  # the hot path: text for a text block already started, as _delta does it
                    type(delta) is dict
                    and delta.get("type") == "text_delta"
                    and type(text := delta.get("text")) is str
                    and text
                    and type(block := self.blocks.get(obj.get("index"))) is dict  # type: ignore[arg-type]
                    and block.get("type") == "text"
                ):
                    block["text"] = block.get("text", "") + text
                    self._chars += len(text)
                    is_text = True
                elif self._delta(obj):
                    is_text = delta["type"] == "text_delta"  # type: ignore[index]
                else:
                    continue
                if self._n_events == 0:
                    sample.first_token_ns = t_ns
                    if sample.token_event_ns is None:
                        sample.token_event_ns = []
                    self._events = sample.token_event_ns
                self._events.append(t_ns)  # type: ignore[union-attr]
                self._n_events += 1
                sample.n_token_events += 1
                if is_text and sample.first_content_ns is None:
                    sample.first_content_ns = t_ns
            elif kind == "content_block_start":
                block = obj.get("content_block")
                index = obj.get("index")
                if isinstance(block, dict) and type(index) is int:
                    self.blocks[index] = dict(block)
            elif kind == "message_start":
                message = obj.get("message")
                if isinstance(message, dict):
                    self.message = message
                    if sample.model is None and type(message.get("model")) is str:
                        sample.model = message["model"]
                    self._merge_usage(message.get("usage"))
            elif kind == "message_delta":
                delta = obj.get("delta")
                if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                    self._stop_reason = delta["stop_reason"]
                self._merge_usage(obj.get("usage"))
            elif kind == "message_stop":
                self._stopped = True
            elif kind == "error" or event == "error":
                err = obj.get("error")
                msg = err.get("message") if isinstance(err, dict) else None
                self._fail(f"error event in stream: {msg if isinstance(msg, str) else short(payload)}")

    def _delta(self, obj: dict[str, Any]) -> bool:
        """Apply one content_block_delta to its block; True when it carries generated text."""
        delta = obj.get("delta")
        if type(delta) is not dict:
            return False
        block = self.blocks.setdefault(obj.get("index"), {})  # type: ignore[arg-type]
        kind = delta.get("type")
        if kind == "text_delta":
            field, value = "text", delta.get("text")
        elif kind == "thinking_delta":
            field, value = "thinking", delta.get("thinking")
        elif kind == "input_json_delta":
            field, value = "input_json", delta.get("partial_json")
        elif kind == "signature_delta":
            if type(delta.get("signature")) is str:
                block["signature"] = block.get("signature", "") + delta["signature"]
            return False
        else:
            return False
        if type(value) is not str or not value:
            return False
        if "type" not in block:  # a delta without its content_block_start: the type it implies
            block["type"] = "tool_use" if field == "input_json" else field
        block[field] = block.get(field, "") + value
        self._chars += len(value)
        return True

    def _apply_usage(self, sample: Sample) -> None:
        usage = self.usage
        if not usage:
            return
        sample.output_tokens = token_count(usage.get("output_tokens"))
        sample.usage_present = sample.output_tokens is not None
        parts = [
            token_count(usage.get(k))
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ]
        sample.prompt_tokens = None if parts[0] is None else sum(p or 0 for p in parts)
        sample.cached_tokens = parts[1]
        details = usage.get("output_tokens_details")
        if isinstance(details, dict):
            sample.reasoning_tokens = token_count(details.get("thinking_tokens"))

    def _ending(self, sample: Sample) -> str | None:
        reason = self._stop_reason
        sample.finish_reason = reason if reason is None or type(reason) is str else short(orjson.dumps(reason))
        cls = stop_class(reason)
        sample.finish_class = cls
        sample.output_chars = self._chars
        if cls is not None and FINISH_FAILS[cls]:
            return finish_error(reason, cls)
        return None

    def _finish_stream(self, sample: Sample) -> None:
        self._close_sse(self._stopped)
        self._apply_usage(sample)
        self._close(sample, complete=self._stopped, failed=self._ending(sample), end="message_stop")

    def _finish_whole(self, sample: Sample) -> None:
        obj = whole_object(self._whole(), sample, error_of=_body_error)
        if obj is None:
            return
        self.message = obj
        self._merge_usage(obj.get("usage"))
        self._apply_usage(sample)
        self._stop_reason = obj.get("stop_reason")
        content = obj.get("content")
        for i, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                continue
            self.blocks[i] = dict(block)
            kind = block.get("type")
            value = block.get("text") if kind == "text" else block.get("thinking") if kind == "thinking" else None
            if kind == "tool_use":
                value = str(block.get("name") or "") + orjson.dumps(block.get("input", {})).decode()
            if type(value) is str:
                self._chars += len(value)
        close_whole(sample, self._ending(sample), self._chars > 0)


def _body_error(obj: dict[str, Any]) -> Any:
    """The error a Messages body states: `{"type": "error", "error": {...}}` (or any
    `error` field), else None."""
    if obj.get("type") == "error":
        return obj.get("error") or obj
    return obj.get("error")
