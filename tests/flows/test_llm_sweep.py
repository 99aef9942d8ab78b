"""benchmaker.flows.llm_sweep: point specs (plain) and one real flow run against the scenario server."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from benchmaker.flows.swebench_replay import ParameterError


def test_the_params_model_builds_each_point_once_and_names_bad_ones() -> None:
    from benchmaker.flows.common import validated
    from benchmaker.flows.llm_sweep import LlmSweepParams

    run = {"base_url": "http://x", "model": "m", "max_tokens": 16, "api": "responses", "max_loop_lag_ms": 7.5}
    p = validated(
        LlmSweepParams, "llm-sweep", {**run, "concurrency_sweep": [1, 8], "rate_sweep": [2.5], "loads": ["constant:3"]}
    )
    points = p.points()
    assert [(q.name, q.load, q.shards) for q in points] == [
        ("closed-1", "closed:1", 1),
        ("closed-8", "closed:8", 1),
        ("poisson-2.5", "poisson:2.5", 1),
        ("constant-3", "constant:3", 1),
    ]
    assert points[3].load is p.loads[0]  # parsed at the edge, passed on as it is
    assert {(q.base_url, q.model, q.api, q.max_tokens, q.duration_s, q.max_loop_lag_ms) for q in points} == {
        ("http://x", "m", "responses", 16, 30.0, 7.5)
    }
    assert points[0].max_schedule_lag_ms == p.max_schedule_lag_ms is not None  # filled in at the edge
    sharded = validated(LlmSweepParams, "llm-sweep", {**run, "concurrency_sweep": [1, 8], "sharded": True, "shards": 3})
    assert [q.shards for q in sharded.points()] == [1, 3]  # closed:1 runs on one shard
    with pytest.raises(ParameterError, match=r"loads\[0\]: .*'posson:3'"):
        validated(LlmSweepParams, "llm-sweep", {**run, "loads": ["posson:3"]})
    with pytest.raises(ParameterError, match="give concurrency_sweep, rate_sweep or loads"):
        validated(LlmSweepParams, "llm-sweep", run)
    with pytest.raises(ParameterError, match="duplicate sweep points"):
        validated(LlmSweepParams, "llm-sweep", {**run, "concurrency_sweep": [2], "loads": ["closed:2"]})


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Prefect's client sockets
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_llm_sweep_flow_loads_every_point(tmp_path: Path) -> None:
    from benchmaker.flows.llm_sweep import llm_sweep
    from benchmaker.testing.scenario_server import Scenario, ScenarioServer

    async with ScenarioServer(Scenario(ttft_ms=20)) as server:
        base = server.chat_url.rsplit("/v1/", 1)[0]
        out = await llm_sweep(
            base_url=base,
            model="m",
            concurrency_sweep=[1, 3],
            max_requests=12,
            duration_s=None,
            out_dir=tmp_path / "a",
            warehouse=tmp_path / "w.duckdb",
        )
    assert [(r["sweep_point"], r["n_requests"], r["achieved_max_concurrency"], r["valid"]) for r in out["points"]] == [
        ("closed-1", 12, 1, True),
        ("closed-3", 12, 3, True),
    ]  # max_requests=12 per point
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    got = con.execute("SELECT sweep_point, count(*) FROM requests GROUP BY 1 ORDER BY 1").fetchall()
    con.close()
    assert got == [("closed-1", 12), ("closed-3", 12)]


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Prefect's client sockets
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_llm_sweep_api_responses_sends_responses_requests(tmp_path: Path) -> None:
    from benchmaker.flows.llm_sweep import llm_sweep
    from benchmaker.testing.scenario_server import Scenario, ScenarioServer

    async with ScenarioServer(Scenario(ttft_ms=5, content_chunks=4)) as server:
        base = server.url
        out = await llm_sweep(
            base_url=base,
            model="m",
            api="responses",
            concurrency_sweep=[2],
            max_requests=6,
            max_tokens=9,
            duration_s=None,
            out_dir=tmp_path / "a",
            warehouse=tmp_path / "w.duckdb",
        )
        assert server.last_body["max_output_tokens"] == 9 and "input" in server.last_body
    assert [(r["sweep_point"], r["n_requests"], r["valid"]) for r in out["points"]] == [("closed-2", 6, True)]
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    got = con.execute("SELECT outcome, finish_reason, output_tokens, count(*) FROM requests GROUP BY ALL").fetchall()
    con.close()
    assert got == [("ok", "completed", 4, 6)]  # 4 one-token chunks per answer, read from response.completed
