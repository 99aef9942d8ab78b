"""benchmaker.sweep.shard: the split of a point's episode slots and plan, two shards (each with its
own replay server) merged into one point with a shard id on every row, a failed
shard, a shard picked up late (the readiness barrier), a shard that never comes, and
the merge of the servers' stats."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import orjson
import pytest
from pydantic import TypeAdapter

from benchmaker.engine.exchange import Exchange
from benchmaker.engine.shared_start import MIN_START_LEAD_S, ReadyBoard, ShardsNotReady, post_ready
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.shard import (
    ReplayShardPoint,
    fetch_replay_shards,
    merge_replay_point,
    merge_server_stats,
    run_replay_shard,
    shard_concurrency,
    shard_dir,
    shard_plan,
    shards_for,
)
from benchmaker.sweep.sweep import point_dir, reset_point_dir, write_run_manifest, write_sweep_points
from benchmaker.trajectories.convert import convert_paths, read_trajectories
from benchmaker.warehouse.loader import load_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"  # one trajectory of 4 turns


def _reasons_but_loop_lag(row: dict) -> list[str]:
    """The point's invalid reasons other than the engine's event-loop lag (a loaded host
    alone can raise it: each shard's engine checks its loop as engine runs do)."""
    return [r for r in (row["invalid_reason"] or "").split("; ") if r and "event-loop lag" not in r]


@pytest.fixture
def traj(tmp_path: Path) -> Path:
    path = tmp_path / "trajectories.jsonl"
    convert_paths([EXAMPLE], path)
    return path


@pytest.fixture
def multi(tmp_path: Path) -> Path:
    """Four distinct trajectories of 4, 2, 2 and 4 turns."""
    path = tmp_path / "multi.jsonl"
    fx = REPO / "tests" / "replay" / "fixtures"
    convert_paths([EXAMPLE, fx / "swe_agent_fc.traj", fx / "pi_events.jsonl", fx / "pi_v3_tree.jsonl"], path)
    return path


def _got_ready_then_died(p: ReplayShardPoint, worker: int) -> None:
    """Shard `worker` of `p`'s attempt posted its ready record (it came), then ran no
    further: the other shards start without waiting for it."""
    post_ready(
        ReadyBoard.in_dir(shard_dir(Path(p.run_dir), p.sweep_point, worker, p.start_wall_ns).parent),
        worker,
        p.shards,
        p.start_wall_ns,
    )


def _episodes(pdir: Path) -> list[dict]:
    return [orjson.loads(line) for line in (pdir / "episodes.jsonl").read_bytes().splitlines() if line.strip()]


def _points(traj: Path, run_dir: Path, n: int, start_wall_ns: int, **kw) -> list[ReplayShardPoint]:
    return [
        ReplayShardPoint(
            point=ReplayPoint(load="closed:4", shards=n, **kw),
            trajectories=str(traj),
            run_dir=str(run_dir),
            run_id="rid",
            worker=k,
            start_wall_ns=start_wall_ns,
        )
        for k in range(n)
    ]


def test_slots_and_plan_are_split_without_overlap() -> None:
    assert [shard_concurrency(5, 2, k) for k in (0, 1)] == [3, 2]
    assert [shard_concurrency(8, 3, k) for k in (0, 1, 2)] == [3, 3, 2]
    assert (shards_for(1, 2), shards_for(4, 2), shards_for(3, 8)) == (1, 2, 3)
    plan = list(range(7))  # slots of 5: 0 1 2 3 4 0 1; shard 0 owns slots 0, 2, 4
    assert shard_plan(plan, 5, 2, 0) == [0, 2, 4, 5]
    assert shard_plan(plan, 5, 2, 1) == [1, 3, 6]


def test_server_stats_of_two_servers_add_up() -> None:
    a = {
        "requests": 3,
        "misses": {"unknown_key": 1, "total": 1},
        "uptime_s": 2.0,
        "recent_unknown_keys": ["k1"],
        "trajectories": {"t": {"served": 2}},
    }
    b = {
        "requests": 5,
        "misses": {"unknown_key": 0, "total": 0},
        "uptime_s": 3.5,
        "recent_unknown_keys": ["k2"],
        "trajectories": {"t": {"served": 4}, "u": {"served": 1}},
    }
    assert merge_server_stats([a, b]) == {
        "requests": 8,
        "misses": {"unknown_key": 1, "total": 1},
        "uptime_s": 3.5,
        "recent_unknown_keys": ["k1", "k2"],
        "trajectories": {"t": {"served": 6}, "u": {"served": 1}},
        "servers": 2,
    }


async def test_two_shards_merge_into_one_point_with_a_shard_id_on_every_row(tmp_path: Path, traj: Path) -> None:
    run_dir = tmp_path / "rid"
    write_run_manifest(run_dir, run_id="rid", kind="swebench-replay", label=None, config={}, workers=2)
    reset_point_dir(point_dir(run_dir, "c4"))
    trajs = list(read_trajectories(traj))
    # 50 ms to the first token: the four episodes overlap for sure
    points = _points(traj, run_dir, 2, time.time_ns() + 2_500_000_000, latency="fixed:50:0")
    reports = await asyncio.gather(*(run_replay_shard(p, trajs) for p in points))
    assert [(r["worker"], r["concurrency"], r["episodes_planned"]) for r in reports] == [(0, 2, 2), (1, 2, 2)]
    assert len({r["server_pid"] for r in reports}) == 2  # a replay server per shard
    for r in reports:  # one host, one clock: both started on the shared start (here both shards share one
        # event loop, where the other shard's engine setup, its manifest, may hold a wake-up back)
        assert 0 <= r["start_late_ns"] < 150_000_000, r
        assert r["start_wall_ns"] == r["barrier"]["start_wall_ns"] >= points[0].start_wall_ns
    assert reports[0]["barrier"]["ready_wall_ns"] == reports[1]["barrier"]["ready_wall_ns"]
    row = merge_replay_point(
        run_dir,
        "c4",
        attempt=points[0].start_wall_ns,
        concurrency=4,
        exit_codes=[0, 0],
        shard_info=[{"flow_run_id": "a"}, {"flow_run_id": "b"}],
    )
    # 4 episodes (default plan: max(concurrency 4, 1 trajectory)) of the recording's 4 turns
    assert (row["n_episodes"], row["n_turns"], row["n_requests"], row["shards"]) == (4, 16, 16, 2)
    assert (row["achieved_max_concurrency"], row["proof_ok"], row["misses_total"]) == (4, True, 0)
    assert _reasons_but_loop_lag(row) == []
    pdir = point_dir(run_dir, "c4")
    assert sorted(p.name for p in pdir.iterdir()) == [
        "concurrency.json",
        "episode_samples-w0.jsonl",
        "episode_samples-w1.jsonl",
        "episodes.jsonl",
        "point_summary.json",
        "samples-w0.jsonl",
        "samples-w1.jsonl",
        "server_stats.json",
        "shards.json",
        "turns.jsonl",
    ]  # _shards removed
    stats = orjson.loads((pdir / "server_stats.json").read_bytes())
    assert (stats["requests"], stats["misses"]["total"], stats["servers"]) == (16, 0, 2)
    shards = orjson.loads((pdir / "shards.json").read_bytes())
    assert [(s["worker"], s["exit_code"], s["flow_run_id"]) for s in shards] == [(0, 0, "a"), (1, 0, "b")]
    episodes = _episodes(pdir)
    assert sorted(e["episode_id"] for e in episodes) == ["c4-w0-0", "c4-w0-1", "c4-w1-0", "c4-w1-1"]
    # as in a single-process point: the point's target, and each episode's slot of the 4
    assert {e["concurrency"] for e in episodes} == {4}
    assert sorted(e["worker"] for e in episodes) == [0, 1, 2, 3]
    write_sweep_points(run_dir, [row])
    report = load_run(tmp_path / "w.duckdb", run_dir)
    assert (report.rows["episodes"], report.rows["turns"], report.rows["requests"]) == (4, 16, 16)
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        for table, per_shard in (("episodes", 2), ("turns", 8), ("requests", 8)):
            assert con.execute(f"SELECT shard, count(*) FROM {table} GROUP BY 1 ORDER BY 1").fetchall() == [
                (0, per_shard),
                (1, per_shard),
            ], table
        assert con.execute("SELECT shards, concurrency FROM sweep_points").fetchall() == [(2, 4)]
    finally:
        con.close()


async def test_shards_get_the_trajectories_and_hand_back_their_files_through_an_exchange(
    tmp_path: Path, traj: Path
) -> None:
    url = f"memory://{tmp_path.name}/exchange"
    ex = Exchange(url)
    ex.put_file(traj, "rid/trajectories.jsonl")
    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "c4"))
    points = [
        replace(p, trajectories="rid/trajectories.jsonl", exchange=url)
        for p in _points(traj, run_dir, 2, time.time_ns() + 2_500_000_000, latency="fixed:50:0")
    ]
    reports = await asyncio.gather(*(run_replay_shard(p) for p in points))  # each reads the file it downloaded
    assert [r["clock"]["reference"] for r in reports] == ["storage mtime (memory)"] * 2
    assert list(point_dir(run_dir, "c4").iterdir()) == []  # the shards wrote elsewhere
    got = fetch_replay_shards(run_dir, "rid", "c4", url, points[0].start_wall_ns)
    assert sorted(p.relative_to(point_dir(run_dir, "c4")).as_posix() for p in got) == sorted(
        [
            f"_shards/a{points[0].start_wall_ns}/w{k}/{name}"
            for k in (0, 1)
            for name in (
                "concurrency.json",
                "engine_summary.json",
                "episode_samples.jsonl",
                "episodes.jsonl",
                "samples.jsonl",
                "server_stats.json",
                "shard.json",
                "turns.jsonl",
            )
        ]
        + [f"_shards/a{points[0].start_wall_ns}/progress-w{k}.json" for k in (0, 1)]  # their live progress
        + [f"_shards/a{points[0].start_wall_ns}/ready-w{k}.json" for k in (0, 1)]
    )  # the barrier's records
    assert ex.get_dir("rid/points", tmp_path / "left") == []  # fetched files are removed there
    row = merge_replay_point(run_dir, "c4", attempt=points[0].start_wall_ns, concurrency=4, exit_codes=[0, 0])
    assert (row["n_episodes"], row["n_turns"], row["achieved_max_concurrency"]) == (4, 16, 4)
    assert _reasons_but_loop_lag(row) == []


