"""SIGTERM (and SIGHUP) stop a run as Ctrl-C does: the real `benchmaker`
process against a loopback server that never finishes a response; the partial bundle
loads into the warehouse flagged partial, and `runs` shows it."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from benchmaker.recipes.cli import main

BIN = Path(sys.executable).with_name("benchmaker")


async def _hang(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.content_type = "text/event-stream"
    await resp.prepare(request)
    try:
        await asyncio.sleep(3600)  # never answers: every request is in flight at the signal
    except asyncio.CancelledError:
        pass
    return resp


async def _server() -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _hang)
    # the handlers never return: cleanup cancels them at once instead of waiting out
    # aiohttp's 60 s graceful shutdown
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions"


async def _run_until_in_flight_then_signal(
    tmp_path: Path, sig: signal.Signals, n_in_flight: int, extra: list[str]
) -> tuple[int, Path]:
    runner, url = await _server()
    out = tmp_path / "runs"
    try:
        proc = await asyncio.create_subprocess_exec(
            str(BIN),
            "llm",
            "--url",
            url,
            "--model",
            "m",
            "--rate",
            "closed:3",
            "--duration",
            "120s",
            "--out-dir",
            str(out),
            "--no-progress",
            *extra,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        # wait (generously: a busy host starts Python slowly) until the run's clock started
        # and the server holds every closed-loop worker's request
        for _ in range(1200):
            await asyncio.sleep(0.1)
            if len(runner.server.connections) >= n_in_flight and list(out.glob("*/manifest.json")):
                break
        else:
            proc.kill()
            pytest.fail(f"the run never had {n_in_flight} requests in flight: {(await proc.communicate())[0]!r}")
        proc.send_signal(sig)
        output, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        await runner.cleanup()
    (bundle,) = out.iterdir()
    assert b"Traceback" not in output, output
    return proc.returncode, bundle


@pytest.mark.slow
async def test_sigterm_writes_a_partial_bundle_that_loads_as_partial(tmp_path, capsys):
    # SIGHUP takes the same path (tests/benchmaker/test_hardening.py, in process)
    sig = signal.SIGTERM
    returncode, bundle = await _run_until_in_flight_then_signal(tmp_path, sig, 3, [])
    assert returncode == 143  # 128 + 15, as a shell reports a process SIGTERM killed
    summary = orjson.loads((bundle / "summary.json").read_bytes())
    assert summary["partial"] is True and summary["interrupted_by"] == sig.name
    assert f"interrupted by {sig.name} before the end (partial run)" in summary["verdict"]["reasons"]
    samples = [orjson.loads(x) for x in (bundle / "samples.jsonl").read_bytes().splitlines()]
    # closed:3 against a server that never answers: exactly the 3 in-flight requests, each cancelled
    assert [s["outcome"] for s in samples] == ["cancelled"] * 3
    assert summary["run"]["n_cancelled"] == 3

    db = tmp_path / "w.duckdb"
    assert main(["load", str(bundle), "--warehouse", str(db)]) == 0
    assert f"(PARTIAL: interrupted by {sig.name} (summary.json partial: true))" in capsys.readouterr().out
    assert main(["runs", "--warehouse", str(db), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["partial"] is True
    assert main(["runs", "--warehouse", str(db)]) == 0
    assert "PARTIAL" in capsys.readouterr().out


@pytest.mark.slow
async def test_sigterm_reaches_every_worker_process(tmp_path):
    returncode, bundle = await _run_until_in_flight_then_signal(tmp_path, signal.SIGTERM, 3, ["--workers", "2"])
    assert returncode == 143
    summary = orjson.loads((bundle / "summary.json").read_bytes())
    assert summary["partial"] is True and summary["interrupted_by"] == "SIGTERM"
    # closed:3 over 2 workers: 2 + 1 requests in flight, all cancelled; no worker "died"
    assert summary["run"]["n_cancelled"] == 3
    assert not [r for r in summary["verdict"]["reasons"] if "died" in r]


def test_a_bundle_without_summary_loads_flagged_partial(tmp_path, capsys):
    from tests.warehouse._bundle import reference_bundle

    bundle = reference_bundle(tmp_path / "run-a")  # manifest and samples, no summary.json: a killed run
    assert not (bundle / "summary.json").exists()
    complete = reference_bundle(tmp_path / "run-b", run_id="run-b")
    (complete / "summary.json").write_text(json.dumps({"run_id": "run-b", "partial": False}))
    db = tmp_path / "w.duckdb"
    assert main(["load", str(bundle), str(complete), "--warehouse", str(db)]) == 0
    out = capsys.readouterr().out
    assert "(PARTIAL: no summary.json in the bundle (the run was killed before it finished))" in out
    assert (
        main(
            [
                "sql",
                "SELECT run_id, partial, partial_reason FROM runs ORDER BY run_id",
                "--warehouse",
                str(db),
                "--json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["partial"]) for r in rows] == [("run-a", True), ("run-b", False)]


def test_sigterm_during_a_flow_run_ends_in_one_line_and_143(monkeypatch, capsys):
    """Prefect's SIGTERM handler, installed while a flow runs, marks the run Crashed and
    raises TerminationSignal through the flow: the CLI prints one line and exits
    128 + 15, as a process killed by SIGTERM does (no traceback)."""
    from prefect.exceptions import TerminationSignal

    import benchmaker.recipes.cli as cli

    def app(*args, **kwargs):
        raise TerminationSignal(signal=signal.SIGTERM)

    monkeypatch.setattr(cli, "app", app)
    assert main(["swebench-replay", "--logs", "x"]) == 143
    err = capsys.readouterr().err
    assert err == "benchmaker: stopped by SIGTERM: the flow run ended Crashed; what it wrote so far is kept\n"
    monkeypatch.setattr(cli, "app", lambda *a, **k: (_ for _ in ()).throw(KeyError("other")))
    with pytest.raises(KeyError):  # anything else is not ours to swallow
        main(["swebench-replay"])


def test_an_unreachable_prefect_api_is_one_line_and_exit_1(monkeypatch, capsys):
    """A server the command needs that does not answer (the Prefect API of a stale
    PREFECT_API_URL) is one line naming the URL, not httpx's traceback."""
    import httpx

    import benchmaker.recipes.cli as cli

    def app(*args, **kwargs):
        raise httpx.ConnectError(
            "All connection attempts failed", request=httpx.Request("GET", "http://127.0.0.1:9/api/health")
        )

    monkeypatch.setattr(cli, "app", app)
    assert main(["swebench-replay", "--logs", "x"]) == 1
    assert capsys.readouterr().err == (
        "benchmaker: error: cannot reach http://127.0.0.1:9/api/health: All connection attempts failed\n"
    )
