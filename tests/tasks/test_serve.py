"""benchmaker.tasks.serve: the registry restarts a dead replay server and stops it for good."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from benchmaker.tasks.serve import launch_server, restart_if_dead, server_handle, server_url, stop_replay_server
from benchmaker.trajectories.convert import convert_paths

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recordings" / "tiny-task.pi.jsonl"


def test_dead_server_is_restarted_then_stopped(tmp_path: Path) -> None:
    traj = tmp_path / "t.jsonl"
    convert_paths([EXAMPLE], traj)
    key = launch_server(traj)
    try:
        first = server_handle(key)
        assert restart_if_dead(key) is False
        os.kill(first.pid, signal.SIGKILL)
        first.proc.wait(5)
        url = server_url(key)  # restarts
        second = server_handle(key)
        assert second.pid != first.pid
        assert httpx.get(url + "/health").status_code == 200
    finally:
        stop_replay_server(key)
    assert second.proc.poll() is not None
    with pytest.raises(KeyError, match=key):
        server_handle(key)
    assert stop_replay_server(key) is None  # idempotent
