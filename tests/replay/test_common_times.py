"""converters.timestamps.iso_from_ms: an epoch-ms value no datetime can hold (a damaged
log's `1e70`, NaN, infinity) is no time, not a crash (found by
tests/replay/test_context_edit_fuzz.py)."""

from __future__ import annotations

import math

import pytest

from benchmaker.trajectories.converters.timestamps import iso_from_ms


@pytest.mark.parametrize("ms", [1e70, -1e70, math.nan, math.inf, 10**30, "1770112801000", True, None])
def test_no_datetime_is_none(ms) -> None:
    assert iso_from_ms(ms) is None


def test_epoch_ms_is_iso_utc() -> None:
    assert iso_from_ms(0) == "1970-01-01T00:00:00Z"
    assert iso_from_ms(1770112801000) == "2026-02-03T10:00:01Z"
    assert iso_from_ms(1770112801500.0) == "2026-02-03T10:00:01.500000Z"


def test_int_ms_fast_path_writes_datetimes_text() -> None:
    """Ints from 1970 to 2106 are written from a cached minute and their own digits:
    the text datetime.fromtimestamp(ms / 1000, UTC).isoformat() gives, for a sample of
    the range, its edges and minute/second/ms boundaries."""
    import random
    from datetime import UTC, datetime

    from benchmaker.trajectories.converters.timestamps import _ISO_FAST_LIMIT_MS

    rng = random.Random(3)
    values = [
        0,
        1,
        999,
        1000,
        59_999,
        60_000,
        86_399_999,
        _ISO_FAST_LIMIT_MS - 1,
        _ISO_FAST_LIMIT_MS,
        1763681581545,
        1770112801000,
        -1,
    ]
    values += [rng.randrange(_ISO_FAST_LIMIT_MS) for _ in range(30_000)]
    values += [rng.randrange(1_700_000_000_000, 1_800_000_000_000) for _ in range(30_000)]
    for ms in values:
        assert iso_from_ms(ms) == datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z"), ms
