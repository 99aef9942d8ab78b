"""One start instant for shards on several hosts (issue #8 item 3; DESIGN §5, §9).

    start_wall_ns = time.time_ns() + 30_000_000_000      # orchestrator: 30 s from now
    ...                                                  # on each load host:
    start_at_ns = start_at_ns_from_wall(start_wall_ns)   # that instant on perf_counter_ns
    check_lead(start_at_ns, "shard 1/2 of c8")           # ShardLate when < 1 s is left
    await sleep_until(start_at_ns)
    clock = measure_clock_offset(shared_dir)             # this host's wall clock vs storage

The shared start travels as WALL-CLOCK ns since the epoch; each host converts it once to
its own monotonic clock (time.perf_counter_ns is CLOCK_MONOTONIC on Linux) and stamps
every sample and episode on that clock, so no duration ever spans two hosts. How far
apart the hosts' wall clocks are is measured, not assumed: each shard stores
`measure_clock_offset` (its wall clock against the clock of the storage every host
writes to) with its report, so hosts whose `wall_offset_ns` differ by D started about
D apart in real time.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = [
    "LATE_START_LIMIT_MS",
    "MIN_START_LEAD_S",
    "ShardLate",
    "check_lead",
    "measure_clock_offset",
    "sleep_until",
    "start_at_ns_from_wall",
]

# A shard refuses to start when less than this is left before the shared start: it
# still has to build its manifest and open its transport (~0.1-0.5 s here), or start
# its replay server.
MIN_START_LEAD_S = 1.0
# A shard whose t0 (by its own wall clock) is later than the shared start by more than
# this makes the point's verdict invalid (its open-loop arrivals would have bunched,
# its closed-loop episodes started after the others').
LATE_START_LIMIT_MS = 50.0


class ShardLate(RuntimeError):
    """The shard began after (or too close to) the shared start time; raise the
    sweep's `start_lead_s` (work-pool pickup + process start must fit in it)."""


def start_at_ns_from_wall(start_wall_ns: int) -> int:
    """The shared start `start_wall_ns` (ns since the epoch, this host's wall clock) on
    this host's perf_counter_ns (CLOCK_MONOTONIC) clock."""
    return time.perf_counter_ns() + (start_wall_ns - time.time_ns())


def check_lead(start_at_ns: int, what: str, min_lead_s: float = MIN_START_LEAD_S) -> float:
    """Seconds left before `start_at_ns` (perf_counter_ns). Raises ShardLate naming
    `what` when fewer than `min_lead_s` are left (nothing should be sent then)."""
    left_s = (start_at_ns - time.perf_counter_ns()) / 1e9
    if left_s < min_lead_s:
        raise ShardLate(f"{what}: {left_s:.2f} s left before the shared start (need >= {min_lead_s:g} s); "
                        f"raise start_lead_s")
    return left_s


async def sleep_until(start_at_ns: int) -> int:
    """Sleep until perf_counter_ns() >= `start_at_ns`: asyncio.sleep to 2 ms before it,
    then short sleeps (the loop's timer can wake a tick early). Returns how late the
    wake-up was, in ns (>= 0)."""
    while True:
        left = start_at_ns - time.perf_counter_ns()
        if left <= 0:
            return -left
        await asyncio.sleep(max(left - 2_000_000, 0) / 1e9 if left > 2_000_000 else 0.0002)


def measure_clock_offset(directory: Path) -> dict[str, Any]:
    """This host's wall clock against the clock of the storage holding `directory`:
    writes a probe file and compares the mtime the storage stamped (the file server's
    clock on NFS; this kernel's coarse clock, one tick <= 4 ms, on a local disk) with
    the local wall clock around the write. Returns {"reference": "storage mtime",
    "wall_offset_ns": local midpoint - mtime (positive: this host is ahead),
    "bracket_ns": the write's duration (the measure's uncertainty, plus one tick),
    "hostname"}. Raises OSError when the directory is not writable."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".clock-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    before = time.time_ns()
    with open(probe, "wb") as fh:
        fh.write(b"x")
    after = time.time_ns()
    mtime = probe.stat().st_mtime_ns
    probe.unlink()
    return {"reference": "storage mtime", "wall_offset_ns": (before + after) // 2 - mtime,
            "bracket_ns": after - before, "hostname": socket.gethostname()}
