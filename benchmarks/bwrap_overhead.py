"""Per-command cost of execute mode's confinement: the wall time of LocalSandbox.exec
for the same command confined by bubblewrap (benchmaker.agent.sandbox.confine) and
unconfined, in one run.

    .venv/bin/python benchmarks/bwrap_overhead.py [--calls 200] [--command true]
        [--spawner process|inline]

What it does: makes two LocalSandbox workspaces of examples/tiny-task (one confined,
one with confined=False) on one spawner (`process`: a started ProcessSpawner, as a
sweep point uses; `inline`: the caller's loop), then calls `exec(--command)` `--calls`
times on each, alternating confined and unconfined call by call (paired: a drifting
host load hits both alike). Each call's time is ExecResult.duration_ns, the figure the
harness records as tool time (perf_counter_ns from the call to its result: spawn,
command, capture, group kill). Printed: per variant the count n, p50, p90 and max in
ms (linear quantiles, statistics.quantiles method "inclusive"), then the median of the
paired differences (confined - unconfined) in ms: the overhead a confined tool call
adds to the recorded tool time. A second table does the same for
`python3 -c pass` (an interpreter start, as a `python -m pytest` call has), and the
host's 1-min load average is printed at the start and the end.

The overhead is bwrap's setup (namespaces, a tmpfs root, ~40 bind mounts) and, as
root, one more exec (setpriv, then env) before bash starts. It is inside the recorded
tool time by design: the tool call's time is what the agent waited for.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmaker.agent.sandbox.local import LocalSandbox  # noqa: E402
from benchmaker.agent.sandbox.spawner import InlineSpawner, ProcessSpawner, Spawner  # noqa: E402


def _ms(ns: float) -> float:
    return ns / 1e6


def _row(name: str, values_ns: list[int]) -> str:
    q = statistics.quantiles(values_ns, n=10, method="inclusive")
    return (
        f"  {name:<11} n={len(values_ns):<4} p50 {_ms(statistics.median(values_ns)):7.2f} ms   "
        f"p90 {_ms(q[8]):7.2f} ms   max {_ms(max(values_ns)):7.2f} ms"
    )


async def _measure(spawner: Spawner, command: str, calls: int) -> None:
    task = ROOT / "examples" / "tiny-task"
    confined = await LocalSandbox.create(task, spawner=spawner)
    plain = await LocalSandbox.create(task, spawner=spawner, confined=False)
    try:
        for sb in (confined, plain):  # warm both paths (page cache, the helper's first spawn)
            for _ in range(3):
                await sb.exec(command)
        on: list[int] = []
        off: list[int] = []
        for i in range(calls):
            pair = (confined, plain) if i % 2 == 0 else (plain, confined)
            for sb in pair:
                res = await sb.exec(command)
                if res.exit_code != 0:
                    raise SystemExit(f"{command!r} failed ({res.exit_code}): {res.output.strip()}")
                (on if sb is confined else off).append(res.duration_ns)
        print(f"{command!r}, {calls} calls each:")
        print(_row("confined", on))
        print(_row("unconfined", off))
        diffs = [a - b for a, b in zip(on, off, strict=True)]
        print(
            f"  overhead    median of paired differences (confined - unconfined): "
            f"{_ms(statistics.median(diffs)):.2f} ms per call"
        )
    finally:
        await confined.close()
        await plain.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--command", default="true")
    ap.add_argument("--spawner", choices=["process", "inline"], default="process")
    args = ap.parse_args()
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}; uid {os.geteuid()}; spawner {args.spawner}")
    spawner: Spawner = await ProcessSpawner.start() if args.spawner == "process" else InlineSpawner()
    try:
        await _measure(spawner, args.command, args.calls)
        await _measure(spawner, "python3 -c pass", max(20, args.calls // 4))
    finally:
        await spawner.aclose()
    print(f"load average (1 min) at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
