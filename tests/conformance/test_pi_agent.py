"""The seed's own agent end to end, on each of its four wire APIs: the real pi coding
agent (npm, its own prefix under the conformance cache) solves examples/mswea-task
against the scripted model (conformance/scripted_model.py playing
conformance/pi_script.json, chat completions) with `benchmaker record` in between; pi's
own session log converts to the same turns. On pi's other APIs (OpenAI Responses,
Anthropic Messages, Gemini) pi solves the task again through `benchmaker record`, this
time in front of a replay server playing that first recording in the API pi speaks, so
each API gets a recording of its own (an API's observations carry what the others do
not, e.g. Anthropic's `is_error`), and its session log converts to the same turns. Then
`benchmaker swebench-replay --mode command` runs the real pi against each API's
recording at concurrency 1 and 4: 0 misses, 0 divergences under `--divergence content`,
the recorded 5 turns in every episode, and the verifier resolves the task in every
episode. Each point's row goes to $BENCHMAKER_CONFORMANCE_OUT/agents.jsonl (the table
`make conformance` prints).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.clients import flush_recorder, run_agent, url_process
from conformance.command_replay import assert_clean_replay, replay_in_command_mode
from conformance.pi_agent import pi_prefix
from conformance.venvs import REPO
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs pi under the conformance cache (conftest)
TASK = REPO / "examples" / "mswea-task"
SCRIPT = REPO / "conformance" / "pi_script.json"
BENCHMAKER = str(Path(sys.executable).with_name("benchmaker"))
PI_AGENT = REPO / "conformance" / "pi_agent.py"
# pi's four wire APIs (its models.json `api`), each answered by the replay server
REPLAY_APIS = ("openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai")


def record_on(api: str, upstream: str, tmp, out_dir) -> tuple:
    """pi on `api` solving a fresh copy of the task through `benchmaker record` in front of
    `upstream`; returns (trajectories.jsonl, pi's session log, the workdir)."""
    rec = tmp / "recorded.jsonl"
    workdir = tmp / "work"
    shutil.copytree(TASK, workdir)
    sessions = tmp / "sessions"
    with url_process(
        [BENCHMAKER, "record", "--upstream", upstream, "-o", str(rec)], log=out_dir / f"pi-{api}-record.log"
    ) as rec_url:
        argv = [sys.executable, str(PI_AGENT), "--base-url", rec_url + "/v1", "--task-file", "ISSUE.md"]
        run_agent(
            [*argv, "--api", api, "--session-dir", str(sessions)], cwd=workdir, log=out_dir / f"pi-{api}-agent.log"
        )
        flushed = flush_recorder(rec_url)
    assert flushed["trajectories"] == 1 and flushed["turns"] == 5, flushed
    (session,) = sessions.glob("*.jsonl")
    return rec, session, workdir


def agent_command(api: str) -> str:
    """The command line of command mode (split on spaces by the harness)."""
    return (
        f"{sys.executable} {PI_AGENT} --base-url {{base_url}} --task-file {{workdir}}/ISSUE.md --api {api} "
        f"--pi {pi_prefix()}"
    )


@pytest.fixture(scope="module")
def recording(tmp_path_factory, out_dir):
    """Run pi once (chat completions) through `benchmaker record` in front of the scripted
    model; returns (trajectories.jsonl, pi's session log, the agent's workdir)."""
    need("pi")
    tmp = tmp_path_factory.mktemp("pi")
    scripted = [
        sys.executable,
        str(REPO / "conformance" / "scripted_model.py"),
        "--script",
        str(SCRIPT),
        "--model",
        "fake-model",
    ]
    with url_process(scripted, log=out_dir / "pi-scripted-model.log") as model_url:
        return record_on("openai-completions", model_url, tmp, out_dir)


@pytest.fixture(scope="module")
def recordings(recording, tmp_path_factory, out_dir):
    """{api: (trajectories.jsonl, session log, workdir)}: the chat recording, and one per
    other API recorded in front of a replay server playing it (module docstring)."""
    out = {"openai-completions": recording}
    with url_process(
        [BENCHMAKER, "serve-replay", str(recording[0]), "--port", "0"], log=out_dir / "pi-upstream.log"
    ) as upstream:
        for api in REPLAY_APIS[1:]:
            out[api] = record_on(api, upstream, tmp_path_factory.mktemp(f"pi-{api}"), out_dir)
    return out


def test_pi_solves_the_task_through_the_recorder(recording):
    rec, _, workdir = recording
    verdict = subprocess.run([sys.executable, "run_tests.py"], cwd=workdir, capture_output=True, text=True)
    assert verdict.stdout.splitlines()[-1] == "passed 3 failed 0"
    (t,) = [json.loads(line) for line in rec.read_text().splitlines()]
    assert t["match_key"] == "task:mswea-task" and t["model"] == "fake-model"
    script = json.loads(SCRIPT.read_text())
    assert [turn["response"]["content"] for turn in t["turns"]] == [s["thought"] for s in script]
    assert [[json.loads(c["arguments_raw"]) for c in turn["response"]["tool_calls"]] for turn in t["turns"]] == [
        [{"command": s["command"]}] if s["command"] else [] for s in script
    ]
    # every tool call is followed by its observation; the final answer ends the run
    assert [len(turn["observations"]) for turn in t["turns"]] == [1, 1, 1, 1, 0]
    assert [turn["response"]["finish_reason"] for turn in t["turns"]] == ["tool_calls"] * 4 + ["stop"]


@pytest.mark.parametrize("api", REPLAY_APIS)
def test_pi_session_log_converts_to_the_recorded_turns(recordings, tmp_path, api):
    rec, session, workdir = recordings[api]
    verdict = subprocess.run([sys.executable, "run_tests.py"], cwd=workdir, capture_output=True, text=True)
    assert verdict.stdout.splitlines()[-1] == "passed 3 failed 0"
    out = tmp_path / "converted.jsonl"
    conv = subprocess.run([BENCHMAKER, "convert", str(session), "-o", str(out)], capture_output=True, text=True)
    assert conv.returncode == 0, conv.stderr
    (converted,) = [json.loads(line) for line in out.read_text().splitlines()]
    (recorded,) = [json.loads(line) for line in rec.read_text().splitlines()]
    assert converted["match_key"] == recorded["match_key"]
    assert len(converted["turns"]) == len(recorded["turns"]) == 5
    for c, r in zip(converted["turns"], recorded["turns"], strict=True):
        assert c["response"]["content"] == r["response"]["content"]
        # the same arguments (Gemini sends them as an object: each side writes its own JSON text)
        assert [json.loads(tc["arguments_raw"]) for tc in c["response"]["tool_calls"]] == [
            json.loads(tc["arguments_raw"]) for tc in r["response"]["tool_calls"]
        ]
        assert [o["content"] for o in c["observations"]] == [o["content"] for o in r["observations"]]


@pytest.mark.parametrize("api", REPLAY_APIS)
def test_command_mode_replay_of_pi_has_no_misses(recordings, tmp_path, out_dir, api):
    rec, _, _ = recordings[api]
    rows = replay_in_command_mode(
        agent="pi", api=api, trajectories=rec, command=agent_command(api), task_dir=TASK, tmp=tmp_path, out_dir=out_dir
    )
    assert_clean_replay(rows, turns=5)
