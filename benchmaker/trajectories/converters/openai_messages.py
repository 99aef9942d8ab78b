"""Rows of OpenAI chat message lists (SWE-smith style JSONL), and the shared walk over
an OpenAI-style message list that the SWE-agent and mini-swe-agent converters reuse.

Row shape (one trajectory per line; SWE-smith trajectories dataset):

    {"messages": [{"role": "system", ...}, {"role": "user", ...}, ...] | "<JSON string>",
     "instance_id": "...", "model": "...", "resolved": true, "patch": "...",
     "traj_id": "...", "tools": [...]}

A row's `tools` (the tool definitions sent with the messages, as in a logged request
body) become the trajectory's `tools` (chat_shape_tools).

A single JSON file holding one such object, or a bare list of messages, is one
trajectory too. Assistant messages become turns (`tool_calls` with the raw
`function.arguments` string; `reasoning_content`/`reasoning` as reasoning; `usage`
when a message carries one); `tool` messages become observations tied by
`tool_call_id` (SWE-agent: `tool_call_ids[0]`); `user` messages become later prompts,
or, for text-action agents, the observation of the preceding turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.content_parts import result_content, split_parts, text_of
from benchmaker.trajectories.converters.json_reading import (
    dict_or_empty,
    first_byte,
    is_one_multiline_document,
    iter_rows,
    read_json_document,
)
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.tool_calls import chat_shape_tools, loads_lenient, tool_call_from_openai
from benchmaker.trajectories.converters.usage import openai_usage
from benchmaker.trajectories.trajectory import FinishReason, Observation, RecordedOutcome, Response, ToolCall

FORMAT = "openai-messages"

FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")


def finish_reason_of(finish: Any, has_calls: bool, ctx: FileContext, line: int | None, where: str) -> FinishReason:
    """An OpenAI `finish_reason` as a FinishReason (FINISH_REASONS); None: "tool_calls"
    when the response has tool calls, else "stop". Raises ConvertError naming `where`
    on another value."""
    if finish is None:
        return "tool_calls" if has_calls else "stop"
    if finish not in FINISH_REASONS:
        raise ctx.error(line, where, "unknown finish reason", finish)
    return FINISH_REASONS[finish]


def reasoning_of(msg: dict[str, Any]) -> str | None:
    """Reasoning text of an OpenAI-style assistant message: `reasoning_content`, else
    `reasoning`, else the joined `thinking_blocks[].thinking`; None when absent."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(msg.get(key), str):
            return msg[key]
    blocks = msg.get("thinking_blocks")
    if isinstance(blocks, list):
        texts = [t for b in blocks if isinstance(b, dict) and isinstance(t := b.get("thinking"), str)]
        if texts:
            return "\n".join(texts)
    return None


def feed_messages(
    messages: list[Any],
    builder: TrajectoryBuilder,
    ctx: FileContext,
    line: int | None,
    *,
    field_prefix: str = "messages",
    text_actions: bool = False,
) -> None:
    """Walk an OpenAI-style message list into `builder`.

    Roles: `system`/`developer` → the system prompt; `user` → a prompt (its
    `tool_result` parts → observations); `assistant` → a turn (content as a string or
    typed parts: text, `thinking`/`reasoning`, `tool_use`); `tool`/`function` → an
    observation (`tool_call_id`, else the first of `tool_call_ids`, which may be a
    Python-literal string); `exit` (mini-swe-agent 2.x) → `builder.exit_status` and
    `builder.submission` (from `extra`, else the content). Any other role is skipped and
    counted as `role:<name>`. `tool_calls` given as a string is parsed as JSON, else as
    a Python literal (`loads_lenient`).
    `text_actions=True` (SWE-agent text mode, mini-swe-agent): the first user message
    after an assistant turn is that turn's observation (`exit_code` from a
    `<returncode>N</returncode>` tag), further user messages are later prompts.
    Raises ConvertError naming `field_prefix[i].field` on a malformed message.
    """
    for i, msg in enumerate(messages):
        where = f"{field_prefix}[{i}]"
        if not isinstance(msg, dict):
            raise ctx.error(line, where, "expected a message object", msg)
        role = msg.get("role")
        content = msg.get("content")
        if role in ("system", "developer"):
            builder.set_system(text_of(content, builder))
        elif role == "user":
            if isinstance(content, list) and any(
                isinstance(p, dict) and p.get("type") == "tool_result" for p in content
            ):
                parts = split_parts(content, builder)
                for obs in parts.tool_results:
                    builder.observation(obs)
                if parts.texts:
                    builder.user("\n".join(parts.texts))
                continue
            text, user_parts = result_content(content, builder)
            last = builder.turns[-1] if builder.turns else None
            if text_actions and last is not None and not last.observations and not last.user_after:
                m = _RETURNCODE.search(text)
                builder.observation(
                    Observation(content=text, exit_code=int(m.group(1)) if m else None, parts=user_parts)
                )
            else:
                builder.user(text, user_parts)
        elif role == "assistant":
            _assistant(msg, builder, ctx, line, where)
        elif role in ("tool", "function"):
            ids = msg.get("tool_call_ids")
            if isinstance(ids, str):
                try:
                    ids = loads_lenient(ids)
                except ValueError as exc:
                    raise ctx.error(line, f"{where}.tool_call_ids", str(exc), msg.get("tool_call_ids")) from None
            call_id = msg.get("tool_call_id")
            if call_id is None and isinstance(ids, list) and ids:
                call_id = ids[0]
                if len(ids) > 1:
                    builder.skip("extra_tool_call_ids", len(ids) - 1)
            if not isinstance(call_id, str):
                raise ctx.error(line, f"{where}.tool_call_id", "tool message without a tool call id", call_id)
            text, result_parts = result_content(content, builder)
            builder.observation(
                Observation(tool_call_id=call_id, name=msg.get("name"), content=text, parts=result_parts)
            )
        elif role == "exit":
            extra = dict_or_empty(msg.get("extra"))
            status, submission = extra.get("exit_status"), extra.get("submission")
            builder.exit_status = status if isinstance(status, str) else builder.exit_status
            if isinstance(submission, str):
                builder.submission = submission
            elif isinstance(content, str) and content:
                builder.submission = content
        else:
            builder.skip(f"role:{role}")


