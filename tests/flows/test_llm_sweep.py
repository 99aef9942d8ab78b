"""benchmaker.flows.llm_sweep: point specs (plain) and one real flow run against the scenario server."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from benchmaker.flows.swebench_replay import ParameterError


def test_sweep_loads_orders_points_and_names_bad_ones() -> None:
    from benchmaker.flows.llm_sweep import sweep_loads

    assert sweep_loads([1, 8], [2.5], ["constant:3"]) == ["closed:1", "closed:8", "poisson:2.5", "constant:3"]
    with pytest.raises(ParameterError, match=r"loads\[0\]: .*'posson:3'"):
        sweep_loads(None, None, ["posson:3"])
    with pytest.raises(ParameterError, match="give concurrency_sweep, rate_sweep or loads"):
        sweep_loads(None, None, None)
    with pytest.raises(ParameterError, match="duplicate sweep points"):
        sweep_loads([2], None, ["closed:2"])


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
