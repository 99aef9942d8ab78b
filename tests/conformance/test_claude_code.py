"""The real Claude Code (npm `@anthropic-ai/claude-code`, Anthropic Messages, streamed)
end to end: it solves examples/mswea-task with `benchmaker record` in between, in front
of a replay server playing conformance/pi_script.json as Claude Code's own `Bash` calls
(conformance/script_trajectory.py); its own session file converts (claude-code) to the
recorded turns; then `benchmaker swebench-replay --mode command` runs the real Claude
Code (conformance/claude_agent.py, its base URL and key from the environment command
mode gives) against the recording and against the converted session at concurrency 1
and 4: 0 misses, 0 divergences under `--divergence content`, the 5 recorded turns in
every episode, the task resolved in every episode. Each point's row goes to
$BENCHMAKER_CONFORMANCE_OUT/agents.jsonl (the table `make conformance` prints).

Installed by `conformance/setup_venvs.sh claude` into `<conformance cache>/claude` (npm,
~30 s, ~380 MB); each run gets its own HOME and working copy of the task, non-essential
traffic off."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance.agent_cli import cache_prefix
from conformance.command_replay import assert_clean_replay, replay_in_command_mode
from conformance.script_trajectory import convert_log, record_on_script, script_trajectory
from conformance.scripted_model import load_script
from conformance.venvs import REPO
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs Claude Code under the conformance cache (conftest)
TASK = REPO / "examples" / "mswea-task"
SCRIPT = REPO / "conformance" / "pi_script.json"
AGENT = REPO / "conformance" / "claude_agent.py"


def bash_arguments(command: str) -> dict:
    """Claude Code's `Bash` tool input for `command`."""
    return {"command": command, "description": "Run a shell command"}


@pytest.fixture(scope="module")
def recording(tmp_path_factory, out_dir):
    """Claude Code once through `benchmaker record` (module docstring); returns (the
    ScriptedRecording, the converted session's trajectories.jsonl)."""
    need("claude")
    tmp = tmp_path_factory.mktemp("claude")
    traj = script_trajectory(
        load_script(SCRIPT), task_id="mswea-task", model="claude-sonnet-4-5", tool="Bash", arguments=bash_arguments
    )
    argv = [sys.executable, str(AGENT), "--base-url", "{base_url}", "--task-file", "ISSUE.md"]
    run = record_on_script(
        traj, agent=[*argv, "--session-dir", "{sessions}"], name="claude", task_dir=TASK, tmp=tmp, out_dir=out_dir
    )
    assert (run.flushed["trajectories"], run.flushed["turns"], run.flushed["skipped"]) == (1, 5, {})
    assert (run.upstream_stats["requests_by_api"], run.upstream_stats["misses"]["total"]) == ({"messages": 5}, 0)
    (session,) = run.sessions.glob("*.jsonl")
    return run, convert_log(session, tmp / "converted.jsonl")


def test_claude_code_solves_the_task_and_its_session_converts_to_the_recorded_turns(recording):
    run, converted = recording
    verdict = subprocess.run([sys.executable, "run_tests.py"], cwd=run.workdir, capture_output=True, text=True)
    assert verdict.stdout.splitlines()[-1] == "passed 3 failed 0"
    result = json.loads(run.stdout.splitlines()[-1])
    script = load_script(SCRIPT)
    assert (result["result"], result["num_turns"], result["is_error"]) == (script[-1]["thought"], 5, False)
    (c,) = [json.loads(line) for line in converted.read_text().splitlines()]
    (r,) = [json.loads(line) for line in run.recorded.read_text().splitlines()]
    assert (c["source"]["format"], c["match_key"], r["match_key"]) == (
        "claude-code",
        "task:mswea-task",
        "task:mswea-task",
    )
    assert [t["response"]["content"] for t in r["turns"]] == [s["thought"] for s in script]
    assert [[json.loads(tc["arguments_raw"]) for tc in t["response"]["tool_calls"]] for t in r["turns"]] == [
        [bash_arguments(s["command"])] if s["command"] else [] for s in script
    ]
    assert [t["response"] for t in c["turns"]] == [t["response"] for t in r["turns"]]
    assert [[o["content"] for o in t["observations"]] for t in c["turns"]] == [
        [o["content"] for o in t["observations"]] for t in r["turns"]
    ]


@pytest.mark.parametrize("source", ["recorded", "session"])
def test_command_mode_replay_of_claude_code_has_no_misses(recording, tmp_path, out_dir, source):
    run, converted = recording
    # no --base-url: the launcher takes OPENAI_BASE_URL and OPENAI_API_KEY from command mode
    command = f"{sys.executable} {AGENT} --task-file {{workdir}}/ISSUE.md --claude {cache_prefix('claude')}"
    rows = replay_in_command_mode(
        agent="claude-code",
        api="anthropic-messages" if source == "recorded" else "anthropic-messages-session",
        trajectories=run.recorded if source == "recorded" else converted,
        command=command,
        task_dir=TASK,
        tmp=tmp_path,
        out_dir=out_dir,
    )
    assert_clean_replay(rows, turns=5)
