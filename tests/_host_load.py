"""Which verdict reasons a loaded host alone can cause, for tests that accept a run
invalidated by a busy machine (the shared test host) but by nothing else:

    assert v["valid"] or not reasons_beyond_host_load(v)
"""

from __future__ import annotations

from typing import Any

# verdict reasons that a loaded host alone can cause (the start of the reason text of
# benchmaker.engine.selfcheck.verdict)
HOST_LOAD_REASONS = ("event-loop lag p99", "client-saturated: schedule lag p99")


def reasons_beyond_host_load(verdict_: dict[str, Any]) -> list[str]:
    """The verdict's reasons that a loaded host alone cannot cause: every reason except
    event-loop lag and open-loop schedule lag (HOST_LOAD_REASONS). [] for a valid run."""
    return [r for r in verdict_.get("reasons", []) if not r.startswith(HOST_LOAD_REASONS)]
