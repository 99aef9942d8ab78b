"""Gemini CLI chat recordings (`~/.gemini/tmp/<project>/chats/session-*.json` and
`.jsonl`), one trajectory per file. Source: google-gemini/gemini-cli
packages/core/src/services/chatRecordingService.ts and chatRecordingTypes.ts.

One turn per `gemini` message (one model call), usage from its `tokens`; a `.jsonl`
log's later record with the same id replaces the earlier one. No system prompt is
logged. What each record becomes: docs/log-formats.md#gemini-cli.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

from benchmaker.apis.gemini import client_call_id, function_response_text
from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.json_reading import (
    is_one_document,
    iter_jsonl,
    non_negative_int,
    read_json_document,
)
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.timestamps import ms_from_iso
from benchmaker.trajectories.converters.tool_calls import ARGS_SYNTH
from benchmaker.trajectories.trajectory import Observation, Response, Timing, ToolCall, Trajectory, Usage

FORMAT = "gemini-cli"
MESSAGE_TYPES = frozenset(("user", "gemini", "info", "error", "warning"))
"""The `type` values of a Gemini CLI MessageRecord."""

_CALL_STAMP = re.compile(r"-(\d{13})-[0-9a-f]+$")


def is_conversation_record(doc: Any) -> bool:
    """True for a Gemini CLI ConversationRecord: an object with a string `sessionId` and a
    `messages` list whose entries have an `id` and a `type` among MESSAGE_TYPES (and no
    `role`: never an OpenAI message list)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("sessionId"), str):
        return False
    messages = doc.get("messages")
    return isinstance(messages, list) and all(_is_message_record(m) for m in messages)


def _is_message_record(m: Any) -> bool:
    return isinstance(m, dict) and "role" not in m and m.get("type") in MESSAGE_TYPES and isinstance(m.get("id"), str)


def is_jsonl_records(records: list[Any]) -> bool:
    """True for the first records of a Gemini CLI `.jsonl` recording: a metadata line with
    string `sessionId` and `projectHash` first, then message, `$rewindTo` or `$set`
    records."""
    if not records or not isinstance(records[0], dict):
        return False
    first = records[0]
    if not (isinstance(first.get("sessionId"), str) and isinstance(first.get("projectHash"), str)):
        return False
    return all(isinstance(r, dict) and (_is_message_record(r) or "$rewindTo" in r or "$set" in r) for r in records[1:])


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str) and part.get("thought") is not True:
            texts.append(part["text"])
    return "\n".join(texts)


def _user(builder: TrajectoryBuilder, content: Any) -> None:
    """A user message: its functionResponse parts are observations of the last turn (those
    its toolCalls did not give already; Gemini CLI >= 0.5x logs the results both ways),
    its text parts a user message (none when it has no text part)."""
    parts = [content] if isinstance(content, dict) else content if isinstance(content, list) else None
    if parts is None:
        builder.user(_text(content))
        return
    for part in parts:
        resp = part.get("functionResponse") if isinstance(part, dict) else None
        if not isinstance(resp, dict):
            continue
        name = resp.get("name")
        if not isinstance(name, str):
            name = ""
        call_id = client_call_id(resp["id"], name) if isinstance(resp.get("id"), str) else None
        if call_id is not None and builder.has_observation(call_id):
            continue
        text, is_error = function_response_text(resp.get("response"))
        builder.observation(Observation(content=text, tool_call_id=call_id, name=name or None, is_error=is_error))
    if any(isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str)) for p in parts):
        builder.user(_text(parts))


