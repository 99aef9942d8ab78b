"""benchmaker.engine.monitors: Prometheus text to rows (rates, histogram quantiles, awkward
labels), function monitors, and a run against a loopback /metrics server whose rows
land in the warehouse."""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import duckdb
import orjson
import pytest
from aiohttp import web

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.monitors import (
    FunctionMonitor,
    PrometheusMonitor,
    PrometheusMonitorSpec,
    PrometheusRates,
    build_monitors,
    histogram_quantile,
)
from benchmaker.engine.runner import BenchRunner
from benchmaker.warehouse.loader import load_run
from benchmaker.workloads.http import HttpWorkload
from tests._host_load import reasons_beyond_host_load

# A label value with a closing brace, escaped quotes, an escaped backslash and an
# escaped newline (Prometheus text format 0.0.4 escapes: \\, \", \n).
AWKWARD_TEXT = r"we}ird \"q\" C:\\path\nx"
AWKWARD = 'we}ird "q" C:\\path\nx'


def _metrics(k: int) -> str:
    """Scrape number k: the counter grows by 10, the histogram by [1, 3, 4, 4]
    cumulative observations in le=0.1/0.5/1/+Inf, the gauge is k."""
    lab = f'model_name="{AWKWARD_TEXT}"'
    b = [k * 1, k * 3, k * 4, k * 4]
    return (
        "# HELP vllm:prompt_tokens_total Prompt tokens.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        f"vllm:prompt_tokens_total{{{lab}}} {10 * k}.0\n"
        f"vllm:prompt_tokens_created{{{lab}}} 1.7e9\n"
        "# HELP vllm:num_requests_running Running.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{lab}}} {k}.0\n"
        "# HELP vllm:e2e_request_latency_seconds Latency.\n"
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        f'vllm:e2e_request_latency_seconds_bucket{{le="0.1",{lab}}} {b[0]}.0\n'
        f'vllm:e2e_request_latency_seconds_bucket{{le="0.5",{lab}}} {b[1]}.0\n'
        f'vllm:e2e_request_latency_seconds_bucket{{le="1.0",{lab}}} {b[2]}.0\n'
        f'vllm:e2e_request_latency_seconds_bucket{{le="+Inf",{lab}}} {b[3]}.0\n'
        f"vllm:e2e_request_latency_seconds_count{{{lab}}} {b[3]}.0\n"
        f"vllm:e2e_request_latency_seconds_sum{{{lab}}} {k * 1.5}\n"
        "# TYPE process_cpu_seconds_total counter\n"
        f"process_cpu_seconds_total {k}.0\n"
    )


def test_histogram_quantile_interpolates_like_prometheus():
    b = [(0.1, 2), (0.5, 6), (1.0, 8), (math.inf, 10)]
    assert histogram_quantile(0.5, b) == pytest.approx(0.4)  # rank 5: 0.1 + 0.4 * (5-2)/(6-2)
    assert histogram_quantile(0.1, b) == pytest.approx(0.05)  # rank 1 in the first bucket, from 0
    assert histogram_quantile(0.9, b) == 1.0  # rank 9 in +Inf: second highest bound
    assert histogram_quantile(0.5, list(reversed(b))) == pytest.approx(0.4)  # order does not matter
    assert histogram_quantile(0.5, [(0.1, 2), (0.5, 6)]) is None  # no +Inf bucket: NaN
    assert histogram_quantile(0.5, [(0.1, 0), (math.inf, 0)]) is None  # no observation: NaN
    assert histogram_quantile(0.5, [(-1.0, 4), (math.inf, 4)]) == -1.0  # lowest bound <= 0
    assert histogram_quantile(1.5, b) == math.inf and histogram_quantile(-1, b) == -math.inf
    # a non-monotonic count is raised to the one before (Prometheus ensureMonotonic):
    # [2, 1, 4, 4] reads as [2, 2, 4, 4]; rank 3 -> 0.5 + 0.5 * (3-2)/(4-2) (unfixed: 0.833)
    assert histogram_quantile(0.75, [(0.1, 2), (0.5, 1), (1.0, 4), (math.inf, 4)]) == pytest.approx(0.75)


