"""`llm-sweep --ignore-eos`: one real flow run against the scenario server's Responses
endpoint sends `"ignore_eos": true` in every point's requests."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from benchmaker.testing.scenario_server import Scenario, ScenarioServer


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Prefect's client sockets
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_llm_sweep_ignore_eos_reaches_every_point(tmp_path: Path) -> None:
    from benchmaker.flows.llm_sweep import llm_sweep

    async with ScenarioServer(Scenario(content_chunks=4)) as server:
        out = await llm_sweep(
            base_url=server.url,
            model="m",
            api="responses",
            ignore_eos=True,
            concurrency_sweep=[1],
            max_requests=3,
            duration_s=None,
            max_tokens=4,
            out_dir=tmp_path / "a",
            warehouse=tmp_path / "w.duckdb",
        )
        body = server.last_body
    assert (body["ignore_eos"], body["max_output_tokens"]) == (True, 4)
    assert [(r["sweep_point"], r["n_requests"], r["valid"]) for r in out["points"]] == [("closed-1", 3, True)]
    manifest = json.loads((Path(out["run_dir"]) / "manifest.json").read_text())
    assert manifest["config"]["ignore_eos"] is True
    con = duckdb.connect(out["warehouse"], read_only=True)
    assert con.execute("SELECT count(*), sum(output_tokens) FROM requests").fetchone() == (3, 12)
    con.close()
