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

`convert_log` converts an agent's own log with `benchmaker convert`. `record_on_script` runs an agent launcher once on a fresh copy of a task through
`benchmaker record`, in front of `benchmaker serve-replay` playing such a trajectory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmaker.trajectories.trajectory import Response, Source, ToolCall, Trajectory, Turn, Usage
from conformance.clients import BENCHMAKER, flush_recorder, run_agent, url_process
from conformance.scripted_model import ScriptStep

__all__ = ["ScriptedRecording", "convert_log", "record_on_script", "script_trajectory"]


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


@dataclass(frozen=True, slots=True)
class ScriptedRecording:
    """One `record_on_script` run: `recorded` the trajectories.jsonl `benchmaker record`
    wrote, `sessions` the folder given to the agent for its own session log, `workdir`
    the task copy it worked in, `stdout` the launcher's output, `flushed` the recorder's
    /flush answer and `upstream_stats` the playing replay server's /stats."""

    recorded: Path
    sessions: Path
    workdir: Path
    stdout: str
    flushed: dict[str, Any]
    upstream_stats: dict[str, Any]


def record_on_script(
    traj: Trajectory, *, agent: list[str], name: str, task_dir: Path, tmp: Path, out_dir: Path
) -> ScriptedRecording:
    """Run the launcher argv `agent` (its `{base_url}` and `{sessions}` items filled in
    with the recorder's OpenAI-style base URL and `<tmp>/sessions`) in a fresh copy of
    `task_dir` at `<tmp>/work`, through `benchmaker record` in front of `benchmaker
    serve-replay` playing `traj`. Logs go to `<out_dir>/<name>-{upstream,record,agent}.log`.
    Raises AssertionError when the launcher exits non-zero, RuntimeError when a server
    does not start."""
    script, recorded, sessions, workdir = tmp / "script.jsonl", tmp / "recorded.jsonl", tmp / "sessions", tmp / "work"
    script.write_text(traj.model_dump_json() + "\n", encoding="utf-8")
    shutil.copytree(task_dir, workdir)
    with (
        url_process(
            [BENCHMAKER, "serve-replay", str(script), "--port", "0"], log=out_dir / f"{name}-upstream.log"
        ) as up,
        url_process(
            [BENCHMAKER, "record", "--upstream", up, "-o", str(recorded)], log=out_dir / f"{name}-record.log"
        ) as rec,
    ):
        argv = [a.format(base_url=rec + "/v1", sessions=sessions) for a in agent]
        done = run_agent(argv, cwd=workdir, log=out_dir / f"{name}-agent.log")
        flushed = flush_recorder(rec)
        with urllib.request.urlopen(up + "/stats") as r:
            stats = json.load(r)
    return ScriptedRecording(recorded, sessions, workdir, done.stdout, flushed, stats)


def convert_log(log: Path, out: Path) -> Path:
    """`benchmaker convert LOG -o OUT`; returns `out`. Raises AssertionError with its
    output when it fails."""
    done = subprocess.run([BENCHMAKER, "convert", str(log), "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return out
