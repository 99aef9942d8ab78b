"""The OpenAI Responses wire API (`POST /v1/responses`): the one place that knows its
request items, its response object, its streamed event sequence and how to read it.

    messages = chat_messages(request_body)            # Responses request -> chat messages
    body = response_object(output, response_id=..., model=..., created=...)
    groups, tail = stream_events(output, pieces, response_id=..., model=..., created=...)
    parser = OpenAIResponsesParser(stream=True)       # engine / recorder side
    parser.feed(read_bytes, t_ns, sample); parser.finish(sample)

Sources: the OpenAI API reference for Responses (create, streaming events), the
openai-python SDK's `openai/types/responses/*` (field names, which are required) and
openai/codex's client (`codex-rs/core/src/client.rs`, `codex-api` SSE reader: the
request it sends and the events it reads).

Request -> chat messages (`chat_messages`), the shape the replay store keys on:
- `instructions` (a string) -> a first message of role "system".
- `input` a string -> one message of role "user".
- `input` a list of items, in order:
  `message` items (also items with a `role` and no `type`), roles user, assistant,
  system, developer: content a string, or parts `input_text` / `output_text` (text
  parts), `input_image` (an `image_url` part with its `image_url` or `file_id`),
  `refusal`; other parts are kept as they are (flatten_content skips them);
  `function_call`, `custom_tool_call` (and `local_shell_call`) -> a tool call of the
  assistant message; `reasoning` -> the assistant message's `reasoning_content` (its
  summary texts, else its content texts, joined with "\\n");
  `function_call_output`, `custom_tool_call_output` (and `local_shell_call_output`)
  -> a message of role "tool" with the `call_id` as `tool_call_id`;
  consecutive assistant-side items (reasoning, an assistant message, calls) form ONE
  assistant message: one model turn. Other item types (item_reference, web search
  calls, compaction) carry no chat message and are skipped.
Errors: ValueError naming the field, e.g. `input[3].content[0].text: expected a string
(got int)`.

Response written back (`response_object`, `stream_events`), from a `ResponseOutput`:
output items in the order reasoning (`summary: [{"type": "summary_text", "text"}]`),
message (`output_text` part), then one `function_call` (or `custom_tool_call`) per
call; `status` from the recorded finish: "length" -> "incomplete" with
`incomplete_details.reason` "max_output_tokens", "content_filter" -> "incomplete"
(reason "content_filter"), "aborted"/"error" -> "failed" with an `error` object, else
"completed". Usage: `input_tokens`, `input_tokens_details.cached_tokens`,
`output_tokens`, `output_tokens_details.reasoning_tokens`, `total_tokens` (input +
output when not recorded); a count that was not recorded is written as 0 only where
the SDK requires the field and the usage object exists, and the usage is null when
neither input nor output tokens were recorded.
The stream: `event: <type>` + `data: <json>` per event, `sequence_number` from 0:
`response.created`, `response.in_progress`, then per output item
`response.output_item.added`, for reasoning `response.reasoning_summary_part.added`,
`response.reasoning_summary_text.delta`..., `.done`, `response.reasoning_summary_part.done`;
for a message `response.content_part.added`, `response.output_text.delta`...,
`response.output_text.done`, `response.content_part.done`; for a function call
`response.function_call_arguments.delta`..., `.done` (custom tools:
`response.custom_tool_call_input.delta`/`.done`); `response.output_item.done`; then the
terminal event `response.completed` (or `response.incomplete`, `response.failed`) with
the whole response and usage. Token events (one per `pieces` piece): each delta, and
each call's `response.output_item.added` (it carries the generated call name), which
makes as many token events as the chat rendering of the same turn.

Stream reading (`OpenAIResponsesParser`), the counterpart of OpenAIChatParser:
- Token event: an event whose non-empty `delta` is generated output:
  `response.output_text.delta` (content; TTFC), `response.refusal.delta` (refusal),
  `response.reasoning_summary_text.delta`, `response.reasoning_text.delta` (reasoning),
  `response.function_call_arguments.delta`, `response.custom_tool_call_input.delta`
  (call arguments), and a `response.output_item.added` whose item is a function or
  custom tool call with a non-empty `name`. Events in one read share its stamp; the
  per-event token count is not stated, so `token_event_tokens` stays None.
- Usage: the terminal event's `response.usage` (`input_tokens` -> prompt_tokens,
  `output_tokens` -> output_tokens, `input_tokens_details.cached_tokens`,
  `output_tokens_details.reasoning_tokens`); none -> all None, usage_present False.
- Model: `response.model` of the first event naming one.
- Finish: `finish_reason` is the terminal `status` ("completed", "failed", "cancelled")
  or, for "incomplete", `incomplete_details.reason` ("max_output_tokens",
  "content_filter"); its class: completed -> "tool_calls" when the output holds a
  call, else "stop"; max_output_tokens -> "length"; content_filter -> "content_filter";
  failed -> "error"; cancelled -> "cancelled"; another status or reason -> its
  benchmaker/apis/generated.py class.
- Outcome at finish(), first match wins: protocol_error for a data line that is not a
  JSON object, an `error` event (`type: "error"` or `event: error`), or a body that
  ended without a terminal event (`response.completed` / `.incomplete` / `.failed`);
  aborted for a failing class (failed: the `error.message` named); empty_output for a
  complete response without a token event; else ok. A non-streamed body (a response
  object) is read at finish() by the same rules over its `output` items.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from benchmaker.apis.generated import (
    FINISH_FAILS,
    BodyReader,
    close_whole,
    error_text,
    finish_class,
    finish_error,
    token_count,
    whole_object,
)
from benchmaker.apis.openai_chat import tool_items
from benchmaker.apis.recorded import RecordedAnswer, RenderedStream
from benchmaker.engine.records import Sample

__all__ = [
    "OpenAIResponsesParser",
    "ResponseCall",
    "ResponseOutput",
    "chat_messages",
    "chat_tools",
    "input_items",
    "recorded_output",
    "render_body",
    "render_stream",
    "response_id",
    "response_object",
    "response_output",
    "response_usage",
    "stream_events",
]


# -- request items -> chat messages ----------------------------------------------------

_ASSISTANT_CALLS = {"function_call": "arguments", "custom_tool_call": "input"}
_CALL_OUTPUTS = frozenset(("function_call_output", "custom_tool_call_output", "local_shell_call_output"))
_ROLES = frozenset(("user", "assistant", "system", "developer"))


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _text_of(value: Any, where: str) -> str:
    if type(value) is not str:
        raise ValueError(f"{where}: expected a string (got {_type_name(value)})")
    return value


def _parts(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A message item's content as chat content: a string as is, parts as chat parts."""
    if type(content) is str:
        return content
    if type(content) is not list:
        raise ValueError(f"{where}: expected a string or a list of parts (got {_type_name(content)})")
    out: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        if type(part) is not dict:
            raise ValueError(f"{at}: expected an object (got {_type_name(part)})")
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            out.append({"type": "text", "text": _text_of(part.get("text"), f"{at}.text")})
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id")
            image: dict[str, Any] = {"url": url}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            out.append({"type": "image_url", "image_url": image})
        elif kind == "refusal":
            out.append({"type": "refusal", "refusal": part.get("refusal")})
        else:
            out.append(part)
    return out


