"""Live progress of a sweep point: episodes done/total, model calls (turns) done/total,
calls per second, requests in flight, misses so far, elapsed and ETA.

The sweep task wraps a point in `watch_point(...)`: a background asyncio task polls the
point's two live sources every `interval_s` s and hands a `ProgressEvent` to every
registered observer (`observe`):

- the replay server's /stats (`stats`, a callable returning that JSON): model calls
  answered (`served` + misses + refused), requests received, misses so far; requests in
  flight = received - answered;
- the point's `episodes.jsonl` (`episodes_file`), one line per finished episode.

The other long stages (conversion, grading, loading) report StageEvents through
`stage(...)` (start, each unit done, end). Observers are the terminal view
(benchmaker.recipes.display.SweepProgressView, rich, only on a TTY) and the Prefect progress
artifact of each sweep point (benchmaker.tasks.progress). Nothing here imports either; an
observer may be sync or async and a failing observer is logged and dropped, never
allowed to fail the point.

ETA: a replayed call costs more as its context grows (a 453-turn pi session answers
~60 calls/s at its start and ~15/s at its end here), so with the plan's per-call context
sizes (`work`) the ETA prices what is left with a cost model fitted to the point so far
(WorkEstimator: elapsed = a x calls + b x context). Without them, or until it has 3
samples, it is the calls left at the call rate so far (`eta_s`). With `duration_s` the
point ends by time, so the ETA is the time left (episodes in flight then still run to
their end). Before the first call is answered the ETA is unknown (None).

    async with watch_point("c4", stats=handle.stats, episodes_file=pdir / "episodes.jsonl",
                           episodes_total=8, calls_total=3624):
        row = await run_point(...)
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FINISH_S",
    "Observer",
    "ProgressEvent",
    "ProgressWriter",
    "StageEvent",
    "WorkEstimator",
    "describe",
    "emit",
    "emit_sync",
    "eta_s",
    "event_from_json",
    "event_to_json",
    "merge_shard_events",
    "observe",
    "snapshot",
    "stage",
    "watch_engine",
    "watch_point",
    "watch_shards",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """One snapshot of a sweep point in progress.

    ProgressEvent(point="c4", episodes_done=3, episodes_total=8, calls_done=1234,
                  calls_total=3624, requests_in_flight=4, misses=0, elapsed_s=14.5,
                  eta_s=28.1, calls_per_s=85.1, finished=False)
    `episodes_total`/`calls_total` are None when the point runs for a duration;
    `calls_done` counts model calls answered by the replay server (misses included), or
    the requests finished of an engine point (`watch_engine`, whose failed requests are
    `errors`); `eta_s` is None until a call has been answered; `finished` is set on the
    last event.
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
    errors: int = 0

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


FINISH_S = 1.0
"""Seconds a point takes after its last model call (samples from turns, the summary SQL,
the engine summary): ~1 s measured here on a 453-turn pi session point; added to the
work-model ETA."""


@dataclass(frozen=True, slots=True)
class StageEvent:
    """A stage other than a sweep point (convert, grade, load) starting, advancing or
    ending: `done` of `total` units (files, sweep points; None when not counted),
    `elapsed_s` since it started, `finished` on its last event."""

    stage: str
    detail: str
    done: int
    total: int | None
    elapsed_s: float
    finished: bool = False


Observer = Callable[[Any], Awaitable[None] | None]
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


async def emit(event: ProgressEvent, observers: list[Observer] | None = None) -> None:
    """Hand `event` to every observer of `observers` (default: the registered ones),
    awaiting the async ones; an observer that raises is logged and removed from that list."""
    observers = _observers if observers is None else observers
    for obs in list(observers):
        try:
            result = obs(event)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # an observer never fails the measurement
            log.warning("progress observer %r failed and was removed: %s", obs, exc)
            if obs in observers:
                observers.remove(obs)


