"""The concurrency proof and usage coverage of replay sweep points in
the warehouse: a real sweep point (harness against the replay server) and a hand-written
staggered point, written by benchmaker.sweep.sweep's plain functions, loaded by load_run, read
back from v_sweep_summary: the same values as the points' own rows."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from benchmaker.agent.episodes import Episode
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import run_point
from benchmaker.sweep.sweep import point_dir, summarize_point, write_run_manifest, write_sweep_points
from benchmaker.trajectories.convert import convert_paths, read_trajectories
from benchmaker.warehouse.loader import load_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
MS = 1_000_000


def _episode(i: int, start_ms: int, end_ms: int, **kw) -> dict:
    return Episode(
        run_id="r1",
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


async def test_proof_and_usage_coverage_reach_the_warehouse(tmp_path: Path) -> None:
    traj = tmp_path / "traj.jsonl"
    convert_paths([EXAMPLE], traj)
    trajs = list(read_trajectories(traj))
    run_dir = tmp_path / "run"
    write_run_manifest(run_dir, run_id="r1", kind="swebench-replay", label="t", config={})
    with start_replay_server(traj) as srv:
        real = await run_point(trajs, srv.url, run_dir, ReplayPoint(load="closed:3"), run_id="r1")
    # a staggered point: 0..100, 150..300, 200..400 ms; 2 of 3 episodes with usage
    pdir = point_dir(run_dir, "c2")
    pdir.mkdir(parents=True)
    (pdir / "episodes.jsonl").write_text(
        "".join(
            json.dumps(e) + "\n"
            for e in [
                _episode(0, 0, 100, usage_complete=True, prompt_tokens=10, output_tokens=5),
                _episode(1, 150, 300, usage_complete=True, prompt_tokens=20, output_tokens=7),
                _episode(2, 200, 400),
            ]
        )
    )
    staggered = summarize_point(pdir, sweep_point="c2", concurrency=2)
    write_sweep_points(run_dir, [staggered, real])

    # the real point: 1 trajectory at concurrency 3 -> 3 episodes all started before any
    # finished; the replay server sends usage on every recorded turn of the example
    proof = json.loads((point_dir(run_dir, "c3") / "concurrency.json").read_text())
    assert (proof["max_in_flight"], proof["all_started_before_first_finish"], proof["valid"]) == (3, True, True)
    assert (real["max_episodes_in_flight"], real["all_started_before_first_finish"], real["proof_ok"]) == (
        3,
        True,
        True,
    )
    # usage per request: 3 episodes x 4 recorded turns, every one answered with usage
    assert (real["n_episodes"], real["n_ok"], real["n_ok_with_usage"], real["usage_coverage"]) == (3, 12, 12, 1.0)

    wh = tmp_path / "wh.duckdb"
    load_run(wh, run_dir)
    con = duckdb.connect(str(wh), read_only=True)
    try:
        view = con.execute(
            "SELECT sweep_point, target_concurrency, max_episodes_in_flight, all_started_before_first_finish, "
            "proof_ok, usage_coverage, valid, invalid_reason FROM v_sweep_summary ORDER BY sweep_point"
        ).fetchall()
    finally:
        con.close()
    reason = "only 1 of 2 episodes started before the first finished"
    # the staggered point has no request: usage coverage unknown (None), never 0
    assert view == [
        ("c2", 2, 2, False, False, None, False, "concurrency proof failed: " + reason),
        ("c3", 3, 3, True, True, 1.0, True, None),
    ]
    keys = (
        "target_concurrency",
        "max_episodes_in_flight",
        "all_started_before_first_finish",
        "proof_ok",
        "usage_coverage",
        "valid",
        "invalid_reason",
    )
    assert [(r["sweep_point"], *(r[k] for k in keys)) for r in (staggered, real)] == view
