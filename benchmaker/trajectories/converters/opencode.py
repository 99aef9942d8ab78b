"""opencode session exports (`opencode export <session id>`, one JSON document), one
trajectory per file. Source: sst/opencode packages/opencode/src/session/message-v2.ts (the
message and part shapes), src/session/index.ts `getUsage` (the token counts) and
src/cli/cmd/export.ts (the document).

One turn per model call (a `step-start` ... `step-finish` run of parts), usage from the
step-finish `tokens` (opencode's `input` and `output` leave out the cached and reasoning
tokens), times in ms since the epoch. No system prompt in the export. What each record
becomes: docs/log-formats.md#opencode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.json_reading import non_negative_int, read_json_document
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.timestamps import iso_from_ms
from benchmaker.trajectories.converters.tool_calls import ARGS_SYNTH
from benchmaker.trajectories.trajectory import Observation, Response, Timing, ToolCall, Trajectory, Usage

FORMAT = "opencode"


def is_export(doc: Any) -> bool:
    """True for an opencode session export: an object whose `info` has a string `id` and
    whose `messages` are objects with an `info` (a `role` "user" or "assistant") and a
    `parts` list."""
    if not isinstance(doc, dict) or not isinstance(doc.get("info"), dict) or not isinstance(doc["info"].get("id"), str):
        return False
    messages = doc.get("messages")
    return isinstance(messages, list) and all(
        isinstance(m, dict)
        and isinstance(m.get("info"), dict)
        and m["info"].get("role") in ("user", "assistant")
        and isinstance(m.get("parts"), list)
        for m in messages
    )


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of an opencode session export (docs/log-formats.md#opencode). Raises
    ConvertError (`path: field: problem`) on a malformed file, and when it holds no user
    message or no model call."""
    doc = read_json_document(ctx)
    if not is_export(doc):
        raise ctx.error(None, "messages", "expected an opencode session export (info.id and messages with info, parts)")
    builder = TrajectoryBuilder(ctx, FORMAT)
    for i, msg in enumerate(doc["messages"]):
        info, parts = msg["info"], [p for p in msg["parts"] if isinstance(p, dict)]
        if info["role"] == "user":
            texts = [p["text"] for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)]
            for p in parts:
                if p.get("type") != "text":
                    builder.skip(f"user_{p.get('type')}_part")
            if texts:
                builder.user("\n".join(texts))
            continue
        steps = _steps(parts)
        if not steps:
            builder.skip("failed_call" if info.get("error") else "empty_assistant_message")
            continue
        for k, step in enumerate(steps):
            _turn(builder, info, step, f"messages[{i}].step[{k}]", ctx, first=k == 0)
    yield builder.build(0)


def _steps(parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The parts of each model call (docs/log-formats.md#opencode)."""
    if not any(p.get("type") == "step-start" for p in parts):
        content = [p for p in parts if p.get("type") in ("text", "reasoning", "tool", "step-finish")]
        return [content] if content else []
    steps: list[list[dict[str, Any]]] = []
    for p in parts:
        if p.get("type") == "step-start":
            steps.append([p])
        elif steps:
            steps[-1].append(p)
    return steps


def _turn(
    builder: TrajectoryBuilder, info: dict[str, Any], step: list[dict[str, Any]], where: str, ctx: Any, *, first: bool
) -> None:
    texts = [p["text"] for p in step if p.get("type") == "text" and isinstance(p.get("text"), str)]
    reasoning = [p["text"] for p in step if p.get("type") == "reasoning" and isinstance(p.get("text"), str)]
    tools = [p for p in step if p.get("type") == "tool"]
    finish = next((p for p in step if p.get("type") == "step-finish"), None)
    tool_calls = []
    for k, part in enumerate(tools):
        state = part.get("state")
        if not isinstance(part.get("tool"), str) or not isinstance(state, dict):
            raise ctx.error(None, f"{where}.tool[{k}]", "expected a tool part with a string tool and a state", part)
        args = state.get("input") if isinstance(state.get("input"), dict) else {}
        call_id = part["callID"] if isinstance(part.get("callID"), str) else f"{part['tool']}-{k}"
        raw = orjson.dumps(args).decode("utf-8")
        tool_calls.append(ToolCall(id=call_id, name=part["tool"], arguments_raw=raw, arguments=args))
        builder.skip(ARGS_SYNTH)
    content = "".join(texts)
    tokens = (finish or {}).get("tokens")
    if not isinstance(tokens, dict):
        tokens = info.get("tokens") if isinstance(info.get("tokens"), dict) else None
    reason = (finish or {}).get("reason") or info.get("finish")
    builder.turn(
        Response(
            content=content if content or not tool_calls else None,
            reasoning="".join(reasoning) if reasoning else None,
            tool_calls=tool_calls,
            finish_reason="tool_calls" if tool_calls else "length" if reason == "length" else "stop",
        ),
        usage=_usage(tokens) if tokens is not None else None,
        timing=_timing(info, step, first),
        model=info.get("modelID") if isinstance(info.get("modelID"), str) else None,
    )
    for part, tc in zip(tools, tool_calls, strict=True):
        state = part["state"]
        status = state.get("status")
        if status == "completed":
            output = state.get("output")
            text = output if isinstance(output, str) else ""
            builder.observation(Observation(content=text, tool_call_id=tc.id, name=tc.name))
        elif status == "error":
            error = state.get("error")
            text = error if isinstance(error, str) else ""
            builder.observation(Observation(content=text, tool_call_id=tc.id, name=tc.name, is_error=True))
        else:
            builder.skip("unfinished_tool")


def _usage(tokens: dict[str, Any]) -> Any:
    found = tokens.get("cache")
    cache: dict[str, Any] = found if isinstance(found, dict) else {}
    inp, out = non_negative_int(tokens.get("input")), non_negative_int(tokens.get("output"))
    reasoning = non_negative_int(tokens.get("reasoning"))
    read, write = non_negative_int(cache.get("read")), non_negative_int(cache.get("write"))
    return Usage(
        prompt_tokens=None if inp is None else inp + (read or 0) + (write or 0),
        completion_tokens=None if out is None else out + (reasoning or 0),
        cached_tokens=read,
        reasoning_tokens=reasoning,
        total_tokens=non_negative_int(tokens.get("total")),
    )


def _timing(info: dict[str, Any], step: list[dict[str, Any]], first: bool) -> Any:
    starts, ends = [], []
    for p in step:
        t = p.get("time")
        if p.get("type") == "tool":
            state = p.get("state")
            t = state.get("time") if isinstance(state, dict) else None
        if isinstance(t, dict):
            if non_negative_int(t.get("start")) is not None:
                starts.append(t["start"])
            if non_negative_int(t.get("end")) is not None and p.get("type") != "tool":
                ends.append(t["end"])
            elif p.get("type") == "tool" and non_negative_int(t.get("start")) is not None:
                ends.append(t["start"])  # the call was complete when the tool started
    created = non_negative_int(info["time"].get("created")) if isinstance(info.get("time"), dict) else None
    start = created if first and created is not None else (min(starts) if starts else None)
    if start is None:
        return None
    duration = float(max(ends) - start) if ends and max(ends) >= start else None
    return Timing(duration_ms=duration, started_at=iso_from_ms(start))
