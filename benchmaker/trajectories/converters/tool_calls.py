"""Tool calls read from the logs: OpenAI `tool_calls[i]` objects
(`tool_call_from_openai`), raw argument text and its parse (`parse_arguments`),
arguments synthesised where only the parse was kept (`synth_arguments_raw`, counted as
`ARGS_SYNTH`) and SWE-agent's Python-literal lists (`loads_lenient`)."""

from __future__ import annotations

import ast
import json
from typing import Any

from benchmaker.apis.anthropic_messages import chat_tools as messages_chat_tools
from benchmaker.apis.openai_responses import chat_tools as responses_chat_tools
from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.trajectory import (
    ToolCall,
)

ARGS_SYNTH = "arguments_raw_synthesized"
"""Skip key: the log kept only parsed tool arguments, so `arguments_raw` is
`json.dumps(arguments)` rather than the bytes the model emitted."""


def synth_arguments_raw(arguments: Any) -> str:
    """`arguments_raw` for logs that kept only parsed arguments: `json.dumps(arguments)`
    (Python defaults). A value json.dumps refuses raises json.dumps' own error. Callers
    count `ARGS_SYNTH` in the trajectory's skipped."""
    return json.dumps(arguments)


def synthesized_call(call_id: str, name: str, arguments: Any, builder: TrajectoryBuilder) -> ToolCall:
    """A ToolCall from a log that kept only the parsed `arguments`: `arguments_raw` is
    `synth_arguments_raw(arguments)` (counted as `ARGS_SYNTH`), `arguments` kept when an
    object."""
    builder.skip(ARGS_SYNTH)
    raw = synth_arguments_raw(arguments)
    return ToolCall(
        id=call_id, name=name, arguments_raw=raw, arguments=arguments if isinstance(arguments, dict) else None
    )


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """`ToolCall.arguments`: the parse of `raw` when it is a JSON object, else None."""
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def loads_lenient(text: str) -> Any:
    """Parse a JSON string, else a Python literal (SWE-agent writes `tool_calls` as
    `str(list_of_dicts)`: single quotes, True/None) with `ast.literal_eval` (literals
    only: never `eval`). Raises ValueError when it is neither."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"neither JSON nor a Python literal: {exc}") from None


def tool_call_from_openai(
    tc: Any, builder: TrajectoryBuilder, where: str, ctx: FileContext, line: int | None
) -> ToolCall:
    """A ToolCall from an OpenAI `tool_calls[i]` object; `function.arguments` kept raw when
    a string, synthesised (and counted) when the log holds an object."""
    if not isinstance(tc, dict):
        raise ctx.error(line, where, "expected a tool call object", tc)
    fn = tc.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ctx.error(line, f"{where}.function.name", "missing tool name", fn)
    call_id = tc.get("id")
    if not isinstance(call_id, str):
        raise ctx.error(line, f"{where}.id", "missing tool call id", call_id)
    args = fn.get("arguments")
    if isinstance(args, str):
        return ToolCall(id=call_id, name=fn["name"], arguments_raw=args, arguments=parse_arguments(args))
    return synthesized_call(call_id, fn["name"], {} if args is None else args, builder)


def chat_shape_tools(value: Any) -> list[dict[str, Any]] | None:
    """Tool definitions as a log keeps them, in OpenAI chat completions shape (the
    shape of `Trajectory.tools`), whatever API they were written for, item by item: a
    chat tool (`{"type", "function": {...}}` or `{"type": "custom", "custom": {...}}`)
    as it is; an Anthropic tool (`input_schema`) and a flat function tool (`{"type":
    "function" | "custom", "name", ...}`: OpenAI Responses, OpenTelemetry GenAI
    `gen_ai.tool.definitions`) through the apis modules' `chat_tools`; a bare `{"name",
    "description", "parameters"}` as a function. Anything else (hosted tools, non-objects)
    is left out. None when `value` is not a list or nothing is left."""
    if not isinstance(value, list):
        return None
    out: list[dict[str, Any]] = []
    for item in value:
        if not isinstance(item, dict) or not item:
            continue
        kind = item.get("type")
        if isinstance(kind, str) and isinstance(item.get(kind), dict):
            out.append(item)
        elif "input_schema" in item:
            out.extend(messages_chat_tools({"tools": [item]}) or ())
        elif kind in ("function", "custom"):
            out.extend(responses_chat_tools({"tools": [item]}) or ())
        elif kind is None and isinstance(item.get("name"), str):
            out.append({"type": "function", "function": item})
    return out or None
