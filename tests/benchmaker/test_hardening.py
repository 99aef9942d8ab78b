"""Engine hardening: the error-rate policy, the host's in-flight cap and the
client named as the bottleneck, stop signals, an infinite rate. Logic is tested with
injected values; the runs use loopback servers and assert counts, never timings."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import time

import orjson
import pytest

from benchmaker.engine.config import BenchConfig, SelfCheckLimits, host_in_flight_limit
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.load_models import Burst, parse_rate_spec
from benchmaker.engine.runner import BenchRunner, interrupt_exit_code
from benchmaker.engine.selfcheck import LoopLagMonitor, connect_timeout_cause, service_error_rate, verdict
from benchmaker.engine.transport import NullTransport
from benchmaker.workloads.http import HttpWorkload

NO_LAG = {"count": 0, "p50": None, "p99": None, "max": None}


def _run(n_sent: int, n_ok: int, **kinds: int) -> dict:
    return {"n_sent": n_sent, "n_ok": n_ok, "n_graded_wrong": 0, **{f"n_{k}": v for k, v in kinds.items()}}


def test_default_max_error_rate_makes_a_dead_target_run_invalid_and_1_turns_it_off():
    run = _run(243, 60, transport_error=183)  # the run: 183 of 243 transport errors
    v = verdict(
        run, limits=SelfCheckLimits(), open_loop=False, target_concurrency=None, loop_lag=NO_LAG, interrupted=False
    )
    # (243 - 60) / 243 = 0.7531
    assert v["reasons"] == [
        "error rate 75.31% exceeds max_error_rate 10.00% (183 of 243 requests failed: 183 transport_error)"
    ]
    off = verdict(
        run,
        limits=SelfCheckLimits(max_error_rate=1),
        open_loop=False,
        target_concurrency=None,
        loop_lag=NO_LAG,
        interrupted=False,
    )
    assert off["valid"] is True


def test_graded_wrong_answers_are_not_service_errors():
    run = {**_run(10, 4), "n_graded_wrong": 5, "n_timeout": 1}
    assert service_error_rate(run) == 0.1  # (10 - 4 - 5) / 10: only the timeout failed
    assert service_error_rate(_run(0, 0)) is None


def test_connect_timeout_names_the_client_when_its_loop_lagged():
    # connect timeout 10 s: a tenth is 1,000 ms of loop lag
    kind, error = connect_timeout_cause("connect timeout", 10.0, 2500.0, 19304)
    assert kind == "client"
    assert error == (
        "client-side overload: the connect deadline (10 s) passed while this client's event loop "
        "lagged 2500 ms with 19304 requests in flight; the endpoint may never have seen the request "
        "(connect timeout)"
    )
    assert connect_timeout_cause("connect timeout", 10.0, 999.0, 5) == ("connect", "connect timeout")
    # short deadlines: at least 50 ms of lag before the client is blamed
    assert connect_timeout_cause("x", 0.1, 49.0, 1)[0] == "connect"
    assert connect_timeout_cause("x", 0.1, 50.0, 1)[0] == "client"


async def test_loop_lag_now_includes_a_loop_too_busy_to_wake_the_monitor():
    monitor = LoopLagMonitor(interval_s=0.01)
    assert monitor.current_lag_ms() == 0.0  # not started
    monitor.start()
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # the loop is blocked: the monitor cannot record this lag yet
    lag = monitor.current_lag_ms()
    await monitor.stop()
    assert lag >= 300 - 10  # blocked >= 300 ms, minus the 10 ms the monitor meant to sleep


def test_host_limit_follows_the_fd_limit_and_caps_concurrency(monkeypatch):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
    try:
        limit, why = host_in_flight_limit()
        assert limit == 200 - 64  # FD_RESERVE descriptors kept free
        assert why == "the file-descriptor limit 200 (ulimit -n) minus 64 reserved; raise it with `ulimit -n`"
        cfg = BenchConfig(load="poisson:5", duration_s=1)
        assert cfg.in_flight_cap() == (136, f"host limit: {why}")  # below 1024 per CPU
        assert BenchConfig(load="poisson:5", duration_s=1, max_in_flight=8).in_flight_cap() == (8, "max_in_flight")
        with pytest.raises(
            ValueError,
            match=r"closed-loop concurrency 500 over 1 worker process\(es\) is 500 in "
            r"flight per process, more than this host can hold \(136: the file",
        ):
            BenchConfig(load="closed:500", duration_s=1)
        BenchConfig(load="closed:500", duration_s=1, workers=4)  # 125 per process fits
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_inf_rate_is_a_burst_at_t0_and_needs_max_requests():
    model = parse_rate_spec("poisson:inf")
    assert isinstance(model, Burst) and model.spec == "poisson:inf" and model.target_rate_per_s() is None
    it = model.arrivals()
    assert [next(it) for _ in range(3)] == [(0, None)] * 3
    with pytest.raises(ValueError, match="needs max_requests"):
        BenchConfig(load="constant:inf", duration_s=5)
    with pytest.raises(ConfigError):
        parse_rate_spec("constant:1e7")  # above MAX_RATE_PER_S


async def test_arrivals_beyond_the_cap_are_dropped_and_the_client_is_named(tmp_path):
    # constant:inf: all 20 arrivals are due at t=0; the loop dispatches without yielding,
    # so the first 5 fill the cap and the other 15 are dropped, whatever the host's speed
    cfg = BenchConfig(load="constant:inf", max_requests=20, max_in_flight=5, overflow="drop", out_dir=tmp_path)
    wl = HttpWorkload("http://null/", "GET", {}, None, [200])
    result = await BenchRunner(cfg, workload=wl, transport=NullTransport(chunks=(b"x",))).run()
    run = result.summary["run"]
    assert (run["n_ok"], run["n_dropped"]) == (5, 15)
    assert (
        "client-side: 15 open-loop arrivals were dropped at the in-flight cap 5 (max_in_flight)"
        in result.summary["verdict"]["notes"]
    )
    dropped = [orjson.loads(x) for x in result.samples_path.read_bytes().splitlines() if b'"dropped"' in x]
    assert {d["error"] for d in dropped} == {"client-side: in-flight cap 5 reached (max_in_flight); not sent"}
    assert result.summary["self_checks"]["in_flight_cap"] == 5
    # schedule lag is not judged for an infinite rate (every arrival is due at t=0)
    assert not [r for r in result.summary["verdict"]["reasons"] if "schedule lag" in r]


async def test_open_loop_without_max_in_flight_is_capped_per_cpu(tmp_path):
    cfg = BenchConfig(load="constant:inf", max_requests=3, out_dir=tmp_path)
    wl = HttpWorkload("http://null/", "GET", {}, None, [200])
    result = await BenchRunner(cfg, workload=wl, transport=NullTransport(chunks=(b"x",))).run()
    cpus = len(os.sched_getaffinity(0))
    checks = result.summary["self_checks"]
    if 1024 * cpus < host_in_flight_limit()[0]:
        assert (checks["in_flight_cap"], checks["in_flight_cap_source"]) == (
            1024 * cpus,
            f"default 1024 per usable CPU x {cpus}; raise it with --max-in-flight / max_in_flight",
        )
    else:
        assert checks["in_flight_cap_source"].startswith("host limit: ")
    assert result.summary["run"]["n_ok"] == 3


async def _hanging_server() -> tuple[socket.socket, str]:
    """A loopback server that accepts connections and never answers."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()
        finally:
            writer.close()

    sock = socket.create_server(("127.0.0.1", 0))
    server = await asyncio.start_server(handle, sock=sock)
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}/"


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
async def test_stop_signal_cancels_the_run_like_ctrl_c(sig, tmp_path):
    before = signal.getsignal(sig)
    if before is signal.SIG_IGN:  # the suite itself runs under nohup: the signal is not ours to take
        signal.signal(sig, signal.SIG_DFL)
        before = signal.SIG_DFL
    server, url = await _hanging_server()
    cfg = BenchConfig(load="closed:2", duration_s=120, out_dir=tmp_path)
    runner = BenchRunner(cfg, workload=HttpWorkload(url, "GET", {}, None, [200]))
    task = asyncio.ensure_future(runner.run())
    while runner.live.in_flight < 2:  # both closed-loop workers are waiting on the server
        await asyncio.sleep(0.01)
    os.kill(os.getpid(), sig)
    with pytest.raises(asyncio.CancelledError):
        await task
    server.close()
    assert runner.interrupted_by == sig.name
    assert interrupt_exit_code(runner.interrupted_by) == 128 + sig.value
    summary = orjson.loads((runner.bundle_dir / "summary.json").read_bytes())
    assert summary["partial"] is True and summary["interrupted_by"] == sig.name
    assert summary["run"]["n_cancelled"] == 2
    # the handler is gone after the run: the process's own disposition is back
    assert signal.getsignal(sig) == before