def describe(ev: ProgressEvent) -> str:
    """One line of a point's figures: episodes and model calls done/planned, calls/s,
    requests in flight, misses, elapsed and ETA (s)."""
    eps = f"{ev.episodes_done}/{ev.episodes_total}" if ev.episodes_total is not None else f"{ev.episodes_done}"
    calls = f"{ev.calls_done}/{ev.calls_total}" if ev.calls_total is not None else f"{ev.calls_done}"
    rate = f"{ev.calls_per_s:.1f}" if ev.calls_per_s is not None else "-"
    eta = "done" if ev.finished else (f"{ev.eta_s:.0f} s" if ev.eta_s is not None else "unknown")
    errors = f", errors {ev.errors}" if ev.errors else ""
    return (
        f"sweep point {ev.point}: episodes {eps}, model calls {calls} ({rate}/s), "
        f"requests in flight {ev.requests_in_flight}, misses {ev.misses}{errors}, "
        f"elapsed {ev.elapsed_s:.0f} s, ETA {eta}"
    )


def emit_sync(event: Any) -> None:
    """Hand `event` to the synchronous observers only (from code outside an event loop,
    e.g. a sync Prefect task in a worker thread); async observers are skipped, not
    called. An observer that raises is logged and removed."""
    for obs in list(_observers):
        if inspect.iscoroutinefunction(obs) or inspect.iscoroutinefunction(type(obs).__call__):
            continue
        try:
            obs(event)
        except Exception as exc:  # an observer never fails the stage
            log.warning("progress observer %r failed and was removed: %s", obs, exc)
            if obs in _observers:
                _observers.remove(obs)


@contextmanager
def stage(
    name: str, detail: str = "", total: int | None = None, clock: Callable[[], float] = time.monotonic
) -> Iterator[Callable[[int], None]]:
    """Report a stage to the synchronous observers: a StageEvent when it starts, one per
    `advance(n)` call (n units more done), and a finished one when the block ends (also
    on an error). Yields `advance`."""
    started = clock()
    done = 0

    def advance(n: int = 1) -> None:
        nonlocal done
        done += n
        emit_sync(StageEvent(name, detail, done, total, clock() - started))

    emit_sync(StageEvent(name, detail, 0, total, 0.0))
    try:
        yield advance
    finally:
        emit_sync(StageEvent(name, detail, done, total, clock() - started, finished=True))


def eta_s(calls_done: int, calls_total: int | None, elapsed_s: float, duration_s: float | None = None) -> float | None:
    """Seconds left: (calls_total - calls_done) / (calls_done / elapsed_s), the call rate
    of the point so far; with `duration_s`, max(0, duration_s - elapsed_s). None when
    nothing is known yet (no call answered, or neither total nor duration)."""
    if duration_s is not None:
        return max(0.0, duration_s - elapsed_s)
    if calls_total is None or calls_done <= 0 or elapsed_s <= 0:
        return None
    return max(0, calls_total - calls_done) / (calls_done / elapsed_s)


