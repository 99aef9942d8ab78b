"""converters._common.iso_from_ms: an epoch-ms value no datetime can hold (a damaged
log's `1e70`, NaN, infinity) is no time, not a crash (found by
tests/replay/test_context_edit_fuzz.py)."""

from __future__ import annotations

import math

import pytest

from replay.converters._common import iso_from_ms


@pytest.mark.parametrize("ms", [1e70, -1e70, math.nan, math.inf, 10**30, "1770112801000", True, None])
def test_no_datetime_is_none(ms) -> None:
    assert iso_from_ms(ms) is None


def test_epoch_ms_is_iso_utc() -> None:
    assert iso_from_ms(0) == "1970-01-01T00:00:00Z"
    assert iso_from_ms(1770112801000) == "2026-02-03T10:00:01Z"
    assert iso_from_ms(1770112801500.0) == "2026-02-03T10:00:01.500000Z"