def _output_text(output: Any) -> str:
    """A call output (`output`: a string, or a list of content parts) as text."""
    if type(output) is str:
        return output
    if type(output) is list:
        return "\n".join(p["text"] for p in output if type(p) is dict and type(p.get("text")) is str)
    if output is None:
        return ""
    return orjson.dumps(output).decode()


def _reasoning_text(item: dict[str, Any]) -> str | None:
    for key in ("summary", "content"):
        parts = item.get(key)
        if type(parts) is list:
            texts = [p["text"] for p in parts if type(p) is dict and type(p.get("text")) is str]
            if texts:
                return "\n".join(texts)
    return None


def chat_messages(req: Any) -> list[dict[str, Any]]:
    """The chat-completions messages a `/v1/responses` request body stands for (rules in
    the module doc): [{"role", "content", ...}], tool calls as chat `tool_calls`
    ({"id": call_id, "type": "function", "function": {"name", "arguments"}}), reasoning
    as `reasoning_content`, call outputs as role "tool" messages. Raises ValueError
    naming the field (`input[2].call_id: expected a string (got null)`)."""
    if type(req) is not dict:
        raise ValueError(f"request body must be a JSON object (got {_type_name(req)})")
    messages: list[dict[str, Any]] = []
    instructions = req.get("instructions")
    if instructions is not None:
        messages.append({"role": "system", "content": _text_of(instructions, "instructions")})
    items = req.get("input")
    if items is None:
        raise ValueError("input: missing (a string or a list of input items is required)")
    if type(items) is str:
        messages.append({"role": "user", "content": items})
        return messages
    if type(items) is not list:
        raise ValueError(f"input: expected a string or a list of items (got {_type_name(items)})")
    turn: dict[str, Any] | None = None  # the assistant message being built

    def assistant() -> dict[str, Any]:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": None}
            messages.append(turn)
        return turn

    for i, item in enumerate(items):
        at = f"input[{i}]"
        if type(item) is not dict:
            raise ValueError(f"{at}: expected an object (got {_type_name(item)})")
        kind = item.get("type")
        if kind == "message" or (kind is None and "role" in item):
            role = item.get("role")
            if role not in _ROLES:
                raise ValueError(f"{at}.role: expected user, assistant, system or developer (got {role!r})")
            content = _parts(item.get("content"), f"{at}.content")
            if role == "assistant":
                msg = assistant()
                text = (
                    content
                    if isinstance(content, str)
                    else "\n".join(p["text"] for p in content if p.get("type") == "text")
                )
                msg["content"] = text if msg["content"] is None else msg["content"] + text
                continue
            turn = None
            messages.append({"role": role, "content": content})
        elif kind in _ASSISTANT_CALLS or kind == "local_shell_call":
            call_id = item.get("call_id")
            if type(call_id) is not str:
                call_id = item.get("id")
            _text_of(call_id, f"{at}.call_id")
            if kind == "local_shell_call":
                name, args = "local_shell", orjson.dumps(item.get("action")).decode()
            else:
                name = _text_of(item.get("name"), f"{at}.name")
                args = _text_of(item.get(_ASSISTANT_CALLS[kind]), f"{at}.{_ASSISTANT_CALLS[kind]}")
            assistant().setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            )
        elif kind == "reasoning":
            thought = _reasoning_text(item)
            msg = assistant()
            if thought is not None:
                msg["reasoning_content"] = (
                    thought if "reasoning_content" not in msg else msg["reasoning_content"] + "\n" + thought
                )
        elif kind in _CALL_OUTPUTS:
            turn = None
            call_id = _text_of(item.get("call_id"), f"{at}.call_id")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _output_text(item.get("output"))})
        # other item types carry no chat message (module doc)
    return messages


