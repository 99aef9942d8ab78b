"""OpenAI Codex CLI rollout files (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`), one
trajectory per file. Source: openai/codex `codex-rs/protocol/src/protocol.rs`
(`RolloutItem`: `session_meta`, `response_item`, `compacted`, `turn_context`,
`event_msg`; `EventMsg::TokenCount` with `info.last_token_usage`) and
`codex-rs/core/src/rollout/` (what is persisted), read against a real 0.125 rollout.

One turn per model call (the outputs written since the previous call, ended by its usage
record); a `compacted` line is a compaction ContextEdit. No per-call timings (timestamps
are when lines were written). What each record becomes:
docs/log-formats.md#codex-rollout.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.content_parts import result_content, text_of
from benchmaker.trajectories.converters.json_reading import iter_jsonl, non_negative_int
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.tool_calls import parse_arguments
from benchmaker.trajectories.trajectory import (
    ContextEdit,
    MessageRef,
    MessageSpan,
    Observation,
    Response,
    ToolCall,
    Trajectory,
    Usage,
)

FORMAT = "codex-rollout"


def is_rollout_records(records: list[Any]) -> bool:
    """True when the first records of a JSONL file are Codex rollout lines (docs/log-formats.md#codex-rollout):
    every one `{"type": str, "payload": object}`, a `session_meta` or `response_item`
    among them."""
    if not records or not all(
        isinstance(r, dict) and isinstance(r.get("type"), str) and isinstance(r.get("payload"), dict) for r in records
    ):
        return False
    return any(r["type"] in ("session_meta", "response_item") for r in records)


@dataclass(slots=True)
class _Call:
    """The outputs of the model call being written."""

    content: str | None = None
    reasoning: str | None = None
    calls: list[ToolCall] = field(default_factory=list)
    n_items: int = 0


def _texts(parts: Any) -> list[str]:
    return (
        [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if isinstance(parts, list)
        else []
    )


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and isinstance(output.get("content"), str):  # older {"content", "success"}
        return output["content"]
    return "\n".join(_texts(output))


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a Codex rollout file. Raises ConvertError
    (`path:line: payload.field: problem`) on a malformed line, or when the file has no
    user message or no model call."""
    builder = TrajectoryBuilder(ctx, FORMAT)
    call = _Call()
    model: str | None = None
    names: dict[str, str] = {}
    awaiting: list[Any] = []  # the turn an input closed, whose usage record is still to come
    usage_records = False  # the file writes token_usage_record lines (token_count then repeats them)

    def close(usage: Any) -> None:
        nonlocal call
        response = Response(
            content=call.content,
            reasoning=call.reasoning,
            tool_calls=call.calls,
            finish_reason="tool_calls" if call.calls else "stop",
        )
        turn = builder.turn(response, usage=usage, model=model)
        call = _Call()
        awaiting[:] = [] if usage is not None else [turn]

    def end_call_by_input() -> None:
        if call.n_items:
            close(None)

    def output_starts() -> None:
        if awaiting and not call.n_items:
            builder.skip("call_without_token_count")
            awaiting.clear()

    def usage_record(usage: Any) -> None:
        if call.n_items:
            close(usage)
        elif awaiting:
            awaiting.pop().usage = usage
        else:
            builder.skip("token_count_without_output")

    for line, rec in iter_jsonl(ctx):
        if not isinstance(rec, dict) or not isinstance(rec.get("payload"), dict):
            raise ctx.error(line, "payload", "expected an object", rec.get("payload") if isinstance(rec, dict) else rec)
        kind, p = rec.get("type"), rec["payload"]
        if kind == "session_meta":
            base = p.get("base_instructions")
            text = base.get("text") if isinstance(base, dict) else base
            if isinstance(text, str):
                builder.set_system(text)
        elif kind == "turn_context":
            if isinstance(p.get("model"), str):
                model = p["model"]
        elif kind == "compacted":
            end_call_by_input()
            summary = p.get("message")
            if not isinstance(summary, str):
                raise ctx.error(line, "payload.message", "expected the compaction summary text", summary)
            if builder.turns:
                builder.edit(
                    ContextEdit(
                        kind="compaction",
                        head=_compacted_head(builder),
                        summary=[summary],
                        keep_from=MessageRef(turn=len(builder.turns), item=0),
                    )
                )
        elif kind == "token_usage_record":
            usage_records = True
            usage_record(_usage(p.get("usage")))
        elif kind == "event_msg":
            if p.get("type") != "token_count" or not isinstance(p.get("info"), dict) or usage_records:
                continue
            usage_record(_usage(p["info"].get("last_token_usage")))
        elif kind == "response_item":
            item = p.get("type")
            if item == "message":
                role = p.get("role")
                # a user message's images are kept as its content parts (TrajectoryBuilder.user)
                text, parts = (
                    result_content(p.get("content"), builder)
                    if role == "user"
                    else (text_of(p.get("content"), builder), None)
                )
                if role == "assistant":
                    output_starts()
                    call.content = text if call.content is None else call.content + text
                    call.n_items += 1
                elif role == "user":
                    end_call_by_input()
                    builder.user(text, parts)
                elif role in ("developer", "system"):
                    builder.skip("developer_message")
                else:
                    raise ctx.error(line, "payload.role", "unknown message role", role)
            elif item == "reasoning":
                output_starts()
                texts = _texts(p.get("summary")) or _texts(p.get("content"))
                if texts:
                    text = "\n".join(texts)
                    call.reasoning = text if call.reasoning is None else call.reasoning + "\n" + text
                call.n_items += 1
            elif item in ("function_call", "custom_tool_call"):
                output_starts()
                custom = item == "custom_tool_call"
                call_id, name = p.get("call_id"), p.get("name")
                raw = p.get("input" if custom else "arguments")
                where = "payload.input" if custom else "payload.arguments"
                if not isinstance(call_id, str) or not isinstance(name, str):
                    raise ctx.error(line, "payload.call_id", "a call needs a string call_id and name", call_id)
                if not isinstance(raw, str):
                    raise ctx.error(line, where, "expected a string", raw)
                call.calls.append(
                    ToolCall(
                        id=call_id,
                        name=name,
                        arguments_raw=raw,
                        arguments=None if custom else parse_arguments(raw),
                        type="custom" if custom else None,
                    )
                )
                names[call_id] = name
                call.n_items += 1
            elif item in ("function_call_output", "custom_tool_call_output"):
                end_call_by_input()
                call_id = p.get("call_id")
                if not isinstance(call_id, str):
                    raise ctx.error(line, "payload.call_id", "expected a string", call_id)
                builder.observation(
                    Observation(tool_call_id=call_id, name=names.get(call_id), content=_output_text(p.get("output")))
                )
            elif item == "web_search_call":
                output_starts()
                builder.skip("web_search_call")
                call.n_items += 1
            else:
                builder.skip(f"item:{item}")
    if call.n_items:
        close(None)
    if awaiting:
        builder.skip("call_without_token_count")
    yield builder.build(0)


def _compacted_head(builder: TrajectoryBuilder) -> list[MessageSpan]:
    """The history Codex keeps at a compaction (docs/log-formats.md#codex-rollout) as spans: the opening user
    messages, then each later user prompt (`user_after` of the turns so far). Codex
    keeps at most the last 20,000 tokens of prompts; the log does not say which were cut,
    so all are kept."""
    opening = 1 + len(builder.user_before_turns)
    head = [MessageSpan(start=MessageRef(turn=None, item=0), end=MessageRef(turn=None, item=opening))]
    for turn in builder.turns:
        first = 1 + len(turn.observations)
        for j in range(len(turn.user_after)):
            head.append(
                MessageSpan(
                    start=MessageRef(turn=turn.index, item=first + j),
                    end=MessageRef(turn=turn.index, item=first + j + 1),
                )
            )
    return head


def _usage(last: Any) -> Any:
    """Usage of a Codex token usage object (docs/log-formats.md#codex-rollout), None when it is not an object."""
    if not isinstance(last, dict):
        return None
    return Usage(
        prompt_tokens=non_negative_int(last.get("input_tokens")),
        completion_tokens=non_negative_int(last.get("output_tokens")),
        cached_tokens=non_negative_int(last.get("cached_input_tokens")),
        reasoning_tokens=non_negative_int(last.get("reasoning_output_tokens")),
        total_tokens=non_negative_int(last.get("total_tokens")),
    )