class WorkEstimator:
    """The ETA of a point whose calls cost more as their context grows (module docstring).

    `episodes`: per planned episode (in plan order), the context size of each call
    (benchmaker.sweep.plan.planned_work; any unit); `slots`: episodes in flight (None: all). The
    work done so far is estimated from the calls answered and the episodes finished:
    finished episodes are the first ones of the plan, the other answered calls are
    spread evenly over the next `slots` episodes. Each `observe(elapsed_s, calls_done,
    episodes_done)` adds a sample; the cost model elapsed = a x calls + b x context (a,
    b >= 0, least squares over the samples since the first, which absorbs the start-up)
    then prices what is left: a x calls left + b x context left."""

    def __init__(self, episodes: Sequence[Sequence[float]], slots: int | None = None) -> None:
        self.episodes = [list(e) for e in episodes]
        self.slots = max(1, min(slots or len(self.episodes), len(self.episodes) or 1))
        self.cum = [[0.0, *itertools.accumulate(e)] for e in self.episodes]
        self.total_calls = sum(len(e) for e in self.episodes)
        self.total_units = sum(c[-1] for c in self.cum)
        self.samples: list[tuple[float, float, float]] = []

    def units_done(self, calls_done: int, episodes_done: int) -> float:
        """Context units of the calls answered so far (the spreading rule above)."""
        done = min(episodes_done, len(self.episodes))
        units = sum(c[-1] for c in self.cum[:done])
        rest = max(0, calls_done - sum(len(e) for e in self.episodes[:done]))
        live = list(range(done, min(len(self.episodes), done + self.slots)))
        if not live or rest <= 0:
            return units
        k = rest / len(live)
        for e in live:
            cum = self.cum[e]
            j = min(int(k), len(cum) - 1)
            frac = k - j if j + 1 < len(cum) else 0.0
            units += cum[j] + (cum[j + 1] - cum[j]) * frac if j + 1 < len(cum) else cum[-1]
        return units

    def observe(self, elapsed_s: float, calls_done: int, episodes_done: int) -> float | None:
        """Add a sample; the seconds left, or None while fewer than 3 samples with calls."""
        if calls_done <= 0:
            return None
        u = self.units_done(calls_done, episodes_done)
        if not self.samples or self.samples[-1][1] != calls_done:
            self.samples.append((elapsed_s, float(calls_done), u))
        if len(self.samples) < 3:
            return None
        t0, n0, u0 = self.samples[0]
        rows = [(t - t0, n - n0, v - u0) for t, n, v in self.samples[1:]]
        a, b = _fit_nonnegative(rows)
        left = a * max(0.0, self.total_calls - calls_done) + b * max(0.0, self.total_units - u)
        return left


def _fit_nonnegative(rows: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """Least squares t = a x + b y through the origin with a, b >= 0 (the better
    one-term fit when the two-term solution has a negative coefficient)."""
    sxx = sum(x * x for _, x, _ in rows)
    syy = sum(y * y for _, _, y in rows)
    sxy = sum(x * y for _, x, y in rows)
    stx = sum(t * x for t, x, _ in rows)
    sty = sum(t * y for t, _, y in rows)
    det = sxx * syy - sxy * sxy
    if det > 1e-12 * max(1.0, sxx * syy):
        a, b = (stx * syy - sty * sxy) / det, (sty * sxx - stx * sxy) / det
        if a >= 0 and b >= 0:
            return a, b

    def sse(a: float, b: float) -> float:
        return sum((t - a * x - b * y) ** 2 for t, x, y in rows)

    only_a = (stx / sxx if sxx > 0 else 0.0, 0.0)
    only_b = (0.0, sty / syy if syy > 0 else 0.0)
    return min(only_a, only_b, key=lambda ab: sse(*ab))


@asynccontextmanager
async def _polling(
    tick: Callable[[bool], Awaitable[None]], interval_s: float, sink: Observer | None = None
) -> AsyncIterator[None]:
    """Await `tick(False)` every `interval_s` s while the block runs, then `tick(True)`
    once after it (the watchers' one poll loop); nothing when no observer is registered
    and there is no `sink`."""
    if not _observers and sink is None:
        yield
        return

    async def loop() -> None:
        while True:
            await tick(False)
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
        await tick(True)


@asynccontextmanager
async def watch_engine(
    point: str,
    live: Any,
    *,
    calls_total: int | None,
    duration_s: float | None,
    interval_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sink: Observer | None = None,
) -> AsyncIterator[None]:
    """Progress of an engine sweep point (llm-sweep) from its runner's live counters
    (`benchmaker.engine.runner.LiveStats`: finished, in_flight, errors), emitted like
    `watch_point`'s events: requests finished of `calls_total` (max_requests) or the
    time left of `duration_s`, requests in flight, errors. Does nothing when no
    observer is registered; with `sink` (a shard's ProgressWriter), the events go to
    it alone, as for watch_point."""
    targets = None if sink is None else [sink]
    started = clock()

    def event(finished: bool = False) -> ProgressEvent:
        elapsed = clock() - started
        done = int(live.finished)
        return ProgressEvent(
            point=point,
            episodes_done=0,
            episodes_total=None,
            calls_done=done,
            calls_total=calls_total,
            requests_in_flight=int(live.in_flight),
            misses=0,
            elapsed_s=elapsed,
            eta_s=0.0 if finished else eta_s(done, calls_total, elapsed, duration_s),
            calls_per_s=done / elapsed if elapsed > 0 and done else None,
            finished=finished,
            duration_s=duration_s,
            errors=int(live.errors),
        )

    async with _polling(lambda finished: emit(event(finished), targets), interval_s, sink):
        yield


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 16), b""))
    except OSError:
        return 0


