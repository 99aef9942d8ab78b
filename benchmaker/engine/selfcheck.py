"""Self-checks that run beside every measurement (docs/metrics.md).

    LoopLagMonitor  every `interval_s` (default 10 ms) it sleeps and measures how late it
                    woke up: the event loop's lag, i.e. how long a ready callback (a
                    token event, a send) may wait behind client work. Lag lands in every
                    client-side timestamp, so a high p99 makes a run invalid.
    CPU             client process CPU time over the run / wall time (1.0 = one core).

`verdict()` turns the summary and these figures into `{"valid": bool, "reasons": [...],
"notes": [...]}` with the thresholds of `SelfCheckLimits`.

Host-load thresholds. Loop lag and schedule lag measure the client host as much as the
client: on a loaded machine (a laptop building something, a shared CI runner, load
average 10 on 2 cores) their p99 passes 10 ms although the engine does nothing wrong.
Their defaults (10 ms each) can be raised per run (YAML `checks:`, `--max-loop-lag-ms`,
`--max-schedule-lag-ms`) or for every run of a shell or CI job through the environment:

    BENCHMAKER_MAX_LOOP_LAG_MS=200 BENCHMAKER_MAX_SCHEDULE_LAG_MS=200 benchmaker llm ...

An explicit value wins over the environment; the thresholds a run used are in its
manifest (`config.checks`) and in every verdict reason. The test suite sets both
(tests/conftest.py) so that a test about something else holds on a busy host, while the
checks themselves are tested with given lag figures (tests/benchmaker/test_selfcheck.py).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable
from typing import Any

from benchmaker.engine.errors import ConfigError

DEFAULT_MAX_LAG_P99_MS = 10.0
ENV_MAX_LOOP_LAG_MS = "BENCHMAKER_MAX_LOOP_LAG_MS"
ENV_MAX_SCHEDULE_LAG_MS = "BENCHMAKER_MAX_SCHEDULE_LAG_MS"


def env_limit_ms(name: str, default: float = DEFAULT_MAX_LAG_P99_MS) -> float:
    """A lag threshold in ms from environment variable `name` (ENV_MAX_LOOP_LAG_MS or
    ENV_MAX_SCHEDULE_LAG_MS), `default` when unset or empty. Raises ConfigError naming
    the variable when the value is not a finite number > 0."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}: expected a finite number of ms > 0 (got {raw!r})")
    return value


def quantile_linear(values: list[float], q: float) -> float | None:
    """Linear-interpolation quantile (numpy's default, DuckDB `quantile_cont`); None for
    an empty list. Source: Hyndman & Fan (1996) definition 7."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class LoopLagMonitor:
    """Samples event-loop lag in ms while running (start()/stop()): each sample is
    `woke - slept - interval` (>= 0) of one `asyncio.sleep(interval_s)`, both stamps from
    `clock` (default time.perf_counter_ns, in ns; tests inject a scripted clock)."""

    def __init__(self, interval_s: float = 0.01, clock: Callable[[], int] = time.perf_counter_ns):
        self.interval_s = interval_s
        self.lags_ms: list[float] = []
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._slept_at_ns: int | None = None

    async def _run(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        pc = self._clock
        while True:
            t = self._slept_at_ns = pc()
            await asyncio.sleep(self.interval_s)
            self.lags_ms.append(max(0, pc() - t - interval_ns) / 1e6)

    def current_lag_ms(self, now_ns: int | None = None) -> float:
        """The loop's lag right now, in ms: the larger of the last measured lag and how
        far the monitor is overdue in its current sleep (a loop too busy to wake the
        monitor has a lag that no sample shows yet). 0 before start."""
        if self._slept_at_ns is None:
            return 0.0
        now_ns = self._clock() if now_ns is None else now_ns
        overdue = (now_ns - self._slept_at_ns) / 1e6 - self.interval_s * 1e3
        return max(self.lags_ms[-1] if self.lags_ms else 0.0, overdue, 0.0)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def stats(self) -> dict[str, Any]:
        """{count, p50, p99, max} of the lag samples in ms."""
        return {
            "count": len(self.lags_ms),
            "p50": quantile_linear(self.lags_ms, 0.5),
            "p99": quantile_linear(self.lags_ms, 0.99),
            "max": max(self.lags_ms) if self.lags_ms else None,
        }


def connect_timeout_cause(error: str, connect_s: float, loop_lag_ms: float, in_flight: int) -> tuple[str, str]:
    """(timeout_kind, error) of a connect timeout. When the client's event loop lagged by
    at least a tenth of the connect timeout (and >= 50 ms) as it fired, the client was
    too busy to make the connection in time and the endpoint may never have seen the
    request: kind `client`, the error naming the lag and the requests in flight. Else
    kind `connect` with the transport's message."""
    if loop_lag_ms >= max(50.0, connect_s * 100):  # connect_s / 10, in ms
        return "client", (
            f"client-side overload: the connect deadline ({connect_s:g} s) passed while this client's event "
            f"loop lagged {loop_lag_ms:.0f} ms with {in_flight} requests in flight; the endpoint may never "
            f"have seen the request ({error})"
        )
    return "connect", error


