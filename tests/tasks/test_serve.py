"""benchmaker.tasks.serve: the registry restarts a dead replay server and stops it for good."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from benchmaker.tasks.serve import (
    launch_server,
    restart_if_dead,
    server_handle,
    server_url,
    server_warnings,
    stop_replay_server,
)
from benchmaker.trajectories.convert import convert_paths
from tests.other_user import OtherUser, other_user  # noqa: F401 - a fixture

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


def test_a_second_local_user_cannot_use_a_flow_replay_server(tmp_path: Path, other_user: OtherUser) -> None:
    """The flows' replay server (a token from new_token) answers another local user's
    requests, /stats/reset included, with 401; its owner's token works."""
    from benchmaker.tasks.serve import new_token

    traj = tmp_path / "t.jsonl"
    convert_paths([EXAMPLE], traj)
    key = launch_server(traj, token=new_token())
    try:
        handle = server_handle(key)
        assert handle.token is not None and len(handle.token) == 43
        url = handle.url
        seen = other_user.probe(f"""
import json, urllib.request, urllib.error
def call(path, method, body=None, token=None):
    h = {{"Content-Type": "application/json"}}
    if token:
        h["Authorization"] = "Bearer " + token
    req = urllib.request.Request({url!r} + path, data=body, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
print(json.dumps([call("/stats", "GET"), call("/stats/reset", "POST", b""),
                  call("/v1/chat/completions", "POST", b'{{"model": "m", "messages": []}}'),
                  call("/stats", "GET", token="guess"), call("/health", "GET")]))
""")
        assert seen == [401, 401, 401, 401, 200]  # /health alone is open (readiness probes)
        stats = handle.stats()
        assert (stats["unauthorized"], stats["served"]) == (1, 0)  # the chat call: counted, refused
    finally:
        stop_replay_server(key)


def test_the_flow_sees_the_servers_warning_of_logs_without_timings(tmp_path: Path) -> None:
    from tests.replay.test_server_fixtures import make_trajectory, write_store

    store = write_store(tmp_path / "t.jsonl", [make_trajectory("untimed", 2)])  # no recorded timings
    key = launch_server(store, latency="recorded")
    try:
        warnings = server_warnings(key)
    finally:
        stop_replay_server(key)
    assert warnings == [
        "replay server: warning: latency recorded: 2 of 2 turns have no recorded timing "
        "(format test logged none: trajectories traj-untimed); they are sent at once, as with latency instant"
    ]
    plain = launch_server(store, latency="instant")
    try:
        assert server_warnings(plain) == []
    finally:
        stop_replay_server(plain)
