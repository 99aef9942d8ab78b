"""This host's measurement ceiling: `benchmaker calibrate`.

    cal, path = calibrate(seconds=5)          # measures, writes the per-host file
    load_calibration()                        # the latest one, or None
    calibration_for_manifest()                # what a run puts under manifest["calibration"]
    ceiling_checks(cal, summary["run"])       # ({"offered_rate_vs_ceiling": ...}, notes)

What is measured, each on the event loop runs use (`run_on_fresh_loop`: uvloop when
installed), against `benchmaker.testing.instant_server` in a separate process:

    max_request_rate_per_s   BenchRunner `closed:<concurrency>` + HttpWorkload GET /json
                             (27-byte body) for `seconds`: ok requests / self_checks.wall_s.
                             Also `request_cpu_us` = client CPU s / ok requests * 1e6.
    stream_events_per_s      BenchRunner `closed:<concurrency>` + OpenAIChatWorkload POST
                             /v1/chat/completions (`sse_chunks` one-token content chunks
                             per response, sent as 4 HTTP chunks): token events of ok
                             samples / wall_s, and per client CPU s.
    timer                    perf_counter_ns granularity = the smallest positive step
                             between consecutive calls over 200,000 calls (ns), the
                             clock's declared resolution (time.get_clock_info), and
                             `asyncio.sleep(0.001)` overshoot (actual - 1 ms) p50/p99/max
                             over 200 sleeps, in ms.
    loop_idle_lag_ms         LoopLagMonitor (10 ms interval) on an idle loop for
                             min(seconds, 2) s: p50/p99/max in ms (the noise floor of
                             every client-side stamp).

The result is one JSON object written (temp file + rename) to `calibration_path()`:
`$BENCHMAKER_CALIBRATION` when set, else `~/.cache/benchmaker/calibration.json`.
Reading it back and using it in a run (load_calibration, calibration_for_manifest,
ceiling_checks) lives in benchmaker.engine.ceiling, re-exported here; the engine imports that
module, not this one, which runs the engine.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.ceiling import (
    CALIBRATION_ENV,
    SCHEMA_VERSION,
    calibration_for_manifest,
    calibration_path,
    ceiling_checks,
    host_facts,
    load_calibration,
    write_calibration,
)
from benchmaker.engine.errors import ConfigError

__all__ = [
    "CALIBRATION_ENV",
    "SCHEMA_VERSION",
    "calibrate",
    "calibration_for_manifest",
    "calibration_path",
    "ceiling_checks",
    "load_calibration",
    "measure",
    "write_calibration",
]


def _quantiles(values: list[float]) -> dict[str, Any]:
    from benchmaker.engine.selfcheck import quantile_linear

    return {
        "count": len(values),
        "p50": quantile_linear(values, 0.5),
        "p99": quantile_linear(values, 0.99),
        "max": max(values) if values else None,
    }


def _perf_counter_granularity_ns(n: int = 200_000) -> int | None:
    """Smallest positive difference between consecutive time.perf_counter_ns() calls
    over `n` calls (ns); None if the clock never moved."""
    pc = time.perf_counter_ns
    best = None
    prev = pc()
    for _ in range(n):
        t = pc()
        d = t - prev
        if d > 0 and (best is None or d < best):
            best = d
        prev = t
    return best


async def _sleep_overshoot_ms(n: int = 200, request_s: float = 0.001) -> list[float]:
    pc = time.perf_counter_ns
    out = []
    for _ in range(n):
        t = pc()
        await asyncio.sleep(request_s)
        out.append((pc() - t) / 1e6 - request_s * 1e3)
    return out


async def _idle_lag(seconds: float) -> dict[str, Any]:
    from benchmaker.engine.selfcheck import LoopLagMonitor

    mon = LoopLagMonitor()
    mon.start()
    await asyncio.sleep(seconds)
    await mon.stop()
    return mon.stats()


async def _engine_run(workload: Any, concurrency: int, seconds: float, out_dir: Path) -> tuple[Any, int, int]:
    """(RunResult, ok samples, token events of ok samples) of a closed-loop run."""
    from benchmaker.engine.config import BenchConfig
    from benchmaker.engine.runner import BenchRunner

    cfg = BenchConfig(load=f"closed:{concurrency}", duration_s=seconds, out_dir=out_dir, kind="calibrate", drain_s=10)
    result = await BenchRunner(cfg, workload=workload).run()
    n_ok = events = 0
    with open(result.samples_path, "rb") as f:
        for line in f:
            s = orjson.loads(line)
            if s["outcome"] == "ok":
                n_ok += 1
                events += s["n_token_events"] or 0
    return result, n_ok, events


async def measure(
    base_url: str, *, seconds: float = 5.0, concurrency: int = 64, sse_chunks: int = 200, work_dir: Path
) -> dict[str, Any]:
    """Measure against an instant server at `base_url` (http://127.0.0.1:PORT serving
    /json and /v1/chat/completions with `sse_chunks` chunks); run bundles go under
    `work_dir`. Returns the calibration dict (module docstring) without host/time
    fields. Raises RuntimeError when no request succeeded (server not reachable)."""
    from benchmaker.workloads.datasets import StaticDataset
    from benchmaker.workloads.http import HttpWorkload
    from benchmaker.workloads.openai_chat import OpenAIChatWorkload

    granularity = _perf_counter_granularity_ns()
    overshoot = await _sleep_overshoot_ms()
    idle = await _idle_lag(min(seconds, 2.0))

    res, n_ok, _ = await _engine_run(HttpWorkload(base_url + "/json"), concurrency, seconds, work_dir)
    sc = res.summary["self_checks"]
    if n_ok == 0:
        raise RuntimeError(f"calibration: no request to {base_url}/json succeeded")
    req = {"rate": n_ok / sc["wall_s"], "cpu_us": sc["client_cpu_s"] / n_ok * 1e6, "n": n_ok, "wall_s": sc["wall_s"]}

    chat = OpenAIChatWorkload(base_url + "/v1/chat/completions", "m", StaticDataset(["x"]))
    res, n_ok, events = await _engine_run(chat, concurrency, seconds, work_dir)
    sc = res.summary["self_checks"]
    if n_ok == 0:
        raise RuntimeError(f"calibration: no stream from {base_url}/v1/chat/completions succeeded")
    return {
        "seconds": seconds,
        "concurrency": concurrency,
        "max_request_rate_per_s": req["rate"],
        "request_cpu_us": req["cpu_us"],
        "n_requests": req["n"],
        "stream_events_per_s": events / sc["wall_s"],
        "stream_events_per_cpu_s": events / sc["client_cpu_s"] if sc["client_cpu_s"] > 0 else None,
        "stream_chunks_per_response": sse_chunks,
        "n_streams": n_ok,
        "timer": {
            "perf_counter_ns_granularity_ns": granularity,
            "perf_counter_resolution_s": time.get_clock_info("perf_counter").resolution,
            "sleep_request_ms": 1.0,
            "sleep_overshoot_ms": _quantiles(overshoot),
        },
        "loop_idle_lag_ms": idle,
    }


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _loop_name() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def calibrate(
    seconds: float = 5.0, *, concurrency: int = 64, sse_chunks: int = 200, path: Path | None = None
) -> tuple[dict[str, Any], Path]:
    """Start the instant server, `measure`, write the result to `path` (default
    `calibration_path()`); returns (calibration, path). Takes about 2 x `seconds` +
    min(seconds, 2) + 0.5 s. Raises ConfigError for seconds <= 0 or concurrency < 1,
    RuntimeError when the server does not start or nothing succeeded."""
    if not seconds > 0:
        raise ConfigError(f"--seconds: expected > 0 (got {seconds})")
    if concurrency < 1:
        raise ConfigError(f"--concurrency: expected >= 1 (got {concurrency})")
    from benchmaker.engine.runner import run_on_fresh_loop
    from benchmaker.testing.instant_server import start_instant_server

    work = Path(tempfile.mkdtemp(prefix="benchmaker-calibrate-"))
    try:
        with start_instant_server(sse_chunks=sse_chunks) as server:
            body = run_on_fresh_loop(
                measure(server.url, seconds=seconds, concurrency=concurrency, sse_chunks=sse_chunks, work_dir=work)
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cal = {
        "schema": SCHEMA_VERSION,
        "calibrated_at": datetime.now(UTC).isoformat(),
        "host": host_facts(),
        "python": sys.version.split()[0],
        "loop": _loop_name(),
        "versions": {name: _version(name) for name in ("benchmaker", "aiohttp", "uvloop", "orjson")},
        **body,
    }
    return cal, write_calibration(cal, path)