async def test_files_of_an_earlier_attempt_of_the_point_are_not_merged(tmp_path: Path, traj: Path) -> None:
    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "c4"))
    trajs = list(read_trajectories(traj))
    earlier = _points(traj, run_dir, 2, time.time_ns() + 2_000_000_000)
    _got_ready_then_died(earlier[1], 0)
    await run_replay_shard(earlier[1], trajs)  # a straggler of an earlier attempt, still writing
    points = _points(traj, run_dir, 2, time.time_ns() + 2_000_000_000)
    _got_ready_then_died(points[0], 1)
    await run_replay_shard(points[0], trajs)  # this attempt: shard 1 never ran
    row = merge_replay_point(run_dir, "c4", attempt=points[0].start_wall_ns, concurrency=4, exit_codes=[0, 1])
    assert (row["n_episodes"], row["n_turns"]) == (2, 8)  # shard 0's two episodes only
    assert not (point_dir(run_dir, "c4") / "_shards").exists()  # every attempt's files removed


async def test_a_failed_shard_is_a_verdict_reason_and_the_other_half_stays(tmp_path: Path, traj: Path) -> None:
    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "c4"))
    points = _points(traj, run_dir, 2, time.time_ns() + 2_000_000_000)
    _got_ready_then_died(points[0], 1)
    await run_replay_shard(points[0], list(read_trajectories(traj)))  # shard 1 came, then died
    row = merge_replay_point(run_dir, "c4", attempt=points[0].start_wall_ns, concurrency=4, exit_codes=[0, 1])
    assert (row["n_episodes"], row["n_turns"]) == (2, 8)
    assert row["valid"] is False
    assert _reasons_but_loop_lag(row) == ["achieved concurrency 2 < target 4", "shard 1 failed (exit code 1)"]


