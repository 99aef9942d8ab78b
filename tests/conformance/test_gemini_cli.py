"""The real Gemini CLI (`@google/gemini-cli` from npm, its own prefix under the
conformance cache) end to end, offline on 127.0.0.1, run by conformance/gemini_agent.py:

- Direct: a scripted trajectory drives one write_file round trip through the replay
  server; the CLI's own chat recording converts to those two turns, and the CLI run again
  against the conversion replays with 0 misses and 0 divergences under `--divergence
  content`. Its router calls are answered as side traffic.
- The product's main job: the CLI solves examples/mswea-task against the scripted model
  (conformance/scripted_model.py playing conformance/pi_script.json on the Gemini API,
  each command a `run_shell_command` call) with `benchmaker record` in between (the
  router's JSON call is relayed, not recorded: `side_request`); its chat recording
  converts to the recorded turns; then `benchmaker swebench-replay --mode command` runs
  the real CLI against the recording at concurrency 1 and 4: 0 misses, 0 divergences
  (the process group id each shell output states differs from run to run and is masked
  by the divergence check), the recorded 5 turns in every episode, the task resolved in
  every episode, each point's row in $BENCHMAKER_CONFORMANCE_OUT/agents.jsonl.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.convert import convert_paths, iter_trajectories
from benchmaker.trajectories.trajectory import (
    Observation,
    Response,
    Source,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    match_key_for,
)
from conformance.clients import check_session_log, record_agent, run_agent
from conformance.command_replay import invalid_but_for_lag, replay_in_command_mode, row_counts
from conformance.gemini_agent import gemini_prefix
from conformance.venvs import REPO
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs node and the Gemini CLI under the conformance cache (conftest)
PROMPT = "task_id: hello-1\nCreate hello.md containing the single line Hello."
TASK = REPO / "examples" / "mswea-task"
SCRIPT = REPO / "conformance" / "pi_script.json"
AGENT = REPO / "conformance" / "gemini_agent.py"


def scripted() -> Trajectory:
    args = {"file_path": "hello.md", "content": "Hello\n"}
    return Trajectory(
        trajectory_id="hello-1",
        source=Source(format="test", path="inline", sha256="0" * 64),
        task_id="hello-1",
        match_key=match_key_for(PROMPT),
        model="gemini-2.5-pro",
        first_user=PROMPT,
        turns=[
            Turn(
                index=0,
                response=Response(
                    reasoning="I will write the file.",
                    tool_calls=[
                        ToolCall(id="call_w1", name="write_file", arguments_raw=json.dumps(args), arguments=args)
                    ],
                    finish_reason="tool_calls",
                ),
                usage=Usage(prompt_tokens=1000, completion_tokens=30, reasoning_tokens=10, total_tokens=1030),
                observations=[Observation(tool_call_id="call_w1", name="write_file", content="ok")],
            ),
            Turn(
                index=1,
                response=Response(content="Created hello.md.", finish_reason="stop"),
                usage=Usage(prompt_tokens=1100, completion_tokens=5, total_tokens=1105),
            ),
        ],
    )


def run_launcher(url: str, work: Path, chats: Path, log: Path) -> None:
    """gemini_agent.py once in `work` (emptied first) with the prompt PROMPT, its chat
    recordings copied to `chats`."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work.parent / "PROMPT.md").write_text(PROMPT)
    argv = [sys.executable, str(AGENT), "--base-url", url, "--task-file", str(work.parent / "PROMPT.md")]
    run_agent([*argv, "--chats-dir", str(chats)], cwd=work, log=log, timeout_s=300)


def test_gemini_cli_records_and_replays(tmp_path, out_dir):
    need("gemini")
    store = tmp_path / "scripted.jsonl"
    store.write_text(scripted().model_dump_json() + "\n")
    work = tmp_path / "work"
    with start_replay_server(store) as srv:
        run_launcher(srv.url, work, tmp_path / "chats", out_dir / "gemini-direct-agent.log")
        stats = srv.stats()
    assert (work / "hello.md").read_text() == "Hello\n"
    assert (stats["served"], stats["served_stream"], stats["misses"]["total"]) == (2, 2, 0)
    assert stats["side_requests"].get("json_answer", 0) >= 1  # the router's classification calls
    (chat,) = (tmp_path / "chats").glob("session-*")
    converted = tmp_path / "converted.jsonl"
    report = convert_paths([chat], converted)
    assert report.files[0].format == "gemini-cli"
    (traj,) = iter_trajectories(chat)
    assert traj.match_key == "task:hello-1" and len(traj.turns) == 2
    with start_replay_server(converted, divergence="content") as srv:
        run_launcher(srv.url, work, tmp_path / "chats2", out_dir / "gemini-direct-replay-agent.log")
        stats = srv.stats()
    assert (work / "hello.md").read_text() == "Hello\n"
    assert stats["served"] == 2
    assert stats["misses"]["total"] == 0 and stats["divergences"]["total"] == 0


@pytest.fixture(scope="module")
def recording(tmp_path_factory, out_dir):
    """The CLI once through `benchmaker record` in front of the scripted model; returns
    (trajectories.jsonl, its chat recording, the workdir)."""
    need("gemini")
    tmp = tmp_path_factory.mktemp("gemini")
    argv = [sys.executable, str(AGENT), "--task-file", "ISSUE.md", "--chats-dir", str(tmp / "chats")]
    flushed, rec, workdir = record_agent(argv, task=TASK, script=SCRIPT, tmp=tmp, out_dir=out_dir, name="gemini")
    assert (flushed["trajectories"], flushed["turns"], flushed["skipped"]) == (1, 5, {"side_request": 1})
    (chat,) = (tmp / "chats").glob("session-*")
    return rec, chat, workdir


def test_gemini_cli_solves_the_task_and_its_chat_converts_to_the_recorded_turns(recording):
    rec, chat, workdir = recording
    _, recorded = check_session_log(chat, rec, workdir, fmt="gemini-cli", script=SCRIPT)
    assert recorded.match_key == "task:mswea-task" and len(recorded.turns) == 5
    script = json.loads(SCRIPT.read_text())
    assert [[(c.name, c.arguments) for c in t.response.tool_calls] for t in recorded.turns] == [
        [("run_shell_command", {"command": s["command"]})] if s["command"] else [] for s in script
    ]
    # the shell's output as the CLI wrote it: the tests fail first, then pass
    assert "passed 1 failed 2" in recorded.turns[1].observations[0].content
    assert "passed 3 failed 0" in recorded.turns[3].observations[0].content


def test_command_mode_replay_of_gemini_cli_has_no_misses(recording, tmp_path, out_dir):
    rec, _, _ = recording
    command = (
        f"{sys.executable} {AGENT} --base-url {{base_url}} --task-file {{workdir}}/ISSUE.md --gemini {gemini_prefix()}"
    )
    rows = replay_in_command_mode(
        agent="gemini-cli",
        api="gemini",
        trajectories=rec,
        command=command,
        task_dir=TASK,
        tmp=tmp_path,
        out_dir=out_dir,
    )
    assert row_counts(rows) == [(1, 1, 4, 0, 20, 20, 0, 0, 4, 4), (4, 4, 4, 0, 20, 20, 0, 0, 4, 4)]
    assert invalid_but_for_lag(rows) == []
