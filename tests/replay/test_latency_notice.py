"""`--latency recorded` over turns whose log kept no timing says so at start instead of
silently serving them as `instant`."""

from __future__ import annotations

from benchmaker.replay_server.latency import parse_latency
from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.server import latency_notice
from benchmaker.replay_server.store import ReplayStore
from benchmaker.trajectories.trajectory import Timing
from tests.replay.test_server_fixtures import make_trajectory, write_store


def test_recorded_latency_names_the_untimed_turns(tmp_path):
    timed = make_trajectory("timed", 2, timing=Timing(ttft_ms=100, duration_ms=300))
    untimed = make_trajectory("untimed", 3)  # timing None: a log without timings
    path = write_store(tmp_path / "t.jsonl", [timed, untimed])
    store = ReplayStore.load(path, latency=parse_latency("recorded"))
    assert store.untimed_turns == 3
    assert latency_notice(store) == (
        "replay server: warning: latency recorded: 3 of 5 turns have no recorded timing "
        "(format test logged none: trajectories traj-untimed); they are sent at once, as with latency instant"
    )
    assert latency_notice(ReplayStore.load(path, latency=parse_latency("instant"))) is None
    only_timed = write_store(tmp_path / "timed.jsonl", [timed])
    assert latency_notice(ReplayStore.load(only_timed, latency=parse_latency("recorded"))) is None


def test_the_server_process_prints_the_notice(tmp_path):
    path = write_store(tmp_path / "t.jsonl", [make_trajectory("untimed", 2)])
    with start_replay_server(path, latency="recorded") as srv:
        tail = srv.stderr_tail()
    assert "warning: latency recorded: 2 of 2 turns have no recorded timing" in tail


def test_the_notice_names_five_untimed_trajectories_and_counts_the_rest(tmp_path):
    trajs = [make_trajectory(f"u{i}", 1) for i in range(7)]
    store = ReplayStore.load(write_store(tmp_path / "t.jsonl", trajs), latency=parse_latency("recorded"))
    assert latency_notice(store) == (
        "replay server: warning: latency recorded: 7 of 7 turns have no recorded timing "
        "(format test logged none: trajectories traj-u0, traj-u1, traj-u2, traj-u3, traj-u4 and 2 more); "
        "they are sent at once, as with latency instant"
    )