async def test_a_shard_picked_up_after_the_earliest_start_delays_the_point(tmp_path: Path, traj: Path) -> None:
    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "c4"))
    trajs = list(read_trajectories(traj))
    points = _points(traj, run_dir, 2, time.time_ns() + 300_000_000, latency="fixed:50:0")

    async def picked_up_late() -> dict:
        await asyncio.sleep(1.5)  # well after the earliest start: it used to be ShardLate
        return await run_replay_shard(points[1], trajs)

    reports = await asyncio.gather(run_replay_shard(points[0], trajs), picked_up_late())
    ready = reports[0]["barrier"]["ready_wall_ns"]
    assert reports[1]["barrier"]["ready_wall_ns"] == ready and ready[1] > points[0].start_wall_ns + 10**9
    start = ready[1] + round(MIN_START_LEAD_S * 1e9)  # the last ready + the margin, on both
    assert [r["start_wall_ns"] for r in reports] == [start, start]
    assert reports[0]["barrier"]["waited_ns"] > 10**9  # shard 0 waited for shard 1
    row = merge_replay_point(run_dir, "c4", attempt=points[0].start_wall_ns, concurrency=4, exit_codes=[0, 0])
    assert (row["n_episodes"], row["n_turns"], row["achieved_max_concurrency"]) == (4, 16, 4)
    assert _reasons_but_loop_lag(row) == []  # neither started late against the shared start