def test_rates_quantiles_and_awkward_labels_from_two_scrapes():
    conv = PrometheusRates(metrics=["vllm:*"], quantiles=(0.5, 0.9, 0.99), extra_labels={"instance": "h:1"})
    first = conv.rows(_metrics(1), 1_000_000_000)
    # first scrape: only the gauge (counters and histograms need a previous scrape)
    assert first == [
        {
            "name": "vllm:num_requests_running",
            "labels": {"model_name": AWKWARD, "instance": "h:1"},
            "t_ns": 1_000_000_000,
            "value": 1.0,
        }
    ]
    rows = conv.rows(_metrics(2), 1_500_000_000)  # 0.5 s later
    got = {r["name"]: r["value"] for r in rows}
    assert got == pytest.approx(
        {
            "vllm:prompt_tokens_total:rate_per_s": 20.0,  # +10 over 0.5 s
            "vllm:num_requests_running": 2.0,
            "vllm:e2e_request_latency_seconds_count:rate_per_s": 8.0,  # +4 over 0.5 s
            # interval's buckets [1, 3, 4, 4]: p50 rank 2 -> 0.1 + 0.4 * 1/2
            "vllm:e2e_request_latency_seconds:p50": 0.3,
            "vllm:e2e_request_latency_seconds:p90": 0.8,  # rank 3.6 -> 0.5 + 0.5 * 0.6
            "vllm:e2e_request_latency_seconds:p99": 0.98,  # rank 3.96 -> 0.5 + 0.5 * 0.96
        }
    )
    assert all(r["labels"] == {"model_name": AWKWARD, "instance": "h:1"} for r in rows)
    assert "process_cpu_seconds_total:rate_per_s" not in got  # filtered out by metrics=


def test_counter_reset_counts_from_zero_and_no_observations_give_no_quantile():
    conv = PrometheusRates()
    conv.rows(_metrics(3), 0)
    rows = {r["name"]: r["value"] for r in conv.rows(_metrics(1), 1_000_000_000)}
    assert rows["vllm:prompt_tokens_total:rate_per_s"] == 10.0  # 30 -> 10 is a reset: increase 10 over 1 s
    assert rows["vllm:e2e_request_latency_seconds:p50"] == pytest.approx(0.3)  # reset: the new counts
    rows = {r["name"]: r["value"] for r in conv.rows(_metrics(1), 2_000_000_000)}
    assert rows["vllm:prompt_tokens_total:rate_per_s"] == 0.0
    assert "vllm:e2e_request_latency_seconds:p50" not in rows  # nothing observed in the interval


def test_bad_text_raises():
    with pytest.raises(ValueError):
        PrometheusRates().rows('metric{label="unterminated} 1\n', 0)


def test_specs_and_bad_values_name_the_monitor():
    (m,) = build_monitors(
        [
            PrometheusMonitorSpec(
                type="prometheus", url="http://127.0.0.1:1/metrics", interval_s="250ms", metrics=["vllm:*"]
            )
        ]
    )
    assert isinstance(m, PrometheusMonitor) and m.interval_s == 0.25 and m.name == "prometheus:127.0.0.1:1"
    with pytest.raises(ConfigError, match=r"monitors\[0\]: url: expected an http\(s\) URL \(got 'ftp://x'\)"):
        build_monitors([PrometheusMonitorSpec(type="prometheus", url="ftp://x")])


