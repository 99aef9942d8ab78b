"""`benchmaker record` as a user runs it: a subprocess printing its URL (with its secret
path segment, which appears nowhere else: not on stderr, not in the file), refusing a
request without it, relaying a conversation to a replay server, writing the trajectory
file on SIGINT."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.store import load_trajectories
from tests.replay.test_recorder import _traj, _write

ROOT = Path(__file__).resolve().parents[2]


def test_record_cli_writes_trajectories_on_sigint(tmp_path: Path):
    out = tmp_path / "rec.jsonl"
    traj = _traj()
    messages = [
        {"role": "system", "content": traj.system},
        {"role": "user", "content": traj.first_user},
        {"role": "user", "content": traj.user_before_turns[0]},
    ]
    with start_replay_server(_write([traj], tmp_path / "t.jsonl")) as upstream:
        with subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmaker.recipes.cli",
                "record",
                "--upstream",
                upstream.url + "/v1",
                "-o",
                str(out),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            url = _relay_one(proc, messages)
            stdout, stderr = proc.communicate()
    origin, secret = url.rsplit("/", 1)
    assert len(secret) == 43 and origin.startswith("http://127.0.0.1:")
    assert stdout == "" and stderr.startswith(f"recording proxy: {origin}/<secret> (the URL above) -> ")
    assert secret not in stderr and secret not in out.read_text()
    (rec,) = [t for _, t in load_trajectories(out)]
    assert rec.match_key == traj.match_key and rec.turns[0].response == traj.turns[0].response


def _relay_one(proc: subprocess.Popen, messages: list[dict]) -> str:
    """Wait for the proxy's URL (the first stdout line; returned) and /health, check a
    request without its secret is refused, relay one request, then SIGINT it."""
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.02)
        bare = httpx.post(url.rsplit("/", 1)[0] + "/v1/chat/completions", json={"model": "m-1", "messages": messages})
        assert (bare.status_code, bare.json()["error"]["code"]) == (401, "unauthorized")
        r = httpx.post(url + "/v1/chat/completions", json={"model": "m-1", "messages": messages})
        assert r.json()["choices"][0]["message"]["reasoning_content"] == "Look at the file first."
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0  # SIGINT is the normal way to stop recording
    return url
