"""mini-swe-agent trajectories (`*.traj.json`), one trajectory per file. Source:
SWE-agent/mini-swe-agent docs/usage/output_files.md and tests/test_data.

Assistant messages are text actions (a THOUGHT and one fenced bash block), the next user
message their observation (`<returncode>N</returncode>` the exit code); 2.x adds usage,
tool calls, Responses items and a final `exit` message. What each record becomes:
docs/log-formats.md#mini-swe-agent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmaker.apis.openai_responses import chat_messages, response_output
from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.json_reading import dict_or_empty, read_json_document
from benchmaker.trajectories.converters.openai_messages import feed_messages
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.trajectory import RecordedOutcome, Trajectory

FORMAT = "mini-swe-agent"
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a mini-swe-agent trajectory file. Raises
    ConvertError (`path: messages[i].field: problem`) on a malformed document."""
    doc = read_json_document(ctx)
    info: dict = {}
    if isinstance(doc, dict):
        info = dict_or_empty(doc.get("info"))
        messages = doc.get("messages")
    else:
        messages = doc
    if not isinstance(messages, list):
        raise ctx.error(None, "messages", "expected a list of messages", messages)
    builder = TrajectoryBuilder(ctx, FORMAT)
    if any(
        isinstance(m, dict) and "role" not in m and (m.get("object") == "response" or "type" in m) for m in messages
    ):
        messages = [_chat_message(m, i, ctx) for i, m in enumerate(messages)]
    feed_messages(messages, builder, ctx, None, text_actions=True)
    patch = info.get("submission") if isinstance(info.get("submission"), str) else builder.submission
    exit_status = info.get("exit_status") if isinstance(info.get("exit_status"), str) else builder.exit_status
    config = dict_or_empty(info.get("config"))
    model_cfg = dict_or_empty(config.get("model"))
    if builder.model is None and isinstance(model_cfg.get("model_name"), str):
        builder.model = model_cfg["model_name"]
    last = builder.turns[-1] if builder.turns else None
    if (
        patch is None
        and last is not None
        and SUBMIT_MARKER in (last.response.content or "")
        and len(last.observations) == 1
        and last.observations[0].exit_code is None
    ):
        patch = last.observations[0].content
        exit_status = exit_status or "Submitted"
    name = Path(ctx.path).name
    task_id = info.get("instance_id") if isinstance(info.get("instance_id"), str) else None
    if task_id is None and isinstance(doc, dict) and isinstance(doc.get("instance_id"), str):
        task_id = doc["instance_id"]  # 2.x writes it at the top level
    yield builder.build(
        0,
        task_id=task_id or (name[: -len(".traj.json")] if name.endswith(".traj.json") else None),
        outcome=RecordedOutcome(patch=patch, exit_status=exit_status),
    )


def _chat_message(entry: Any, i: int, ctx: FileContext) -> Any:
    """A Responses-API entry of a mini-swe-agent 2.x message list as a chat message (a
    `response` object -> its assistant message with `model` and chat-style `usage`; an
    input item such as `function_call_output` -> its message); chat messages as they
    are. Raises ConvertError naming `messages[i]` for an item chat_messages refuses."""
    if not isinstance(entry, dict) or "role" in entry:
        return entry
    if entry.get("object") == "response":
        out = response_output(entry)
        try:
            msgs = chat_messages({"input": [x for x in entry.get("output") or () if isinstance(x, dict)]})
        except ValueError as exc:
            raise ctx.error(None, f"messages[{i}].output", str(exc)) from None
        msg: dict[str, Any] = msgs[0] if msgs else {"role": "assistant", "content": None}
        usage: dict[str, Any] = {
            "prompt_tokens": out.input_tokens,
            "completion_tokens": out.output_tokens,
            "total_tokens": out.total_tokens,
        }
        if out.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": out.cached_tokens}
        if out.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": out.reasoning_tokens}
        msg["usage"] = usage
        if isinstance(entry.get("model"), str):
            msg["model"] = entry["model"]
        return msg
    try:
        msgs = chat_messages({"input": [entry]})
    except ValueError as exc:
        raise ctx.error(None, f"messages[{i}]", str(exc).removeprefix("input[0]")) from None
    return msgs[0] if msgs else entry