def _site(app: web.Application) -> tuple[socket.socket, str]:
    sock = socket.create_server(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_run_scrapes_loopback_metrics_into_bundle_and_warehouse(tmp_path: Path):
    scrapes = 0

    async def metrics(request: web.Request) -> web.Response:
        nonlocal scrapes
        scrapes += 1
        return web.Response(text=_metrics(scrapes), content_type="text/plain")

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/ok", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    sock, base = _site(app)
    await web.SockSite(runner, sock).start()
    calls: list[int] = []

    def probe() -> dict:
        calls.append(1)
        return {"probe_calls": len(calls), "not_a_number": "x"}

    def broken() -> dict:
        raise RuntimeError("probe down")

    try:
        cfg = BenchConfig(
            load="constant:20",
            duration_s=0.3,
            out_dir=tmp_path,
            run_id="mon-run",
            checks={"max_loop_lag_p99_ms": 10, "max_schedule_lag_p99_ms": 10},
        )  # the defaults
        # timeout_s: the default (the 50 ms interval) lets a busy host time a scrape out after
        # the handler counted it, and its gauge row would be missing
        mons = [
            PrometheusMonitor(base + "/metrics", interval_s=0.05, metrics=["vllm:*"], timeout_s=5),
            FunctionMonitor(probe, interval_s=0.1, labels={"host": "a"}),
            FunctionMonitor(broken, interval_s=0.1, name="broken"),
        ]
        result = await BenchRunner(cfg, workload=HttpWorkload(base + "/ok"), monitors=mons).run()
    finally:
        await runner.cleanup()
    rows = [orjson.loads(line) for line in (result.bundle_dir / "monitor.jsonl").read_bytes().splitlines()]
    prom = [r for r in rows if r["name"].startswith("vllm:")]
    gauges = [r for r in prom if r["name"] == "vllm:num_requests_running"]
    # one gauge row per scrape; scrape k serves gauge k (sampled at t0, every 50 ms, at stop)
    assert [r["value"] for r in gauges] == [float(k) for k in range(1, scrapes + 1)]
    # the first, at least one periodic (50 ms) and the final scrape; or a stall of the host ate
    # the periodic ones, and the run's self-checks say so (it delays the sends as much)
    v = result.summary["verdict"]
    host_stalled = not v["valid"] and not reasons_beyond_host_load(v)
    assert scrapes >= 3 or host_stalled, (scrapes, v)
    stamps = [r["t_ns"] for r in gauges]
    # the final scrape comes after the last request (constant:20 in 0.3 s: the last one at 0.25 s)
    assert stamps == sorted(stamps) and 0 <= stamps[0] < 50_000_000 and stamps[-1] >= 250_000_000
    rates = [r for r in prom if r["name"] == "vllm:prompt_tokens_total:rate_per_s"]
    assert len(rates) == scrapes - 1
    for prev_t, r in zip(stamps, rates, strict=False):  # +10 tokens per scrape over the scrape gap
        assert r["value"] == pytest.approx(10 / ((r["t_ns"] - prev_t) / 1e9))
    p99 = [r["value"] for r in prom if r["name"] == "vllm:e2e_request_latency_seconds:p99"]
    assert p99 == pytest.approx([0.98] * (scrapes - 1))
    assert all(r["labels"]["model_name"] == AWKWARD for r in prom)
    fn = [r for r in rows if r["name"] == "probe_calls"]
    assert [r["value"] for r in fn] == [float(i) for i in range(1, len(calls) + 1)]
    assert all(r["labels"] == {"host": "a"} for r in fn)
    report = result.summary["self_checks"]["monitors"]
    assert report["broken"]["errors"] == report["broken"]["samples"]
    assert report["broken"]["samples"] >= 3 or host_stalled, (report, v)  # t0, 100 ms, the final one
    assert report["broken"]["last_error"] == "RuntimeError: probe down"
    assert report[mons[0].name] == {"samples": scrapes, "errors": 0, "rows": len(prom), "last_error": None}

    wh = tmp_path / "wh.duckdb"
    rep = load_run(wh, result.bundle_dir)
    assert rep.rows["monitor_samples"] == len(rows)
    with duckdb.connect(str(wh), read_only=True) as con:
        got = con.execute(
            "SELECT run_id, count(*), max(value), any_value(labels ->> 'model_name') FROM monitor_samples "
            "WHERE name = 'vllm:num_requests_running' GROUP BY run_id"
        ).fetchall()
    assert got == [("mon-run", scrapes, float(scrapes), AWKWARD)]
    assert json.loads(json.dumps(AWKWARD)) == AWKWARD
