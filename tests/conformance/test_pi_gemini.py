"""The real pi coding agent (`@mariozechner/pi-coding-agent` from npm) on the Gemini API
(`api: "google-generative-ai"`) against the replay server, offline on 127.0.0.1: a
scripted write round trip, pi's own session file converted (pi-session), and pi run
again against the conversion under `--divergence content`: 2 turns streamed, 0 misses,
0 divergences.

pi: $BENCHMAKER_PI, else the one `conformance/setup_venvs.sh pi` installs under the
conformance cache (<cache>/pi/bin/pi).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.convert import convert_paths
from benchmaker.trajectories.trajectory import Response, Source, ToolCall, Trajectory, Turn, Usage, match_key_for
from conformance.venvs import venv_bin
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs node and pi (module doc)
PROMPT = "task_id: hello-1\nCreate hello.md containing the single line Hello."


def pi_bin() -> Path:
    """The `pi` executable (module doc); fails naming the install step when it is missing."""
    if os.environ.get("BENCHMAKER_PI"):
        return Path(os.environ["BENCHMAKER_PI"])
    need("pi")
    return venv_bin("pi", "pi")


def scripted() -> Trajectory:
    args = {"path": "hello.md", "content": "Hello\n"}
    return Trajectory(
        trajectory_id="hello-pi",
        source=Source(format="test", path="inline", sha256="0" * 64),
        task_id="hello-1",
        match_key=match_key_for(PROMPT),
        model="fake-gemini",
        first_user=PROMPT,
        turns=[
            Turn(
                index=0,
                response=Response(
                    reasoning="Write it.",
                    tool_calls=[ToolCall(id="call_w1", name="write", arguments_raw=json.dumps(args), arguments=args)],
                    finish_reason="tool_calls",
                ),
                usage=Usage(prompt_tokens=1000, completion_tokens=30, reasoning_tokens=10, total_tokens=1030),
            ),
            Turn(
                index=1,
                response=Response(content="Created hello.md.", finish_reason="stop"),
                usage=Usage(prompt_tokens=1100, completion_tokens=5, total_tokens=1105),
            ),
        ],
    )


def run_pi(pi: Path, url: str, home: Path, work: Path, sessions: Path) -> subprocess.CompletedProcess:
    """One `pi -p` run on the Gemini API at `url`, its own HOME, an empty folder `work`."""
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    (home / ".pi" / "agent").mkdir(parents=True)
    work.mkdir(parents=True)
    models = {
        "providers": {
            "fake": {
                "baseUrl": url + "/v1beta",
                "api": "google-generative-ai",
                "apiKey": "dummy",
                "models": [{"id": "fake-gemini", "contextWindow": 128000, "maxTokens": 4096}],
            }
        }
    }
    (home / ".pi" / "agent" / "models.json").write_text(json.dumps(models))
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PI_OFFLINE": "1"}
    return subprocess.run(
        [str(pi), "--provider", "fake", "--model", "fake-gemini", "--session-dir", str(sessions), "-p", PROMPT],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_pi_on_the_gemini_api_records_and_replays(tmp_path):
    pi = pi_bin()
    store = tmp_path / "scripted.jsonl"
    store.write_text(scripted().model_dump_json() + "\n")
    work = tmp_path / "work"
    with start_replay_server(store) as srv:
        done = run_pi(pi, srv.url, tmp_path / "home", work, tmp_path / "sessions")
        stats = srv.stats()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("Created hello.md.")
    assert (work / "hello.md").read_text() == "Hello\n"
    assert (stats["served"], stats["served_stream"], stats["misses"]["total"]) == (2, 2, 0)
    converted = tmp_path / "converted.jsonl"
    report = convert_paths([tmp_path / "sessions"], converted)
    assert (report.trajectories, report.turns, report.files[0].format) == (1, 2, "pi-session")
    with start_replay_server(converted, divergence="content") as srv:
        again = run_pi(pi, srv.url, tmp_path / "home2", work, tmp_path / "sessions2")
        stats = srv.stats()
    assert again.returncode == 0, again.stderr[-2000:]
    assert (work / "hello.md").read_text() == "Hello\n"
    assert (stats["served"], stats["misses"]["total"], stats["divergences"]["total"]) == (2, 0, 0)