async def test_a_shard_that_never_comes_stops_the_others_naming_it(tmp_path: Path, traj: Path) -> None:
    p = replace(_points(traj, tmp_path / "rid", 2, time.time_ns())[1], ready_timeout_s=0.5)
    with pytest.raises(
        ShardsNotReady,
        match=r"^shard 1/2 of c4: shard 0 of 2 not ready 0\.5 s after the earliest "
        r"start \(ready_timeout_s\); nothing sent$",
    ):
        await run_replay_shard(p, list(read_trajectories(traj)))
    attempt = shard_dir(tmp_path / "rid", "c4", 1, p.start_wall_ns).parent
    assert (attempt / "ready-w1.json").is_file()
    assert not list(attempt.rglob("shard.json"))
    assert all(f.stat().st_size == 0 for f in attempt.rglob("*samples*.jsonl"))  # nothing sent
    with pytest.raises(
        ValueError,
        match=r"expected 0 <= worker < shards <= concurrency=4 \(got worker 0, "
        r"shards 5\)",
    ):
        await run_replay_shard(replace(p, worker=0, point=p.point.model_copy(update={"shards": 5})), [])
    # as a flow-run parameter and back (the shard flow's `point`): the same point
    assert TypeAdapter(ReplayShardPoint).validate_python(p.as_params()) == p


async def test_a_sharded_point_plays_what_a_single_process_point_plays(tmp_path: Path, multi: Path) -> None:
    from benchmaker.replay_server.process import start_replay_server
    from benchmaker.sweep.point_run import run_point

    trajs = list(read_trajectories(multi))
    with start_replay_server(multi, latency="fixed:20:0") as srv:
        single = await run_point(
            trajs, srv.url, tmp_path / "single", ReplayPoint(load="closed:4", episodes=6), run_id="rid"
        )
    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "c4"))
    points = _points(multi, run_dir, 2, time.time_ns() + 2_500_000_000, latency="fixed:20:0", episodes=6)
    await asyncio.gather(*(run_replay_shard(p, trajs) for p in points))
    sharded = merge_replay_point(
        run_dir, "c4", attempt=points[0].start_wall_ns, concurrency=4, exit_codes=[0, 0], episodes_target=6
    )
    # episodes 0..5 of the one plan cycle the 4 trajectories (4+2+2+4 turns, then 4+2): 18 turns
    keys = ("n_episodes", "n_turns", "n_requests", "achieved_max_concurrency", "misses_total", "episodes")
    assert [sharded[k] for k in keys] == [single[k] for k in keys] == [6, 18, 18, 4, 0, 6]
    assert _reasons_but_loop_lag(sharded) == _reasons_but_loop_lag(single) == []

    def mix(pdir: Path) -> list[str]:
        return sorted(e["trajectory_id"] for e in _episodes(pdir))

    assert mix(point_dir(run_dir, "c4")) == mix(point_dir(tmp_path / "single", "c4"))


async def test_in_duration_mode_the_shards_start_on_every_trajectory(tmp_path: Path, multi: Path) -> None:
    trajs = list(read_trajectories(multi))
    run_dir = tmp_path / "rid"
    reset_point_dir(point_dir(run_dir, "c4"))
    points = _points(multi, run_dir, 2, time.time_ns() + 2_500_000_000, latency="fixed:20:0", duration_s=0.2)
    await asyncio.gather(*(run_replay_shard(p, trajs) for p in points))
    row = merge_replay_point(
        run_dir, "c4", attempt=points[0].start_wall_ns, concurrency=4, exit_codes=[0, 0], duration_s=0.2
    )
    assert (row["achieved_max_concurrency"], row["misses_total"]) == (4, 0)
    assert _reasons_but_loop_lag(row) == []
    first = {e["episode_id"]: e["trajectory_id"] for e in _episodes(point_dir(run_dir, "c4"))}
    # shard 0 owns slots 0 and 2, shard 1 slots 1 and 3: the first wave plays all four
    # trajectories, as the single-process point's first wave does
    assert sorted(first[f"c4-w{i % 2}-{i}"] for i in range(4)) == sorted(t.trajectory_id for t in trajs)
