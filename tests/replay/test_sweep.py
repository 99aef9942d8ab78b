"""benchmaker.sweep.sweep: the episode plan, the sweep files, and one real point against a replay
server (benchmaker.sweep.point_run: on the engine) (the point summary SQL: tests/replay/test_point_summary.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.agent.episodes import Episode, TurnRecord
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import run_point
from benchmaker.sweep.sweep import (
    episode_plan,
    point_dir,
    point_name,
    summarize_point,
    sweep_table_markdown,
    write_sweep_points,
)
from benchmaker.trajectories.convert import convert_paths, read_trajectories

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
MS = 1_000_000


def _ep(i: int, start_ms: int, end_ms: int, **kw) -> dict:
    return Episode(
        run_id="r",
        sweep_point="c2",
        concurrency=2,
        episode_id=f"c2-{i}",
        trajectory_id="t",
        task_id=None,
        mode="recorded",
        worker=i,
        started_ns=start_ms * MS,
        ended_ns=end_ms * MS,
        **kw,
    ).to_dict()


def _turn(ep: int, idx: int, **kw) -> dict:
    return TurnRecord(run_id="r", sweep_point="c2", episode_id=f"c2-{ep}", turn_index=idx, **kw).to_dict()


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def point(tmp_path: Path) -> Path:
    pdir = tmp_path / "points" / "c2"
    pdir.mkdir(parents=True)
    # episode 0: 0..100 ms, episode 1: 50..150 ms, episode 2: 150..200 ms (touches 1: no overlap)
    _write(
        pdir / "episodes.jsonl",
        [
            _ep(
                0,
                0,
                100,
                n_turns=2,
                n_requests=2,
                model_time_ns=60 * MS,
                tool_time_ns=10 * MS,
                misses_beyond_turns=1,
                resolved=True,
                reverified=True,
            ),
            _ep(
                1,
                50,
                150,
                n_turns=1,
                n_requests=1,
                model_time_ns=30 * MS,
                tool_time_ns=20 * MS,
                divergences=2,
                resolved=False,
                reverified=True,
            ),
            _ep(
                2,
                150,
                200,
                n_turns=1,
                n_requests=1,
                model_time_ns=30 * MS,
                tool_time_ns=0,
                misses_unknown_key=1,
                resolved=True,
                reverified=False,
                outcome="error",
            ),
        ],
    )
    _write(
        pdir / "turns.jsonl",
        [
            _turn(0, 0, byte_equal=True),
            _turn(0, 1, byte_equal=True),
            _turn(1, 0, byte_equal=True),
            _turn(2, 0, miss_kind="unknown_key"),
        ],
    )
    return pdir


def test_episode_plan_cycles_and_fills_every_worker() -> None:
    a, b = object(), object()
    assert episode_plan([a, b], 5, None) == [a, b, a, b, a]  # max(5, 2) episodes
    assert episode_plan([a, b], 1, None) == [a, b]  # every trajectory once
    assert episode_plan([a], 3, 2) == [a, a]  # explicit count wins
    with pytest.raises(ValueError, match="trajectories"):
        episode_plan([], 1, None)


def test_sweep_points_roundtrip_and_markdown_names_invalid(point: Path, tmp_path: Path) -> None:
    rows = [
        summarize_point(point, sweep_point="c2", concurrency=2),
        summarize_point(point, sweep_point="c3", concurrency=3),
    ]
    write_sweep_points(tmp_path, rows)
    lines = (tmp_path / "sweep_points.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["sweep_point"] for line in lines] == ["c2", "c3"]
    md = sweep_table_markdown(rows, title="t")
    assert md.count("\n| c") == 2
    assert "- **c3 invalid**: achieved concurrency 2 < target 3" in md


async def test_run_point_against_replay_server(tmp_path: Path) -> None:
    traj = tmp_path / "traj.jsonl"
    convert_paths([EXAMPLE], traj)
    trajs = list(read_trajectories(traj))
    with start_replay_server(traj) as srv:
        row = await run_point(trajs, srv.url, tmp_path / "run", ReplayPoint(load="closed:3"), run_id="r1")
        stats = srv.stats()
    pdir = point_dir(tmp_path / "run", point_name(3))
    # 1 trajectory, concurrency 3 -> 3 episodes of its 4 recorded turns
    assert (row["n_episodes"], row["n_turns"], row["n_requests"]) == (3, 12, 12)
    assert row["achieved_max_concurrency"] == 3
    # valid, unless the engine's event-loop lag self-check alone flags a loaded host
    assert [r for r in (row["invalid_reason"] or "").split("; ") if r and "event-loop lag" not in r] == []
    assert row["misses_total"] == 0 and stats["misses"]["total"] == 0
    assert stats["requests"] == 12
    assert sorted(p.name for p in pdir.iterdir()) == [
        "concurrency.json",
        "engine_summary.json",
        "episode_samples.jsonl",
        "episodes.jsonl",
        "point_summary.json",
        "samples.jsonl",
        "turns.jsonl",
    ]
    # a second attempt of the same point replaces the first attempt's lines
    again = await _rerun(trajs, traj, tmp_path)
    assert again == 3


async def _rerun(trajs, traj: Path, tmp_path: Path) -> int:
    with start_replay_server(traj) as srv:
        await run_point(trajs, srv.url, tmp_path / "run", ReplayPoint(load="closed:3"), run_id="r1")
    pdir = point_dir(tmp_path / "run", "c3")
    return len((pdir / "episodes.jsonl").read_text().splitlines())
