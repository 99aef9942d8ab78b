"""OpenHands software-agent-sdk (V1) event lists. Source: OpenHands/software-agent-sdk
openhands-sdk/openhands/sdk/event/ (llm_convertible/{system,message,action,
observation}.py, condenser.py) and openhands-sdk/openhands/sdk/context/view.py.

Every event is a JSON object with `kind` (the class name), `id` (a UUID string),
`timestamp` and `source` ("agent" | "user" | "environment"). A conversation's events
come as a JSON array, as JSONL (one event per line), or under `history` of an
evaluation output record (OpenHands/benchmarks `output.jsonl`, read by `openhands`).
What the LLM is sent, per event kind (each class's `to_llm_message`):
  - `SystemPromptEvent {system_prompt: {text}, dynamic_context?: {text}}` → the system
    prompt (the two text blocks joined with "\\n");
  - `MessageEvent {source, llm_message: {role, content: [parts], reasoning_content?},
    extended_content}` → a user prompt (source "user"), or an assistant turn without
    tool calls (source "agent", finish_reason stop);
  - `ActionEvent {thought: [parts], reasoning_content?, tool_call: {id, name,
    arguments (raw string)}, llm_response_id}` → the tool calls of one assistant turn:
    consecutive actions with the same `llm_response_id` are one model response (content
    = the thought text of the first, reasoning = its `reasoning_content`);
  - `ObservationEvent {tool_call_id, tool_name, observation: {content: [parts],
    is_error}}` → the tool result: the text parts, after the SDK's
    `Observation.ERROR_MESSAGE_HEADER` when `is_error` (a tool's own richer
    `to_llm_content`, e.g. the terminal's metadata, is not reproduced:
    `observation_text_from_content`); `AgentErrorEvent {error}` → an error result;
    `UserRejectObservation {rejection_reason}` → "Action rejected: <reason>";
  - `Condensation {forgotten_event_ids, summary, summary_offset}` → a ContextEdit (kind
    "condensation") on the next turn, by `View.from_events`: the forgotten events
    (cumulative) and the condensation itself leave the view, the summary of the latest
    condensation with one goes in as a user message (`CondensationSummaryEvent`) at
    `summary_offset` among the kept LLM-convertible events, and a model response with
    any forgotten action is dropped whole (batch atomicity);
  - a stored `CondensationSummaryEvent {summary}` is a user message with the summary;
    `CondensationRequest` leaves the view; every other kind (state updates, pauses,
    token events, ...) is counted under `event:<kind>`.
The SDK keeps no per-call usage or model name on these events, so turns have usage
None; the model comes from the evaluation record's metadata when there is one.
"""

from __future__ import annotations

from typing import Any

from replay.converters._common import FileContext, TrajectoryBuilder, parse_arguments, text_of
from replay.converters._edits import CondensedView
from replay.trajectory import Observation, Response, ToolCall

LLM_CONVERTIBLE = frozenset({
    "SystemPromptEvent", "MessageEvent", "ActionEvent", "ObservationEvent", "AgentErrorEvent",
    "UserRejectObservation", "CondensationSummaryEvent",
})
"""Kinds that take a place in the SDK's View (`LLMConvertibleEvent` subclasses)."""

KINDS = LLM_CONVERTIBLE | {"Condensation", "CondensationRequest", "ConversationStateUpdateEvent", "PauseEvent"}
"""Kinds that identify an SDK event list (format detection)."""

ERROR_MESSAGE_HEADER = "[An error occurred during execution.]\n"
"""openhands-sdk tool/schema.py `Observation.ERROR_MESSAGE_HEADER`."""


def is_sdk_events(value: Any) -> bool:
    """True for a non-empty list of objects with a string `kind`, some of them SDK
    event kinds (`KINDS`)."""
    return (isinstance(value, list) and bool(value)
            and all(isinstance(e, dict) and isinstance(e.get("kind"), str) for e in value)
            and any(e["kind"] in KINDS for e in value))


def _text(parts: Any, builder: TrajectoryBuilder) -> str:
    return text_of(parts, builder) if not isinstance(parts, str) else parts


