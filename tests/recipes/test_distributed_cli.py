"""`benchmaker swebench-replay --shards 2 --dask-address ...` and `benchmaker llm-sweep
--shards 2 ...` from the command line (subprocesses, the test process's local Prefect
server, the session's Dask LocalCluster): one run with two shards in the warehouse;
scale-out options without a Dask address are refused before anything runs. The Dask
workers reach the CLI's Prefect server through the settings Prefect sends with each
shard (its URL and secret)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from benchmaker.testing.scenario_server import Scenario, ScenarioServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"  # one trajectory of 4 turns


def _query(wh: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(wh), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.slow  # ~35 s: a point 25 s after its submission
@pytest.mark.prefect
def test_swebench_replay_with_two_shards_on_dask(tmp_path: Path, local_cluster) -> None:
    wh = tmp_path / "wh.duckdb"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmaker.recipes.cli",
            "swebench-replay",
            "--logs",
            str(EXAMPLE),
            "--concurrency",
            "4",
            "--latency",
            "fixed:50:0",
            "--shards",
            "2",
            "--dask-address",
            local_cluster.scheduler_address,
            "--out-dir",
            str(tmp_path / "art"),
            "--warehouse",
            str(wh),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _query(wh, "SELECT count(*), any_value(workers) FROM runs") == [(1, 2)]
    # c4 on two shards, two episodes of the recording's 4 turns each
    assert _query(wh, "SELECT sweep_point, shard, count(*) FROM episodes GROUP BY ALL ORDER BY ALL") == [
        ("c4", 0, 2),
        ("c4", 1, 2),
    ]
    assert _query(wh, "SELECT sweep_point, shards, valid FROM v_sweep_summary ORDER BY 1") == [("c4", 2, True)]


@pytest.mark.slow
@pytest.mark.prefect
async def test_llm_sweep_with_two_shards_on_dask(tmp_path: Path, local_cluster) -> None:
    import asyncio

    wh = tmp_path / "wh.duckdb"
    async with ScenarioServer(Scenario(ttft_ms=5)) as server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmaker.recipes.cli",
            "llm-sweep",
            "--base-url",
            server.url,
            "--model",
            "m",
            "--rate",
            "constant:40",
            "--duration",
            "1",
            "--max-tokens",
            "8",
            "--shards",
            "2",
            "--dask-address",
            local_cluster.scheduler_address,
            "--out-dir",
            str(tmp_path / "art"),
            "--warehouse",
            str(wh),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=300)
        served = server.n_requests
    # exit 0, or 1 when the loaded 2-core machine made the verdict flag client lag
    assert proc.returncode in (0, 1), out.decode()[-3000:]
    assert served == 40
    assert _query(wh, "SELECT shard, count(*) FROM requests GROUP BY 1 ORDER BY 1") == [(0, 20), (1, 20)]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shards", "2"], "--shards/--exchange/--start-lead/--shard-timeout: need --dask-address"),
        (["--shards", "0"], 'Invalid value "0" for --shards. Must be >= 1.'),
        (
            ["--shards", "2", "--dask-address", "tcp://127.0.0.1:9", "--start-lead", "0"],
            'Invalid value "0.0" for --start-lead. Must be > 0.',
        ),
        (
            ["--shards", "2", "--dask-address", "tcp://127.0.0.1:9", "--shard-timeout", "nan"],
            'Invalid value "nan" for --shard-timeout. Must be <= 2592000.',
        ),
        (
            ["--shards", "2", "--dask-address", "tcp://127.0.0.1:9", "--exchange", "bogus://x"],
            "exchange: Protocol not known: bogus",
        ),
        (
            ["--shards", "2", "--dask-address", "tcp://127.0.0.1:9", "--exchange", "s3://key:secret@bucket/x"],
            "exchange: a password in the URL is refused",
        ),
        (
            ["--shards", "2", "--dask-address", "tcp://127.0.0.1:9"],  # port 9 (discard): nothing listens here
            "--dask-address: no Dask scheduler answers at tcp://127.0.0.1:9",
        ),
        (["--shards", "2", "--dask-address", "scheduler"], "--dask-address: expected tcp://HOST:PORT"),
    ],
)
def test_scale_out_options_are_checked_before_anything_runs(
    tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # in this process: a CLI subprocess per case paid ~3 s of CPU for its imports alone
    from benchmaker.recipes.cli import main

    code = main(["swebench-replay", "--logs", str(EXAMPLE), *args, "--out-dir", str(tmp_path / "art")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "secret" not in err
    assert not (tmp_path / "art").exists()
