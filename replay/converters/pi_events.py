"""pi `--mode json` event streams (`pi -p --mode json ...` stdout), one trajectory per
file. Source: pi-mono packages/coding-agent/docs/json.md and packages/agent/src/
agent-loop.ts (`AgentEvent`).

Events, one JSON object per line with a `type`:
  `session` (header, pi >= 0.45.1), `agent_start`, `turn_start`, `message_start`,
  `message_update` (streaming deltas), `message_end {message}`, `tool_execution_start`,
  `tool_execution_update`, `tool_execution_end {toolCallId, toolName, result, isError}`,
  `turn_end {message, toolResults}`, `agent_end {messages}`, `auto_compaction_*`,
  `auto_retry_*`.

The conversation comes from `message_end` messages (user prompts, assistant turns,
toolResult messages), handled as in a session file (`pi_session.apply_message`).
Logs whose `message_*` events were filtered out still convert: a `turn_end` whose
assistant message was not seen as a `message_end` supplies the turn and its
`toolResults`, and a `tool_execution_end` supplies the observation of a tool call that
got no toolResult message (`observation_from_tool_execution_end`). `message_update`,
`agent_end` (a repeat of the messages) and the other events are counted under
`event:<type>`. There are no entry timestamps, so timing has `started_at` only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from replay.converters._common import FileContext, TrajectoryBuilder, iter_jsonl, text_of
from replay.converters.pi_session import apply_message
from replay.errors import ConvertError
from replay.trajectory import Observation, Trajectory

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
        "auto_retry_start",
        "auto_retry_end",
    }
)


class _State:
    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self.builder = TrajectoryBuilder(ctx, FORMAT)
        self.assistant_seen = False  # an assistant message_end since the last turn_start
        self.pending: dict[str, Observation] = {}  # tool_execution_end results by call id

    def flush_pending(self) -> None:
        """Attach buffered tool_execution_end results to the last turn's unanswered calls."""
        b = self.builder
        if b.turns:
            for call in b.turns[-1].response.tool_calls:
                obs = self.pending.pop(call.id, None)
                if obs is not None and not b.has_observation(call.id):
                    b.observation(obs)
                    b.skip("observation_from_tool_execution_end")
        if self.pending:
            b.skip("unmatched_tool_execution_end", len(self.pending))
        self.pending.clear()

    def message(self, msg: Any, line: int) -> None:
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "assistant":
            self.flush_pending()
            self.assistant_seen = True
        apply_message(msg, self.builder, self.ctx, line)


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a pi json event stream (see module docstring).
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
                        apply_message(res, b, ctx, line)
                state.assistant_seen = False
            elif kind == "tool_execution_end":
                call_id = event.get("toolCallId")
                if not isinstance(call_id, str):
                    raise ctx.error(line, "toolCallId", "tool_execution_end without toolCallId", call_id)
                result = event.get("result")
                content = result.get("content") if isinstance(result, dict) else result
                state.pending[call_id] = Observation(
                    tool_call_id=call_id,
                    name=event.get("toolName"),
                    content=text_of(content, b) if not isinstance(content, str) else content,
                    is_error=bool(event.get("isError", False)),
                )
                if b.has_observation(call_id):
                    state.pending.pop(call_id)
            else:  # streaming deltas, lifecycle, agent_end (a repeat), compaction/retry notices
                b.skip(f"event:{kind}")
        except ConvertError:
            if not ctx.lenient:
                raise
            ctx.skipped["bad_event"] += 1
    if not any_event:
        raise ctx.error(None, None, "no events")
    state.flush_pending()
    yield b.build(0)
