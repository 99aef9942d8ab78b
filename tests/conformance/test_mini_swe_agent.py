"""A real agent end to end: mini-swe-agent 2.x (its own venv) solves
examples/mswea-task against the scripted model (conformance/scripted_model.py playing
conformance/mswea_script.json) with `benchmaker record` in between; mini-swe-agent's own
trajectory file converts to the same turns; then `benchmaker swebench-replay --mode
command` runs the real mini-swe-agent against the replay server at concurrency 1 and 4:
0 misses, 0 divergences under `--divergence content` (every observation byte-equal to
the recording), the recorded 5 turns in every episode, and the verifier resolves the
task in every episode; each point's row goes to $BENCHMAKER_CONFORMANCE_OUT/agents.jsonl
(the table `make conformance` prints).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from conformance.clients import flush_recorder, url_process
from conformance.command_replay import invalid_but_for_lag, replay_in_command_mode, row_counts
from conformance.venvs import REPO, venv_bin
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs the conformance venvs (conftest)
TASK = REPO / "examples" / "mswea-task"
SCRIPT = REPO / "conformance" / "mswea_script.json"
BENCHMAKER = str(Path(sys.executable).with_name("benchmaker"))


def agent_command() -> str:
    """The command line of command mode (split on spaces by the harness)."""
    return (
        f"{venv_bin('mswea', 'python')} {REPO / 'conformance' / 'mswea_agent.py'} "
        "--base-url {base_url} --task-file {workdir}/ISSUE.md"
    )


@pytest.fixture(scope="module")
def recording(tmp_path_factory, out_dir):
    """Run the agent once through `benchmaker record`; returns (trajectories.jsonl,
    mini-swe-agent's traj.json, the agent's workdir)."""
    need("mswea")
    tmp = tmp_path_factory.mktemp("mswea")
    rec = tmp / "recorded.jsonl"
    workdir = tmp / "work"
    shutil.copytree(TASK, workdir)
    traj = tmp / "mswea-task.traj.json"
    scripted = [
        sys.executable,
        str(REPO / "conformance" / "scripted_model.py"),
        "--script",
        str(SCRIPT),
        "--model",
        "tiny",
    ]
    with (
        url_process(scripted, log=out_dir / "mswea-scripted-model.log") as model_url,
        url_process(
            [BENCHMAKER, "record", "--upstream", model_url, "-o", str(rec)], log=out_dir / "mswea-record.log"
        ) as rec_url,
    ):
        agent = subprocess.run(
            [
                str(venv_bin("mswea", "python")),
                str(REPO / "conformance" / "mswea_agent.py"),
                "--base-url",
                rec_url + "/v1",
                "--task-file",
                "ISSUE.md",
                "--output",
                str(traj),
            ],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=600,
        )
        (out_dir / "mswea-agent.log").write_text(agent.stdout + agent.stderr)
        assert agent.returncode == 0, agent.stdout[-2000:] + agent.stderr[-2000:]
        flushed = flush_recorder(rec_url)
    assert flushed["trajectories"] == 1 and flushed["turns"] == 5, flushed
    return rec, traj, workdir


def test_agent_solves_the_task_through_the_recorder(recording):
    rec, traj, workdir = recording
    verdict = subprocess.run([sys.executable, "run_tests.py"], cwd=workdir, capture_output=True, text=True)
    assert verdict.returncode == 0, verdict.stdout
    assert verdict.stdout.splitlines()[-1] == "passed 3 failed 0"
    (t,) = [json.loads(line) for line in rec.read_text().splitlines()]
    assert t["match_key"] == "task:mswea-task" and t["task_id"] == "mswea-task" and t["model"] == "tiny"
    script = json.loads(SCRIPT.read_text())
    assert [turn["response"]["tool_calls"][0]["arguments"] for turn in t["turns"]] == [
        {"command": s["command"]} for s in script
    ]
    assert [turn["response"]["content"] for turn in t["turns"]] == [s["thought"] for s in script]
    # each turn but the last is followed by the command's observation (mini-swe-agent's
    # JSON: returncode and output); the submit command ends the run, nothing follows it
    assert [len(turn["observations"]) for turn in t["turns"]] == [1, 1, 1, 1, 0]
    assert json.loads(t["turns"][1]["observations"][0]["content"])["returncode"] == 1  # tests fail
    assert json.loads(t["turns"][3]["observations"][0]["content"])["returncode"] == 0  # tests pass
    assert all(turn["usage"]["completion_tokens"] >= 1 for turn in t["turns"])


def test_mini_swe_agent_trajectory_converts_to_the_recorded_turns(recording, tmp_path):
    rec, traj, _ = recording
    doc = json.loads(traj.read_text())
    assert doc["info"]["exit_status"] == "Submitted"
    assert doc["messages"][-1]["role"] == "exit"  # mini-swe-agent 2.x ends with an exit message
    out = tmp_path / "converted.jsonl"
    conv = subprocess.run([BENCHMAKER, "convert", str(traj), "-o", str(out)], capture_output=True, text=True)
    assert conv.returncode == 0, conv.stderr
    (converted,) = [json.loads(line) for line in out.read_text().splitlines()]
    (recorded,) = [json.loads(line) for line in rec.read_text().splitlines()]
    assert converted["match_key"] == recorded["match_key"]
    assert len(converted["turns"]) == len(recorded["turns"]) == 5
    for c, r in zip(converted["turns"], recorded["turns"], strict=False):
        assert c["response"]["content"] == r["response"]["content"]
        assert [tc["arguments_raw"] for tc in c["response"]["tool_calls"]] == [
            tc["arguments_raw"] for tc in r["response"]["tool_calls"]
        ]
    for c, r in zip(converted["turns"][:4], recorded["turns"][:4], strict=False):
        assert [o["content"] for o in c["observations"]] == [o["content"] for o in r["observations"]]
    assert converted["outcome"]["exit_status"] == "Submitted"


def test_command_mode_replay_of_the_real_agent_has_no_misses(recording, tmp_path, out_dir):
    rec, _, _ = recording
    rows = replay_in_command_mode(
        agent="mini-swe-agent",
        api="openai-completions",
        trajectories=rec,
        command=agent_command(),
        task_dir=TASK,
        tmp=tmp_path,
        out_dir=out_dir,
    )
    # 4 episodes per point, 5 turns each = 20; every episode re-verified and resolved
    assert row_counts(rows) == [(1, 1, 4, 0, 20, 20, 0, 0, 4, 4), (4, 4, 4, 0, 20, 20, 0, 0, 4, 4)]
    assert invalid_but_for_lag(rows) == []
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        per_episode = con.sql("SELECT DISTINCT n_turns, outcome, resolved FROM episodes").fetchall()
    assert per_episode == [(5, "ok", True)]
