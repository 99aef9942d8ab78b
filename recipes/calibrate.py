"""`benchmaker calibrate`: measure this host's ceiling and store it for later runs.

    benchmaker calibrate [--duration 5s] [--concurrency 64] [--sse-chunks 200] [--out FILE]

Writes `--out`, else `$BENCHMAKER_CALIBRATION`, else `~/.cache/benchmaker/calibration.json`
(benchmaker.recipes.calibration). Every later run copies the latest calibration into its
manifest.json (`calibration`) and relates its offered rate to the ceiling in its
summary (`self_checks.offered_rate_vs_ceiling`). Exit 0 when measured, 2 on bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from benchmaker.engine.errors import ConfigError
from benchmaker.engine.load_models import parse_duration_s
from benchmaker.recipes.app import app, within
from benchmaker.recipes.calibration import calibrate as _calibrate
from benchmaker.recipes.display import console


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} ms"


@app.command(name="calibrate")
def calibrate(
    *,
    duration: Annotated[
        str, Parameter(help="how long each of the two throughput measurements runs (5s, 1m, or seconds)")
    ] = "5s",
    concurrency: Annotated[int, Parameter(help="closed-loop workers against the instant server")] = 64,
    sse_chunks: Annotated[
        int, Parameter(help="one-token content chunks per streamed response"), within(1, 1_000_000)
    ] = 200,
    out: Annotated[
        Path | None,
        Parameter(help="calibration file (default: $BENCHMAKER_CALIBRATION or ~/.cache/benchmaker/calibration.json)"),
    ] = None,
    seconds: Annotated[float | None, Parameter(show=False)] = None,
) -> int:
    """Measure this host's ceiling (max request rate, streaming events/s, timer
    resolution, idle event-loop lag) against an instant local server and store it.
    `seconds`: the old spelling of --duration. Raises ConfigError naming --duration
    when it is no duration or not above 0 s."""
    given = duration if seconds is None else seconds
    duration_s = parse_duration_s(given, what="--duration")
    if not duration_s > 0:
        raise ConfigError(f"--duration: expected more than 0 s (got {given!r})")
    cal, path = _calibrate(duration_s, concurrency=concurrency, sse_chunks=sse_chunks, path=out)
    t = cal["timer"]
    rows = [
        ("max request rate (closed loop, non-streaming)", f"{cal['max_request_rate_per_s']:,.0f} req/s"),
        ("client CPU per request", f"{cal['request_cpu_us']:.1f} us"),
        ("streaming events", f"{cal['stream_events_per_s']:,.0f} events/s"),
        ("streaming events per client CPU s", f"{cal['stream_events_per_cpu_s']:,.0f} events/s"),
        ("perf_counter_ns granularity", f"{t['perf_counter_ns_granularity_ns']} ns"),
        (
            "asyncio.sleep(1 ms) overshoot p50 / p99",
            f"{_ms(t['sleep_overshoot_ms']['p50'])} / {_ms(t['sleep_overshoot_ms']['p99'])}",
        ),
        (
            "idle event-loop lag p50 / p99",
            f"{_ms(cal['loop_idle_lag_ms']['p50'])} / {_ms(cal['loop_idle_lag_ms']['p99'])}",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    console.print(f"calibration of {cal['host']['hostname']} ({cal['loop']}, {duration_s:g} s per measurement)")
    for k, v in rows:
        console.print(f"  {k:<{width}}  {v}")
    console.print(f"written to {path}")
    return 0
