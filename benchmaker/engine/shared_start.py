"""One start instant for shards on several hosts (docs/several-machines.md).

    earliest_wall_ns = time.time_ns() + 30_000_000_000   # orchestrator: not before 30 s from now
    ...                                                  # on each load host, once it can send:
    board = ReadyBoard.in_dir(attempt_dir)               # or ReadyBoard.in_exchange(ex, key)
    shared = await await_shared_start(board, worker=k, shards=N, earliest_wall_ns=earliest_wall_ns,
                                      timeout_s=300.0, what="shard 1/2 of c8")
    start_at_ns = start_at_ns_from_wall(shared.start_wall_ns)   # on perf_counter_ns
    check_lead(start_at_ns, "shard 1/2 of c8", min_lead_s=0.0)  # ShardLate when already past
    await sleep_until(start_at_ns)
    clock = measure_clock_offset(shared_dir)             # this host's wall clock vs storage

The readiness barrier: the orchestrator fixes only the EARLIEST start
(`earliest_wall_ns`, the sweep's `start_lead_s` after the submission; the attempt's id,
`start_wall_ns` in a shard point). Each shard, once it is ready to send (its transport
open and workload built, or its replay server up), writes a ready record
`ready-w<k>.json` = {"worker", "shards", "attempt" (the earliest start), "ready_wall_ns"
(its wall clock at the write), "hostname", "pid"} into the attempt's shared directory
(the one its reports go to: a mounted path, or the exchange's attempt key, any fsspec
URL), then polls that directory until it holds the records of all N shards. The shared
start is then

    start_wall_ns = max(earliest_wall_ns, max(ready_wall_ns of the N shards) + margin)

(`shared_start_of`, margin MIN_START_LEAD_S), which every shard computes from the same
N records, so they agree without a coordinator round trip, and a slow pickup (a busy
host, a work pool's polling) delays the point instead of failing it. The margin covers
the other shards' next poll and the storage's visibility lag. The wait is bounded: a
shard still missing `timeout_s` after the earliest start makes every waiting shard
raise ShardsNotReady naming it (nothing is sent; the point is invalid with that
reason). A shard that sees the last record only after the computed start raises
ShardLate (check_lead), and the merge still marks a shard whose t0 is more than
LATE_START_LIMIT_MS after the shared start.

The shared start travels as WALL-CLOCK ns since the epoch; each host converts it once to
its own monotonic clock (time.perf_counter_ns is CLOCK_MONOTONIC on Linux) and stamps
every sample and episode on that clock, so no duration ever spans two hosts. How far
apart the hosts' wall clocks are is measured, not assumed: each shard stores
`measure_clock_offset` (its wall clock against the clock of the storage every host
writes to) with its report, so hosts whose `wall_offset_ns` differ by D started about
D apart in real time (the barrier's max of ready times is taken on the hosts' own
wall clocks: an offset D shifts that host's start by D, which the report shows).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "DEFAULT_READY_TIMEOUT_S",
    "LATE_START_LIMIT_MS",
    "MIN_START_LEAD_S",
    "ReadyBoard",
    "ShardLate",
    "ShardsNotReady",
    "SharedStart",
    "StartBarrier",
    "await_shared_start",
    "check_lead",
    "measure_clock_offset",
    "post_ready",
    "ready_name",
    "shared_start_of",
    "sleep_until",
    "start_at_ns_from_wall",
]

# The barrier's margin: the shared start is this long after the last shard's ready
# record, s. It covers the other shards' next poll (READY_POLL_S, or the exchange's)
# and the storage making the record visible to them, on a busy host too.
MIN_START_LEAD_S = 1.0
# How long after the earliest start the shards wait for each other's ready records
# when the point states no ready timeout, s (a work pool's pickup on a busy host).
DEFAULT_READY_TIMEOUT_S = 300.0
# How often a waiting shard reads the ready records: on a mounted directory, through
# an exchange (each poll lists and reads keys there), s.
READY_POLL_S = 0.05
READY_POLL_EXCHANGE_S = 0.25
# A shard whose t0 (by its own wall clock) is later than the shared start by more than
# this makes the point's verdict invalid (its open-loop arrivals would have bunched,
# its closed-loop episodes started after the others').
LATE_START_LIMIT_MS = 50.0


class ShardLate(RuntimeError):
    """The shard began after (or too close to) the shared start time."""


class ShardsNotReady(RuntimeError):
    """Not every shard of the point wrote its ready record within the ready timeout
    (await_shared_start); the message names the missing shards."""


def start_at_ns_from_wall(start_wall_ns: int) -> int:
    """The shared start `start_wall_ns` (ns since the epoch, this host's wall clock) on
    this host's perf_counter_ns (CLOCK_MONOTONIC) clock."""
    return time.perf_counter_ns() + (start_wall_ns - time.time_ns())


def check_lead(start_at_ns: int, what: str, min_lead_s: float = MIN_START_LEAD_S) -> float:
    """Seconds left before `start_at_ns` (perf_counter_ns). Raises ShardLate naming
    `what` when fewer than `min_lead_s` are left (nothing should be sent then)."""
    left_s = (start_at_ns - time.perf_counter_ns()) / 1e9
    if left_s < min_lead_s:
        raise ShardLate(f"{what}: {left_s:.2f} s left before the shared start (need >= {min_lead_s:g} s)")
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
    return {
        "reference": "storage mtime",
        "wall_offset_ns": (before + after) // 2 - mtime,
        "bracket_ns": after - before,
        "hostname": socket.gethostname(),
    }


def ready_name(worker: int) -> str:
    """The file name (key) of shard `worker`'s ready record in the attempt's directory."""
    return f"ready-w{worker}.json"


_READY_FILE = re.compile(r"ready-w(\d+)\.json$")


@dataclass(frozen=True)
class ReadyBoard:
    """Where the shards of one attempt of a point leave their ready records:
    `put(name, data)` writes one record (whole, replacing it), `read()` returns every
    ready record there as {name: bytes}; `poll_s` is how often a waiting shard reads."""

    put: Callable[[str, bytes], None]
    read: Callable[[], dict[str, bytes]]
    poll_s: float = READY_POLL_S

    @classmethod
    def in_dir(cls, directory: Path) -> ReadyBoard:
        """Records as files in `directory` (a path every host mounts; created when
        missing), each written to a temporary name and renamed, so a reader never sees
        half a record."""
        directory = Path(directory)

        def put(name: str, data: bytes) -> None:
            directory.mkdir(parents=True, exist_ok=True)
            tmp = directory / f".{name}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, directory / name)

        def read() -> dict[str, bytes]:
            out = {}
            for path in directory.glob("ready-w*.json"):
                try:
                    out[path.name] = path.read_bytes()
                except OSError:
                    continue
            return out

        return cls(put, read, READY_POLL_S)

    @classmethod
    def in_exchange(cls, exchange: Any, key: str) -> ReadyBoard:
        """Records under `key` of a benchmaker.engine.exchange.Exchange (any fsspec URL):
        written with Exchange.put_bytes, read with Exchange.read_glob."""
        key = key.strip("/")

        def read() -> dict[str, bytes]:
            return {k.rsplit("/", 1)[-1]: v for k, v in exchange.read_glob(f"{key}/ready-w*.json").items()}

        return cls(lambda name, data: exchange.put_bytes(f"{key}/{name}", data), read, READY_POLL_EXCHANGE_S)


@dataclass(frozen=True)
class SharedStart:
    """The barrier's outcome: `start_wall_ns` (the shared start, wall-clock ns),
    `earliest_wall_ns` (the configured earliest start, the attempt), `ready_wall_ns`
    (every shard's ready time, by worker) and `waited_ns` (how long this shard waited
    for the others' records, by its wall clock)."""

    start_wall_ns: int
    earliest_wall_ns: int
    ready_wall_ns: tuple[int, ...]
    waited_ns: int

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (a shard's report)."""
        return {
            "start_wall_ns": self.start_wall_ns,
            "earliest_wall_ns": self.earliest_wall_ns,
            "ready_wall_ns": list(self.ready_wall_ns),
            "waited_ns": self.waited_ns,
        }


def shared_start_of(
    ready_wall_ns: list[int] | tuple[int, ...], earliest_wall_ns: int, margin_s: float = MIN_START_LEAD_S
) -> int:
    """The shared start (wall-clock ns) of shards ready at `ready_wall_ns` (ns since the
    epoch): max(`earliest_wall_ns`, max(ready) + `margin_s`). Raises ValueError for no
    ready time."""
    if not ready_wall_ns:
        raise ValueError("ready_wall_ns: expected at least one shard's ready time (got none)")
    return max(earliest_wall_ns, max(ready_wall_ns) + round(margin_s * 1e9))


def post_ready(
    board: ReadyBoard, worker: int, shards: int, earliest_wall_ns: int, wall_ns: Callable[[], int] = time.time_ns
) -> int:
    """Write shard `worker` of `shards`'s ready record for the attempt `earliest_wall_ns`
    on `board` (module docstring); returns its `ready_wall_ns` (`wall_ns()` at the
    write). Raises what the storage raises (OSError, the fsspec backend's errors)."""
    ready = wall_ns()
    board.put(
        ready_name(worker),
        orjson.dumps(
            {
                "worker": worker,
                "shards": shards,
                "attempt": earliest_wall_ns,
                "ready_wall_ns": ready,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
            }
        ),
    )
    return ready


def _ready_times(found: dict[str, bytes], shards: int, attempt: int) -> dict[int, int]:
    """{worker: ready_wall_ns} of the well-formed records of this attempt in `found`; a
    record being written, of another attempt or of another shard count is left out."""
    out = {}
    for name, data in found.items():
        m = _READY_FILE.search(name)
        if m is None:
            continue
        try:
            rec = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if (
            isinstance(rec, dict)
            and rec.get("attempt") == attempt
            and rec.get("shards") == shards
            and rec.get("worker") == int(m.group(1))
            and isinstance(rec.get("ready_wall_ns"), int)
        ):
            out[rec["worker"]] = rec["ready_wall_ns"]
    return out


async def await_shared_start(
    board: ReadyBoard,
    *,
    worker: int,
    shards: int,
    earliest_wall_ns: int,
    timeout_s: float,
    what: str,
    margin_s: float = MIN_START_LEAD_S,
    wall_ns: Callable[[], int] = time.time_ns,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> SharedStart:
    """The readiness barrier (module docstring): post this shard's ready record on
    `board`, then read the board every `board.poll_s` s until it holds the records of
    all `shards` shards of the attempt `earliest_wall_ns`, and return the shared start
    (shared_start_of with `margin_s`). `wall_ns` / `sleep` are the wall clock (ns) and
    the sleep (s) used (injectable for tests); the board is read in a thread.

    Raises ShardsNotReady (message: `what`, the missing shards, the timeout) when a
    shard's record is still missing `timeout_s` s after `earliest_wall_ns`, by this
    host's wall clock; what the storage raises when it fails."""
    began = wall_ns()
    post_ready(board, worker, shards, earliest_wall_ns, wall_ns)
    deadline = earliest_wall_ns + round(timeout_s * 1e9)
    while True:
        ready = _ready_times(await asyncio.to_thread(board.read), shards, earliest_wall_ns)
        if len(ready) == shards:
            times = tuple(ready[k] for k in range(shards))
            return SharedStart(
                shared_start_of(times, earliest_wall_ns, margin_s), earliest_wall_ns, times, wall_ns() - began
            )
        now = wall_ns()
        if now >= deadline:
            missing = ", ".join(str(k) for k in range(shards) if k not in ready)
            raise ShardsNotReady(
                f"{what}: shard {missing} of {shards} not ready {timeout_s:g} s after the earliest start "
                f"(ready_timeout_s); nothing sent"
            )
        await sleep(min(board.poll_s, (deadline - now) / 1e9))


class StartBarrier:
    """One shard's readiness barrier as an engine's `ready` hook
    (benchmaker.engine.runner.BenchRunner, benchmaker.sweep.point_run.play_episodes): awaiting it runs
    await_shared_start on `board` (`timeout_s` None: DEFAULT_READY_TIMEOUT_S) and returns
    the shared start on this host's perf_counter_ns; `shared` holds the SharedStart
    afterwards (None before). Raises ShardsNotReady (await_shared_start), ShardLate when
    the shared start has already passed."""

    def __init__(
        self, board: ReadyBoard, *, worker: int, shards: int, earliest_wall_ns: int, timeout_s: float | None, what: str
    ):
        self.board, self.worker, self.shards, self.what = board, worker, shards, what
        self.earliest_wall_ns = earliest_wall_ns
        self.timeout_s = DEFAULT_READY_TIMEOUT_S if timeout_s is None else timeout_s
        self.shared: SharedStart | None = None

    async def __call__(self) -> int:
        self.shared = await await_shared_start(
            self.board,
            worker=self.worker,
            shards=self.shards,
            earliest_wall_ns=self.earliest_wall_ns,
            timeout_s=self.timeout_s,
            what=self.what,
        )
        start_at_ns = start_at_ns_from_wall(self.shared.start_wall_ns)
        check_lead(start_at_ns, self.what, min_lead_s=0.0)
        return start_at_ns