def _observation(ev: dict[str, Any], kind: str, builder: TrajectoryBuilder) -> Observation:
    if kind == "AgentErrorEvent":
        content, is_error = str(ev.get("error", "")), True
    elif kind == "UserRejectObservation":
        content, is_error = f"Action rejected: {ev.get('rejection_reason', 'User rejected the action')}", False
    else:
        obs = ev.get("observation") if isinstance(ev.get("observation"), dict) else {}
        is_error = obs.get("is_error") is True
        content = (ERROR_MESSAGE_HEADER if is_error else "") + _text(obs.get("content", []), builder)
        extra = ev.get("extended_content")
        if isinstance(extra, list) and extra:
            content += "\n" + _text(extra, builder)
        builder.skip("observation_text_from_content")
    return Observation(tool_call_id=str(ev.get("tool_call_id")), name=ev.get("tool_name"), content=content,
                       is_error=is_error)


def feed_sdk_events(events: list[Any], builder: TrajectoryBuilder, ctx: FileContext, line: int | None,
                    prefix: str = "") -> None:
    """Feed an SDK event list into `builder` (module docstring); an ActionEvent without a
    `tool_call` is counted (`action_event_without_tool_call`). Raises ConvertError
    naming `prefix[i]` for an event that is not an object."""
    view = CondensedView(builder)
    response_id: object = None
    response_event: object = None
    for i, ev in enumerate(events):
        where = f"{prefix}[{i}]"
        if not isinstance(ev, dict):
            raise ctx.error(line, where, "expected an event object", ev)
        kind = ev.get("kind")
        event_id = ev.get("id")
        if not isinstance(event_id, str | int) or isinstance(event_id, bool):
            event_id = ("index", i)  # no usable id: nothing can name this event
        in_view = kind in LLM_CONVERTIBLE
        if kind != "ActionEvent":
            response_id = None
        if kind == "SystemPromptEvent":
            parts = [p for p in (ev.get("system_prompt"), ev.get("dynamic_context")) if isinstance(p, dict)]
            builder.set_system(_text(parts, builder))
            view.add(event_id, in_view)
        elif kind == "MessageEvent":
            msg = ev.get("llm_message") if isinstance(ev.get("llm_message"), dict) else {}
            parts = msg.get("content", [])
            extra = ev.get("extended_content")
            if isinstance(parts, list) and isinstance(extra, list):
                parts = [*parts, *extra]
            text = _text(parts, builder)
            if ev.get("source") == "agent" or msg.get("role") == "assistant":
                reasoning = msg.get("reasoning_content") if isinstance(msg.get("reasoning_content"), str) else None
                view.add(event_id, in_view, lambda: builder.turn(
                    Response(content=text, reasoning=reasoning, finish_reason="stop")))
            else:
                view.add(event_id, in_view, lambda: builder.user(text))
        elif kind == "ActionEvent":
            tc = ev.get("tool_call")
            if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
                builder.skip("action_event_without_tool_call")  # nothing to send as a call
                view.add(event_id, in_view)
                continue
            raw = tc.get("arguments") if isinstance(tc.get("arguments"), str) else "{}"
            call = ToolCall(id=str(tc.get("id", ev.get("tool_call_id"))), name=tc["name"], arguments_raw=raw,
                            arguments=parse_arguments(raw))
            rid = ev.get("llm_response_id")
            if rid is not None and rid == response_id and builder.turns:
                builder.turns[-1].response.tool_calls.append(call)
                view.add(event_id, in_view, same_as=response_event)
            else:
                thought = _text(ev.get("thought", []), builder)
                reasoning = ev.get("reasoning_content") if isinstance(ev.get("reasoning_content"), str) else None
                view.add(event_id, in_view, lambda: builder.turn(Response(
                    content=thought or None, reasoning=reasoning, tool_calls=[call], finish_reason="tool_calls")))
                response_id, response_event = rid, event_id
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            obs = _observation(ev, kind, builder)
            view.add(event_id, in_view, lambda: builder.observation(obs))
        elif kind == "CondensationSummaryEvent" and isinstance(ev.get("summary"), str):
            view.add(event_id, in_view, lambda: builder.user(ev["summary"]))
        elif kind == "Condensation":
            ids = ev.get("forgotten_event_ids")
            if not isinstance(ids, list):
                builder.skip("condensation_without_forgotten_events")
                ids = []
            view.forget([*(x for x in ids if isinstance(x, str | int) and not isinstance(x, bool)), event_id],
                        ev.get("summary"), ev.get("summary_offset"))
        elif kind == "CondensationRequest":
            view.forgotten.add(event_id)
            builder.skip("event:CondensationRequest")
        else:
            builder.skip(f"event:{kind}")
            view.add(event_id, in_view)