async def test_an_ignored_stop_signal_stays_ignored(tmp_path):
    """Under nohup SIGHUP is SIG_IGN: a hangup must not stop the run, and the disposition
    is still SIG_IGN after it (a full busy run under nohup found the test above assuming
    SIG_DFL)."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        server, url = await _hanging_server()
        cfg = BenchConfig(load="closed:2", duration_s=120, out_dir=tmp_path)
        runner = BenchRunner(cfg, workload=HttpWorkload(url, "GET", {}, None, [200]))
        task = asyncio.ensure_future(runner.run())
        while runner.live.in_flight < 2:
            await asyncio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.2)
        assert not task.done() and runner.interrupted_by is None  # ignored: the run goes on
        os.kill(os.getpid(), signal.SIGTERM)  # a stop signal it does take
        with pytest.raises(asyncio.CancelledError):
            await task
        server.close()
        assert runner.interrupted_by == "SIGTERM"
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


async def test_a_target_that_dies_makes_the_run_invalid_with_the_reason(tmp_path):
    """A loopback server answers 2 requests, then stops listening and drops its
    connections: the other 8 of closed:1 x 10 are transport errors, 80% > 10%."""
    served = 0
    conns: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        conns.append(writer)
        while served < 2 and (await reader.readuntil(b"\r\n\r\n")):
            served += 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            if served == 2:
                server.close()  # the target dies: no new connections...
                for w in conns:  # ...and the open ones are cut
                    w.transport.abort()

    sock = socket.create_server(("127.0.0.1", 0))
    server = await asyncio.start_server(handle, sock=sock)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    cfg = BenchConfig(load="closed:1", max_requests=10, out_dir=tmp_path)
    result = await BenchRunner(cfg, workload=HttpWorkload(url, "GET", {}, None, [200])).run()
    run = result.summary["run"]
    assert (run["n_ok"], run["n_transport_error"]) == (2, 8)
    assert (
        "error rate 80.00% exceeds max_error_rate 10.00% (8 of 10 requests failed: 8 transport_error)"
        in result.summary["verdict"]["reasons"]
    )
    assert result.valid is False
