"""OpenHands event lists (a JSON array of events, as saved by OpenHands' trajectory
export and its tests/runtime/trajs/*.json), one trajectory per file. Source:
All-Hands-AI/OpenHands openhands/events/serialization.

Events have `id`, `timestamp`, `source` ("user"|"agent"|"environment") and either an
`action` (+ `args`) or an `observation` (+ `content`, `extras`, `cause`). An agent action
that came from a model call carries `tool_call_metadata {function_name, tool_call_id,
total_calls_in_response, model_response}`, where `model_response` is the full OpenAI
chat-completion response. One model response can produce several actions; they share
`model_response.id` and form one turn. The turn is built from the response itself:
`choices[0].message.content`, `reasoning_content`, `tool_calls` (raw
`function.arguments`), `choices[0].finish_reason`, `usage` (cached tokens from
`prompt_tokens_details.cached_tokens`, else `cache_read_input_tokens`) and `model`.

Observations with `tool_call_metadata` become the turn's observations (`content`,
`extras.exit_code`, `observation == "error"` → is_error). User `message` actions are
prompts; a `system` action's `args.content` is the system prompt; an agent `message`
action without a model response becomes a turn with that text and no usage
(`agent_message_without_model_response`). Other events are counted under
`action:<name>` / `observation:<name>`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from replay.converters._common import (
    FileContext,
    TrajectoryBuilder,
    openai_usage,
    read_json_document,
    text_of,
    tool_call_from_openai,
)
from replay.converters.openai_messages import FINISH_REASONS, reasoning_of
from replay.trajectory import Observation, Response, Trajectory

FORMAT = "openhands"


def _turn_from_response(mr: Any, builder: TrajectoryBuilder, ctx: FileContext, where: str) -> None:
    choices = mr.get("choices") if isinstance(mr, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ctx.error(None, f"{where}.choices", "expected a non-empty list", choices)
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise ctx.error(None, f"{where}.choices[0].message", "expected an object", msg)
    raw_calls = msg.get("tool_calls") or []
    calls = [
        tool_call_from_openai(tc, builder, f"{where}.choices[0].message.tool_calls[{j}]", ctx, None)
        for j, tc in enumerate(raw_calls)
    ]
    finish = choices[0].get("finish_reason")
    if finish is None:
        finish_reason = "tool_calls" if calls else "stop"
    elif finish in FINISH_REASONS:
        finish_reason = FINISH_REASONS[finish]
    else:
        raise ctx.error(None, f"{where}.choices[0].finish_reason", "unknown finish reason", finish)
    content = msg.get("content")
    builder.turn(
        Response(
            content=content if content is None or isinstance(content, str) else text_of(content, builder),
            reasoning=reasoning_of(msg),
            tool_calls=calls,
            finish_reason=finish_reason,
        ),
        usage=openai_usage(mr.get("usage")),
        model=mr.get("model") if isinstance(mr.get("model"), str) else None,
    )


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of an OpenHands event list. Raises ConvertError
    (`path: [i].field: problem`, i = index in the event list) on a malformed event."""
    events = read_json_document(ctx)
    if not isinstance(events, list):
        raise ctx.error(None, None, "expected a JSON array of events", events)
    builder = TrajectoryBuilder(ctx, FORMAT)
    current_response_id: object = None
    for i, ev in enumerate(events):
        where = f"[{i}]"
        if not isinstance(ev, dict):
            raise ctx.error(None, where, "expected an event object", ev)
        tcm = ev.get("tool_call_metadata")
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        if "action" in ev:
            action = ev["action"]
            if isinstance(tcm, dict) and isinstance(tcm.get("model_response"), dict):
                mr = tcm["model_response"]
                rid = mr.get("id")
                if rid is None or rid != current_response_id:
                    _turn_from_response(mr, builder, ctx, f"{where}.tool_call_metadata.model_response")
                    current_response_id = rid
            elif action == "message" and ev.get("source") == "user":
                builder.user(text_of(args.get("content", ev.get("message", "")), builder))
            elif action == "system":
                builder.set_system(text_of(args.get("content", ""), builder))
            elif action == "message" and ev.get("source") == "agent":
                builder.turn(Response(content=args.get("content", ev.get("message")), finish_reason="stop"))
                builder.skip("agent_message_without_model_response")
                current_response_id = None
            else:
                builder.skip(f"action:{action}")
        elif "observation" in ev:
            kind = ev["observation"]
            if isinstance(tcm, dict) and isinstance(tcm.get("tool_call_id"), str):
                extras = ev.get("extras") if isinstance(ev.get("extras"), dict) else {}
                code = extras.get("exit_code")
                content = ev.get("content", "")
                builder.observation(
                    Observation(
                        tool_call_id=tcm["tool_call_id"],
                        name=tcm.get("function_name"),
                        content=content if isinstance(content, str) else text_of(content, builder),
                        is_error=kind == "error",
                        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                    )
                )
            else:
                builder.skip(f"observation:{kind}")
        else:
            raise ctx.error(None, where, "event has neither `action` nor `observation`", sorted(ev)[:6])
    yield builder.build(0)
