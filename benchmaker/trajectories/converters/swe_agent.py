"""SWE-agent `.traj` files (one JSON document, one trajectory). Source: SWE-agent
sweagent/types.py (`HistoryItem`, `AgentInfo`) and the trajectories in its
tests/test_data.

`history` (the messages the model saw: text actions or function calls, possibly written
as Python literals) gives the turns; a final call only in `trajectory` becomes a turn
when it can be rebuilt. No per-call usage is logged. What each record becomes:
docs/log-formats.md#swe-agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.json_reading import read_json_document
from benchmaker.trajectories.converters.openai_messages import feed_messages
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.tool_calls import ARGS_SYNTH
from benchmaker.trajectories.trajectory import Observation, RecordedOutcome, Response, ToolCall, Trajectory

FORMAT = "swe-agent"


def model_of(replay_config: Any) -> str | None:
    """`agent.model.name` (or `model_name`) of a SWE-agent `replay_config` (a JSON
    string or an object); None when absent or unparsable."""
    if isinstance(replay_config, str):
        try:
            replay_config = json.loads(replay_config)
        except json.JSONDecodeError:
            return None
    agent = replay_config.get("agent") if isinstance(replay_config, dict) else None
    model = agent.get("model") if isinstance(agent, dict) else None
    if isinstance(model, dict):
        for key in ("name", "model_name"):
            if isinstance(model.get(key), str):
                return model[key]
    return None


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of a SWE-agent `.traj` file. Raises ConvertError
    (`path: history[i].field: problem`) on a malformed document."""
    doc = read_json_document(ctx)
    if not isinstance(doc, dict):
        raise ctx.error(None, None, "expected a JSON object with `history`", doc)
    history = doc.get("history")
    if not isinstance(history, list):
        raise ctx.error(None, "history", "expected a list of messages", history)
    info = doc.get("info")
    if info is None:
        info = {}
    elif not isinstance(info, dict):
        raise ctx.error(None, "info", "expected an object", info)
    builder = TrajectoryBuilder(ctx, FORMAT)
    function_calling = any(isinstance(m, dict) and m.get("tool_calls") for m in history)
    feed_messages(history, builder, ctx, None, field_prefix="history", text_actions=not function_calling)
    builder.model = builder.model or model_of(doc.get("replay_config"))
    submission = info.get("submission")
    exit_status = info.get("exit_status")
    name = Path(ctx.path).name
    task_id = name[: -len(".traj")] if name.endswith(".traj") else Path(name).stem
    steps = doc.get("trajectory")
    if isinstance(steps, list) and builder.turns and len(steps) > len(builder.turns):
        _add_trajectory_steps(builder, steps[len(builder.turns) :], len(builder.turns), function_calling, task_id)
    yield builder.build(
        0,
        task_id=task_id,
        outcome=RecordedOutcome(
            patch=submission if isinstance(submission, str) else None,
            exit_status=exit_status if isinstance(exit_status, str) else None,
        ),
    )


_BARE_COMMAND = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""An action that is a tool name alone (`submit`): a call of that tool without arguments."""


def _single_command_tool(builder: TrajectoryBuilder) -> str | None:
    """The one tool every recorded call calls with a single `command` argument, else None."""
    names = set()
    for turn in builder.turns:
        for call in turn.response.tool_calls:
            if call.arguments is None or list(call.arguments) != ["command"]:
                return None
            names.add(call.name)
    return names.pop() if len(names) == 1 else None


def _add_trajectory_steps(
    builder: TrajectoryBuilder, steps: list[Any], first: int, function_calling: bool, task_id: str
) -> None:
    """Turns for the `trajectory` steps past the history's turns (docs/log-formats.md#swe-agent)."""
    tool = _single_command_tool(builder) if function_calling else None
    for n, step in enumerate(steps, start=first):
        if not isinstance(step, dict) or not isinstance(step.get("action"), str):
            builder.skip("call_only_in_trajectory")
            continue
        observation = step.get("observation")
        if not isinstance(observation, str):
            observation = ""
        if not function_calling and isinstance(step.get("response"), str):
            builder.turn(Response(content=step["response"]))
            builder.observation(Observation(content=observation))
        elif function_calling and (tool is not None or _BARE_COMMAND.fullmatch(step["action"].strip())):
            name, args = (tool, {"command": step["action"]}) if tool is not None else (step["action"].strip(), {})
            call = ToolCall(id=f"{task_id}-step-{n}", name=name, arguments_raw=json.dumps(args), arguments=args)
            thought = step.get("thought") if isinstance(step.get("thought"), str) else None
            builder.turn(Response(content=thought, tool_calls=[call], finish_reason="tool_calls"))
            builder.observation(Observation(content=observation, tool_call_id=call.id, name=name))
            builder.skip(ARGS_SYNTH)
        else:
            builder.skip("call_only_in_trajectory")
            continue
        builder.skip("turn_from_trajectory")
