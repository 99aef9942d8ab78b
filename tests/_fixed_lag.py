"""A loop-lag monitor with fixed figures, for tests of how lag limits judge a run:
monkeypatch it over benchmaker.engine.runner.LoopLagMonitor and every run of
this process reports an event-loop lag p99 of LOOP_LAG_P99_MS, whatever the host does.

    monkeypatch.setattr("benchmaker.engine.runner.LoopLagMonitor", FixedLag)
"""

from __future__ import annotations

from typing import Any

LOOP_LAG_P99_MS = 7.5


class FixedLag:
    """Stands in for benchmaker.engine.selfcheck.LoopLagMonitor (same methods): stats() gives
    p50 = p99 = max = LOOP_LAG_P99_MS over 100 samples; current_lag_ms() is 0 (no
    client-overload cause for a connect timeout)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lags_ms = [LOOP_LAG_P99_MS]

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def current_lag_ms(self, now_ns: int | None = None) -> float:
        return 0.0

    def stats(self) -> dict[str, Any]:
        return {"count": 100, "p50": LOOP_LAG_P99_MS, "p99": LOOP_LAG_P99_MS, "max": LOOP_LAG_P99_MS}
