"""#7 "done when": every recipe runs from the CLI (`benchmaker.recipes.cli.main`) against local
servers started here, and its results load into the warehouse with exact row counts.

    http, llm (+ /metrics monitor), sglang, sandbox, trajectory-replay, run  -> `benchmaker load`
    swebench                                            -> its own --warehouse
    record                                              -> a trajectories file that a replay
                                                           server serves with zero misses
    swebench-replay (of that recording)                 -> its own --warehouse (slow: a
                                                           Prefect flow run, ~9 s)
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import httpx
import orjson
import pytest

from benchmaker.recipes.cli import main
from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.store import load_trajectories
from benchmaker.testing.scenario_server import Scenario, ScenarioServer
from tests.examples.test_examples import _metrics_app

ROOT = Path(__file__).resolve().parents[2]
TINY_LOG = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"
TINY_TASK = ROOT / "examples" / "tiny-task"
TABLES = ("runs", "requests", "episodes", "turns", "grades", "sweep_points", "lanes", "monitor_samples")


def _bundle(out: Path) -> Path:
    (bundle,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")]
    return bundle


def _load(bundle: Path, wh: Path, capsys) -> str:
    """`benchmaker load BUNDLE --warehouse WH`; returns the run id."""
    assert main(["load", str(bundle), "--warehouse", str(wh)]) == 0
    run_id = orjson.loads((bundle / "manifest.json").read_bytes())["run_id"]
    assert f"loaded {run_id} into {wh}" in capsys.readouterr().out
    return run_id


def _counts(wh: Path, run_id: str) -> dict[str, int]:
    """Rows of `run_id` per table, tables with none left out."""
    con = duckdb.connect(str(wh), read_only=True)
    try:
        counts = {t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [run_id]).fetchone()[0] for t in TABLES}
    finally:
        con.close()
    return {t: n for t, n in counts.items() if n}


def _query(wh: Path, sql: str, *params) -> list[tuple]:
    con = duckdb.connect(str(wh), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def _valid_exit(code: int, bundle: Path) -> None:
    """0 for a valid run, 1 for an invalid one (event-loop lag on a loaded host alone can
    make a short run invalid; the counts asserted do not depend on it)."""
    summary = orjson.loads((bundle / "summary.json").read_bytes())
    assert code == (0 if summary["verdict"]["valid"] else 1), summary["verdict"]


async def test_http(tmp_path: Path, capsys):
    async with ScenarioServer() as srv:
        code = await asyncio.to_thread(
            main,
            [
                "http",
                "--url",
                srv.url + "/health",
                "--max-requests",
                "5",
                "--out-dir",
                str(tmp_path / "out"),
                "--no-progress",
            ],
        )
    bundle = _bundle(tmp_path / "out")
    _valid_exit(code, bundle)
    run_id = _load(bundle, tmp_path / "wh.duckdb", capsys)
    assert _counts(tmp_path / "wh.duckdb", run_id) == {"runs": 1, "requests": 5, "lanes": 1}
    assert _query(tmp_path / "wh.duckdb", "SELECT kind FROM runs") == [("http",)]


async def test_llm_with_metrics_monitor(tmp_path: Path, capsys):
    metrics, scrapes = _metrics_app()
    async with ScenarioServer(Scenario(content_chunks=4)) as srv, metrics:
        code = await asyncio.to_thread(
            main,
            [
                "llm",
                "--url",
                srv.chat_url,
                "--model",
                "m",
                "--max-requests",
                "6",
                "--metrics-url",
                metrics.url + "/metrics",
                "--metrics-interval",
                "60s",
                "--out-dir",
                str(tmp_path / "out"),
                "--no-progress",
            ],
        )
    bundle = _bundle(tmp_path / "out")
    _valid_exit(code, bundle)
    wh = tmp_path / "wh.duckdb"
    run_id = _load(bundle, wh, capsys)
    # no metric filter on the CLI; 2 scrapes (run start and stop: the interval is longer than
    # the run): 2 gauges x 2 scrapes + 1 counter rate (none at the first scrape) = 5 rows
    assert scrapes == [2]
    assert _counts(wh, run_id) == {"runs": 1, "requests": 6, "lanes": 1, "monitor_samples": 5}
    assert _query(wh, "SELECT sum(output_tokens) FROM requests") == [(24,)]  # 4 tokens x 6


async def test_sglang(tmp_path: Path, capsys):
    async with ScenarioServer(Scenario(content_chunks=5, cached_tokens=2)) as srv:
        code = await asyncio.to_thread(
            main,
            [
                "sglang",
                "--url",
                srv.generate_url,
                "--max-requests",
                "3",
                "--out-dir",
                str(tmp_path / "out"),
                "--no-progress",
            ],
        )
    bundle = _bundle(tmp_path / "out")
    _valid_exit(code, bundle)
    wh = tmp_path / "wh.duckdb"
    run_id = _load(bundle, wh, capsys)
    assert _counts(wh, run_id) == {"runs": 1, "requests": 3, "lanes": 1}
    # meta_info: 5 completion tokens (one per event), 10 prompt tokens, 2 cached
    assert _query(wh, "SELECT output_tokens, prompt_tokens, cached_tokens, count(*) FROM requests GROUP BY ALL") == [
        (5, 10, 2, 3)
    ]


def test_sandbox(tmp_path: Path, capsys):
    code = main(
        [
            "sandbox",
            "--command",
            "echo hi",
            "--mode",
            "lifecycle",
            "--max-requests",
            "3",
            "--out-dir",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    bundle = _bundle(tmp_path / "out")
    _valid_exit(code, bundle)
    wh = tmp_path / "wh.duckdb"
    run_id = _load(bundle, wh, capsys)
    assert _counts(wh, run_id) == {"runs": 1, "requests": 3, "lanes": 1}
    rows = _query(wh, "SELECT outcome, meta->>'exit_code' FROM requests")
    assert rows == [("ok", "0")] * 3


async def test_trajectory_replay(tmp_path: Path, capsys):
    data = tmp_path / "convs.jsonl"
    convs = []
    for tag in "ab":
        msgs = [{"role": "user", "content": f"start {tag}"}]
        for k in range(2):
            msgs += [{"role": "assistant", "content": f"reply {k}"}, {"role": "user", "content": f"more {tag} {k}"}]
        convs.append({"id": tag, "messages": msgs})
    data.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in convs))
    async with ScenarioServer(Scenario(content_chunks=2, cached_tokens=3)) as srv:
        code = await asyncio.to_thread(
            main,
            [
                "trajectory-replay",
                str(data),
                "--url",
                srv.chat_url,
                "--model",
                "m",
                "--concurrency",
                "2",
                "--out-dir",
                str(tmp_path / "out"),
                "--no-progress",
            ],
        )
    bundle = _bundle(tmp_path / "out")
    _valid_exit(code, bundle)
    wh = tmp_path / "wh.duckdb"
    run_id = _load(bundle, wh, capsys)
    assert _counts(wh, run_id) == {"runs": 1, "requests": 4, "lanes": 1}  # 2 conversations x 2 assistant turns
    assert _query(wh, "SELECT sum(cached_tokens) FROM requests") == [(12,)]  # 3 per request


async def test_run_yaml_two_lanes(tmp_path: Path, capsys):
    async with ScenarioServer() as srv:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(
            "load: closed:1\nmax_requests: 7\nmix:\n  lanes:\n"
            f"    - {{name: chat, rate: 'closed:1', max_requests: 4, workload: {{type: openai-chat, url: '{srv.chat_url}', model: m}}}}\n"
            f"    - {{name: health, rate: 'closed:1', max_requests: 3, workload: {{type: http, url: '{srv.url}/health'}}}}\n"
        )
        code = await asyncio.to_thread(main, ["run", str(cfg), "--out-dir", str(tmp_path / "out"), "--no-progress"])
    bundle = _bundle(tmp_path / "out")
    _valid_exit(code, bundle)
    wh = tmp_path / "wh.duckdb"
    run_id = _load(bundle, wh, capsys)
    assert _counts(wh, run_id) == {"runs": 1, "requests": 7, "lanes": 2}
    assert _query(wh, "SELECT lane, count(*) FROM requests GROUP BY lane ORDER BY lane") == [("chat", 4), ("health", 3)]


def test_swebench(tmp_path: Path, capsys):
    from benchmaker.trajectories.convert import iter_trajectories

    (traj,) = list(iter_trajectories(TINY_LOG))
    rec = tmp_path / "model.jsonl"
    rec.write_text(traj.model_dump_json() + "\n")
    wh = tmp_path / "wh.duckdb"
    with start_replay_server(rec) as srv:
        code = main(
            [
                "swebench",
                "--url",
                srv.url,
                "--model",
                "gpt-4o-mini",
                "--task-dirs",
                str(TINY_TASK),
                "--attempts",
                "1",
                "--out-dir",
                str(tmp_path / "out"),
                "--run-id",
                "sw1",
                "--warehouse",
                str(wh),
            ]
        )
    assert code == 0
    counts = _counts(wh, "sw1")
    # the recording has 4 model turns; the verifier writes one task_outcome grade per episode
    assert (counts["runs"], counts["episodes"], counts["turns"]) == (1, 1, 4)
    assert _query(wh, "SELECT verdict FROM grades WHERE run_id = 'sw1'") == [("resolved",)]


def _record_tiny_task(tmp_path: Path, capsys) -> Path:
    """`benchmaker record` (a subprocess, as users run it) in front of a replay server of
    the tiny-task recording; `benchmaker episode` plays the recording through it; SIGINT
    writes the trajectories file, which is returned."""
    from benchmaker.trajectories.convert import iter_trajectories

    (traj,) = list(iter_trajectories(TINY_LOG))
    original = tmp_path / "original.jsonl"
    original.write_text(traj.model_dump_json() + "\n")
    out = tmp_path / "recorded.jsonl"
    with (
        start_replay_server(original) as upstream,
        subprocess.Popen(
            [sys.executable, "-m", "benchmaker.recipes.cli", "record", "--upstream", upstream.url, "-o", str(out)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proxy,
    ):
        try:
            url = proxy.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:"), proxy.stderr.read()
            deadline = time.monotonic() + 10
            while True:
                try:
                    if httpx.get(url + "/health").status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
            assert main(["episode", str(TINY_LOG), "--url", url]) == 0
            assert json.loads(capsys.readouterr().out)["n_turns"] == 4
        finally:
            proxy.send_signal(signal.SIGINT)
            assert proxy.wait(10) == 0
        assert upstream.stats()["misses"]["total"] == 0
    return out


def test_record_then_replay_with_zero_misses(tmp_path: Path, capsys):
    rec = _record_tiny_task(tmp_path, capsys)
    (traj,) = [t for _, t in load_trajectories(rec)]
    assert (len(traj.turns), traj.source.format) == (4, "recording-proxy")
    with start_replay_server(rec, divergence="content") as fresh:
        assert main(["episode", str(rec), "--url", fresh.url, "--out", str(tmp_path / "ep")]) == 0
        stats = fresh.stats()
    episode = json.loads((tmp_path / "ep" / "episodes.jsonl").read_text())
    assert (episode["outcome"], episode["n_turns"]) == ("ok", 4)
    assert stats["misses"]["total"] == 0 and stats["divergences"]["total"] == 0
    wh = tmp_path / "w.duckdb"
    _load(tmp_path / "ep", wh, capsys)  # `episode --out` writes a bundle the loader accepts
    counts = _counts(wh, episode["run_id"])
    # each turn's model call is a request (samples.jsonl), joined by episode and turn index
    assert (counts["episodes"], counts["turns"], counts["requests"]) == (1, 4, 4)
    assert _query(
        wh,
        "SELECT t.turn_index, r.outcome, r.finish_reason IS NOT NULL FROM turns t JOIN requests r "
        "ON r.run_id = t.run_id AND r.episode_id = t.episode_id AND r.turn_index = t.turn_index "
        "ORDER BY 1",
    ) == [(i, "ok", True) for i in range(4)]


@pytest.mark.slow  # ~10 s: `benchmaker swebench-replay` runs a Prefect flow
@pytest.mark.prefect
def test_swebench_replay_of_a_recording_loads_the_warehouse(tmp_path: Path, capsys):
    rec = _record_tiny_task(tmp_path, capsys)
    wh = tmp_path / "wh.duckdb"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmaker.recipes.cli",
            "swebench-replay",
            "--trajectories",
            str(rec),
            "--concurrency",
            "1,2",
            "--episodes-per-point",
            "2",
            "--out-dir",
            str(tmp_path / "art"),
            "--warehouse",
            str(wh),
            "--label",
            "recorded",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # 0, or 1 when the engine's event-loop lag self-check alone made a point invalid (busy host)
    assert proc.returncode == 0 or (proc.returncode == 1 and "event-loop lag" in proc.stdout), proc.stdout + proc.stderr
    ((run_id,),) = _query(wh, "SELECT run_id FROM runs WHERE label = 'recorded'")
    counts = _counts(wh, run_id)
    # 2 points x 2 episodes x 4 turns (one request per model turn)
    assert {t: counts.get(t) for t in ("runs", "sweep_points", "episodes", "turns", "requests")} == {
        "runs": 1,
        "sweep_points": 2,
        "episodes": 4,
        "turns": 16,
        "requests": 16,
    }
    assert _query(wh, "SELECT sweep_point, misses_total FROM v_sweep_summary ORDER BY sweep_point") == [
        ("c1", 0),
        ("c2", 0),
    ]