def service_error_rate(run: dict[str, Any]) -> float | None:
    """Share of sent requests the service failed: (n_sent - n_ok - n_graded_wrong) /
    n_sent, None when nothing was sent. A graded_wrong answer is a response the endpoint
    delivered (its quality is the accuracy figure), so it is not a service error here;
    every other non-ok outcome is (http/transport/protocol errors, timeouts, empty
    output, grading errors, cancelled, dropped and aborted requests). A replayed call
    that failed in the original run (recorded_error) is neither failed nor counted."""
    sent = (run.get("n_sent") or 0) - (run.get("n_recorded_error") or 0)
    if sent <= 0:
        return None
    return (sent - (run.get("n_ok") or 0) - (run.get("n_graded_wrong") or 0)) / sent


def _failure_kinds(run: dict[str, Any]) -> str:
    kinds = (
        "transport_error",
        "timeout",
        "http_error",
        "protocol_error",
        "empty_output",
        "grading_error",
        "cancelled",
        "dropped",
        "aborted",
    )
    return ", ".join(f"{run[f'n_{k}']} {k}" for k in kinds if run.get(f"n_{k}")) or "none by kind"


def verdict(
    run: dict[str, Any] | None,
    *,
    limits: Any,
    open_loop: bool,
    target_concurrency: int | None,
    loop_lag: dict[str, Any],
    interrupted: bool,
    worker_failures: list[str] | None = None,
) -> dict[str, Any]:
    """Decide whether a run measured what it claims.

    Invalid when: no request succeeded (with how many answers were graded wrong, when
    some were); the service error rate (service_error_rate)
    exceeds `limits.max_error_rate` (default 0.1: a target that died; 1 turns it off);
    open loop and the schedule-lag p99 exceeds `limits.max_schedule_lag_p99_ms` (client
    saturated); event-loop lag p99 exceeds `limits.max_loop_lag_p99_ms`; closed loop and
    the achieved max concurrency never reached the target; the run was interrupted; a
    worker process died. Notes (not invalidating): unfinished requests at the deadline,
    partial usage coverage.
    """
    reasons: list[str] = []
    notes: list[str] = []
    if interrupted:
        reasons.append("interrupted before the end (partial run)")
    for failure in worker_failures or []:
        reasons.append(failure)
    if run is None or not run.get("n_ok"):
        wrong = (run or {}).get("n_graded_wrong")
        # every answer graded wrong: the responses came, say so beside the accuracy
        reasons.append(
            f"no request succeeded ({wrong} answers graded wrong: accuracy 0 of {run.get('n_graded')})"
            if wrong and run is not None
            else "no request succeeded"
        )
    else:
        err = service_error_rate(run)
        if (
            limits.max_error_rate is not None
            and limits.max_error_rate < 1
            and err is not None
            and err > limits.max_error_rate
        ):
            judged = run["n_sent"] - (run.get("n_recorded_error") or 0)
            reasons.append(
                f"error rate {err:.2%} exceeds max_error_rate {limits.max_error_rate:.2%} "
                f"({judged - run['n_ok'] - (run.get('n_graded_wrong') or 0)} of "
                f"{judged} requests failed: {_failure_kinds(run)})"
            )
        lag = (run.get("schedule_lag_ms") or {}).get("p99")
        if open_loop and lag is not None and lag > limits.max_schedule_lag_p99_ms:
            reasons.append(f"client-saturated: schedule lag p99 {lag:.2f} ms > {limits.max_schedule_lag_p99_ms:g} ms")
        if target_concurrency is not None:
            got = run.get("max_concurrency") or 0
            if got < target_concurrency:
                reasons.append(f"achieved concurrency {got} never reached the target {target_concurrency}")
    if run is not None and run.get("n_cancelled"):
        notes.append(f"{run['n_cancelled']} requests unfinished at the deadline were cancelled")
    if run is not None and run.get("n_ok") and run.get("token_totals_null_reason"):
        notes.append(f"token totals are null: {run['token_totals_null_reason']}")
    if loop_lag.get("p99") is not None and loop_lag["p99"] > limits.max_loop_lag_p99_ms:
        reasons.append(
            f"event-loop lag p99 {loop_lag['p99']:.2f} ms > {limits.max_loop_lag_p99_ms:g} ms: "
            "client-side timestamps include client delay"
        )
    return {"valid": not reasons, "reasons": reasons, "notes": notes}
