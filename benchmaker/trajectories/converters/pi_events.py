"""pi `--mode json` event streams (`pi -p --mode json ...` stdout), one trajectory per
file. Source: pi-mono packages/coding-agent/docs/json.md and packages/agent/src/
agent-loop.ts (`AgentEvent`).

Turns come from `message_end` messages, handled as in a session file; compactions and
automatic retries become ContextEdits (the first kept message found by pi's own
cut-point rule, the stream having no entry ids). No entry timestamps: timing has
`started_at` only. What each record becomes: docs/log-formats.md#pi-events.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from benchmaker.trajectories.context import HistoryIndex
from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.content_parts import result_content
from benchmaker.trajectories.converters.json_reading import iter_jsonl, non_negative_int
from benchmaker.trajectories.converters.pi_session import apply_message, compaction_text
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.errors import ConvertError
from benchmaker.trajectories.trajectory import MessageRef, Observation, Trajectory

FORMAT = "pi-events"

EVENT_TYPES = frozenset(
    {
        "agent_start",
        "agent_end",
        "turn_start",
        "turn_end",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_end",
        "auto_compaction_start",
        "auto_compaction_end",
        "compaction_start",
        "compaction_end",
        "auto_retry_start",
        "auto_retry_end",
    }
)


PI_KEEP_RECENT_TOKENS = 20_000
"""pi's default `compaction.keepRecentTokens` (compaction.ts `DEFAULT_COMPACTION_SETTINGS`)."""

_IMAGE_CHARS = 4800  # pi's estimate of one image in a tool result (1,200 tokens)