def chat_tools(req: Any) -> list[dict[str, Any]] | None:
    """The tool definitions of a Responses request body (`req`, parsed JSON) in chat
    completions shape, in order: a function tool `{"type": "function", "name",
    "description", "parameters", "strict"}` becomes `{"type": "function", "function":
    {...the same fields but type}}`, a custom tool `{"type": "custom", "name", ...}`
    becomes `{"type": "custom", "custom": {...}}` (openai-python `FunctionToolParam`,
    `CustomToolParam`, `ChatCompletionToolUnionParam`); hosted tools (web_search,
    file_search, ...), which chat completions has no shape for, are left out. None when
    no tool is left."""
    out = []
    for tool in tool_items(req):
        if tool.get("type") in ("function", "custom") and isinstance(tool.get("name"), str):
            kind = tool["type"]
            out.append({"type": kind, kind: {k: v for k, v in tool.items() if k != "type"}})
    return out or None


def input_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Responses `input` items of chat messages, the inverse of chat_messages:
    a message -> {"type": "message", "role", "content"} (content as given: a string or
    parts; chat `text` parts become `input_text`, or `output_text` for the assistant;
    an assistant's `tool_calls` -> `function_call` items after its message, its
    `reasoning_content` -> a `reasoning` item before it; a role "tool" message -> a
    `function_call_output`. Raises ValueError naming `messages[i]` for a message that is
    not an object."""
    items: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        if type(msg) is not dict:
            raise ValueError(f"messages[{i}]: expected an object (got {_type_name(msg)})")
        role = msg.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": msg.get("tool_call_id"),
                    "output": _output_text(msg.get("content")),
                }
            )
            continue
        content = msg.get("content")
        if type(content) is list:
            kind = "output_text" if role == "assistant" else "input_text"
            content = [
                {"type": kind, "text": p["text"]} if type(p) is dict and p.get("type") == "text" else p for p in content
            ]
        if role == "assistant":
            reasoning = msg.get("reasoning_content")
            if type(reasoning) is str and reasoning:
                items.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]})
            if content:
                items.append({"type": "message", "role": "assistant", "content": content})
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": fn.get("name"),
                        "arguments": fn.get("arguments") or "",
                    }
                )
            continue
        items.append({"type": "message", "role": role, "content": content if content is not None else ""})
    return items


# -- the response written back ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResponseCall:
    """One call the model made: `call_id`, the tool `name`, the exact argument string
    (`arguments`; a custom tool's free-form `input`), `custom` True for a
    `custom_tool_call`."""

    call_id: str
    name: str
    arguments: str
    custom: bool = False


@dataclass(frozen=True, slots=True)
class ResponseOutput:
    """What one model turn produced, in wire-neutral terms: `content` (None: no message
    item), `reasoning` (None: no reasoning item), `calls`, the chat-style
    `finish_reason` (stop, tool_calls, length, content_filter, error, aborted),
    `error` (the message of a failed turn) and token counts (None: not recorded)."""

    content: str | None = None
    reasoning: str | None = None
    calls: tuple[ResponseCall, ...] = ()
    finish_reason: str = "stop"
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    total_tokens: int | None = None


def response_usage(out: ResponseOutput) -> dict[str, Any] | None:
    """The Responses `usage` object of `out` (module doc), None when neither input nor
    output tokens were recorded."""
    if out.input_tokens is None and out.output_tokens is None:
        return None
    inp, outp = out.input_tokens or 0, out.output_tokens or 0
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": out.cached_tokens or 0},
        "output_tokens": outp,
        "output_tokens_details": {"reasoning_tokens": out.reasoning_tokens or 0},
        "total_tokens": out.total_tokens if out.total_tokens is not None else inp + outp,
    }


def _status(out: ResponseOutput) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """(status, incomplete_details, error) of a recorded finish."""
    if out.finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}, None
    if out.finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}, None
    if out.finish_reason in ("aborted", "error"):
        message = out.error or f"the recorded call ended with {out.finish_reason}"
        return "failed", None, {"code": "server_error", "message": message}
    return "completed", None, None


def _items(out: ResponseOutput, response_id: str) -> list[dict[str, Any]]:
    """The finished output items of `out` (ids derived from `response_id`)."""
    tag = response_id.removeprefix("resp_")
    items: list[dict[str, Any]] = []
    if out.reasoning is not None:
        items.append(
            {
                "id": f"rs_{tag}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": out.reasoning}] if out.reasoning else [],
            }
        )
    if out.content is not None or not out.calls:
        items.append(
            {
                "id": f"msg_{tag}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": out.content or "", "annotations": [], "logprobs": []}],
            }
        )
    for k, call in enumerate(out.calls):
        prefix, kind, field = (
            ("ctc", "custom_tool_call", "input") if call.custom else ("fc", "function_call", "arguments")
        )
        items.append(
            {
                "id": f"{prefix}_{tag}_{k}",
                "type": kind,
                "status": "completed",
                "call_id": call.call_id,
                "name": call.name,
                field: call.arguments,
            }
        )
    return items


def _response(
    out: ResponseOutput,
    response_id: str,
    model: str,
    created: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    _, incomplete, error = _status(out)
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": error if status == "failed" else None,
        "incomplete_details": incomplete if status == "incomplete" else None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": None,
        "store": False,
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    }


def response_object(out: ResponseOutput, *, response_id: str, model: str, created: int) -> dict[str, Any]:
    """The non-streamed `response` object of `out` (module doc); `created` in unix s."""
    status = _status(out)[0]
    return _response(out, response_id, model, created, status, _items(out, response_id), response_usage(out))


def _event(kind: str, seq: int, body: dict[str, Any]) -> bytes:
    return (
        b"event: "
        + kind.encode()
        + b"\ndata: "
        + orjson.dumps({"type": kind, "sequence_number": seq, **body})
        + b"\n\n"
    )


def stream_events(
    out: ResponseOutput,
    split: Callable[[str], list[str]],
    *,
    response_id: str,
    model: str,
    created: int,
) -> tuple[list[bytes], bytes]:
    """The streamed events of `out` (module doc) as (groups, tail): `groups[i]` the
    bytes of token event i with the non-token events before it, `tail` the events after
    the last token event (all of them when there is none). `split(text)` gives a text's
    pieces, one delta event each; the token events are len(split(reasoning)) +
    len(split(content)) + per call 1 + len(split(arguments))."""
    seq = 0
    pending: list[bytes] = []
    groups: list[bytes] = []

    def emit(kind: str, body: dict[str, Any], token: bool = False) -> None:
        nonlocal seq
        pending.append(_event(kind, seq, body))
        seq += 1
        if token:
            groups.append(b"".join(pending))
            pending.clear()

    status = _status(out)[0]
    shell = _response(out, response_id, model, created, "in_progress", [], None)
    emit("response.created", {"response": shell})
    emit("response.in_progress", {"response": shell})
    items = _items(out, response_id)
    for index, item in enumerate(items):
        kind, item_id = item["type"], item["id"]
        ids = {"item_id": item_id, "output_index": index}
        if kind == "reasoning":
            emit("response.output_item.added", {"output_index": index, "item": {**item, "summary": []}})
            if out.reasoning:
                part = {"type": "summary_text", "text": ""}
                emit("response.reasoning_summary_part.added", {**ids, "summary_index": 0, "part": part})
                for piece in split(out.reasoning):
                    emit(
                        "response.reasoning_summary_text.delta", {**ids, "summary_index": 0, "delta": piece}, token=True
                    )
                emit("response.reasoning_summary_text.done", {**ids, "summary_index": 0, "text": out.reasoning})
                emit(
                    "response.reasoning_summary_part.done",
                    {**ids, "summary_index": 0, "part": {"type": "summary_text", "text": out.reasoning}},
                )
        elif kind == "message":
            text = out.content or ""
            emit(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "content": []}},
            )
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit("response.content_part.added", {**ids, "content_index": 0, "part": empty})
            for piece in split(text):
                emit(
                    "response.output_text.delta",
                    {**ids, "content_index": 0, "delta": piece, "logprobs": []},
                    token=True,
                )
            emit("response.output_text.done", {**ids, "content_index": 0, "text": text, "logprobs": []})
            emit("response.content_part.done", {**ids, "content_index": 0, "part": item["content"][0]})
        else:
            custom = kind == "custom_tool_call"
            field_name = "input" if custom else "arguments"
            args = item[field_name]
            emit(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", field_name: ""}},
                token=True,
            )
            delta_kind = "response.custom_tool_call_input" if custom else "response.function_call_arguments"
            for piece in split(args):
                emit(delta_kind + ".delta", {**ids, "delta": piece}, token=True)
            done = {**ids, field_name: args}
            if not custom:
                done["name"] = item["name"]
            emit(delta_kind + ".done", done)
        emit("response.output_item.done", {"output_index": index, "item": item})
    terminal = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}[
        status
    ]
    emit(terminal, {"response": _response(out, response_id, model, created, status, items, response_usage(out))})
    return groups, b"".join(pending)


def response_id(completion_id: str) -> str:
    """The Responses id of a turn: `resp_` + its chat completion id's tail without dashes
    (`chatcmpl-replay-ab-3` -> `resp_replayab3`)."""
    return "resp_" + completion_id.removeprefix("chatcmpl-").replace("-", "")


def recorded_output(answer: RecordedAnswer) -> ResponseOutput:
    """A recorded answer as a ResponseOutput: its texts, calls (a call recorded from a
    Responses `custom_tool_call` stays one), finish, error and usage."""
    resp, usage = answer.response, answer.usage
    calls = tuple(ResponseCall(tc.id, tc.name, tc.arguments_raw, tc.type == "custom") for tc in resp.tool_calls)
    return ResponseOutput(
        content=resp.content,
        reasoning=resp.reasoning,
        calls=calls,
        finish_reason=resp.finish_reason,
        error=answer.error,
        input_tokens=usage.prompt_tokens if usage else None,
        output_tokens=usage.completion_tokens if usage else None,
        cached_tokens=usage.cached_tokens if usage else None,
        reasoning_tokens=usage.reasoning_tokens if usage else None,
        total_tokens=usage.total_tokens if usage else None,
    )


def render_body(answer: RecordedAnswer, *, completion_id: str, model: str, created: int) -> bytes:
    """The non-streamed `response` object of a recorded answer (`response_object`), its
    id `response_id(completion_id)`; `created` in unix s."""
    out = recorded_output(answer)
    return orjson.dumps(response_object(out, response_id=response_id(completion_id), model=model, created=created))


def render_stream(
    answer: RecordedAnswer,
    *,
    completion_id: str,
    model: str,
    created: int,
    splitter: Callable[[str], list[str]],
) -> RenderedStream:
    """The event stream of a recorded answer (`stream_events`): no head (the first token
    event carries the events before it), the usage on the terminal event in the tail."""
    events, tail = stream_events(
        recorded_output(answer), splitter, response_id=response_id(completion_id), model=model, created=created
    )
    return RenderedStream(head=b"", events=events, tail=tail)


# -- reading a response ---------------------------------------------------------------

_REASONING_DELTAS = frozenset(("response.reasoning_summary_text.delta", "response.reasoning_text.delta"))
_CALL_DELTAS = frozenset(("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"))
_TERMINAL = frozenset(("response.completed", "response.incomplete", "response.failed"))
_CALL_ITEMS = frozenset(("function_call", "custom_tool_call"))
_STATUS_CLASS = {"completed": "stop", "failed": "error", "cancelled": "cancelled"}
_REASON_CLASS = {"max_output_tokens": "length", "content_filter": "content_filter", "max_tokens": "length"}


def apply_usage(usage: Any, sample: Sample) -> None:
    """Copy a Responses `usage` object onto the sample (module doc). Fields that are
    absent or not non-negative ints stay None; usage_present is True only when
    `output_tokens` is such an int."""
    if type(usage) is not dict:
        return
    sample.prompt_tokens = token_count(usage.get("input_tokens"))
    sample.output_tokens = token_count(usage.get("output_tokens"))
    sample.usage_present = sample.output_tokens is not None
    details = usage.get("input_tokens_details")
    sample.cached_tokens = token_count(details.get("cached_tokens")) if type(details) is dict else None
    details = usage.get("output_tokens_details")
    sample.reasoning_tokens = token_count(details.get("reasoning_tokens")) if type(details) is dict else None


def response_output(resp: dict[str, Any], streamed_items: list[dict[str, Any]] | None = None) -> ResponseOutput:
    """A `response` object (a body, a terminal event's response, or one a log kept) as a
    ResponseOutput: its `output` items (`streamed_items` when `output` is empty), back in
    chat terms: message texts joined (a refusal part's text included), reasoning from
    summary texts, else content texts, joined with "\n"; function and custom tool calls
    in order (`call_id`, else `id`, else `call_<k>`); finish: incomplete ->
    "content_filter" or "length", failed / cancelled -> "error", completed -> "tool_calls"
    when there is a call, else "stop"; `error.message`; usage counts (None where absent).
    Other item types (web search calls and the like) carry nothing here."""
    output = resp.get("output")
    items = output if type(output) is list and output else (streamed_items or [])
    content: str | None = None
    reasoning: str | None = None
    calls: list[ResponseCall] = []
    for item in items:
        if type(item) is not dict:
            continue
        kind = item.get("type")
        if kind == "message":
            texts = [
                p.get("text") if p.get("type") != "refusal" else p.get("refusal")
                for p in item.get("content") or ()
                if type(p) is dict
            ]
            text = "".join(t for t in texts if type(t) is str)
            content = text if content is None else content + text
        elif kind == "reasoning":
            thought = _reasoning_text(item)
            if thought is not None:
                reasoning = thought if reasoning is None else reasoning + "\n" + thought
        elif kind in _CALL_ITEMS:
            custom = kind == "custom_tool_call"
            args = item.get("input" if custom else "arguments")
            calls.append(
                ResponseCall(
                    str(item.get("call_id") or item.get("id") or f"call_{len(calls)}"),
                    str(item.get("name") or ""),
                    args if type(args) is str else "",
                    custom,
                )
            )
    status = resp.get("status")
    details = resp.get("incomplete_details")
    reason = details.get("reason") if type(details) is dict else None
    if status == "incomplete":
        finish = "content_filter" if reason == "content_filter" else "length"
    elif status in ("failed", "cancelled"):
        finish = "error"
    else:
        finish = "tool_calls" if calls else "stop"
    raw_usage = resp.get("usage")
    usage = raw_usage if type(raw_usage) is dict else {}
    idetails = usage.get("input_tokens_details")
    odetails = usage.get("output_tokens_details")
    err = resp.get("error")
    return ResponseOutput(
        content=content,
        reasoning=reasoning,
        calls=tuple(calls),
        finish_reason=finish,
        error=error_text(err) if err is not None else None,
        input_tokens=token_count(usage.get("input_tokens")),
        output_tokens=token_count(usage.get("output_tokens")),
        cached_tokens=token_count(idetails.get("cached_tokens")) if type(idetails) is dict else None,
        reasoning_tokens=token_count(odetails.get("reasoning_tokens")) if type(odetails) is dict else None,
        total_tokens=token_count(usage.get("total_tokens")),
    )


class OpenAIResponsesParser(BodyReader):
    """Parser of one `/v1/responses` response, streamed or not (rules in the module
    doc). `text` is the generated message text so far; `response` the terminal
    event's (or the body's) response object, None before it; `usage` its usage."""

    __slots__ = (
        "_parts",
        "_response",
        "_refusal",
        "_calls",
        "_items",
    )

    def __init__(self, stream: bool = True) -> None:
        super().__init__(stream)
        self._parts: list[str] = []
        self._response: dict[str, Any] | None = None  # the terminal event's response
        self._refusal = False
        self._calls = False  # a call item was output
        self._items: list[dict[str, Any]] = []  # response.output_item.done items, in order

    @property
    def text(self) -> str:
        """Generated message text so far (reasoning, refusals and calls excluded)."""
        return "".join(self._parts)

    @property
    def response(self) -> dict[str, Any] | None:
        """The final response object (terminal event or body), None before it."""
        return self._response

    @property
    def usage(self) -> Any:
        """The final response's `usage` (None when absent)."""
        return None if self._response is None else self._response.get("usage")

    @property
    def ended(self) -> bool:
        """True once the terminal event (`response.completed`, `.incomplete`, `.failed`)
        or the whole body was read."""
        return self._response is not None

    def output(self) -> ResponseOutput | None:
        """What the response generated, once its terminal event (or whole body) was
        read, else None: `response_output` of the final response, with the
        `response.output_item.done` items seen standing in for an empty `output`."""
        if self._response is None:
            return None
        return response_output(self._response, self._items)

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """Parse one transport read that arrived at `t_ns` (ns from run t0)."""
        for event, payload in self._read(data):
            if payload == b"[DONE]" or not payload:  # not Responses events; some proxies add them
                continue
            obj = self._object(payload)
            if obj is None:
                continue
            kind = obj.get("type") or event
            delta = obj.get("delta")
            if type(delta) is str and kind != "error":  # the deltas: the hot path
                if not delta:
                    continue
                if kind == "response.output_text.delta":
                    self._parts.append(delta)
                    if sample.first_content_ns is None:
                        sample.first_content_ns = t_ns
                elif kind == "response.refusal.delta":
                    self._refusal = True
                elif kind not in _REASONING_DELTAS and kind not in _CALL_DELTAS:
                    continue
                self._chars += len(delta)
            elif kind == "error" or event == "error":
                self._fail(f"error event in stream: {error_text(obj.get('error', obj))}")
                continue
            else:
                if kind == "response.output_item.done" and type(obj.get("item")) is dict:
                    self._items.append(obj["item"])
                resp = obj.get("response")
                if type(resp) is dict:
                    if sample.model is None and type(resp.get("model")) is str:
                        sample.model = resp["model"]
                    if kind in _TERMINAL:
                        self._response = resp
                if kind != "response.output_item.added" or not self._call_added(obj):
                    continue
            # a token event at this read's stamp
            if self._n_events == 0:
                sample.first_token_ns = t_ns
                sample.token_event_ns = [t_ns]
            else:
                sample.token_event_ns.append(t_ns)  # type: ignore[union-attr]
            self._n_events += 1
            sample.n_token_events += 1

    def _call_added(self, obj: dict[str, Any]) -> bool:
        """True when a `response.output_item.added` adds a call with a non-empty name
        (a token event); counts the name's characters."""
        item = obj.get("item")
        if type(item) is dict and item.get("type") in _CALL_ITEMS:
            self._calls = True
            name = item.get("name")
            if type(name) is str and name:
                self._chars += len(name)
                return True
        return False

    def _ending(self, resp: dict[str, Any], sample: Sample) -> str | None:
        """Set usage, finish_reason/class, refusal and output_chars from the final
        response object; return the error of a failing finish, else None."""
        apply_usage(resp.get("usage"), sample)
        status = resp.get("status")
        reason: Any = status
        if status == "incomplete":
            details = resp.get("incomplete_details")
            if type(details) is dict and details.get("reason") is not None:
                reason = details["reason"]
        if type(reason) is str:
            cls = _REASON_CLASS.get(reason) or _STATUS_CLASS.get(reason) or finish_class(reason)
            if cls == "stop" and self._calls:
                cls = "tool_calls"
        else:
            reason, cls = None, None
        sample.finish_reason = reason
        sample.finish_class = cls
        sample.refusal = self._refusal
        sample.output_chars = self._chars
        if cls is not None and FINISH_FAILS.get(cls, True):
            err = resp.get("error")
            detail = f": {error_text(err)}" if err is not None else ""
            return finish_error(reason, cls) + detail
        return None

    def _finish_stream(self, sample: Sample) -> None:
        self._close_sse(self._response is not None)
        resp = self._response
        self._close(
            sample,
            complete=resp is not None,
            failed=self._ending(resp, sample) if resp is not None else None,
            end="response.completed",
        )

    def _finish_whole(self, sample: Sample) -> None:
        obj = whole_object(self._whole(), sample, error_of=_body_error)
        if obj is None:
            return
        self._response = obj
        for item in obj.get("output") or ():
            if type(item) is not dict:
                continue
            kind = item.get("type")
            if kind in _CALL_ITEMS:
                self._calls = True
                for key in ("name", "arguments", "input"):
                    value = item.get(key)
                    if type(value) is str and value:
                        self._chars += len(value)
            elif kind == "reasoning":
                for key in ("summary", "content"):
                    for part in item.get(key) or ():
                        if type(part) is dict and type(part.get("text")) is str and part["text"]:
                            self._chars += len(part["text"])
            elif kind == "message":
                for part in item.get("content") or ():
                    if type(part) is not dict:
                        continue
                    if part.get("type") == "refusal" and part.get("refusal"):
                        self._refusal = True
                        self._chars += len(part["refusal"])
                    elif type(part.get("text")) is str and part["text"]:
                        self._parts.append(part["text"])
                        self._chars += len(part["text"])
        close_whole(sample, self._ending(obj, sample), self._chars > 0)


def _body_error(obj: dict[str, Any]) -> Any:
    """The error a response body states, unless it is a `failed` response (aborted, not
    a protocol error)."""
    return obj.get("error") if obj.get("status") != "failed" else None
