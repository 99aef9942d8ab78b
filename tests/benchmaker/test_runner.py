"""The runner against real loopback servers (benchmaker/engine/runner.py)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from benchmaker.engine.config import SLO, BenchConfig, Timeouts
from benchmaker.engine.records import RequestSpec, Sample
from benchmaker.engine.runner import BenchRunner, Lane
from benchmaker.engine.transport import NullTransport


class ReadParser:
    """Every body read is one token event; ok when anything arrived."""

    text = ""

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        if sample.first_token_ns is None:
            sample.first_token_ns = t_ns
            sample.token_event_ns = []
        sample.token_event_ns.append(t_ns)
        sample.n_token_events += 1
        self.text += data.decode()

    def finish(self, sample: Sample) -> None:
        sample.outcome = "ok" if sample.n_token_events else "empty_output"


class PathWorkload:
    name = "path"

    def __init__(self, base: str, path: str = "/"):
        self.url = base + path

    def request(self, seq: int) -> RequestSpec:
        return RequestSpec("GET", self.url, meta={"seq": seq})

    def parser(self, spec: RequestSpec) -> ReadParser:
        return ReadParser()


async def _drip(request: web.Request) -> web.StreamResponse:
    """Writes `n` pieces `gap_ms` apart after `first_ms`."""
    q = request.query
    first, gap, n = float(q.get("first_ms", 0)), float(q.get("gap_ms", 0)), int(q.get("n", 1))
    resp = web.StreamResponse()
    await resp.prepare(request)
    try:
        await asyncio.sleep(first / 1000)
        for i in range(n):
            if i:
                await asyncio.sleep(gap / 1000)
            await resp.write(b"x")
        await resp.write_eof()
    except ConnectionResetError:  # the client gave up (timeouts, cancellation)
        pass
    return resp


async def _fail(request: web.Request) -> web.Response:
    return web.Response(status=503, text='{"error": "overloaded"}')


@pytest.fixture
async def server():
    app = web.Application()
    app.router.add_get("/drip", _drip)
    app.router.add_get("/fail", _fail)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    site = web.SockSite(runner, sock)
    await site.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    await runner.cleanup()


def read_samples(result) -> list[dict]:
    return [orjson.loads(line) for line in result.samples_path.read_bytes().splitlines()]


def cfg(tmp_path: Path, **kw) -> BenchConfig:
    kw.setdefault("out_dir", tmp_path)
    return BenchConfig(**kw)


async def test_ttft_and_e2e_follow_the_server_timing(server, tmp_path):
    wl = PathWorkload(server, "/drip?first_ms=50&gap_ms=20&n=5")
    result = await BenchRunner(cfg(tmp_path, load="closed:1", max_requests=3), workload=wl).run()
    run = result.summary["run"]
    assert run["n_ok"] == 3
    # first piece after 50 ms, then 4 gaps of 20 ms: TTFT ~50 ms, E2E ~130 ms. Server and
    # client share the loop: the upper bounds add the longest hold-up the run's loop-lag
    # check saw (0-1 ms idle, hundreds on a busy host), once per server timer a span
    # waits on (E2E: the first piece and 4 gaps, each can be held up)
    held_ms = result.summary["self_checks"]["loop_lag_ms"]["max"] or 0.0
    assert 50 <= run["ttft_ms"]["p50"] < 65 + held_ms
    assert 130 <= run["e2e_ms"]["p50"] < 150 + 5 * held_ms
    assert run["itl_event_ms"]["count"] == 12  # 3 requests x 4 gaps
    assert 19 <= run["itl_event_ms"]["p50"] < 30 + held_ms
    assert result.summary["verdict"]["valid"], result.summary["verdict"]
    assert result.summary["self_checks"]["connections_opened"] == 1  # keep-alive: 3 requests, 1 connection
    assert (result.bundle_dir / "summary.json").exists() and (result.bundle_dir / "manifest.json").exists()


async def test_http_error_keeps_the_body(server, tmp_path):
    result = await BenchRunner(
        cfg(tmp_path, load="closed:1", max_requests=2), workload=PathWorkload(server, "/fail")
    ).run()
    samples = read_samples(result)
    assert [s["outcome"] for s in samples] == ["http_error", "http_error"]
    assert samples[0]["http_status"] == 503
    assert samples[0]["error"] == '{"error": "overloaded"}'
    assert result.summary["verdict"] == {"valid": False, "reasons": ["no request succeeded"], "notes": []}


async def test_refused_connection_is_a_transport_error(tmp_path):
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    wl = PathWorkload(f"http://127.0.0.1:{port}")
    result = await BenchRunner(cfg(tmp_path, load="closed:2", max_requests=4), workload=wl).run()
    samples = read_samples(result)
    assert {s["outcome"] for s in samples} == {"transport_error"}
    assert len(samples) == 4
    assert "cannot connect" in samples[0]["error"]


@pytest.mark.parametrize(
    "query, timeouts, kind",
    [
        ("first_ms=400&n=1", Timeouts(ttft_s=0.1), "ttft"),
        ("first_ms=0&gap_ms=400&n=3", Timeouts(idle_s=0.1), "idle"),
        ("first_ms=0&gap_ms=50&n=20", Timeouts(total_s=0.2, idle_s=0.3), "total"),
    ],
)
async def test_each_deadline_is_named(server, tmp_path, query, timeouts, kind):
    wl = PathWorkload(server, "/drip?" + query)
    result = await BenchRunner(cfg(tmp_path, load="closed:1", max_requests=1, timeouts=timeouts), workload=wl).run()
    (s,) = read_samples(result)
    assert (s["outcome"], s["timeout_kind"]) == ("timeout", kind)


async def test_stragglers_at_the_deadline_are_cancelled_and_counted(server, tmp_path):
    wl = PathWorkload(server, "/drip?first_ms=3000&n=1")
    c = cfg(tmp_path, load="constant:20", duration_s=0.5, drain_s=0.2)
    result = await BenchRunner(c, workload=wl).run()
    run = result.summary["run"]
    assert run["n_cancelled"] == 10 and run["n_ok"] == 0  # 0.5 s at 20/s
    assert result.summary["verdict"]["notes"][0] == "10 requests unfinished at the deadline were cancelled"


async def test_cap_with_drop_policy_counts_dropped_arrivals(server, tmp_path):
    wl = PathWorkload(server, "/drip?first_ms=300&n=1")
    c = cfg(tmp_path, load="constant:20", duration_s=0.5, max_in_flight=2, overflow="drop")
    result = await BenchRunner(c, workload=wl).run()
    run = result.summary["run"]
    # arrivals at 0, 50, ..., 450 ms; the first two fill the cap until ~300 ms,
    # then arrivals at 300+ ms find free slots again.
    assert run["n_samples"] == 10
    assert run["n_dropped"] == 10 - run["n_ok"]
    assert run["n_dropped"] >= 4
    assert result.summary["self_checks"]["max_in_flight"] == 2


async def test_cap_with_late_policy_shows_as_schedule_lag(server, tmp_path):
    wl = PathWorkload(server, "/drip?first_ms=100&n=1")
    c = cfg(tmp_path, load="constant:10", duration_s=1.0, max_in_flight=1)
    result = await BenchRunner(c, workload=wl).run()
    run = result.summary["run"]
    assert run["n_ok"] == 10 and run["n_dropped"] == 0
    samples = read_samples(result)
    # each request takes >= 100 ms with arrivals 100 ms apart: lateness accumulates
    assert samples[-1]["sent_ns"] - samples[-1]["intended_ns"] > samples[1]["sent_ns"] - samples[1]["intended_ns"]
    assert run["e2e_intended_ms"]["max"] > run["e2e_ms"]["max"]


async def test_warmup_samples_are_excluded_from_the_summary(tmp_path):
    wl = PathWorkload("http://null")
    c = cfg(tmp_path, load="constant:10", duration_s=1.0, warmup_s=0.3, cooldown_s=0.2)
    result = await BenchRunner(c, workload=wl, transport=NullTransport(chunks=(b"x",))).run()
    phases = [s["phase"] for s in read_samples(result)]
    # arrivals at 0,100,...,900 ms: 0-200 warm-up, 300-700 measured, 800-900 cool-down
    assert phases == ["warmup"] * 3 + ["measure"] * 5 + ["cooldown"] * 2
    assert result.summary["run"]["n_samples"] == 5


async def test_lanes_share_one_clock_and_are_summarised_each(tmp_path):
    a, b = PathWorkload("http://null/a"), PathWorkload("http://null/b")
    lanes = [Lane("chat", a, "constant:10"), Lane("rag", b, "stages:5,20@0.4s")]
    result = await BenchRunner(
        cfg(tmp_path, duration_s=0.8), lanes=lanes, transport=NullTransport(chunks=(b"x",))
    ).run()
    assert result.summary["lanes"]["chat"]["n_ok"] == 8
    assert result.summary["lanes"]["rag"]["n_ok"] == 2 + 8  # 0.4 s at 5/s then 0.4 s at 20/s
    assert result.summary["stages"]["s1"]["n_ok"] == 8
    assert result.summary["run"]["n_ok"] == 18


async def test_hooks_run_and_goodput_counts_slo(tmp_path):
    seen = []

    async def sign(spec: RequestSpec) -> None:
        spec.headers["x-signature"] = "sig"

    def grade(spec: RequestSpec, sample: Sample, text: str) -> None:
        seen.append(spec.headers["x-signature"])
        if sample.seq % 2:
            sample.outcome = "graded_wrong"

    c = cfg(tmp_path, load="closed:1", max_requests=4, slo=SLO(e2e_ms=1000))
    result = await BenchRunner(
        c,
        workload=PathWorkload("http://null"),
        transport=NullTransport(chunks=(b"x",)),
        pre_hooks=[sign],
        post_hooks=[grade],
    ).run()
    run = result.summary["run"]
    assert seen == ["sig"] * 4
    assert run["n_ok"] == 2 and run["n_graded_wrong"] == 2
    assert run["n_good"] == 2


async def test_cancelling_the_run_writes_a_partial_bundle(server, tmp_path):
    wl = PathWorkload(server, "/drip?first_ms=2000&n=1")
    runner = BenchRunner(cfg(tmp_path, load="constant:10", duration_s=5), workload=wl)
    task = asyncio.ensure_future(runner.run())
    # cancel once 4 requests (arrivals at 0, 100, 200, 300 ms) are in flight: waiting on the
    # runner's count, not on the clock, holds on a busy host where the run starts late
    for _ in range(6000):
        if runner.live.in_flight >= 4:
            break
        await asyncio.sleep(0.005)
    in_flight = runner.live.in_flight  # no await between this and the cancel: nothing else is sent
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    summary = orjson.loads((runner.bundle_dir / "summary.json").read_bytes())
    assert summary["partial"] is True
    assert in_flight >= 4
    assert summary["run"]["n_cancelled"] == in_flight  # every request in flight, none finished or sent after
    assert "interrupted before the end (partial run)" in summary["verdict"]["reasons"]


async def test_an_expected_error_status_is_ok_for_http_workloads(server, tmp_path):
    from benchmaker.workloads.http import HttpWorkload

    wl = HttpWorkload(server + "/fail", expected_status=503)
    result = await BenchRunner(cfg(tmp_path, load="closed:1", max_requests=2), workload=wl).run()
    assert [s["outcome"] for s in read_samples(result)] == ["ok", "ok"]
    wl = HttpWorkload(server + "/fail")  # expects 200
    result = await BenchRunner(cfg(tmp_path, load="closed:1", max_requests=1), workload=wl).run()
    assert [s["outcome"] for s in read_samples(result)] == ["http_error"]


async def test_request_meta_travels_to_the_sample(tmp_path):
    wl = PathWorkload("http://null")  # its requests carry meta {"seq": seq}
    result = await BenchRunner(
        cfg(tmp_path, load="closed:1", max_requests=2), workload=wl, transport=NullTransport(chunks=(b"x",))
    ).run()
    assert [s["meta"] for s in read_samples(result)] == [{"seq": 0}, {"seq": 1}]


async def test_a_hook_cancelled_at_the_deadline_still_writes_its_sample(tmp_path):
    async def slow_judge(spec, sample, text):
        await asyncio.sleep(30)

    c = cfg(tmp_path, load="constant:10", duration_s=0.15, drain_s=0.2)
    result = await BenchRunner(
        c, workload=PathWorkload("http://null"), transport=NullTransport(chunks=(b"x",)), post_hooks=[slow_judge]
    ).run()
    samples = read_samples(result)
    assert len(samples) == 2  # arrivals at 0 and 100 ms
    assert {s["outcome"] for s in samples} == {"grading_error"}
    assert samples[0]["error"] == "post-response hook cancelled at the run deadline or interrupt"
