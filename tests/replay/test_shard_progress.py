"""Live progress of a distributed sweep point: each shard writes its latest
progress event beside its files (or into the exchange), the coordinator merges them
into one event of the point (benchmaker.progress.watch_shards). Real shards here (each
with its own replay server), on a shared directory and through an exchange."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from benchmaker.engine.exchange import Exchange
from benchmaker.progress import (
    ProgressEvent,
    ProgressWriter,
    event_from_json,
    event_to_json,
    merge_shard_events,
    observe,
    watch_shards,
)
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.shard import ReplayShardPoint, read_shard_progress, run_replay_shard
from benchmaker.sweep.sweep import point_dir, reset_point_dir
from benchmaker.trajectories.convert import convert_paths, read_trajectories

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"  # one trajectory of 4 turns


def _ev(**kw) -> ProgressEvent:
    base = dict(
        point="c4",
        episodes_done=0,
        episodes_total=2,
        calls_done=0,
        calls_total=8,
        requests_in_flight=0,
        misses=0,
        elapsed_s=1.0,
        eta_s=None,
        calls_per_s=None,
    )
    return ProgressEvent(**{**base, **kw})


def test_merged_event_sums_the_shards_and_waits_for_all_of_them() -> None:
    a = _ev(episodes_done=1, calls_done=6, requests_in_flight=1, misses=1, eta_s=3.0, errors=1)
    b = _ev(episodes_done=0, calls_done=2, requests_in_flight=2, eta_s=7.5)
    ev = merge_shard_events("c4", [a, b], shards=2, elapsed_s=4.0)
    assert (ev.episodes_done, ev.episodes_total, ev.calls_done, ev.calls_total) == (1, 4, 8, 16)
    assert (ev.requests_in_flight, ev.misses, ev.errors, ev.calls_per_s, ev.eta_s) == (3, 1, 1, 2.0, 7.5)
    assert (ev.elapsed_s, ev.finished, ev.fraction) == (4.0, False, 0.5)
    one = merge_shard_events("c4", [a], shards=2, elapsed_s=4.0)  # shard 1 not heard from yet
    assert (one.calls_done, one.calls_total, one.episodes_total, one.eta_s) == (6, None, None, None)
    no_eta = merge_shard_events("c4", [a, _ev(calls_done=0)], shards=2, elapsed_s=4.0)
    assert no_eta.eta_s is None  # a shard without an ETA yet: the point's is unknown
    done = merge_shard_events(
        "c4", [_ev(calls_done=8, finished=True), _ev(calls_done=8, finished=True, eta_s=0.0)], shards=2, elapsed_s=9.0
    )
    assert (done.calls_done, done.finished, done.eta_s, done.fraction) == (16, True, 0.0, 1.0)
    assert merge_shard_events("c4", [], shards=2, elapsed_s=0.0).calls_done == 0


def test_an_event_travels_as_json_and_bad_json_is_refused() -> None:
    ev = _ev(calls_done=3, eta_s=2.5, calls_per_s=3.0, duration_s=None, errors=2)
    assert event_from_json(event_to_json(ev)) == ev
    with pytest.raises(ValueError, match="not a progress event"):
        event_from_json(b"[1, 2]")
    with pytest.raises(ValueError, match="not a progress event"):
        event_from_json(b"{")


async def test_the_writer_throttles_but_always_writes_the_last_event() -> None:
    written: list[bytes] = []
    now = [0.0]
    writer = ProgressWriter(written.append, min_interval_s=1.0, clock=lambda: now[0])
    await writer(_ev(calls_done=1))
    now[0] = 0.5
    await writer(_ev(calls_done=2))  # within the second: skipped
    now[0] = 1.2
    await writer(_ev(calls_done=3))
    now[0] = 1.3
    await writer(_ev(calls_done=8, finished=True))  # the last one, whatever the time
    assert [event_from_json(w).calls_done for w in written] == [1, 3, 8]


@pytest.fixture
def traj(tmp_path: Path) -> Path:
    path = tmp_path / "trajectories.jsonl"
    convert_paths([EXAMPLE], path)
    return path


async def _two_shards_watched(points: list[ReplayShardPoint], read) -> list[ProgressEvent]:
    """Run the shards of `points` (here, in this process) while the coordinator's
    watch_shards merges what they write; returns the merged events seen."""
    seen: list[ProgressEvent] = []
    with observe(seen.append):
        async with watch_shards("c4", read, shards=len(points), interval_s=0.1):
            await asyncio.gather(*(run_replay_shard(p) for p in points))
    return seen


def _check(seen: list[ProgressEvent], start_wall_ns: int) -> None:
    # 4 episodes (default plan of concurrency 4 over one trajectory) x 4 turns, 2 per shard
    last = seen[-1]
    assert (last.point, last.episodes_done, last.episodes_total, last.calls_done, last.calls_total) == (
        "c4",
        4,
        4,
        16,
        16,
    )
    assert (last.finished, last.eta_s, last.misses, last.requests_in_flight) == (True, 0.0, 0, 0)
    # the point was visible before its shards were done: both had reported their plans
    live = [e for e in seen if not e.finished and e.calls_total == 16]
    assert live, seen
    assert all(e.calls_done <= 16 and e.episodes_done <= 4 for e in seen)
    assert [e.calls_done for e in seen] == sorted(e.calls_done for e in seen)  # never goes back
    assert last.elapsed_s <= (time.time_ns() - start_wall_ns) / 1e9  # since the shared start


async def test_a_distributed_point_shows_its_shards_progress_merged(tmp_path: Path, traj: Path) -> None:
    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "c4"))
    start = time.time_ns() + 8_000_000_000  # room for two replay servers to start on a busy host
    points = [
        ReplayShardPoint(
            point=ReplayPoint(load="closed:4", shards=2, latency="fixed:50:0"),
            trajectories=str(traj),
            run_dir=str(run_dir),
            run_id="rid",
            worker=k,
            start_wall_ns=start,
        )
        for k in range(2)
    ]
    seen = await _two_shards_watched(points, lambda: read_shard_progress(run_dir, "rid", "c4"))
    _check(seen, start)
    attempt, events = read_shard_progress(run_dir, "rid", "c4")
    assert attempt == start
    assert [(e.calls_done, e.calls_total, e.episodes_total, e.finished) for e in events] == [
        (8, 8, 2, True),
        (8, 8, 2, True),
    ]  # each shard's own file: its half of the point
    assert read_shard_progress(tmp_path / "other", "rid", "c4") == (None, [])


async def test_shards_progress_travels_through_an_exchange(tmp_path: Path, traj: Path) -> None:
    url = f"memory://{tmp_path.name}/exchange"
    ex = Exchange(url)
    ex.put_file(traj, "rid/trajectories.jsonl")
    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "c4"))
    start = time.time_ns() + 8_000_000_000  # room for two replay servers to start on a busy host
    points = [
        ReplayShardPoint(
            point=ReplayPoint(load="closed:4", shards=2, latency="fixed:50:0"),
            trajectories="rid/trajectories.jsonl",
            run_dir=str(run_dir),
            run_id="rid",
            worker=k,
            start_wall_ns=start,
            exchange=url,
        )
        for k in range(2)
    ]
    seen = await _two_shards_watched(points, lambda: read_shard_progress(run_dir, "rid", "c4", url))
    _check(seen, start)
    assert list(point_dir(run_dir, "c4").iterdir()) == []  # nothing written on the coordinator's side
    assert sorted(ex.read_glob("rid/points/c4/_shards/a*/progress-w*.json")) == [
        f"rid/points/c4/_shards/a{start}/progress-w{k}.json" for k in (0, 1)
    ]
    # a straggler of an earlier attempt is not mixed into the latest one
    ex.put_bytes(f"rid/points/c4/_shards/a{start - 10**9}/progress-w0.json", event_to_json(_ev(calls_done=99)))
    attempt, events = read_shard_progress(run_dir, "rid", "c4", url)
    assert (attempt, [e.calls_done for e in events]) == (start, [8, 8])


def test_trajectories_fixture_is_one_recording_of_four_turns(traj: Path) -> None:
    assert [len(t.turns) for t in read_trajectories(traj)] == [4]


async def test_an_engine_point_in_shards_shows_its_requests_merged(tmp_path: Path) -> None:
    """llm-sweep's shards (benchmaker.tasks.shard.run_shard_point) write their engine progress the
    same way: constant:40 for 1 s on two shards = 20 requests each, 40 merged."""
    from benchmaker.sweep.point import LlmPoint
    from benchmaker.tasks.shard import ShardPoint, run_shard_point
    from benchmaker.testing.scenario_server import Scenario, ScenarioServer

    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "constant-40"))
    start = time.time_ns() + 4_000_000_000
    seen: list[ProgressEvent] = []
    async with ScenarioServer(Scenario(ttft_ms=5)) as server:
        points = [
            ShardPoint(
                LlmPoint(base_url=server.url, model="m", load="constant:40", shards=2, duration_s=1.0, max_tokens=8),
                str(run_dir),
                "rid",
                None,
                worker=k,
                start_wall_ns=start,
            )
            for k in range(2)
        ]
        with observe(seen.append):
            async with watch_shards(
                "constant-40", lambda: read_shard_progress(run_dir, "rid", "constant-40"), shards=2, interval_s=0.1
            ):
                await asyncio.gather(*(run_shard_point(p) for p in points))
    last = seen[-1]
    assert (last.calls_done, last.calls_total, last.errors, last.finished, last.duration_s) == (40, None, 0, True, 1.0)
    assert any(not e.finished for e in seen)
    assert [e.calls_done for e in seen] == sorted(e.calls_done for e in seen)
    attempt, events = read_shard_progress(run_dir, "rid", "constant-40")
    assert (attempt, [(e.calls_done, e.finished) for e in events]) == (start, [(20, True), (20, True)])
