"""The real Gemini CLI (`@google/gemini-cli` from npm) against the replay server, offline on
127.0.0.1: a scripted trajectory drives one tool round trip (write_file, then a final
answer); the CLI's own chat recording converts to those two turns; the CLI run again
against the converted recording replays with 0 misses and 0 divergences under
`--divergence content`. Its router calls are answered as side traffic.

The CLI: $BENCHMAKER_GEMINI_CLI, else the one `conformance/setup_venvs.sh gemini` installs
under the conformance cache (<cache>/gemini/bin/gemini).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

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
from conformance.venvs import venv_bin
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs node and the Gemini CLI (module doc)
PROMPT = "task_id: hello-1\nCreate hello.md containing the single line Hello."
SETTINGS = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}


def gemini_cli() -> Path:
    """The `gemini` executable (module doc); fails naming the install step when it is missing."""
    if os.environ.get("BENCHMAKER_GEMINI_CLI"):
        return Path(os.environ["BENCHMAKER_GEMINI_CLI"])
    need("gemini")
    return venv_bin("gemini", "gemini")


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


def run_cli(cli: Path, url: str, home: Path, work: Path) -> subprocess.CompletedProcess:
    """One `gemini -p` run with its own HOME and an empty working folder `work`."""
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    (home / ".gemini").mkdir(parents=True)
    work.mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_API_KEY": "dummy",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    return subprocess.run(
        [str(cli), "-p", PROMPT, "--yolo", "--output-format", "stream-json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_gemini_cli_records_and_replays(tmp_path):
    cli = gemini_cli()
    store = tmp_path / "scripted.jsonl"
    store.write_text(scripted().model_dump_json() + "\n")
    home, work = tmp_path / "home", tmp_path / "work"
    with start_replay_server(store) as srv:
        done = run_cli(cli, srv.url, home, work)
        stats = srv.stats()
    assert done.returncode == 0, done.stderr[-2000:]
    assert (work / "hello.md").read_text() == "Hello\n"
    assert (stats["served"], stats["served_stream"], stats["misses"]["total"]) == (2, 2, 0)
    assert stats["side_requests"].get("json_answer", 0) >= 1  # the router's classification calls
    (chat,) = (home / ".gemini" / "tmp").glob("*/chats/session-*")
    converted = tmp_path / "converted.jsonl"
    report = convert_paths([chat], converted)
    assert report.files[0].format == "gemini-cli"
    (traj,) = iter_trajectories(chat)
    assert traj.match_key == "task:hello-1" and len(traj.turns) == 2
    with start_replay_server(converted, divergence="content") as srv:
        again = run_cli(cli, srv.url, tmp_path / "home2", work)
        stats = srv.stats()
    assert again.returncode == 0, again.stderr[-2000:]
    assert (work / "hello.md").read_text() == "Hello\n"
    assert stats["served"] == 2
    assert stats["misses"]["total"] == 0 and stats["divergences"]["total"] == 0
