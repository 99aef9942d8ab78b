"""Live progress of a sweep point: episodes done/total, model calls (turns) done/total,
calls per second, requests in flight, misses so far, elapsed and ETA (issue #15 item 2).

The sweep task wraps a point in `watch_point(...)`: a background asyncio task polls the
point's two live sources every `interval_s` s and hands a `ProgressEvent` to every
registered observer (`observe`):

- the replay server's /stats (`stats`, a callable returning that JSON): model calls
  answered (`served` + misses + refused), requests received, misses so far; requests in
  flight = received - answered;
- the point's `episodes.jsonl` (`episodes_file`), one line per finished episode.

Observers are the terminal view (recipes.display.SweepProgressView, rich, only on a TTY)
and the Prefect progress artifact (tasks.progress). Nothing here imports either; an
observer may be sync or async and a failing observer is logged and dropped, never
allowed to fail the point.

ETA: the point's planned model calls (one per recorded turn of every planned episode)
minus those answered, divided by the call rate measured so far in this point
(calls answered / elapsed). With `duration_s` the point ends by time, so the ETA is
the time left (episodes in flight then still run to their end). Before the first call
is answered the ETA is unknown (None).

    async with watch_point("c4", stats=handle.stats, episodes_file=pdir / "episodes.jsonl",
                           episodes_total=8, calls_total=3624):
        row = await run_point(...)
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Observer", "ProgressEvent", "describe", "emit", "eta_s", "observe", "snapshot", "watch_point"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """One snapshot of a sweep point in progress.

    ProgressEvent(point="c4", episodes_done=3, episodes_total=8, calls_done=1234,
                  calls_total=3624, requests_in_flight=4, misses=0, elapsed_s=14.5,
                  eta_s=28.1, calls_per_s=85.1, finished=False)
    `episodes_total`/`calls_total` are None when the point runs for a duration;
    `calls_done` counts model calls answered by the replay server (misses included);
    `eta_s` is None until a call has been answered; `finished` is set on the last event.
    """

    point: str
    episodes_done: int
    episodes_total: int | None
    calls_done: int
    calls_total: int | None
    requests_in_flight: int
    misses: int
    elapsed_s: float
    eta_s: float | None
    calls_per_s: float | None
    finished: bool = False
    duration_s: float | None = None

    @property
    def fraction(self) -> float | None:
        """Done fraction in 0..1: calls done / calls planned, or elapsed / duration."""
        if self.finished:
            return 1.0
        if self.calls_total:
            return min(1.0, self.calls_done / self.calls_total)
        if self.duration_s:
            return min(1.0, self.elapsed_s / self.duration_s)
        return None


Observer = Callable[[ProgressEvent], Awaitable[None] | None]
_observers: list[Observer] = []


@contextmanager
def observe(observer: Observer) -> Iterator[Observer]:
    """Register `observer` for every ProgressEvent of this process while the block runs."""
    _observers.append(observer)
    try:
        yield observer
    finally:
        if observer in _observers:
            _observers.remove(observer)


async def emit(event: ProgressEvent) -> None:
    """Hand `event` to every observer (awaiting the async ones); an observer that raises
    is logged and removed."""
    for obs in list(_observers):
        try:
            result = obs(event)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # an observer never fails the measurement
            log.warning("progress observer %r failed and was removed: %s", obs, exc)
            if obs in _observers:
                _observers.remove(obs)


def describe(ev: ProgressEvent) -> str:
    """One line of a point's figures: episodes and model calls done/planned, calls/s,
    requests in flight, misses, elapsed and ETA (s)."""
    eps = f"{ev.episodes_done}/{ev.episodes_total}" if ev.episodes_total is not None else f"{ev.episodes_done}"
    calls = f"{ev.calls_done}/{ev.calls_total}" if ev.calls_total is not None else f"{ev.calls_done}"
    rate = f"{ev.calls_per_s:.1f}" if ev.calls_per_s is not None else "-"
    eta = "done" if ev.finished else (f"{ev.eta_s:.0f} s" if ev.eta_s is not None else "unknown")
    return (f"sweep point {ev.point}: episodes {eps}, model calls {calls} ({rate}/s), "
            f"requests in flight {ev.requests_in_flight}, misses {ev.misses}, "
            f"elapsed {ev.elapsed_s:.0f} s, ETA {eta}")


def eta_s(calls_done: int, calls_total: int | None, elapsed_s: float, duration_s: float | None = None) -> float | None:
    """Seconds left: (calls_total - calls_done) / (calls_done / elapsed_s), the call rate
    of the point so far; with `duration_s`, max(0, duration_s - elapsed_s). None when
    nothing is known yet (no call answered, or neither total nor duration)."""
    if duration_s is not None:
        return max(0.0, duration_s - elapsed_s)
    if calls_total is None or calls_done <= 0 or elapsed_s <= 0:
        return None
    return max(0, calls_total - calls_done) / (calls_done / elapsed_s)


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 16), b""))
    except OSError:
        return 0


def snapshot(point: str, stats: dict[str, Any] | None, episodes_done: int, episodes_total: int | None,
             calls_total: int | None, elapsed_s: float, duration_s: float | None = None,
             finished: bool = False) -> ProgressEvent:
    """The ProgressEvent of a point from the replay server's /stats JSON (None: not
    read yet) and the finished episodes counted in its episodes file."""
    stats = stats or {}
    misses = int((stats.get("misses") or {}).get("total") or 0)
    answered = int(stats.get("served") or 0) + misses + int(stats.get("bad_requests") or 0) \
        + int(stats.get("unauthorized") or 0)
    in_flight = max(0, int(stats.get("requests") or 0) - answered)
    rate = answered / elapsed_s if elapsed_s > 0 and answered else None
    return ProgressEvent(
        point=point, episodes_done=episodes_done, episodes_total=episodes_total, calls_done=answered,
        calls_total=calls_total, requests_in_flight=in_flight, misses=misses, elapsed_s=elapsed_s,
        eta_s=0.0 if finished else eta_s(answered, calls_total, elapsed_s, duration_s), calls_per_s=rate,
        finished=finished, duration_s=duration_s,
    )


@asynccontextmanager
async def watch_point(point: str, *, stats: Callable[[], dict[str, Any]], episodes_file: Path,
                      episodes_total: int | None, calls_total: int | None, duration_s: float | None = None,
                      interval_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> AsyncIterator[None]:
    """Poll the point's live sources (module docstring) every `interval_s` s while the
    block runs and emit a ProgressEvent each time, then a last one with finished=True.
    `stats` is called in a thread (it is blocking HTTP); its errors skip that poll.
    Does nothing when no observer is registered."""
    if not _observers:
        yield
        return
    started = clock()
    last: dict[str, Any] | None = None

    async def poll(finished: bool = False) -> None:
        nonlocal last
        try:
            last = await asyncio.to_thread(stats)
        except Exception:  # the server may be between restarts: keep the last figures
            pass
        await emit(snapshot(point, last, _count_lines(episodes_file), episodes_total, calls_total,
                            clock() - started, duration_s, finished))

    async def loop() -> None:
        while True:
            await poll()
            await asyncio.sleep(interval_s)

    poller = asyncio.create_task(loop())
    try:
        yield
    finally:
        poller.cancel()
        try:
            await poller
        except asyncio.CancelledError:
            pass
        await poll(finished=True)
