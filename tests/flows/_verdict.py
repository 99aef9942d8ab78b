"""Sweep-point verdicts in flow tests on a loaded host.

A replay point runs on the engine, whose self-checks make a point invalid when its
event loop lagged (p99 > 10 ms) or, open loop, its schedule lagged (benchmaker.engine.selfcheck).
Two cores shared by a Prefect harness and other tests can cause that alone; these
helpers keep every other reason asserted, and the rows a flow returns even when every
point was invalid for that reason only (the flow run then ends Failed: benchmaker.flows.outcome).
"""

from __future__ import annotations

from typing import Any

_LAG = ("event-loop lag", "client-saturated: schedule lag")


def reasons_but_loop_lag(row: dict[str, Any]) -> list[str]:
    """The point's invalid reasons other than event-loop and schedule lag ([] when valid),
    for a row whose reasons are '; '-joined in `invalid_reason`."""
    return [r for r in (row.get("invalid_reason") or "").split("; ") if r and not any(k in r for k in _LAG)]


def valid_but_loop_lag(row: dict[str, Any]) -> bool:
    """True when the point is valid, or invalid for loop / schedule lag alone."""
    return bool(row.get("valid")) or not reasons_but_loop_lag(row)


async def run_flow(flow: Any, **params: Any) -> dict[str, Any]:
    """`await flow(**params)`'s result; when every point was invalid (AllPointsInvalid) for
    loop lag alone, the rows it carries. Any other reason re-raises."""
    from benchmaker.flows.outcome import AllPointsInvalid

    try:
        return await flow(**params)
    except AllPointsInvalid as exc:
        if not all(valid_but_loop_lag(r) for r in exc.out["points"]):
            raise
        return exc.out
