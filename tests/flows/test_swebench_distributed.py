"""Sharded swebench-replay (flows/swebench_replay.py with sharded, its shard side in
flows/swebench_replay_shard.py): the same
shards through prefect-dask on a distributed.LocalCluster, end to end into the
warehouse. The work-pool end-to-end run is in test_distributed_pool.py; the shard and
the merge themselves in tests/replay/test_shard.py."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import orjson
import pytest

from benchmaker.flows.swebench_replay import ParameterError
from benchmaker.sweep.sweep import point_dir
from tests.flows._verdict import reasons_but_loop_lag, run_flow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"  # one trajectory of 4 turns


pytestmark = [
    pytest.mark.prefect,
    pytest.mark.usefixtures("prefect_harness"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),  # Prefect's client sockets
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


async def test_a_two_point_sweep_runs_its_shards_on_a_dask_local_cluster_through_an_exchange(
    tmp_path: Path, local_cluster
) -> None:
    from benchmaker.flows.swebench_replay import swebench_replay

    # the shards reach the run only through the exchange (a file:// URL here, s3:// on a fleet)
    exchange = f"file://{tmp_path}/exchange"
    out = await run_flow(
        swebench_replay,
        logs=[EXAMPLE],
        sharded=True,
        concurrency_sweep=[1, 4],
        shards=2,
        latency="fixed:50:0",
        out_dir=tmp_path / "a",
        warehouse=tmp_path / "w.duckdb",
        dask_address=local_cluster.scheduler_address,
        exchange=exchange,
    )
    assert list((tmp_path / "exchange").iterdir()) == []  # the run's files were fetched and removed there
    c1, c4 = out["points"]
    # c1: one slot, so one shard; c4: two shards of two episodes, each of the 4 recorded turns
    assert (c1["shards"], c1["n_episodes"], c1["n_turns"], reasons_but_loop_lag(c1)) == (1, 1, 4, [])
    assert (c4["shards"], c4["n_episodes"], c4["n_turns"], c4["achieved_max_concurrency"]) == (2, 4, 16, 4)
    assert (reasons_but_loop_lag(c4), c4["misses_total"]) == ([], 0), c4["invalid_reason"]
    assert [[s["state"] for s in point] for point in out["shards"]] == [["COMPLETED"], ["COMPLETED", "COMPLETED"]]
    shards = orjson.loads((point_dir(Path(out["run_dir"]), "c4") / "shards.json").read_bytes())
    pids = {s["pid"] for s in shards}
    assert len(pids) == 2 and os.getpid() not in pids  # two Dask worker processes, not this one
    assert [s["clock"]["reference"] for s in shards] == ["storage mtime (file)"] * 2
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*), any_value(kind), any_value(workers) FROM runs").fetchone() == (
            1,
            "swebench-replay",
            2,
        )
        assert con.execute(
            "SELECT sweep_point, shard, count(*) FROM episodes GROUP BY ALL ORDER BY ALL"
        ).fetchall() == [("c1", 0, 1), ("c4", 0, 2), ("c4", 1, 2)]
        assert con.execute(
            "SELECT sweep_point, shard, count(*) FROM requests GROUP BY ALL ORDER BY ALL"
        ).fetchall() == [("c1", 0, 4), ("c4", 0, 8), ("c4", 1, 8)]
        assert con.execute("SELECT sweep_point, shards FROM sweep_points ORDER BY 1").fetchall() == [
            ("c1", 1),
            ("c4", 2),
        ]
        # every episode graded: replay integrity held on both shards' servers
        assert con.execute(
            "SELECT grader, verdict, count(*) FROM grades WHERE sweep_point = 'c4' GROUP BY ALL ORDER BY ALL"
        ).fetchall()[:2] == [("concurrency_proof", "correct", 1), ("replay_integrity", "correct", 4)]
    finally:
        con.close()


async def test_a_missing_trajectories_file_is_refused_before_any_work(tmp_path: Path) -> None:
    from benchmaker.flows.swebench_replay import swebench_replay

    with pytest.raises(ParameterError, match=r"trajectories: no such file \(got '.*nope.jsonl'\)"):
        await swebench_replay(trajectories=tmp_path / "nope.jsonl", out_dir=tmp_path / "a", sharded=True)
    assert not (tmp_path / "a").exists()


async def test_a_failed_distributed_run_resumes_at_the_failed_point(tmp_path: Path, local_cluster, monkeypatch) -> None:
    import hashlib
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    from benchmaker.flows.swebench_replay import swebench_replay
    from benchmaker.tasks.sweep import FAIL_POINT_ENV

    def fingerprint(pdir: Path) -> dict[str, tuple[int, str]]:
        # the point stage's files (grades.jsonl is the grade stage's, written after all points)
        return {
            f.name: (f.stat().st_mtime_ns, hashlib.sha256(f.read_bytes()).hexdigest())
            for f in sorted(pdir.iterdir())
            if f.name != "grades.jsonl"
        }

    out_dir = tmp_path / "a"
    # 50 ms a turn: the two shards' episodes overlap however late one shard starts on a
    # busy host (at instant latency a CI run measured c4 at concurrency 3: invalid)
    kw = dict(
        logs=[EXAMPLE],
        concurrency_sweep=[2, 4],
        sharded=True,
        shards=2,
        latency="fixed:50:0",
        out_dir=out_dir,
        warehouse=tmp_path / "w.duckdb",
        dask_address=local_cluster.scheduler_address,
    )
    monkeypatch.setenv(FAIL_POINT_ENV, "c4")  # c2 completes, c4 measures, merges, then fails
    state = await swebench_replay(**kw, return_state=True)
    monkeypatch.delenv(FAIL_POINT_ENV)
    assert state.is_failed()
    flow_run_id = str(state.state_details.flow_run_id)
    [run_dir] = [d for d in out_dir.iterdir() if d.name != "_cache"]
    c2_before, c4_before = fingerprint(run_dir / "points" / "c2"), fingerprint(run_dir / "points" / "c4")
    manifest_before = (run_dir / "manifest.json").read_bytes()

    # resumed from another process, as a user would: the one flow, sharded again
    env = dict(
        os.environ,
        PREFECT_API_URL=PREFECT_API_URL.value(),
        PYTHONPATH=str(REPO),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "benchmaker.flows.retry", flow_run_id],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert fingerprint(run_dir / "points" / "c2") == c2_before  # a cache hit: not measured again
    c4_after = fingerprint(run_dir / "points" / "c4")
    assert c4_after.keys() == c4_before.keys()
    assert all(c4_after[name][0] > c4_before[name][0] for name in c4_after)  # measured again
    assert (run_dir / "manifest.json").read_bytes() == manifest_before  # same run, same t0
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT sweep_point, shards, n_episodes, invalid_reason FROM v_sweep_summary ORDER BY sweep_point"
        ).fetchall()
        assert [(p, s, n, reasons_but_loop_lag({"invalid_reason": r})) for p, s, n, r in rows] == [
            ("c2", 2, 2, []),
            ("c4", 2, 4, []),
        ]
    finally:
        con.close()