def snapshot(
    point: str,
    stats: dict[str, Any] | None,
    episodes_done: int,
    episodes_total: int | None,
    calls_total: int | None,
    elapsed_s: float,
    duration_s: float | None = None,
    finished: bool = False,
) -> ProgressEvent:
    """The ProgressEvent of a point from the replay server's /stats JSON (None: not
    read yet) and the finished episodes counted in its episodes file."""
    stats = stats or {}
    misses = int((stats.get("misses") or {}).get("total") or 0)
    answered = (
        int(stats.get("served") or 0)
        + misses
        + int(stats.get("bad_requests") or 0)
        + int(stats.get("unauthorized") or 0)
    )
    in_flight = max(0, int(stats.get("requests") or 0) - answered)
    rate = answered / elapsed_s if elapsed_s > 0 and answered else None
    return ProgressEvent(
        point=point,
        episodes_done=episodes_done,
        episodes_total=episodes_total,
        calls_done=answered,
        calls_total=calls_total,
        requests_in_flight=in_flight,
        misses=misses,
        elapsed_s=elapsed_s,
        eta_s=0.0 if finished else eta_s(answered, calls_total, elapsed_s, duration_s),
        calls_per_s=rate,
        finished=finished,
        duration_s=duration_s,
    )


@asynccontextmanager
async def watch_point(
    point: str,
    *,
    stats: Callable[[], dict[str, Any]],
    episodes_file: Path,
    episodes_total: int | None,
    calls_total: int | None,
    duration_s: float | None = None,
    work: Sequence[Sequence[float]] | None = None,
    slots: int | None = None,
    interval_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sink: Observer | None = None,
) -> AsyncIterator[None]:
    """Poll the point's live sources (module docstring) every `interval_s` s while the
    block runs and emit a ProgressEvent each time, then a last one with finished=True.
    With `sink` (e.g. a ProgressWriter: a shard's progress file), the events go to it
    alone, not to the registered observers, whether or not any is registered.
    `stats` is called in a thread (it is blocking HTTP); its errors skip that poll.
    With `work` (per planned episode, the context size of each call: benchmaker.sweep.plan.
    planned_work) and `slots` (episodes in flight), the ETA comes from WorkEstimator
    once it has 3 samples; FINISH_S (s) is added for the point's own summary after its
    last call. Does nothing when no observer is registered (and no `sink`)."""
    targets = None if sink is None else [sink]
    started = clock()
    last: dict[str, Any] | None = None
    estimator = WorkEstimator(work, slots) if work and duration_s is None else None

    async def poll(finished: bool = False) -> None:
        nonlocal last
        try:
            last = await asyncio.to_thread(stats)
        except Exception:  # the server may be between restarts: keep the last figures
            pass
        ev = snapshot(
            point,
            last,
            _count_lines(episodes_file),
            episodes_total,
            calls_total,
            clock() - started,
            duration_s,
            finished,
        )
        if estimator is not None and not finished:
            left = estimator.observe(ev.elapsed_s, ev.calls_done, ev.episodes_done)
            if left is not None:
                ev = dataclasses.replace(ev, eta_s=left + FINISH_S)
        await emit(ev, targets)

    async with _polling(poll, interval_s, sink):
        yield


# --- a distributed point (benchmaker.sweep.shard): its shards' progress, merged -------


def event_to_json(ev: ProgressEvent) -> bytes:
    """The event as one JSON object (its fields by name)."""
    import orjson

    return orjson.dumps(dataclasses.asdict(ev))


