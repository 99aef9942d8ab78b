"""benchmaker.replay_server.process.start_replay_server: the server in its own process (python -m
benchmaker.replay_server.server), URL handover on stdout, readiness, token via the environment, stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.process import ReplayServerError, start_replay_server
from tests.replay.test_server_fixtures import make_trajectory, request_messages, write_store


def test_start_serve_stats_stop(tmp_path):
    traj = make_trajectory("proc", 2)
    path = write_store(tmp_path / "t.jsonl", [traj])
    with start_replay_server(path, token="tok-123", divergence="status") as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        port = int(srv.url.rsplit(":", 1)[1])
        assert port > 0  # port 0 was replaced by the bound ephemeral port
        assert srv.pid != os.getpid()
        r = httpx.post(
            srv.url + "/v1/chat/completions",
            json={"messages": request_messages(traj, 1)},
            headers={"authorization": "Bearer tok-123"},
        )
        assert r.status_code == 200
        assert (
            httpx.post(srv.url + "/v1/chat/completions", json={"messages": request_messages(traj, 1)}).status_code
            == 401
        )
        stats = srv.stats()
        assert stats["served"] == 1
        assert stats["unauthorized"] == 1
        assert srv.reset_stats()["served"] == 0
        # The token travels in the environment, not on the command line.
        assert "tok-123" not in " ".join(srv.proc.args)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it: -SIGTERM, not -SIGKILL.
    assert srv.proc.returncode == -signal.SIGTERM
    with pytest.raises(httpx.TransportError):
        httpx.get(srv.url + "/health", timeout=1)
    assert srv.stop() == -signal.SIGTERM  # idempotent


def test_bad_store_fails_with_stderr_tail(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"trajectory_id": 1}\n', encoding="utf-8")
    with pytest.raises(ReplayServerError) as info:
        start_replay_server(path, startup_timeout_s=20)
    msg = str(info.value)
    assert "exited with code 2" in msg
    assert f"{path}:1: " in msg  # the child's one-line error names file and line


def test_bad_latency_fails(tmp_path):
    path = write_store(tmp_path / "t.jsonl", [make_trajectory("x", 1)])
    with pytest.raises(ReplayServerError, match="unknown latency model 'warp'"):
        start_replay_server(path, latency="warp", startup_timeout_s=20)


def test_cli_serve_replay_prints_url_and_rejects_bad_input(tmp_path):
    # `benchmaker serve-replay` through the console entry point (benchmaker.recipes.cli).
    path = write_store(tmp_path / "t.jsonl", [make_trajectory("cli", 1)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmaker.recipes.cli", "serve-replay", str(path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(url + "/health", timeout=5).json()["trajectories"] == 1
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    bad = subprocess.run(
        [sys.executable, "-m", "benchmaker.recipes.cli", "serve-replay", str(path), "--latency", "fixed:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("benchmaker: error: latency: expected fixed:TTFT_MS:ITL_MS (got 'fixed:1')")


_PARENT = """
import sys, threading, time
from pathlib import Path
from benchmaker.replay_server.process import start_replay_server
out = []
# started from a short-lived thread: the server must outlive that thread, not just the process
t = threading.Thread(target=lambda: out.append(start_replay_server(Path(sys.argv[1]))))
t.start(); t.join()
print(out[0].pid, out[0].url, flush=True)
time.sleep(120)
"""


def _exited(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it (the orphan is not our child)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_server_dies_when_its_parent_is_sigkilled(tmp_path):
    from benchmaker.replay_server.process import parent_death_signal_supported

    assert parent_death_signal_supported()
    path = write_store(tmp_path / "t.jsonl", [make_trajectory("orphan", 1)])
    repo = str(Path(__file__).resolve().parents[2])
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo,
        env=dict(os.environ, PYTHONPATH=repo),
    )
    try:
        pid_s, url = parent.stdout.readline().split()
        pid = int(pid_s)
        time.sleep(0.3)  # the spawning thread has exited by now; the server must still serve
        assert httpx.get(url + "/health", timeout=5).status_code == 200
        assert not _exited(pid)
        parent.send_signal(signal.SIGKILL)  # no finally, no atexit in the parent
        parent.wait(5)
        deadline = time.monotonic() + 5
        while not _exited(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _exited(pid), f"replay server {pid} outlived its SIGKILLed parent"
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/health", timeout=1)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(5)
        parent.stdout.close()
        if "pid" in locals() and not _exited(pid):
            os.kill(pid, signal.SIGKILL)
