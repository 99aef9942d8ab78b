"""Timestamps in the logs: epoch ms to ISO-8601 UTC text (`iso_from_ms`) and back
(`ms_from_iso`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

_ISO_FAST_LIMIT_MS = 2**32 * 1000
"""iso_from_ms writes an int below this (year 2106) from its digits: there `ms / 1000` is
within 0.25 us of the true value, so datetime's microseconds are exactly `ms % 1000`
thousands (tests/replay/test_common_times.py compares the two)."""
_ISO_MINUTES: dict[int, str] = {}  # epoch minute -> "YYYY-MM-DDTHH:MM:"
_ISO_MINUTES_MAX = 4096
_ISO_SECONDS = tuple(f"{s:02d}" for s in range(60))
_ISO_MILLIS = ("Z", *(f".{m:03d}000Z" for m in range(1, 1000)))  # isoformat writes microseconds, none when 0


def iso_from_ms(ms: Any) -> str | None:
    """ISO-8601 UTC text of an epoch time in ms, None when `ms` is not a number or no
    datetime (NaN, infinite, beyond year 9999: `1e70` in a damaged log):
    `datetime.fromtimestamp(ms / 1000, UTC).isoformat()` with `Z` for `+00:00`. An int
    ms from 1970 to 2106 (a pi message's `timestamp`) is written from a cached minute and
    its own seconds and ms, the same text for a fifth of the cost."""
    if type(ms) is int and 0 <= ms < _ISO_FAST_LIMIT_MS:
        secs, milli = divmod(ms, 1000)
        minute = _ISO_MINUTES.get(secs // 60)
        if minute is None:
            if len(_ISO_MINUTES) >= _ISO_MINUTES_MAX:
                _ISO_MINUTES.clear()
            minute = _ISO_MINUTES[secs // 60] = datetime.fromtimestamp(secs // 60 * 60, tz=UTC).isoformat()[:17]
        return minute + _ISO_SECONDS[secs % 60] + _ISO_MILLIS[milli]
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return None


def ms_from_iso(text: Any) -> float | None:
    """Epoch ms of an ISO-8601 timestamp (a trailing `Z` allowed), None when unparsable."""
    if not isinstance(text, str):
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp() * 1000