def event_from_json(data: bytes) -> ProgressEvent:
    """The ProgressEvent of event_to_json's JSON (fields it does not know are ignored).
    Raises ValueError for JSON that is not such an object."""
    import orjson

    try:
        raw = orjson.loads(data)
        names = {f.name for f in dataclasses.fields(ProgressEvent)}
        return ProgressEvent(**{k: v for k, v in raw.items() if k in names})
    except (TypeError, AttributeError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a progress event: {exc}") from None


class ProgressWriter:
    """A watch_point sink that hands each event, as JSON (event_to_json), to `put` (a
    blocking write: a file, an exchange key), in a thread, at most every
    `min_interval_s` s, and always the finished one."""

    def __init__(
        self, put: Callable[[bytes], None], min_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.put = put
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._last = float("-inf")

    async def __call__(self, ev: ProgressEvent) -> None:
        now = self.clock()
        if not ev.finished and now - self._last < self.min_interval_s:
            return
        self._last = now
        await asyncio.to_thread(self.put, event_to_json(ev))


def merge_shard_events(point: str, events: Sequence[ProgressEvent], shards: int, elapsed_s: float) -> ProgressEvent:
    """One ProgressEvent of the point from the latest events of its shards (`events`,
    one per shard that reported, of `shards`): episodes, calls, requests in flight,
    misses and errors summed; the planned totals summed once every shard reported them
    (else None); calls/s = calls done / `elapsed_s` (the point's time since its shared
    start); ETA the longest of the shards' ETAs (None while a shard that has not
    finished has none, or a shard has not reported); finished when every shard has."""
    reported = len(events) == shards
    done = sum(e.calls_done for e in events)

    def total(values: list[int | None]) -> int | None:
        return sum(v for v in values if v is not None) if reported and None not in values else None

    finished = reported and all(e.finished for e in events)
    etas = [e.eta_s for e in events if not e.finished]
    known = [e for e in etas if e is not None]
    eta = 0.0 if finished else (max(known) if reported and etas and len(known) == len(etas) else None)
    durations = [e.duration_s for e in events if e.duration_s is not None]
    return ProgressEvent(
        point=point,
        episodes_done=sum(e.episodes_done for e in events),
        episodes_total=total([e.episodes_total for e in events]),
        calls_done=done,
        calls_total=total([e.calls_total for e in events]),
        requests_in_flight=sum(e.requests_in_flight for e in events),
        misses=sum(e.misses for e in events),
        elapsed_s=elapsed_s,
        eta_s=eta,
        calls_per_s=done / elapsed_s if elapsed_s > 0 and done else None,
        finished=finished,
        duration_s=max(durations) if durations else None,
        errors=sum(e.errors for e in events),
    )


ShardReader = Callable[[], "tuple[int | None, list[ProgressEvent]]"]
"""Reads a distributed point's progress: (the attempt's shared start in wall-clock ns, None
when no shard has reported yet; the latest event of each shard that has reported)."""


@asynccontextmanager
async def watch_shards(
    point: str, read: ShardReader, *, shards: int, interval_s: float = 1.0, wall_ns: Callable[[], int] = time.time_ns
) -> AsyncIterator[None]:
    """While the block runs (the coordinator waiting for a distributed point's shards),
    call `read` (in a thread) every `interval_s` s and emit the merged event of the
    point's `shards` shards (merge_shard_events; elapsed since the shared start, 0
    before it) to the registered observers, then a last one after the block, finished.
    A failing `read` skips that poll. Does nothing when no observer is registered."""

    async def tick(finished: bool) -> None:
        try:
            start_ns, events = await asyncio.to_thread(read)
        except Exception as exc:  # the storage may hiccup: the next poll tries again
            log.debug("shard progress of %s not read: %s", point, exc)
            return
        elapsed = max(0.0, (wall_ns() - start_ns) / 1e9) if start_ns is not None else 0.0
        ev = merge_shard_events(point, events, shards, elapsed)
        if finished and not ev.finished:
            ev = dataclasses.replace(ev, finished=True, eta_s=0.0)
        await emit(ev)

    async with _polling(tick, interval_s):
        yield
