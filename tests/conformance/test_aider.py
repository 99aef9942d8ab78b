"""The real aider (PyPI `aider-chat`, chat completions, streamed, no tools: edits as
SEARCH/REPLACE text) end to end: it solves examples/mswea-task against the scripted model
in text mode (conformance/scripted_model.py --text playing conformance/aider_script.json:
a first edit that leaves one test failing, aider's `--auto-test` run sending the failure
back, a second edit that fixes it) with `benchmaker record --canned-replies
--text-actions` in between. Every aider request opens with aider's own exchanges (its
diff format's example conversation, "I switched to a new code base" / "Ok.", the files in
the chat); the recording strips them, so aider's first call is turn 0 and the second turn
1, its observation the test output aider sent. aider's own log of its model calls
(`--llm-history-file`) converts (format `aider-llm-history`) to the same turns. Then `benchmaker swebench-replay --mode
command` runs the real aider against the recording at concurrency 1 and 4: 0 misses, 0
divergences under `--divergence content`, the recorded 2 turns in every episode, the task
resolved in every episode.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmaker.replay_server.store import load_trajectories
from benchmaker.trajectories.convert import iter_trajectories
from conformance.aider_agent import aider_venv
from conformance.clients import flush_recorder, run_agent, url_process
from conformance.command_replay import replay_in_command_mode
from conformance.venvs import REPO
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs aider under the conformance cache (conftest)
TASK = REPO / "examples" / "mswea-task"
SCRIPT = REPO / "conformance" / "aider_script.json"
BENCHMAKER = str(Path(sys.executable).with_name("benchmaker"))
AGENT = REPO / "conformance" / "aider_agent.py"
TEST_CMD = "python3 run_tests.py"  # examples/mswea-task/task.json test_command


@pytest.fixture(scope="module")
def recording(tmp_path_factory, out_dir):
    """aider once through `benchmaker record --canned-replies --text-actions` in front of
    the scripted model; returns (trajectories.jsonl, aider's LLM history, the workdir)."""
    need("aider")
    tmp = tmp_path_factory.mktemp("aider")
    rec, workdir, history = tmp / "recorded.jsonl", tmp / "work", tmp / "llm.history"
    shutil.copytree(TASK, workdir)
    scripted = [sys.executable, str(REPO / "conformance" / "scripted_model.py"), "--script", str(SCRIPT), "--text"]
    with (
        url_process([*scripted, "--model", "fake-model"], log=out_dir / "aider-scripted-model.log") as model_url,
        url_process(
            [BENCHMAKER, "record", "--upstream", model_url, "-o", str(rec), "--canned-replies", "--text-actions"],
            log=out_dir / "aider-record.log",
        ) as rec_url,
    ):
        run_agent(
            [sys.executable, str(AGENT), "--base-url", rec_url + "/v1", "--task-file", "ISSUE.md"]
            + ["--task-tests", "--llm-history-file", str(history)],
            cwd=workdir,
            log=out_dir / "aider-agent.log",
        )
        flushed = flush_recorder(rec_url)
    assert (flushed["trajectories"], flushed["turns"], flushed["skipped"]) == (1, 2, {})
    return rec, history, workdir


def test_aider_solves_the_task_and_its_canned_exchanges_are_no_turns(recording):
    rec, _, workdir = recording
    verdict = subprocess.run([sys.executable, "run_tests.py"], cwd=workdir, capture_output=True, text=True)
    assert verdict.stdout.splitlines()[-1] == "passed 3 failed 0"
    (traj,) = [t for _, t in load_trajectories(rec)]
    script = json.loads(SCRIPT.read_text())
    assert traj.match_key == "task:mswea-task"
    assert [t.response.content for t in traj.turns] == [s["thought"] for s in script]
    assert [t.response.finish_reason for t in traj.turns] == ["stop", "stop"]
    # aider's own replies (aider/coders/base_coder.py, editblock_prompts.py), never the model's
    assert "Ok." in traj.canned_replies
    assert "Ok, any changes I propose will be to those files." in traj.canned_replies
    assert not set(traj.canned_replies) & {s["thought"] for s in script}
    # turn 0's observation: the failing test run aider sent back (its --auto-test)
    (obs,) = traj.turns[0].observations
    assert obs.content.startswith(f"I ran this command:\n\n{TEST_CMD}\n\nAnd got this output:\n\n")
    assert "FAIL  tests.test_counts.WordCountTest.test_repeated_spaces_do_not_make_words\npassed 2 failed 1" in (
        obs.content
    )
    assert traj.turns[1].observations == []


def test_aiders_llm_history_converts_to_the_recorded_turns(recording):
    rec, history, _ = recording
    (recorded,) = [t for _, t in load_trajectories(rec)]
    (converted,) = list(iter_trajectories(history))
    assert (converted.source.format, converted.match_key) == ("aider-llm-history", recorded.match_key)
    assert len(converted.turns) == len(recorded.turns) == 2
    # the history keeps texts by lines: final line breaks are lost
    for c, r in zip(converted.turns, recorded.turns, strict=True):
        assert (c.response.content or "").rstrip("\n") == (r.response.content or "").rstrip("\n")
        assert [o.content.rstrip("\n") for o in c.observations] == [o.content.rstrip("\n") for o in r.observations]
    assert [t.strip() for t in converted.canned_replies] == [t.strip() for t in recorded.canned_replies]


def test_command_mode_replay_of_aider_has_no_misses(recording, tmp_path, out_dir):
    rec, _, _ = recording
    command = (
        f"{sys.executable} {AGENT} --base-url {{base_url}} --task-file {{workdir}}/ISSUE.md "
        f"--task-tests --aider {aider_venv()}"
    )
    rows = replay_in_command_mode(
        agent="aider",
        api="openai-completions",
        trajectories=rec,
        command=command,
        task_dir=TASK,
        tmp=tmp_path,
        out_dir=out_dir,
    )
    assert [r.counts for r in rows] == [(1, 1, 4, 0, 8, 8, 0, 0, 4), (4, 4, 4, 0, 8, 8, 0, 0, 4)]
    assert all(r.valid_but_for_lag for r in rows), rows
