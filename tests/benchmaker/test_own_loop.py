"""benchmaker.engine.runner.run_on_own_loop: a measurement awaited from a busy event loop runs on
a loop (and thread) of its own, returns or raises as awaited directly, and is cancelled
with its caller."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from benchmaker.engine.runner import run_on_fresh_loop, run_on_own_loop


async def test_returns_the_result_from_another_thread_and_loop() -> None:
    outer = asyncio.get_running_loop()

    async def where() -> tuple[int, bool]:
        return threading.get_ident(), asyncio.get_running_loop() is outer

    ident, same_loop = await run_on_own_loop(where())
    assert ident != threading.get_ident() and not same_loop


async def test_exceptions_propagate() -> None:
    async def fail() -> None:
        raise ValueError("bad point")

    with pytest.raises(ValueError, match="bad point"):
        await run_on_own_loop(fail())


async def test_a_blocked_caller_loop_does_not_delay_the_measurement() -> None:
    """The caller's loop stays blocked (as a slow Prefect callback would block it) until
    the measurement's loop has woken from three 10 ms sleeps, or 10 s. On a shared loop no
    wake-up could happen inside the block however quiet the host; on its own loop three
    do however busy the host, and the block ends as soon as they have."""
    wakeups: list[float] = []
    done = threading.Event()

    async def measure() -> None:
        while not done.is_set():
            await asyncio.sleep(0.01)
            wakeups.append(time.perf_counter())

    task = asyncio.ensure_future(run_on_own_loop(measure()))
    await asyncio.sleep(0.05)
    block_start = time.perf_counter()
    seen = len(wakeups)
    while len(wakeups) < seen + 3 and time.perf_counter() - block_start < 10:
        time.sleep(0.01)  # blocks the caller's loop, releasing the GIL as a blocking call does
    woke_during_block = len(wakeups) - seen
    done.set()
    await task
    assert woke_during_block >= 3, woke_during_block


async def test_cancelling_the_caller_cancels_the_measurement_and_waits_for_it() -> None:
    events: list[str] = []

    async def measure() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # e.g. writing a partial bundle
            events.append("cancelled and cleaned up")
            raise

    task = asyncio.ensure_future(run_on_own_loop(measure()))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == ["cancelled and cleaned up"]  # finished before the caller saw CancelledError


async def test_cancelled_before_its_loop_started_still_stops_it() -> None:
    events: list[str] = []

    async def measure() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    task = asyncio.ensure_future(run_on_own_loop(measure()))
    await asyncio.sleep(0)  # the thread may not have started the loop yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert events == ["cancelled"]


class _CountedRepr:
    reprs = 0

    def __repr__(self) -> str:
        _CountedRepr.reprs += 1
        return "counted"


def test_a_fresh_loop_never_reprs_the_result() -> None:
    """asyncio.run / uvloop.run in the main thread format the finished main task (its
    result included) when they put the SIGINT handler back (Python 3.11): the result
    comes back from a box with a constant repr, so a large result costs nothing there."""
    assert threading.current_thread() is threading.main_thread()

    async def main() -> _CountedRepr:
        return _CountedRepr()

    _CountedRepr.reprs = 0
    result = run_on_fresh_loop(main())
    assert type(result) is _CountedRepr and _CountedRepr.reprs == 0
    with pytest.raises(ValueError, match="inner"):
        run_on_fresh_loop(_raises())


async def _raises() -> None:
    raise ValueError("inner")
