"""The shards' readiness barrier (benchmaker.engine.shared_start): every shard computes
the same shared start from the N ready records, a late shard delays it, a missing one
stops the others with its name. Clocks are injected (each shard its own fake wall clock,
advanced only by its own sleeps), the records go to a real temp dir or a real fsspec
memory:// exchange."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from benchmaker.engine.exchange import Exchange
from benchmaker.engine.shared_start import (
    MIN_START_LEAD_S,
    ReadyBoard,
    ShardsNotReady,
    await_shared_start,
    post_ready,
    ready_name,
    shared_start_of,
)

S = 1_000_000_000  # ns per s
EARLIEST = 1_700_000_000 * S  # the attempt's earliest start (wall-clock ns)


class FakeHost:
    """One host's wall clock (ns), moved only by its own sleeps; counts them."""

    def __init__(self, now_ns: int):
        self.now_ns = now_ns
        self.sleeps = 0

    def wall_ns(self) -> int:
        return self.now_ns

    async def sleep(self, s: float) -> None:
        self.sleeps += 1
        self.now_ns += round(s * S)
        await asyncio.sleep(0.001)  # a real yield: the other shards' coroutines run


async def _barrier(board: ReadyBoard, host: FakeHost, worker: int, shards: int, timeout_s: float = 60.0):
    return await await_shared_start(
        board,
        worker=worker,
        shards=shards,
        earliest_wall_ns=EARLIEST,
        timeout_s=timeout_s,
        what=f"shard {worker}/{shards} of c8",
        wall_ns=host.wall_ns,
        sleep=host.sleep,
    )