def _tool_calls(msg: dict[str, Any], ctx: FileContext, line: int | None, where: str) -> list[Any]:
    raw_calls = msg.get("tool_calls") or []
    if isinstance(raw_calls, str):
        try:
            raw_calls = loads_lenient(raw_calls)
        except ValueError as exc:
            raise ctx.error(line, f"{where}.tool_calls", str(exc), msg.get("tool_calls")) from None
    if not isinstance(raw_calls, list):
        raise ctx.error(line, f"{where}.tool_calls", "expected a list", raw_calls)
    return raw_calls


def _assistant(msg: dict[str, Any], builder: TrajectoryBuilder, ctx: FileContext, line: int | None, where: str) -> None:
    content = msg.get("content")
    reasoning = reasoning_of(msg)
    typed: list[ToolCall] = []
    if content is None or isinstance(content, str):
        text = content
    else:
        parts = split_parts(content, builder)
        text = "\n".join(parts.texts) if parts.texts else None
        if reasoning is None and parts.reasoning:
            reasoning = "\n".join(parts.reasoning)
        typed = parts.tool_calls
    raw_calls = _tool_calls(msg, ctx, line, where)
    calls = [
        tool_call_from_openai(tc, builder, f"{where}.tool_calls[{j}]", ctx, line) for j, tc in enumerate(raw_calls)
    ]
    calls.extend(typed)
    finish_reason = finish_reason_of(msg.get("finish_reason"), bool(calls), ctx, line, f"{where}.finish_reason")
    usage = openai_usage(msg.get("usage"))
    model = msg.get("model") if isinstance(msg.get("model"), str) else None
    extra = msg.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("response"), dict):  # mini-swe-agent `extra.response`
        response = extra["response"]
        usage = usage or openai_usage(response.get("usage"))
        model = model or (response.get("model") if isinstance(response.get("model"), str) else None)
        if reasoning is None:  # the raw response's reasoning, which the message itself leaves out (1.x)
            reasoning = _response_reasoning(response)
    builder.turn(
        Response(content=text, reasoning=reasoning, tool_calls=calls, finish_reason=finish_reason),
        usage=usage,
        model=model,
    )


def _response_reasoning(response: dict[str, Any]) -> str | None:
    """The reasoning text of a raw chat completion (`choices[0].message.reasoning_content`,
    else `.reasoning`, as OpenRouter and vLLM return it), None when it has none."""
    choices = response.get("choices")
    message = (
        choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    )
    if not isinstance(message, dict):
        return None
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str) and message[key]:
            return message[key]
    return None


def row_messages(row: dict[str, Any], ctx: FileContext, line: int | None) -> list[Any]:
    """The `messages` of a row: a list, or a JSON string holding one. Raises ConvertError."""
    messages = row.get("messages")
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except json.JSONDecodeError as exc:
            raise ctx.error(line, "messages", f"JSON string does not parse: {exc.msg}") from exc
    if not isinstance(messages, list):
        raise ctx.error(line, "messages", "expected a list of messages or a JSON string of one", messages)
    return messages


def _row_trajectory(row: Any, ctx: FileContext, line: int | None, index: int):
    if not isinstance(row, dict):
        raise ctx.error(line, None, "expected an object with `messages`", row)
    builder = TrajectoryBuilder(ctx, FORMAT)
    feed_messages(row_messages(row, ctx, line), builder, ctx, line)
    if isinstance(row.get("model"), str):
        builder.model = row["model"]
    builder.tools = chat_shape_tools(row.get("tools"))
    patch = row.get("patch", row.get("model_patch"))
    resolved = row.get("resolved")
    task_id = row.get("instance_id", row.get("task_id"))
    return builder.build(
        index,
        line=line,
        task_id=task_id if isinstance(task_id, str) else None,
        outcome=RecordedOutcome(
            patch=patch if isinstance(patch, str) else None,
            resolved=resolved if isinstance(resolved, bool) else None,
        ),
    )


def convert(ctx: FileContext) -> Iterator[Any]:
    """Yield one Trajectory per row (JSONL) or one for a JSON document (a row object or
    a bare message list). Raises ConvertError (`path:line: messages[i].field: ...`);
    with `ctx.lenient` a bad row is skipped and counted as `bad_row`."""
    lead = first_byte(ctx.head)
    if lead == ord("[") or (lead == ord("{") and is_one_multiline_document(ctx.head)):
        doc = read_json_document(ctx)  # a bare message list, or one pretty-printed row
        if isinstance(doc, list):
            doc = {"messages": doc}
        yield _row_trajectory(doc, ctx, None, 0)
        return
    yield from iter_rows(ctx, lambda row, line, index: _row_trajectory(row, ctx, line, index))
