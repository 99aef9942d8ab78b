"""pi coding-agent session files (`~/.pi/agent/sessions/**/*.jsonl`), one trajectory per
file. Source: badlogic/pi-mono packages/coding-agent/src/core/session-manager.ts and
messages.ts.

Every assistant entry is a turn, in file order (pi writes a parent before its children),
abandoned branches and retries included; a request that is not the previous one plus
what followed gets a `ContextEdit` (compaction, branch). Timestamps are in ms.
What each record becomes: docs/log-formats.md#pi-session.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchmaker.trajectories.context import HistoryIndex, message_cursor
from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.content_parts import result_content, text_of
from benchmaker.trajectories.converters.json_reading import iter_jsonl, non_negative_int
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.timestamps import iso_from_ms, ms_from_iso
from benchmaker.trajectories.converters.tool_calls import synthesized_call
from benchmaker.trajectories.errors import ConvertError
from benchmaker.trajectories.trajectory import (
    ContextEdit,
    FinishReason,
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

_BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
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
    """Usage from a pi-ai `Usage` object (see docs/log-formats.md#pi-session); None when absent."""
    if not isinstance(usage, dict):
        return None
    inp, out = non_negative_int(usage.get("input")), non_negative_int(usage.get("output"))
    if inp is None and out is None:
        return None
    cr, cw = non_negative_int(usage.get("cacheRead")), non_negative_int(usage.get("cacheWrite"))
    prompt = None if inp is None else inp + (cr or 0) + (cw or 0)
    total = non_negative_int(usage.get("totalTokens"))
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
        elif kind == "toolCall":
            call_id, name = part.get("id"), part.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise ctx.error(line, f"message.content[{j}]", "toolCall without id or name", part)
            calls.append(synthesized_call(call_id, name, part.get("arguments", {}), builder))
        elif kind == "thinking":
            thinking.append(part.get("thinking", ""))
        else:
            builder.skip(f"assistant_part:{kind}")
    stop = msg.get("stopReason")
    if stop not in STOP_REASONS:
        raise ctx.error(line, "message.stopReason", "unknown stop reason", stop)
    finish = STOP_REASONS[stop]
    usage = pi_usage(msg.get("usage"))
    if (
        usage is not None
        and finish in ("aborted", "error")
        and not any((usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens))
    ):
        usage = None
        builder.skip("usage_zero_on_failed_turn")
    error = msg.get("errorMessage")
    if not (isinstance(error, str) and error):
        error = None
    started_ms = msg.get("timestamp")
    ended_ms = ms_from_iso(entry_timestamp)
    duration = None
    if isinstance(started_ms, (int, float)) and ended_ms is not None and ended_ms >= started_ms:
        duration = round(ended_ms - started_ms, 3)
    started_at = iso_from_ms(started_ms)
    timing = (
        Timing(ttft_ms=None, duration_ms=duration, started_at=started_at)
        if started_at or duration is not None
        else None
    )
    if len(texts) > 1:  # an empty text block (pi opens one for a Gemini stream's closing empty part) adds no line
        texts = [t for t in texts if t] or texts[:1]
    builder.turn(
        Response(
            content="\n".join(texts) if texts else None,
            reasoning="\n".join(thinking) if thinking else None,
            tool_calls=calls,
            finish_reason=finish,
        ),
        usage=usage,
        timing=timing,
        model=model if isinstance(model := msg.get("model"), str) else default_model,
        error=error,
    )


def tool_result(
    msg: dict[str, Any], builder: TrajectoryBuilder, ctx: FileContext, line: int | None
) -> tuple[int | None, int] | None:
    """Attach a pi ToolResultMessage to the last turn as an Observation; its (turn, item)
    MessageRef coordinates, None when nothing was added (a result for a call that already
    has one: `duplicate_tool_result`; no turn yet: `orphan_observation`). Raises
    ConvertError when `toolCallId` is not a string."""
    call_id = msg.get("toolCallId")
    if not isinstance(call_id, str):
        raise ctx.error(line, "message.toolCallId", "toolResult without toolCallId", call_id)
    if builder.has_observation(call_id):
        builder.skip("duplicate_tool_result")
        return None
    text, parts = result_content(msg.get("content"), builder)
    obs = Observation(
        tool_call_id=call_id,
        name=msg.get("toolName"),
        content=text,
        is_error=bool(msg.get("isError", False)),
        parts=parts,
    )
    at = message_cursor(builder) if builder.turns else None  # no turn: counted as orphan_observation
    builder.observation(obs)
    return at


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
        builder.user(*result_content(msg.get("content"), builder))
    elif role == "assistant":
        assistant_turn(msg, builder, ctx, line, entry_timestamp, default_model)
    elif role == "toolResult":
        tool_result(msg, builder, ctx, line)
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


@dataclass(slots=True, eq=False)
class _Entry:
    """One session entry in file order: its line, id, parent and (once fed to the
    builder) the position of the history message it produced."""

    line: int
    entry: dict[str, Any]
    id: str
    parent: str | None
    index: int
    up: _Entry | None = None  # the parent's _Entry (`_Tree` sets it)
    pos: int | None = None  # position in the history (`HistoryIndex`), None: no message
    model: str | None = None  # the model in force at this entry on its path
    retried: bool = False  # a failed assistant message pi retried (left out of later requests)


class _Tree:
    """The session tree (v1 files: a chain in file order, as pi's `migrateV1ToV2`) and the
    history built from ALL its entries in file order, so every request the agent sent,
    on an abandoned branch too, can be rebuilt (docs/log-formats.md#pi-session)."""

    def __init__(self, entries: list[tuple[int, dict[str, Any]]], ctx: FileContext, tree: bool):
        self.ctx = ctx
        self.by_id: dict[str, _Entry] = {}
        self.nodes: list[_Entry] = []
        prev: str | None = None
        for i, (line, entry) in enumerate(entries):
            if tree:
                entry_id, parent = entry.get("id"), entry.get("parentId")
                if not isinstance(entry_id, str):
                    raise ctx.error(line, "id", "entry without an id in a v2/v3 session", entry_id)
                if parent is not None and not isinstance(parent, str):
                    raise ctx.error(line, "parentId", "expected an entry id (string) or null", parent)
                if parent is not None and parent not in self.by_id:
                    raise ctx.error(line, "parentId", "parent entry not found before this entry", parent)
            else:
                entry_id, parent = f"#{line}", prev  # v1: each entry's parent is the one before
            node = _Entry(line, entry, entry_id, parent, i)
            self.by_id[entry_id] = node
            self.nodes.append(node)
            prev = entry_id
        for node in self.nodes:  # once all are in: an id used twice names its last entry, as in by_id
            node.up = self.by_id.get(node.parent) if node.parent is not None else None
            if node.up is not None and node.up.index >= node.index:
                # a later entry reused the parent's id: walking up could loop forever
                raise ctx.error(
                    node.line,
                    "parentId",
                    f"names an id that a later entry (line {node.up.line}) uses again: the session tree would loop",
                    node.parent,
                )
        # every entry the child of the one before it (all v1 files, most v2/v3): then a
        # turn extends the previous one unless a compaction or a retry lies between (v1: so by construction)
        self.linear = not tree or all(
            n.parent == (self.nodes[i - 1].id if i else None) for i, n in enumerate(self.nodes)
        )
        self.compactions = [n.index for n in self.nodes if n.entry["type"] == "compaction"]
        self.index: HistoryIndex | None = None  # set once the builder exists
        self.applied: set[str] = set()  # ids of compactions an edit has applied

    def path_to(self, entry_id: str | None, stop_at: int = -1) -> list[_Entry]:
        """The entries from the root (or, with `stop_at`, from the first entry after
        file index `stop_at`) down to `entry_id`, root first."""
        path: list[_Entry] = []
        current = self.by_id.get(entry_id) if entry_id is not None else None
        while current is not None and current.index > stop_at:
            path.append(current)
            current = current.up
        path.reverse()
        return path

    def extends(self, prev: _Entry | None, node: _Entry) -> bool:
        """True when the request of the assistant entry `node` is the request of the
        assistant entry `prev` (None: the start) plus `prev` and every history message
        written between them in file order: `prev` is an ancestor of `node`, every
        message between them in the file is on `node`'s path, and no compaction is."""
        stop = -1 if prev is None else prev.index
        if prev is not None and prev.retried:
            return False
        if self.linear:
            return not self.compactions or not any(stop < c < node.index for c in self.compactions)
        between = self.path_to(node.parent, stop)
        first = between[0] if between else None
        parent_of_first = first.parent if first is not None else node.parent
        if (None if prev is None else prev.id) != parent_of_first:
            return False  # prev is not an ancestor of node
        if any(e.entry["type"] == "compaction" for e in between):
            return False
        on_path = {e.index for e in between}
        return all(n.pos is None or n.index in on_path for n in self.nodes[stop + 1 : node.index])

    def request_edit(self, node: _Entry, builder: TrajectoryBuilder) -> ContextEdit:
        """The ContextEdit giving the request of the assistant entry `node` (the next
        turn): pi's `buildSessionContext` at its parent entry, as spans of the history."""
        path = self.path_to(node.parent)
        compaction = next((e for e in reversed(path) if e.entry["type"] == "compaction"), None)
        summary: list[str] = []
        kept: list[_Entry] = path
        tokens = None
        if compaction is not None:
            comp = compaction.entry
            summary = [compaction_text(str(comp.get("summary", "")))]
            at = path.index(compaction)
            first_id = comp.get("firstKeptEntryId")
            if not isinstance(first_id, str) and isinstance(comp.get("firstKeptEntryIndex"), int):
                first_id = f"#{comp['firstKeptEntryIndex'] + 1}"  # v1: a file index, header = 0
            start = next((i for i in range(at) if path[i].id == first_id), None)
            if start is None:
                builder.skip("compaction_keeps_nothing")
                start = at
            kept = path[start:at] + path[at + 1 :]
            tokens = non_negative_int(comp.get("tokensBefore"))
        positions = [e.pos for e in kept if e.pos is not None and not e.retried]
        assert self.index is not None, "request_edit runs once the builder (and its index) exists"
        if compaction is None or compaction.id in self.applied:
            return self.index.edit("branch", positions, summary=summary)
        self.applied.add(compaction.id)
        return self.index.edit("compaction", positions, summary=summary, tokens_before=tokens)


def _is_failed_call(entry: dict[str, Any]) -> bool:
    """An assistant message entry whose call failed (`stopReason` "error")."""
    msg = entry.get("message")
    return (
        entry.get("type") == "message"
        and isinstance(msg, dict)
        and msg.get("role") == "assistant"
        and msg.get("stopReason") == "error"
    )


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a pi session file (see docs/log-formats.md#pi-session).
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
    tree = _Tree(entries, ctx, isinstance(version, int) and version >= 2)
    builder = TrajectoryBuilder(ctx, FORMAT)
    tree.index = index = HistoryIndex(builder)
    header_model = header.get("modelId") if isinstance(header.get("modelId"), str) else None
    # a fork (`/fork`, `--fork`: header `parentSession`, older `branchedFrom`) starts with
    # a copy of the parent's entries, stamped before the new header
    forked_at = (
        ms_from_iso(header.get("timestamp")) if (header.get("parentSession") or header.get("branchedFrom")) else None
    )
    prev_turn: _Entry | None = None  # the entry of the latest assistant turn
    for node in tree.nodes:
        entry, line, kind = node.entry, node.line, node.entry["type"]
        parent = node.up
        node.model = parent.model if parent is not None else header_model
        if kind == "message":
            msg: Any = entry.get("message")
            is_turn = isinstance(msg, dict) and msg.get("role") == "assistant"
            if is_turn:
                failed = parent
                while failed is not None and failed.entry["type"] == "compaction":  # overflow: compact, then retry
                    failed = failed.up
                if failed is not None and _is_failed_call(failed.entry):
                    failed.retried = True  # pi's auto-retry: the failed message is not resent
                if not tree.extends(prev_turn, node):
                    builder.edit(tree.request_edit(node, builder))
            n_turns = len(builder.turns)
            try:
                if is_turn:  # apply_message's assistant case, which adds exactly one turn (or raises)
                    assistant_turn(msg, builder, ctx, line, entry.get("timestamp"), node.model)
                    node.pos = index.push(n_turns, 0)
                elif type(msg) is dict and msg.get("role") == "toolResult":  # its toolResult case
                    at = tool_result(msg, builder, ctx, line)
                    node.pos = None if at is None else index.push(*at)
                else:
                    node.pos = index.add(
                        lambda msg=msg, line=line, entry=entry, node=node: apply_message(
                            msg, builder, ctx, line, entry.get("timestamp"), node.model
                        )
                    )
            except ConvertError:
                if not ctx.lenient:
                    raise
                builder.skip("bad_entry")
            if len(builder.turns) > n_turns:
                prev_turn = node
                if forked_at is not None:
                    stamped = ms_from_iso(entry.get("timestamp"))
                    if stamped is not None and stamped < forked_at:
                        builder.skip("turn_copied_from_parent_session")
                if isinstance(msg.get("model"), str):
                    node.model = msg["model"]
        elif kind == "branch_summary" and entry.get("summary"):
            node.pos = index.add(
                lambda entry=entry: builder.user(
                    _BRANCH_SUMMARY_PREFIX + str(entry["summary"]) + _BRANCH_SUMMARY_SUFFIX
                )
            )
        elif kind == "custom_message":
            node.pos = index.add(lambda entry=entry: builder.user(*result_content(entry.get("content"), builder)))
        elif kind == "model_change":
            named = entry.get("modelId")
            if not isinstance(named, str) and isinstance(entry.get("model"), dict):
                named = entry["model"].get("id")  # `model: {id, name}` in some writers
            if isinstance(named, str):
                node.model = named
            else:
                builder.skip("model_change")
        elif kind == "compaction":
            pass  # applied by the edit of the next turn on its path (`_Tree.request_edit`)
        elif kind in _SKIPPED_TYPES:
            builder.skip(kind)
        else:
            builder.skip(f"entry:{kind}")
    if builder.model is None and header_model is not None:
        builder.model = header_model
    yield builder.build(0)
