"""The real Codex CLI (npm `@openai/codex`, Responses only, streamed) end to end: it solves
examples/mswea-task with `benchmaker record` in between, in front of a replay server
playing conformance/pi_script.json as Codex's own `exec_command` calls
(conformance/script_trajectory.py); its own rollout converts (codex-rollout) to the
recorded turns; then `benchmaker swebench-replay --mode command` runs the real Codex
(conformance/codex_agent.py) against the recording and against the converted rollout at
concurrency 1 and 4: 0 misses, 0 divergences under `--divergence content` (its results'
chunk ids and wall times differ per run and are masked), the 5 recorded turns in every
episode, the task resolved in every episode. Each point's row goes to
$BENCHMAKER_CONFORMANCE_OUT/agents.jsonl (the table `make conformance` prints).

Installed by `conformance/setup_venvs.sh codex` into `<conformance cache>/codex` (npm,
~30 s, ~420 MB); each run gets its own HOME / CODEX_HOME and working copy of the task."""

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

CONFORMANCE = True  # gated: needs Codex under the conformance cache (conftest)
TASK = REPO / "examples" / "mswea-task"
SCRIPT = REPO / "conformance" / "pi_script.json"
AGENT = REPO / "conformance" / "codex_agent.py"


@pytest.fixture(scope="module")
def recording(tmp_path_factory, out_dir):
    """Codex once through `benchmaker record` (module docstring); returns (the
    ScriptedRecording, the converted rollout's trajectories.jsonl)."""
    need("codex")
    tmp = tmp_path_factory.mktemp("codex")
    traj = script_trajectory(
        load_script(SCRIPT), task_id="mswea-task", model="gpt-5.5", tool="exec_command", arguments=lambda c: {"cmd": c}
    )
    argv = [sys.executable, str(AGENT), "--base-url", "{base_url}", "--task-file", "ISSUE.md"]
    run = record_on_script(
        traj, agent=[*argv, "--session-dir", "{sessions}"], name="codex", task_dir=TASK, tmp=tmp, out_dir=out_dir
    )
    assert (run.flushed["trajectories"], run.flushed["turns"], run.flushed["skipped"]) == (1, 5, {})
    assert (run.upstream_stats["served"], run.upstream_stats["misses"]["total"]) == (5, 0)
    (rollout,) = run.sessions.glob("rollout-*.jsonl")
    return run, convert_log(rollout, tmp / "converted.jsonl")


def test_codex_solves_the_task_and_its_rollout_converts_to_the_recorded_turns(recording):
    run, converted = recording
    verdict = subprocess.run([sys.executable, "run_tests.py"], cwd=run.workdir, capture_output=True, text=True)
    assert verdict.stdout.splitlines()[-1] == "passed 3 failed 0"
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    # the agent read the replayed usage: 1000 + 1100 + ... + 1400 input tokens
    assert (events[-1]["type"], events[-1]["usage"]["input_tokens"]) == ("turn.completed", 6000)
    (c,) = [json.loads(line) for line in converted.read_text().splitlines()]
    (r,) = [json.loads(line) for line in run.recorded.read_text().splitlines()]
    assert (c["source"]["format"], c["match_key"], r["match_key"]) == (
        "codex-rollout",
        "task:mswea-task",
        "task:mswea-task",
    )
    script = load_script(SCRIPT)
    assert [t["response"]["content"] for t in r["turns"]] == [s["thought"] for s in script]
    assert [[json.loads(tc["arguments_raw"]) for tc in t["response"]["tool_calls"]] for t in r["turns"]] == [
        [{"cmd": s["command"]}] if s["command"] else [] for s in script
    ]
    assert [t["usage"]["prompt_tokens"] for t in c["turns"]] == [1000, 1100, 1200, 1300, 1400]
    assert len(c["turns"]) == len(r["turns"]) == 5
    for ct, rt in zip(c["turns"], r["turns"], strict=True):
        assert ct["response"]["content"] == rt["response"]["content"]
        assert [(tc["name"], tc["arguments_raw"]) for tc in ct["response"]["tool_calls"]] == [
            (tc["name"], tc["arguments_raw"]) for tc in rt["response"]["tool_calls"]
        ]
        assert [o["content"] for o in ct["observations"]] == [o["content"] for o in rt["observations"]]
    # its results open with Codex's header: a per-run chunk id and wall time
    assert r["turns"][0]["observations"][0]["content"].startswith("Chunk ID: ")


@pytest.mark.parametrize("source", ["recorded", "rollout"])
def test_command_mode_replay_of_codex_has_no_misses(recording, tmp_path, out_dir, source):
    run, converted = recording
    command = f"{sys.executable} {AGENT} --base-url {{base_url}} --task-file {{workdir}}/ISSUE.md --codex {cache_prefix('codex')}"
    rows = replay_in_command_mode(
        agent="codex",
        api="openai-responses" if source == "recorded" else "openai-responses-rollout",
        trajectories=run.recorded if source == "recorded" else converted,
        command=command,
        task_dir=TASK,
        tmp=tmp_path,
        out_dir=out_dir,
    )
    assert_clean_replay(rows, turns=5)
