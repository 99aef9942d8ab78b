"""pi coding-agent session files (`~/.pi/agent/sessions/**/*.jsonl`), one trajectory per
file. Source: badlogic/pi-mono packages/coding-agent/src/core/session-manager.ts and
messages.ts.

Line 1 is the header `{"type": "session", "id", "timestamp", "cwd", "version"?}`.
Versions:
  - v1 (no `version`): entries have no ids; the conversation is the file order.
  - v2/v3: every entry has `id` and `parentId`; the file is a tree. The active branch
    is the path from the last entry back to the root (pi's `buildSessionContext` with
    no explicit leaf); entries off that path are counted as `off_branch_entry`.

Entries on the branch:
  - `message`: `message.role` user → a prompt (the first one is `first_user`, later
    ones go to the previous turn's `user_after`); assistant → a turn; toolResult → an
    observation (`toolCallId`, `toolName`, `isError`); bashExecution (a `!cmd` the user
    ran) → a user message with pi's `bashExecutionToText` text, or skipped
    (`bash_execution_excluded`) when `excludeFromContext`; custom/hookMessage → a user
    message with its text.
  - `branch_summary`, `custom_message` → user messages (as pi sends them to the model).
  - `compaction {summary, firstKeptEntryIndex (v1: index of a line of the file, header
    = 0) | firstKeptEntryId (v2/v3), tokensBefore}` → a `ContextEdit` on the next turn:
    from then on pi sends the summary (as a user message, pi messages.ts
    `COMPACTION_SUMMARY_PREFIX` + summary + `COMPACTION_SUMMARY_SUFFIX`) followed by the
    messages from the first kept entry on (session-manager.ts `buildSessionContext`);
    `replay.context.request_messages` rebuilds those requests.
  - `model_change {modelId}` (or `{model: {id}}`) → the model of the following turns
    whose message names none (an assistant message's own `model` wins).
  - `thinking_level_change`, `custom`, `label`, `session_info` → counted in `skipped`
    under their type.

Assistant messages: `content` is a list of parts (a plain string is one text part); text
parts joined with "\\n" are the content (None when there is
no text part), `thinking` parts the reasoning, `toolCall` parts the tool calls. pi
stores only parsed `arguments`, so `arguments_raw = json.dumps(arguments)` and each is
counted under `arguments_raw_synthesized`. `stopReason` maps stop→stop,
toolUse→tool_calls, length→length, aborted→aborted, error→error; aborted and error
turns are kept, with their `errorMessage` as `Turn.error`. Usage (pi-ai `Usage`): prompt = input + cacheRead + cacheWrite,
cached = cacheRead, completion = output, total = totalTokens or the sum; an aborted or
error turn whose counts are all 0 gets usage None (`usage_zero_on_failed_turn`).
Timing: `started_at` = `message.timestamp` (ms, set when the request starts);
`duration_ms` = entry `timestamp` (written at message_end) minus it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from replay.converters._common import (
    ARGS_SYNTH,
    FileContext,
    TrajectoryBuilder,
    iso_from_ms,
    iter_jsonl,
    ms_from_iso,
    synth_arguments_raw,
    text_of,
)
from replay.errors import ConvertError
from replay.trajectory import (
    ContextEdit,
    FinishReason,
    MessageRef,
    Observation,
    Response,
    Timing,
    ToolCall,
    Trajectory,
    Usage,
)

FORMAT = "pi-session"

STOP_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "toolUse": "tool_calls",
    "length": "length",
    "aborted": "aborted",
    "error": "error",
}

_BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
_BRANCH_SUMMARY_SUFFIX = "</summary>"
_SKIPPED_TYPES = {"thinking_level_change", "custom", "label", "session_info"}

COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"


def compaction_text(summary: str) -> str:
    """The user-message text pi sends for a compaction summary (pi-mono messages.ts
    `convertToLlm`, role `compactionSummary`)."""
    return COMPACTION_SUMMARY_PREFIX + summary + COMPACTION_SUMMARY_SUFFIX


def bash_execution_text(msg: dict[str, Any]) -> str:
    """The user-message text pi sends for a `bashExecution` message
    (pi-mono messages.ts `bashExecutionToText`)."""
    text = f"Ran `{msg.get('command', '')}`\n"
    output = msg.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = msg.get("exitCode")
    if msg.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if msg.get("truncated") and msg.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {msg['fullOutputPath']}]"
    return text


def pi_usage(usage: Any) -> Usage | None:
    """Usage from a pi-ai `Usage` object (see module docstring); None when absent."""
    if not isinstance(usage, dict):
        return None

    def n(key: str) -> int | None:
        v = usage.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

    inp, out, cr, cw = n("input"), n("output"), n("cacheRead"), n("cacheWrite")
    if inp is None and out is None:
        return None
    prompt = None if inp is None else inp + (cr or 0) + (cw or 0)
    total = n("totalTokens")
    if total is None and prompt is not None and out is not None:
        total = prompt + out
    return Usage(prompt_tokens=prompt, completion_tokens=out, cached_tokens=cr, total_tokens=total)


def assistant_turn(
    msg: dict[str, Any],
    builder: TrajectoryBuilder,
    ctx: FileContext,
    line: int | None,
    entry_timestamp: Any = None,
    default_model: str | None = None,
) -> None:
    """Append the turn of a pi AssistantMessage (`default_model`: the model of the
    latest `model_change`, used when the message names none). Raises ConvertError on an unknown
    `stopReason`, a non-list `content` or a malformed tool call."""
    content = msg.get("content")
    if isinstance(content, str):  # some writers keep a plain-text answer as a string
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise ctx.error(line, "message.content", "expected a list of content parts or a string", content)
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(part.get("text", ""))
        elif kind == "thinking":
            thinking.append(part.get("thinking", ""))
        elif kind == "toolCall":
            call_id, name = part.get("id"), part.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise ctx.error(line, f"message.content[{j}]", "toolCall without id or name", part)
            args = part.get("arguments", {})
            builder.skip(ARGS_SYNTH)
            calls.append(
                ToolCall(
                    id=call_id,
                    name=name,
                    arguments_raw=synth_arguments_raw(args),
                    arguments=args if isinstance(args, dict) else None,
                )
            )
        else:
            builder.skip(f"assistant_part:{kind}")
    stop = msg.get("stopReason")
    if stop not in STOP_REASONS:
        raise ctx.error(line, "message.stopReason", "unknown stop reason", stop)
    finish = STOP_REASONS[stop]
    usage = pi_usage(msg.get("usage"))
    if usage is not None and finish in ("aborted", "error") and not any(
        (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
    ):
        usage = None
        builder.skip("usage_zero_on_failed_turn")
    error = msg.get("errorMessage") if isinstance(msg.get("errorMessage"), str) and msg.get("errorMessage") else None
    started_ms = msg.get("timestamp")
    ended_ms = ms_from_iso(entry_timestamp)
    duration = None
    if isinstance(started_ms, int | float) and ended_ms is not None and ended_ms >= started_ms:
        duration = round(ended_ms - started_ms, 3)
    started_at = iso_from_ms(started_ms)
    timing = Timing(started_at=started_at, duration_ms=duration) if started_at or duration is not None else None
    builder.turn(
        Response(
            content="\n".join(texts) if texts else None,
            reasoning="\n".join(thinking) if thinking else None,
            tool_calls=calls,
            finish_reason=finish,
        ),
        usage=usage,
        timing=timing,
        model=msg.get("model") if isinstance(msg.get("model"), str) else default_model,
        error=error,
    )


def apply_message(
    msg: Any,
    builder: TrajectoryBuilder,
    ctx: FileContext,
    line: int | None,
    entry_timestamp: Any = None,
    default_model: str | None = None,
) -> None:
    """Feed one pi AgentMessage (user, assistant, toolResult, bashExecution, custom,
    branchSummary, compactionSummary) into `builder`; an unknown role is skipped and
    counted as `role:<name>`. Raises ConvertError on a malformed message."""
    if not isinstance(msg, dict):
        raise ctx.error(line, "message", "expected a message object", msg)
    role = msg.get("role")
    if role == "user":
        builder.user(text_of(msg.get("content"), builder))
    elif role == "assistant":
        assistant_turn(msg, builder, ctx, line, entry_timestamp, default_model)
    elif role == "toolResult":
        call_id = msg.get("toolCallId")
        if not isinstance(call_id, str):
            raise ctx.error(line, "message.toolCallId", "toolResult without toolCallId", call_id)
        if builder.has_observation(call_id):
            builder.skip("duplicate_tool_result")
            return
        builder.observation(
            Observation(
                tool_call_id=call_id,
                name=msg.get("toolName"),
                content=text_of(msg.get("content"), builder),
                is_error=bool(msg.get("isError", False)),
            )
        )
    elif role == "bashExecution":
        if msg.get("excludeFromContext"):
            builder.skip("bash_execution_excluded")
        else:
            builder.user(bash_execution_text(msg))
    elif role in ("custom", "hookMessage"):
        builder.user(text_of(msg.get("content"), builder))
    elif role == "branchSummary":
        builder.user(_BRANCH_SUMMARY_PREFIX + str(msg.get("summary", "")) + _BRANCH_SUMMARY_SUFFIX)
    elif role == "compactionSummary":
        builder.user(compaction_text(str(msg.get("summary", ""))))
    else:
        builder.skip(f"role:{role}")


def _active_branch(entries: list[tuple[int, dict[str, Any]]], ctx: FileContext) -> list[tuple[int, dict[str, Any]]]:
    by_id: dict[str, tuple[int, dict[str, Any]]] = {}
    for line, entry in entries:
        entry_id = entry.get("id")
        if not isinstance(entry_id, str):
            raise ctx.error(line, "id", "entry without an id in a v2/v3 session", entry_id)
        by_id[entry_id] = (line, entry)
    path: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()
    current: tuple[int, dict[str, Any]] | None = entries[-1]
    while current is not None:
        line, entry = current
        if entry["id"] in seen:
            raise ctx.error(line, "parentId", "cycle in the entry tree", entry.get("parentId"))
        seen.add(entry["id"])
        path.append(current)
        parent = entry.get("parentId")
        if parent is None:
            break
        if parent not in by_id:
            raise ctx.error(line, "parentId", "parent entry not found", parent)
        current = by_id[parent]
    path.reverse()
    return path


def _compaction_edit(entry: dict[str, Any], refs: dict[int, MessageRef], ids: dict[str, int],
                     builder: TrajectoryBuilder) -> ContextEdit:
    """The ContextEdit of a `compaction` entry: keep from the first message at or after
    the first kept entry (by file index), else nothing from before the compaction."""
    first: int | None = None
    if isinstance(entry.get("firstKeptEntryId"), str):
        first = ids.get(entry["firstKeptEntryId"])
    elif isinstance(entry.get("firstKeptEntryIndex"), int):
        first = entry["firstKeptEntryIndex"]
    keep = None
    if first is not None:
        later = [i for i in refs if i >= first]
        keep = refs[min(later)] if later else None
    if keep is None:
        builder.skip("compaction_keeps_nothing")
        keep = builder.next_ref("user")
    tokens = entry.get("tokensBefore")
    return ContextEdit(
        kind="compaction",
        summary=[compaction_text(str(entry.get("summary", "")))],
        keep_from=keep,
        tokens_before=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None,
    )


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a pi session file (see module docstring).
    Raises ConvertError naming the line and field of a malformed entry."""
    records = list(iter_jsonl(ctx))
    if not records:
        raise ctx.error(None, None, "no entries")
    header: dict[str, Any] = {}
    first_line, first = records[0]
    if isinstance(first, dict) and first.get("type") == "session":
        header = first
        records = records[1:]
    entries: list[tuple[int, dict[str, Any]]] = []
    for line, entry in records:
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            if ctx.lenient:
                ctx.skipped["bad_entry"] += 1
                continue
            raise ctx.error(line, "type", "expected an entry object with a `type`", entry)
        entries.append((line, entry))
    if not entries:
        raise ctx.error(first_line, None, "session has no entries after the header")
    version = header.get("version", 1)
    builder = TrajectoryBuilder(ctx, FORMAT)
    if isinstance(version, int) and version >= 2:
        path = _active_branch(entries, ctx)
        if len(entries) > len(path):
            builder.skip("off_branch_entry", len(entries) - len(path))
    else:
        path = entries
    refs: dict[int, MessageRef] = {}  # file index (line - 1, header = 0) -> message position
    ids: dict[str, int] = {}
    model: str | None = header.get("modelId") if isinstance(header.get("modelId"), str) else None
    for line, entry in path:
        kind = entry["type"]
        if isinstance(entry.get("id"), str):
            ids[entry["id"]] = line - 1
        if kind == "message":
            msg = entry.get("message")
            role = msg.get("role") if isinstance(msg, dict) else None
            refs[line - 1] = builder.next_ref("assistant" if role == "assistant" else "user")
            try:
                apply_message(msg, builder, ctx, line, entry.get("timestamp"), model)
            except ConvertError:
                if not ctx.lenient:
                    raise
                builder.skip("bad_entry")
        elif kind == "branch_summary" and entry.get("summary"):
            refs[line - 1] = builder.next_ref("user")
            builder.user(_BRANCH_SUMMARY_PREFIX + entry["summary"] + _BRANCH_SUMMARY_SUFFIX)
        elif kind == "custom_message":
            refs[line - 1] = builder.next_ref("user")
            builder.user(text_of(entry.get("content"), builder))
        elif kind == "compaction":
            builder.edit(_compaction_edit(entry, refs, ids, builder))
        elif kind == "model_change":
            named = entry.get("modelId")
            if not isinstance(named, str) and isinstance(entry.get("model"), dict):
                named = entry["model"].get("id")  # `model: {id, name}` in some writers
            if isinstance(named, str):
                model = named
            else:
                builder.skip("model_change")
        elif kind in _SKIPPED_TYPES:
            builder.skip(kind)
        else:
            builder.skip(f"entry:{kind}")
    if builder.model is None and isinstance(header.get("modelId"), str):
        builder.model = header["modelId"]
    yield builder.build(0)
