"""The swebench-replay flow for real (one session-scoped Prefect harness): end to end
on the bundled example, cached conversion on a second run, a killed replay server
retried, bad parameters refused, the real recordings at sweep 1,5, resume by cache."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import duckdb
import httpx
import pytest

from tests.flows._verdict import run_flow, valid_but_loop_lag

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
TINY_TASK = REPO / "examples" / "tiny-task"
REAL = REPO / ".." / "shared" / "data" / "real"

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.usefixtures("prefect_harness"),
    # Prefect's own API clients leave sockets to its test server for the GC (every
    # leaked socket's peer is the harness port); not ours to close.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


def _task_runs(flow_run_id: str) -> dict[str, list]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    out: dict[str, list] = {}
    for tr in runs:
        out.setdefault(tr.name.rsplit("-", 1)[0], []).append(tr)
    return out


async def test_example_end_to_end_twice_reuses_conversion(tmp_path: Path) -> None:
    from benchmaker.flows.swebench_replay import swebench_replay

    kw = dict(
        logs=[EXAMPLE],
        concurrency_sweep=[1, 2],
        mode="execute",
        task_dirs=[TINY_TASK],
        out_dir=tmp_path / "artifacts",
        warehouse=tmp_path / "wh.duckdb",
        label="test",
    )
    first = await run_flow(swebench_replay, **kw)
    converted_ns = Path(first["trajectories"]).stat().st_mtime_ns
    second = await run_flow(swebench_replay, **kw)
    assert first["run_id"] != second["run_id"]
    for out in (first, second):
        assert [
            (r["sweep_point"], r["achieved_max_concurrency"], valid_but_loop_lag(r), r["misses_total"])
            for r in out["points"]
        ] == [("c1", 1, True, 0), ("c2", 2, True, 0)]
        # execute mode: the example task is fixed and re-verified in every episode (1 + 2)
        assert [(r["n_reverified"], r["resolved_rate_reverified"]) for r in out["points"]] == [(1, 1.0), (2, 1.0)]
    convert_first = _task_runs(first["flow_run_id"])["convert-logs"][0].state
    convert_second = _task_runs(second["flow_run_id"])["convert-logs"][0].state
    # no Prefect result cache for the conversion: the task runs and finds the cached file
    assert convert_first.name == convert_second.name == "Completed"
    assert first["trajectories"] == second["trajectories"]
    assert Path(second["trajectories"]).stat().st_mtime_ns == converted_ns  # not written again
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT run_id, sweep_point, n_episodes, achieved_max_concurrency, valid, invalid_reason "
        "FROM v_sweep_summary ORDER BY run_id, sweep_point"
    ).fetchall()
    con.close()
    # two runs, two points each; 1 trajectory -> max(c, 1) episodes per point; the view's
    # verdict is the rows' (loop lag alone may make a point invalid on a loaded host)
    assert [r[:4] for r in rows] == sorted(
        [(r, "c1", 1, 1) for r in (first["run_id"], second["run_id"])]
        + [(r, "c2", 2, 2) for r in (first["run_id"], second["run_id"])]
    )
    by_point = {(p["sweep_point"], out["run_id"]): p for out in (first, second) for p in out["points"]}
    assert [(r[4], r[5]) for r in rows] == [
        (by_point[(r[1], r[0])]["valid"], by_point[(r[1], r[0])]["invalid_reason"]) for r in rows
    ]
    run_dir = Path(first["run_dir"])
    assert (run_dir / "sweep_points.jsonl").is_file() and (run_dir / "points" / "c2" / "grades.jsonl").is_file()


async def test_bad_parameters_refused_before_any_work(tmp_path: Path) -> None:
    from prefect.exceptions import ParameterTypeError

    from benchmaker.flows.swebench_replay import ParameterError, swebench_replay

    with pytest.raises(ParameterTypeError, match="concurrency_sweep.0"):
        await swebench_replay(logs=[EXAMPLE], concurrency_sweep=[0], out_dir=tmp_path / "a")
    with pytest.raises(ParameterError, match=r"logs\[0\]: no such file or directory"):
        await swebench_replay(logs=[tmp_path / "missing.jsonl"], out_dir=tmp_path / "a")
    assert not (tmp_path / "a").exists()  # nothing was written


async def test_killed_replay_server_point_is_retried(tmp_path: Path) -> None:
    from benchmaker.flows.swebench_replay import swebench_replay
    from benchmaker.tasks import serve

    killed: list[int] = []
    without_token: list[int] = []

    def killer() -> None:  # kill the first server once it has served a request
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for key, (pid, url) in serve.running_servers().items():
                try:
                    if serve.server_handle(key).stats(timeout_s=1)["requests"] >= 1:
                        # the flow's server wants its token: another local user gets 401 everywhere
                        without_token.extend(
                            r.status_code
                            for r in (
                                httpx.get(url + "/stats", timeout=5),
                                httpx.post(url + "/stats/reset", timeout=5),
                                httpx.post(
                                    url + "/v1/chat/completions", json={"model": "m", "messages": []}, timeout=5
                                ),
                                httpx.get(url + "/stats", timeout=5, headers={"authorization": "Bearer guess"}),
                            )
                        )
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        return
                except (httpx.HTTPError, ValueError, KeyError):
                    pass
            time.sleep(0.02)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    # 300 ms to first token per turn: a 4-turn episode lasts >= 1.2 s, time to kill mid-point
    out = await run_flow(
        swebench_replay,
        logs=[EXAMPLE],
        concurrency_sweep=[2],
        latency="fixed:300:0",
        out_dir=tmp_path / "artifacts",
        warehouse=tmp_path / "wh.duckdb",
    )
    t.join(5)
    assert len(killed) == 1 and without_token == [401, 401, 401, 401]
    sweep_runs = _task_runs(out["flow_run_id"])["run-sweep-point"]
    assert [tr.run_count for tr in sweep_runs] == [2]  # failed once, retried once
    [row] = out["points"]
    # the retried point holds only the clean attempt's episodes
    assert (row["n_episodes"], row["n_episodes_failed"], row["misses_total"], valid_but_loop_lag(row)) == (
        2,
        0,
        0,
        True,
    )
    assert serve.running_servers() == {}  # stopped at the end of the flow


async def test_sweep_point_cached_within_a_flow_run_only(tmp_path: Path) -> None:
    from prefect import flow

    from benchmaker.flows.swebench_replay import result_storage_for
    from benchmaker.sweep.point import ReplayPoint
    from benchmaker.tasks.serve import launch_server, stop_replay_server
    from benchmaker.tasks.sweep import run_sweep_point
    from benchmaker.trajectories.convert import convert_paths

    traj = tmp_path / "t.jsonl"
    convert_paths([EXAMPLE], traj)
    task = run_sweep_point.with_options(result_storage=result_storage_for(tmp_path))

    @flow(name="sweep-twice")
    async def sweep_twice(run_dir: Path) -> list[float]:
        key = launch_server(traj)
        try:
            stamps = []
            for _ in range(2):  # a re-executed flow body (flow retry) calls the point again
                await task(key, traj, run_dir, "r", ReplayPoint(load="closed:1"))
                stamps.append((run_dir / "points" / "c1" / "episodes.jsonl").stat().st_mtime_ns)
            return stamps
        finally:
            stop_replay_server(key)

    a = await sweep_twice(tmp_path / "run")
    assert a[0] == a[1]  # second call was a cache hit: the point did not run again
    b = await sweep_twice(tmp_path / "run")
    assert b[0] > a[1]  # a new flow run measures again


@pytest.mark.skipif(not (REAL / "pi-session-v1-large.jsonl").is_file(), reason="../shared/data/real absent")
async def test_real_recordings_sweep_1_5(tmp_path: Path) -> None:
    from benchmaker.flows.swebench_replay import swebench_replay

    out = await run_flow(
        swebench_replay,
        logs=[REAL / "pi-session-v1-large.jsonl", REAL / "swe-agent-pydicom-1458.traj"],
        concurrency_sweep=[1, 5],
        out_dir=tmp_path / "artifacts",
        warehouse=tmp_path / "wh.duckdb",
    )
    # 2 trajectories (453 + 12 recorded turns): c1 plays each once, c5 plays 5 cycling
    assert [
        (r["sweep_point"], r["n_episodes"], r["achieved_max_concurrency"], r["misses_total"], valid_but_loop_lag(r))
        for r in out["points"]
    ] == [("c1", 2, 1, 0, True), ("c5", 5, 5, 0, True)]
    assert out["points"][0]["n_turns"] == 465