def _messages(ctx: FileContext) -> list[dict[str, Any]]:
    """The MessageRecords of the file as Gemini CLI loads them (docs/log-formats.md#gemini-cli)."""
    if is_one_document(ctx.head):
        doc = read_json_document(ctx)
        if not is_conversation_record(doc):
            raise ctx.error(
                None, "messages", "expected a Gemini CLI conversation record (sessionId and messages with id and type)"
            )
        return list(doc["messages"])
    by_id: dict[str, dict[str, Any]] = {}
    for line, record in iter_jsonl(ctx):
        if not isinstance(record, dict):
            raise ctx.error(line, None, "expected a JSON object per line", record)
        if isinstance(record.get("$rewindTo"), str):
            ids = list(by_id)
            cut = ids.index(record["$rewindTo"]) if record["$rewindTo"] in ids else 0
            for dropped in ids[cut:]:
                del by_id[dropped]
            ctx.skipped["rewound_message"] += len(ids) - cut
        elif _is_message_record(record):
            by_id[record["id"]] = record
        elif isinstance(record.get("$set"), dict) and isinstance(record["$set"].get("messages"), list):
            by_id = {m["id"]: m for m in record["$set"]["messages"] if _is_message_record(m)}
    return list(by_id.values())


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a Gemini CLI chat recording (docs/log-formats.md#gemini-cli). Raises
    ConvertError (`path:line: field: problem`) on a malformed file, and when it holds no
    user message or no model call."""
    builder = TrajectoryBuilder(ctx, FORMAT)
    before: str | None = None  # timestamp of the record before the next model call
    for i, msg in enumerate(_messages(ctx)):
        kind = msg["type"]
        if kind == "user":
            _user(builder, msg.get("content"))
        elif kind == "gemini":
            _turn(builder, msg, before, f"messages[{i}]", ctx)
        else:
            builder.skip(f"{kind}_message")
        calls = msg.get("toolCalls") if kind == "gemini" else None
        stamps = [c.get("timestamp") for c in calls or [] if isinstance(c, dict)]
        before = next((s for s in reversed(stamps) if isinstance(s, str)), None) or msg.get("timestamp")
    yield builder.build(0)


def _turn(builder: TrajectoryBuilder, msg: dict[str, Any], before: str | None, where: str, ctx: FileContext) -> None:
    content = _text(msg.get("content"))
    thoughts = [t for t in msg.get("thoughts") or [] if isinstance(t, dict)]
    reasoning = "\n\n".join(_thought_text(t) for t in thoughts) or None
    calls = msg.get("toolCalls") or []
    if not isinstance(calls, list):
        raise ctx.error(None, f"{where}.toolCalls", "expected a list", calls)
    if not content and reasoning is None and not calls:
        builder.skip("empty_model_message")
        return
    tool_calls = []
    for k, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ctx.error(None, f"{where}.toolCalls[{k}]", "expected an object with a string name", call)
        args = call.get("args") if isinstance(call.get("args"), dict) else {}
        call_id = client_call_id(call["id"], call["name"]) if isinstance(call.get("id"), str) else f"{call['name']}-{k}"
        raw = orjson.dumps(args).decode("utf-8")
        tool_calls.append(ToolCall(id=call_id, name=call["name"], arguments_raw=raw, arguments=args))
        builder.skip(ARGS_SYNTH)
    tokens = msg.get("tokens") if isinstance(msg.get("tokens"), dict) else None
    usage = None
    if tokens is not None:
        output, thoughts_n = non_negative_int(tokens.get("output")), non_negative_int(tokens.get("thoughts"))
        usage = Usage(
            prompt_tokens=non_negative_int(tokens.get("input")),
            completion_tokens=None if output is None else output + (thoughts_n or 0),
            cached_tokens=non_negative_int(tokens.get("cached")),
            reasoning_tokens=thoughts_n,
            total_tokens=non_negative_int(tokens.get("total")),
        )
    builder.turn(
        Response(
            content=content if content or not tool_calls else None,
            reasoning=reasoning,
            tool_calls=tool_calls,
            finish_reason="tool_calls" if tool_calls else "stop",
        ),
        usage=usage,
        timing=_timing(before, msg, tool_calls),
        model=msg.get("model") if isinstance(msg.get("model"), str) else None,
    )
    for call, tc in zip(calls, tool_calls, strict=False):
        for part in call.get("result") or []:
            resp = part.get("functionResponse") if isinstance(part, dict) else None
            if not isinstance(resp, dict):
                builder.skip("non_function_response_part")
                continue
            text, is_error = function_response_text(resp.get("response"))
            builder.observation(
                Observation(
                    content=text,
                    tool_call_id=tc.id,
                    name=tc.name,
                    is_error=is_error or call.get("status") not in (None, "success"),
                )
            )


def _thought_text(thought: dict[str, Any]) -> str:
    subject = thought.get("subject")
    description = thought.get("description")
    if not isinstance(subject, str):
        subject = ""
    if not isinstance(description, str):
        description = ""
    return f"**{subject}**\n\n{description}" if subject else description


def _timing(before: str | None, msg: dict[str, Any], tool_calls: list[Any]) -> Any:
    start_ms = ms_from_iso(before)
    end_ms: float | None = None
    m = _CALL_STAMP.search(tool_calls[0].id) if tool_calls else None
    end_ms = float(m.group(1)) if m else ms_from_iso(msg.get("timestamp"))
    duration = None
    if start_ms is not None and end_ms is not None and end_ms >= start_ms:
        duration = round(end_ms - start_ms, 3)  # ms stamps: float noise below the µs
    if before is None and duration is None:
        return None
    return Timing(duration_ms=duration, started_at=before)
