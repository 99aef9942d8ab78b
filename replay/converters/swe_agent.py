"""SWE-agent `.traj` files (one JSON document, one trajectory). Source: SWE-agent
sweagent/types.py (`HistoryItem`, `AgentInfo`) and the trajectories in its
tests/test_data.

Shape: `{"environment": str, "trajectory": [steps], "history": [messages], "info":
{"exit_status", "submission", "model_stats", ...}}`. `history` is the message list the
model saw, so it is the source of the turns:
  - text-action histories (SWE-agent 0.x): assistant `content` holds the thought and a
    fenced command; the user message after it is the observation (as the model saw
    it, with the open-file/cwd footer); demonstration messages (`is_demo`) are sent
    to the model, so a demonstration can be the first user message;
  - function-calling histories (SWE-agent 1.x): assistant `tool_calls` (raw
    `function.arguments` strings), `tool` messages tied by `tool_call_ids`.
`info.submission` is the recorded patch, byte for byte; `info.exit_status` the exit
status. The task id is the file name without `.traj` (SWE-agent names it after the
instance id). Per-call usage is not logged (usage None); `info.model_stats` holds
totals only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from replay.converters._common import FileContext, TrajectoryBuilder, read_json_document
from replay.converters.openai_messages import feed_messages
from replay.trajectory import RecordedOutcome, Trajectory

FORMAT = "swe-agent"


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a SWE-agent `.traj` file. Raises ConvertError
    (`path: history[i].field: problem`) on a malformed document."""
    doc = read_json_document(ctx)
    if not isinstance(doc, dict):
        raise ctx.error(None, None, "expected a JSON object with `history` and `info`", doc)
    history = doc.get("history")
    if not isinstance(history, list):
        raise ctx.error(None, "history", "expected a list of messages", history)
    info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    if not isinstance(doc.get("info"), dict):
        raise ctx.error(None, "info", "expected an object", doc.get("info"))
    builder = TrajectoryBuilder(ctx, FORMAT)
    function_calling = any(isinstance(m, dict) and m.get("tool_calls") for m in history)
    feed_messages(history, builder, ctx, None, field_prefix="history", text_actions=not function_calling)
    submission = info.get("submission")
    exit_status = info.get("exit_status")
    name = Path(ctx.path).name
    task_id = name[: -len(".traj")] if name.endswith(".traj") else Path(name).stem
    yield builder.build(
        0,
        task_id=task_id,
        outcome=RecordedOutcome(
            patch=submission if isinstance(submission, str) else None,
            exit_status=exit_status if isinstance(exit_status, str) else None,
        ),
    )
