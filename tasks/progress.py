"""Sweep-point progress as a Prefect progress artifact, so a run started
from the UI or a deployment shows it too: one artifact per point (key
`sweep-progress-<run>-<point>`, lower-case), its progress in percent (0-100) and a
description with the same figures as the terminal view (benchmaker.progress).

    with progress_artifact(run_id, "c4"):
        async with watch_point("c4", ...):
            ...

A distributed point's coordinator does the same with its shards' progress files merged
(`shard_progress`, benchmaker.progress.watch_shards).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact

from benchmaker.progress import ProgressEvent, describe, observe, watch_shards

__all__ = ["ArtifactObserver", "progress_artifact", "shard_progress"]


class ArtifactObserver:
    """An observer (benchmaker.progress) that creates the point's progress artifact on its
    first event and updates it at most every `min_interval_s` s (each update is an API
    call), and always on the last event. Each call gets `deadline_s` s (default 5): a
    lost or slow Prefect server raises TimeoutError, and benchmaker.progress removes
    the observer, so the point never waits on the API more than once (the client's
    own retries against a lost server took a minute a call)."""

    def __init__(self, run_id: str, point: str, min_interval_s: float = 2.0, deadline_s: float = 5.0) -> None:
        self.point = point
        self.deadline_s = deadline_s
        self.key = re.sub(r"[^a-z0-9-]+", "-", f"sweep-progress-{run_id}-{point}".lower())
        self.min_interval_s = min_interval_s
        self.artifact_id: Any = None
        self._last = float("-inf")

    async def __call__(self, ev: ProgressEvent) -> None:
        if not isinstance(ev, ProgressEvent) or ev.point != self.point:
            return
        now = time.monotonic()
        if not ev.finished and now - self._last < self.min_interval_s:
            return
        self._last = now
        pct = round(100.0 * (ev.fraction or 0.0), 1)
        try:
            async with asyncio.timeout(self.deadline_s):
                if self.artifact_id is None:
                    self.artifact_id = await acreate_progress_artifact(pct, key=self.key, description=describe(ev))
                else:
                    await aupdate_progress_artifact(self.artifact_id, pct, description=describe(ev))
        except TimeoutError:
            raise TimeoutError(
                f"the Prefect API did not answer within {self.deadline_s:g} s; no more progress "
                f"artifact updates for {self.point}"
            ) from None


@contextmanager
def progress_artifact(run_id: str, point: str) -> Iterator[ArtifactObserver]:
    """Observe the progress of `point` into a Prefect progress artifact while the block
    runs (inside a task or flow run; outside one the artifact is not linked to a run)."""
    observer = ArtifactObserver(run_id, point)
    with observe(observer):
        yield observer


@asynccontextmanager
async def shard_progress(template: Any, interval_s: float | None = None) -> AsyncIterator[None]:
    """While the block runs (the coordinator waiting for the shards of `template`'s
    point: a benchmaker.sweep.shard.ReplayShardPoint or benchmaker.tasks.shard.ShardPoint, of which `run_dir`,
    `run_id`, `sweep_point`, `exchange` and `shards` are used), the point's progress
    merged from its `template.shards` shards' progress
    files (benchmaker.sweep.shard.read_shard_progress, benchmaker.progress.watch_shards) goes to the
    registered observers (the terminal view) and to the point's Prefect progress
    artifact, as a single-process point's does. Polls every `interval_s` s (default 1,
    2 through an exchange: each poll lists and reads its keys)."""
    from benchmaker.sweep.shard import read_shard_progress

    since = time.time_ns()  # an earlier attempt's straggler (in the exchange) is not this attempt

    def read() -> tuple[int | None, list[ProgressEvent]]:
        attempt, events = read_shard_progress(
            Path(template.run_dir), template.run_id, template.sweep_point, template.exchange
        )
        return (attempt, events) if attempt is not None and attempt >= since else (None, [])

    every = interval_s if interval_s is not None else (2.0 if template.exchange else 1.0)
    with progress_artifact(template.run_id, template.sweep_point):
        async with watch_shards(template.sweep_point, read, shards=template.shards, interval_s=every):
            yield