def test_the_start_is_the_earliest_or_the_last_ready_time_plus_the_margin() -> None:
    assert MIN_START_LEAD_S == 1.0
    assert shared_start_of([EARLIEST - 5 * S, EARLIEST - 3 * S], EARLIEST) == EARLIEST  # all ready in time
    assert shared_start_of([EARLIEST - 5 * S, EARLIEST + 2 * S], EARLIEST) == EARLIEST + 3 * S
    assert shared_start_of((EARLIEST - S // 2,), EARLIEST, margin_s=0.25) == EARLIEST
    assert shared_start_of((EARLIEST - S // 2,), EARLIEST, margin_s=0.75) == EARLIEST + S // 4
    with pytest.raises(ValueError, match="ready_wall_ns: expected at least one"):
        shared_start_of([], EARLIEST)


async def test_n_records_give_the_same_start_on_every_shard(tmp_path: Path) -> None:
    board = ReadyBoard.in_dir(tmp_path / "a1")
    ready = [EARLIEST + 4 * S, EARLIEST + 7 * S + 123, EARLIEST + 2 * S]  # each host's clock at its ready
    hosts = [FakeHost(r) for r in ready]
    got = await asyncio.gather(*(_barrier(board, h, k, 3) for k, h in enumerate(hosts)))
    assert {g.start_wall_ns for g in got} == {EARLIEST + 8 * S + 123}  # the last ready + 1 s, everywhere
    assert [g.ready_wall_ns for g in got] == [tuple(ready)] * 3
    assert {g.earliest_wall_ns for g in got} == {EARLIEST}
    assert sorted(p.name for p in (tmp_path / "a1").iterdir()) == ["ready-w0.json", "ready-w1.json", "ready-w2.json"]
    rec = orjson.loads((tmp_path / "a1" / "ready-w1.json").read_bytes())
    assert (rec["worker"], rec["shards"], rec["attempt"], rec["ready_wall_ns"]) == (1, 3, EARLIEST, ready[1])
    assert got[0].as_dict() == {
        "start_wall_ns": EARLIEST + 8 * S + 123,
        "earliest_wall_ns": EARLIEST,
        "ready_wall_ns": ready,
        "waited_ns": got[0].waited_ns,
    }


async def test_shards_ready_before_the_earliest_start_keep_it(tmp_path: Path) -> None:
    board = ReadyBoard.in_dir(tmp_path)
    hosts = [FakeHost(EARLIEST - 20 * S), FakeHost(EARLIEST - 10 * S)]
    got = await asyncio.gather(*(_barrier(board, h, k, 2) for k, h in enumerate(hosts)))
    assert [g.start_wall_ns for g in got] == [EARLIEST, EARLIEST]


async def test_a_late_shard_within_the_timeout_delays_everyone(tmp_path: Path) -> None:
    board = ReadyBoard.in_dir(tmp_path)
    early, late = FakeHost(EARLIEST - 3 * S), FakeHost(EARLIEST + 25 * S)  # picked up 25 s after the start
    waiting = asyncio.ensure_future(_barrier(board, early, 0, 2))
    while early.sleeps < 5:  # shard 0 posted and is polling: shard 1 is not there
        await asyncio.sleep(0.001)
    assert not waiting.done()
    got1 = await _barrier(board, late, 1, 2)
    got0 = await waiting
    assert got0.start_wall_ns == got1.start_wall_ns == EARLIEST + 26 * S
    assert got0.ready_wall_ns == got1.ready_wall_ns == (EARLIEST - 3 * S, EARLIEST + 25 * S)
    assert got0.waited_ns >= 5 * round(board.poll_s * S) and got1.waited_ns == 0


async def test_a_missing_shard_stops_the_waiting_ones_naming_it(tmp_path: Path) -> None:
    board = ReadyBoard.in_dir(tmp_path)
    hosts = [FakeHost(EARLIEST - S), FakeHost(EARLIEST + S)]  # shards 0 and 2 of 3; shard 1 never comes
    outcomes = await asyncio.gather(
        _barrier(board, hosts[0], 0, 3, timeout_s=4.0),
        _barrier(board, hosts[1], 2, 3, timeout_s=4.0),
        return_exceptions=True,
    )
    for out in outcomes:
        assert isinstance(out, ShardsNotReady)
    assert str(outcomes[0]) == (
        "shard 0/3 of c8: shard 1 of 3 not ready 4 s after the earliest start (ready_timeout_s); nothing sent"
    )
    assert str(outcomes[1]).startswith("shard 2/3 of c8: shard 1 of 3 not ready")
    for h in hosts:  # each waited until the deadline (its own clock), not a poll longer
        assert h.now_ns == EARLIEST + 4 * S


async def test_a_shard_ready_after_the_deadline_fails_at_once_naming_the_others(tmp_path: Path) -> None:
    host = FakeHost(EARLIEST + 10 * S)
    with pytest.raises(ShardsNotReady, match=r"^shard 1/3 of c8: shard 0, 2 of 3 not ready 5 s after"):
        await _barrier(ReadyBoard.in_dir(tmp_path), host, 1, 3, timeout_s=5.0)
    assert host.sleeps == 0


async def test_records_of_another_attempt_or_shard_count_or_half_written_do_not_count(tmp_path: Path) -> None:
    board = ReadyBoard.in_dir(tmp_path)
    post_ready(board, 1, 2, EARLIEST - S, wall_ns=lambda: EARLIEST)  # another attempt's straggler
    post_ready(board, 1, 3, EARLIEST, wall_ns=lambda: EARLIEST)  # another shard count
    (tmp_path / "ready-w1.json").write_bytes(b'{"worker": 1, "sha')  # being written
    host = FakeHost(EARLIEST - S)
    with pytest.raises(ShardsNotReady, match=r"shard 1 of 2 not ready 0\.5 s after"):
        await _barrier(board, host, 0, 2, timeout_s=0.5)
    post_ready(board, 1, 2, EARLIEST, wall_ns=lambda: EARLIEST + 3 * S)
    got = await _barrier(board, FakeHost(EARLIEST), 0, 2, timeout_s=0.5)
    assert got.start_wall_ns == EARLIEST + 4 * S


async def test_the_barrier_through_an_fsspec_exchange(tmp_path: Path) -> None:
    ex = Exchange(f"memory://{tmp_path.name}/ex")
    key = "rid/points/c8/_shards/a7"
    board = ReadyBoard.in_exchange(ex, key)
    hosts = [FakeHost(EARLIEST + 2 * S), FakeHost(EARLIEST + S)]
    got = await asyncio.gather(*(_barrier(board, h, k, 2) for k, h in enumerate(hosts)))
    assert [g.start_wall_ns for g in got] == [EARLIEST + 3 * S] * 2
    assert sorted(ex.read_glob(f"{key}/*")) == [f"{key}/{ready_name(0)}", f"{key}/{ready_name(1)}"]
