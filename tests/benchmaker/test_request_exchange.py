"""benchmaker.engine.request: the deadline rules on an injected clock (Deadlines.due and
check take the time), and the outcome a cancellation records."""

from __future__ import annotations

import asyncio

import pytest

from benchmaker.engine.errors import ConnectTimeout, TransportError
from benchmaker.engine.records import Sample
from benchmaker.engine.request import DeadlineExceeded, Deadlines, RequestExchange

S = 1_000_000_000


def _started(dl: Deadlines) -> tuple[RequestExchange, Sample, asyncio.Task]:
    """An exchange started under `dl` in a task that waits for an hour: (exchange, its sample, the task)."""
    waiter = asyncio.create_task(asyncio.sleep(3600))
    sample = Sample("r", 0, "l")
    ex = RequestExchange(sample, 0, dl, waiter)
    ex.start()
    return ex, sample, waiter


async def test_each_deadline_at_its_time_total_first_then_ttft_then_idle():
    # deadlines of 20-100 s: the real periodic check never fires within the test
    dl = Deadlines(total_s=100.0, ttft_s=50.0, idle_s=20.0)
    assert dl.period_s == 0.05  # 20 s / 20, clamped to 50 ms
    ex, sample, waiter = _started(dl)
    sent = ex.sent_at
    assert (sample.sent_ns, ex.read_at) == (sent, sent)
    assert dl.due(ex, sent + 20 * S - 1) is None
    assert dl.due(ex, sent + 20 * S) == "idle"  # nothing read since the send
    ex.read_at = sent + 45 * S  # a read at 45 s
    assert dl.due(ex, sent + 50 * S - 1) is None
    assert dl.due(ex, sent + 50 * S) == "ttft"  # no token yet
    sample.first_token_ns = 1
    assert dl.due(ex, sent + 65 * S - 1) is None
    assert dl.due(ex, sent + 65 * S) == "idle"
    ex.read_at = sent + 99 * S
    assert dl.due(ex, sent + 100 * S) == "total"
    ex.stop()
    waiter.cancel()


async def test_a_held_exchange_is_not_cut_and_a_fired_deadline_records_its_kind():
    dl = Deadlines(total_s=100.0)
    ex, sample, waiter = _started(dl)
    ex.held_at = ex.sent_at + 1  # a consumer holds the last read: its code runs, never cancelled
    dl.check(ex.sent_at + 200 * S)
    assert (ex.fired, waiter.cancelling()) == (None, 0)
    ex.held_at = 0
    dl.check(ex.sent_at + 200 * S)
    assert (ex.fired, waiter.cancelling()) == ("total", 1)
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert ex.record(asyncio.CancelledError()) is True
    assert (sample.outcome, sample.timeout_kind, sample.error) == ("timeout", "total", None)
    assert sample.end_ns is not None and sample.end_ns >= sample.sent_ns


async def test_a_cancellation_from_elsewhere_records_nothing():
    ex, sample, waiter = _started(Deadlines(idle_s=30.0))
    waiter.cancel()  # not a deadline
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert ex.record(asyncio.CancelledError()) is False
    assert (sample.outcome, sample.end_ns) == ("ok", None)
    ex.stop()


@pytest.mark.parametrize(
    ("exc", "view"),
    [
        (DeadlineExceeded("idle"), ("timeout", "idle", None)),
        (ConnectTimeout("connect timeout after 1 s to u"), ("timeout", "connect", "connect timeout after 1 s to u")),
        (TransportError("response body cut"), ("transport_error", None, "response body cut")),
        (TimeoutError(), ("protocol_error", None, "TimeoutError: ")),
        (KeyError("x"), ("protocol_error", None, "KeyError: 'x'")),
    ],
)
def test_the_outcome_of_each_failure(exc, view):
    sample = Sample("r", 0, "l")
    ex = RequestExchange(sample, 0, None)
    ex.start()
    assert ex.record(exc) is True
    assert (sample.outcome, sample.timeout_kind, sample.error) == view
    assert sample.end_ns is not None and sample.end_ns >= sample.sent_ns


def test_deadlines_refuse_a_deadline_that_is_not_positive():
    with pytest.raises(ValueError, match="deadlines must be positive s"):
        Deadlines(idle_s=0.0)