def pi_estimate_tokens(msg: dict[str, Any]) -> int:
    """pi's size estimate of one AgentMessage in tokens (compaction.ts `estimateTokens`:
    ceil(chars / 4); user: text parts; assistant: text, thinking, tool name + JSON
    arguments; toolResult/custom: text parts + 4,800 chars per image; bashExecution:
    command + output; branch/compaction summaries: the summary). Lengths are counted in
    code points (JavaScript counts UTF-16 units: astral characters differ by one)."""
    role = msg.get("role")
    content = msg.get("content")
    chars = 0
    if role in ("user", "custom", "toolResult", "hookMessage"):
        if isinstance(content, str):
            chars = len(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text" and isinstance(part.get("text"), str):
                    chars += len(part["text"])
                elif part.get("type") == "image" and role != "user":
                    chars += _IMAGE_CHARS
    elif role == "assistant" and isinstance(content, list):
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                chars += len(str(part.get("text", "")))
            elif kind == "thinking":
                chars += len(str(part.get("thinking", "")))
            elif kind == "toolCall":
                chars += len(str(part.get("name", ""))) + len(
                    json.dumps(part.get("arguments"), separators=(",", ":"), ensure_ascii=False)
                )
    elif role == "assistant" and isinstance(content, str):
        chars = len(content)
    elif role == "bashExecution":
        chars = len(str(msg.get("command", ""))) + len(str(msg.get("output", "")))
    elif role in ("branchSummary", "compactionSummary"):
        chars = len(str(msg.get("summary", "")))
    return math.ceil(chars / 4)


def first_kept(messages: list[tuple[MessageRef, dict[str, Any]]], keep_recent: int) -> MessageRef | None:
    """The first message pi keeps at a compaction (compaction.ts `findCutPoint` over the
    messages since the previous compaction, oldest first): None when there are none."""
    cuts = [i for i, (_, m) in enumerate(messages) if m.get("role") != "toolResult"]
    if not cuts:
        return messages[0][0] if messages else None
    cut = cuts[0]
    total = 0
    for i in range(len(messages) - 1, -1, -1):
        total += pi_estimate_tokens(messages[i][1])
        if total >= keep_recent:
            cut = next((c for c in cuts if c >= i), cut)
            break
    return messages[cut][0]


class _State:
    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self.builder = TrajectoryBuilder(ctx, FORMAT)
        self.assistant_seen = False  # an assistant message_end since the last turn_start
        self.pending: dict[str, Observation] = {}  # tool_execution_end results by call id
        self.since: list[tuple[MessageRef, dict[str, Any]]] = []  # messages since the last compaction
        self.index = HistoryIndex(self.builder)
        # the agent's context: `summary`, then the history from position `start` on,
        # without the positions in `dropped` (failed calls pi retried)
        self.summary: list[str] = []
        self.start = 0
        self.dropped: set[int] = set()
        self.last_turn_pos: int | None = None

    def feed(self, msg: Any, line: int) -> None:
        """`apply_message`, remembering the message (and where it went) for compaction."""
        n_turns = len(self.builder.turns)
        pos = self.index.add(lambda: apply_message(msg, self.builder, self.ctx, line))
        if pos is not None:
            self.since.append((self.index.order[pos], msg))
            if len(self.builder.turns) > n_turns:
                self.last_turn_pos = pos

    def _edit(self, kind: str, tokens_before: int | None = None) -> None:
        keep = [p for p in range(self.start, len(self.index.order)) if p not in self.dropped]
        self.builder.edit(self.index.edit(kind, keep, summary=self.summary, tokens_before=tokens_before))

    def compaction(self, event: dict[str, Any]) -> None:
        """A `*compaction_end` event (docs/log-formats.md#pi-events)."""
        b = self.builder
        result = event.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("summary"), str):
            b.skip("compaction_without_result")
            return
        if (
            event.get("willRetry") is True
            and b.turns
            and b.turns[-1].response.finish_reason == "error"
            and self.last_turn_pos is not None
        ):  # a context overflow: the failed call is retried
            self.dropped.add(self.last_turn_pos)
            b.skip("retried_call_left_out")
        keep = first_kept(self.since, PI_KEEP_RECENT_TOKENS)
        b.skip("compaction_cut_by_pi_rule")
        self.start = self.index.order.index(keep) if keep is not None else len(self.index.order)
        self.summary = [compaction_text(result["summary"])]
        self._edit("compaction", non_negative_int(result.get("tokensBefore")))
        self.since = []

    def retry(self) -> None:
        """An `auto_retry_start` after a failed call: pi drops the failed assistant
        message from the agent's context and calls again (docs/log-formats.md#pi-events)."""
        b = self.builder
        if not b.turns or b.turns[-1].response.finish_reason != "error" or self.last_turn_pos is None:
            b.skip("event:auto_retry_start")
            return
        self.dropped.add(self.last_turn_pos)
        b.skip("retried_call_left_out")
        self._edit("branch")

    def flush_pending(self) -> None:
        """Attach buffered tool_execution_end results to the last turn's unanswered calls."""
        b = self.builder
        if b.turns:
            for call in b.turns[-1].response.tool_calls:
                obs = self.pending.pop(call.id, None)
                if obs is not None and not b.has_observation(call.id):
                    pos = self.index.add(lambda obs=obs: b.observation(obs))
                    if pos is not None:
                        self.since.append((self.index.order[pos], {"role": "toolResult", "content": obs.content}))
                    b.skip("observation_from_tool_execution_end")
        if self.pending:
            b.skip("unmatched_tool_execution_end", len(self.pending))
        self.pending.clear()

    def message(self, msg: Any, line: int) -> None:
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "assistant":
            self.flush_pending()
            self.assistant_seen = True
        self.feed(msg, line)


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a pi json event stream (see docs/log-formats.md#pi-events).
    Raises ConvertError naming the line and field of a malformed event."""
    state = _State(ctx)
    b = state.builder
    any_event = False
    for line, event in iter_jsonl(ctx):
        kind = event.get("type") if isinstance(event, dict) else None
        if not isinstance(kind, str):
            if ctx.lenient:
                ctx.skipped["bad_event"] += 1
                continue
            raise ctx.error(line, "type", "expected an event object with a `type`", event)
        any_event = True
        try:
            if kind == "session":
                b.skip("event:session")
            elif kind == "message_end":
                state.message(event.get("message"), line)
            elif kind == "turn_start":
                state.assistant_seen = False
                b.skip("event:turn_start")
            elif kind == "turn_end":
                if not state.assistant_seen and isinstance(event.get("message"), dict):
                    state.message(event["message"], line)
                    b.skip("assistant_from_turn_end")
                results = event.get("toolResults") or []
                for res in results if isinstance(results, list) else []:
                    if isinstance(res, dict) and not b.has_observation(str(res.get("toolCallId"))):
                        state.feed(res, line)
                state.assistant_seen = False
            elif kind == "tool_execution_end":
                call_id = event.get("toolCallId")
                if not isinstance(call_id, str):
                    raise ctx.error(line, "toolCallId", "tool_execution_end without toolCallId", call_id)
                result = event.get("result")
                content = result.get("content") if isinstance(result, dict) else result
                text, parts = result_content(content, b)
                state.pending[call_id] = Observation(
                    tool_call_id=call_id,
                    name=event.get("toolName"),
                    content=text,
                    is_error=bool(event.get("isError", False)),
                    parts=parts,
                )
                if b.has_observation(call_id):
                    state.pending.pop(call_id)
            elif kind in ("compaction_end", "auto_compaction_end"):
                state.compaction(event)
            elif kind == "auto_retry_start":
                state.retry()
            else:  # streaming deltas, lifecycle, agent_end (a repeat), compaction starts, retry notices
                b.skip(f"event:{kind}")
        except ConvertError:
            if not ctx.lenient:
                raise
            ctx.skipped["bad_event"] += 1
    if not any_event:
        raise ctx.error(None, None, "no events")
    state.flush_pending()
    yield b.build(0)
