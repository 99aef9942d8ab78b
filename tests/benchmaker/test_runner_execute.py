"""The runner's CallableWorkload seam: execute() timed like a request, errors become
samples, start()/aclose() around the run, post hooks see the returned text."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from benchmaker.engine.config import BenchConfig, Timeouts
from benchmaker.engine.errors import TransportError
from benchmaker.engine.records import Outcome
from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.types import CallableWorkload


class Steps:
    """seq 0: ok after 30 ms; seq 1: TransportError; seq 2: ValueError; seq 3: sleeps 5 s."""

    name = "steps"

    def __init__(self) -> None:
        self.events: list[str] = []

    async def start(self) -> None:
        self.events.append("start")

    async def aclose(self) -> None:
        self.events.append("aclose")

    async def execute(self, seq: int, sample, t0_ns: int) -> str | None:
        self.events.append(f"execute {seq}")
        if seq == 0:
            await asyncio.sleep(0.03)
            sample.meta = {"phase_ms": 30}
            return "hello"
        if seq == 1:
            raise TransportError("sandbox unreachable")
        if seq == 2:
            raise ValueError("agent bug")
        await asyncio.sleep(5)
        return None


def _rows(res) -> list[dict]:
    return sorted((json.loads(x) for x in res.samples_path.read_text().splitlines()), key=lambda r: r["seq"])


async def test_execute_is_timed_and_failures_become_samples(tmp_path: Path):
    wl = Steps()
    assert isinstance(wl, CallableWorkload)
    seen: list[tuple[str, str, str]] = []

    def hook(spec, sample, text):
        seen.append((spec.method, spec.url, text))

    cfg = BenchConfig(load="closed:1", max_requests=4, out_dir=tmp_path, timeouts=Timeouts(total_s=0.3))
    res = await BenchRunner(cfg, workload=wl, post_hooks=[hook]).run()
    rows = _rows(res)
    assert [r["outcome"] for r in rows] == ["ok", "transport_error", "protocol_error", "timeout"]
    assert rows[0]["meta"] == {"phase_ms": 30}
    # the 30 ms sleep sits inside sent..end
    assert 30e6 <= rows[0]["end_ns"] - rows[0]["sent_ns"] < 300e6
    assert rows[1]["error"] == "sandbox unreachable"
    assert rows[2]["error"] == "ValueError: agent bug"
    assert (rows[3]["timeout_kind"], rows[3]["outcome"]) == ("total", Outcome.TIMEOUT.value)
    assert wl.events == ["start", "execute 0", "execute 1", "execute 2", "execute 3", "aclose"]
    # post hooks ran for every finished sample with the returned text ("" when none)
    assert seen == [
        ("EXECUTE", "steps", "hello"),
        ("EXECUTE", "steps", ""),
        ("EXECUTE", "steps", ""),
        ("EXECUTE", "steps", ""),
    ]


async def test_start_failure_stops_the_run_and_closes_started_workloads(tmp_path: Path):
    class Boom(Steps):
        async def start(self) -> None:
            raise RuntimeError("no sandbox")

    cfg = BenchConfig(load="closed:1", max_requests=1, out_dir=tmp_path)
    wl = Boom()
    try:
        await BenchRunner(cfg, workload=wl).run()
    except RuntimeError as exc:
        assert str(exc) == "no sandbox"
    else:
        raise AssertionError("run started without its workload")
    assert wl.events == []
