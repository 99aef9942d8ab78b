"""A script of conformance/scripted_model.py (`[{"thought", "command"}]`) as a replayable
trajectory, for agents whose shell tool is not a chat-completions `bash`: the replay
server plays it to the agent in the API the agent speaks, as the upstream of
`benchmaker record`.

    traj = script_trajectory(load_script(SCRIPT), task_id="mswea-task", model="gpt-5.5",
                             tool="exec_command", arguments=lambda cmd: {"cmd": cmd})
    path.write_text(traj.model_dump_json() + "\\n")      # benchmaker serve-replay PATH

Step i becomes turn i: content the step's thought; a step with a command one tool call
`tool` (id `call_<i>`, arguments `json.dumps(arguments(command))`), finish_reason
"tool_calls"; a step without one the final answer, finish_reason "stop". The match key
is `task:<task_id>` (the replay server finds `task_id: <task_id>` in the agent's first
user message). Usage is a stand-in (prompt 1000 + 100 per turn, completion 20 tokens),
stated as such.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from benchmaker.trajectories.trajectory import Response, Source, ToolCall, Trajectory, Turn, Usage
from conformance.scripted_model import ScriptStep

__all__ = ["script_trajectory"]


def script_trajectory(
    script: list[ScriptStep],
    *,
    task_id: str,
    model: str,
    tool: str,
    arguments: Callable[[str], dict[str, Any]],
) -> Trajectory:
    """The trajectory of `script` (module docstring)."""
    turns = []
    for i, step in enumerate(script):
        command = step["command"]
        calls = (
            []
            if command is None
            else [ToolCall(id=f"call_{i}", name=tool, arguments_raw=json.dumps(arguments(command)))]
        )
        turns.append(
            Turn(
                index=i,
                response=Response(
                    content=step["thought"], tool_calls=calls, finish_reason="tool_calls" if calls else "stop"
                ),
                usage=Usage(prompt_tokens=1000 + 100 * i, completion_tokens=20, total_tokens=1020 + 100 * i),
            )
        )
    return Trajectory(
        trajectory_id=f"{task_id}-{tool}",
        source=Source(format="script", path="conformance", sha256="0" * 64),
        match_key=f"task:{task_id}",
        model=model,
        first_user=f"task_id: {task_id}",
        turns=turns,
    )
