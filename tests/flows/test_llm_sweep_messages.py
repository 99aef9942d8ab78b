"""llm-sweep with `api: messages`: one real flow run against the scenario server's
Anthropic Messages endpoint, and the CLI's checks of `--api`."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from benchmaker.recipes.cli import main


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Prefect's client sockets
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_llm_sweep_api_messages_measures_every_point(tmp_path: Path) -> None:
    from benchmaker.flows.llm_sweep import llm_sweep
    from benchmaker.testing.scenario_server import Scenario, ScenarioServer

    async with ScenarioServer(Scenario(ttft_ms=20, content_chunks=5, prompt_tokens=40, cached_tokens=30)) as server:
        out = await llm_sweep(
            base_url=server.url,
            model="m",
            api="messages",
            concurrency_sweep=[1, 2],
            max_requests=6,
            duration_s=None,
            max_tokens=16,
            out_dir=tmp_path / "a",
            warehouse=tmp_path / "w.duckdb",
        )
        assert server.last_body["max_tokens"] == 16 and "messages" in server.last_body
    assert [(r["sweep_point"], r["n_requests"], r["valid"]) for r in out["points"]] == [
        ("closed-1", 6, True),
        ("closed-2", 6, True),
    ]
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    got = con.execute(
        "SELECT sweep_point, count(*), sum(output_tokens), sum(cached_tokens), "
        "min(first_token_ns - sent_ns) >= 20e6 "
        "FROM requests GROUP BY 1 ORDER BY 1"
    ).fetchall()
    con.close()
    # 6 requests x 5 one-token chunks; 6 x 30 cached prompt tokens; the first token never before 20 ms
    assert got == [("closed-1", 6, 30, 180, True), ("closed-2", 6, 30, 180, True)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--api", "responses-v0"], "--api: expected chat, responses or messages (got 'responses-v0')"),
        (["--api", "messages", "--shards", "2"], "--api: messages sweeps run on one host (got --shards 2)"),
        (
            ["--api", "messages", "--max-tokens", "null"],
            "--max-tokens: required with api messages (the Messages API requires it; got None)",
        ),
    ],
)
def test_llm_sweep_bad_api_is_one_line_exit_2(tmp_path, capsys, extra, message):
    code = main(
        [
            "llm-sweep",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--concurrency",
            "1",
            "--out-dir",
            str(tmp_path),
            *extra,
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err
