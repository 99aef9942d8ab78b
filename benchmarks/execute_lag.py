"""Event-loop lag of execute-mode sweep points: commands spawned on the measuring loop
(inline, the old way) vs by the helper process (benchmaker.agent.sandbox.spawner), in one run.

    .venv/bin/python benchmarks/execute_lag.py [--rounds 3] [--concurrency 1,2,4]
        [--episodes-per-slot 2] [--hogs 0]

What it does: converts the bundled recording (examples/recordings/tiny-task.pi.jsonl,
the one `make demo` replays), starts one replay server on it (its own process, instant
latency), then for each round plays every point of `--concurrency` in execute mode with
the local sandbox (examples/tiny-task: read, edit, `python -m pytest` tool calls, then
the verifier's test command) exactly as `make demo` does (benchmaker.sweep.point_run.run_point on
the engine), once with each spawner: `inline` (LocalSandboxFactory never started: every
git/bash/pytest process forks from the measuring loop, tree copies in a thread of it),
`process` (the factory's helper, started before the clock) and `nice` (the same helper
at nice 10: its commands yield the CPU to the measuring loop). Each round also samples
an idle loop for `--idle-s` s with the same monitor (`idle`: the host's floor of loop
lag at that moment; recorded-mode points are too short at instant latency to give
enough samples). The variants of a round run back to back, their order reversed every
other round (paired rounds: a drifting host load hits all alike). `--hogs N` starts N
busy-looping Python processes for the whole run (a loaded laptop, as tests/busy.sh)
and kills them at the end.

Printed per round and point: event-loop lag p50 / p99 / max in ms (the engine's
LoopLagMonitor: 10 ms sleeps, lag = woke - slept - 10 ms, linear quantiles over the
point's samples, count n), the point's verdict (valid: the engine self-checks, whose
loop-lag limit is p99 <= 10 ms unless BENCHMAKER_MAX_LOOP_LAG_MS is set; the reasons
when invalid) and its tool time (sum over the point's turns of the tool time the
harness recorded, in s). Then per point and variant the medians over rounds of p50,
p99, max, tool time and of the paired differences inline - variant. The host load
(1-min load average) is printed at the start and the end.

Measured here (2 shared cores, load 9-13 from other sessions; 2026-12-01), p99 in ms,
medians of 3 paired rounds without hogs: c1 inline 4.4 / process 7.0 / nice 5.1;
c2 9.6 / 6.6 / 5.2 (valid 2, 3, 3 of 3); c4 14.2 / 7.3 / 6.7 (valid 0, 3, 3 of 3);
idle-loop floor 4.7. With `--hogs 2` (2 rounds, load 10-14, idle floor 28.8 ms, so
nothing can be valid at 10 ms): c1 24.9 / 28.7 / 35.7, c2 58.6 / 33.6 / 31.7,
c4 65.6 / 38.5 / 45.1. The helper removes what spawning on the loop added (c2, c4);
what is left is near the host's own scheduling delay, which an idle loop shows too.
`nice` gave no consistent gain.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmaker.agent.sandbox import LocalSandboxFactory  # noqa: E402
from benchmaker.agent.verifier import load_task  # noqa: E402
from benchmaker.recipes.calibration import _idle_lag  # noqa: E402 - the calibration's idle-loop figure
from benchmaker.replay_server.process import start_replay_server  # noqa: E402
from benchmaker.sweep.point import ReplayPoint  # noqa: E402
from benchmaker.sweep.point_run import run_point  # noqa: E402
from benchmaker.trajectories.convert import iter_trajectories  # noqa: E402

RECORDING = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"
TASK_DIR = ROOT / "examples" / "tiny-task"
VARIANTS = ("inline", "process", "nice")


class _InlineFactory(LocalSandboxFactory):
    """The spawning before the helper existed: start() does nothing, so every sandbox
    uses the InlineSpawner on the measuring loop."""

    async def start(self) -> None:
        return None


def _factory(variant: str) -> LocalSandboxFactory:
    if variant == "inline":
        return _InlineFactory()
    return LocalSandboxFactory(nice=10 if variant == "nice" else 0)


def _point_figures(run_dir: Path, point: str, row: dict[str, Any]) -> dict[str, Any]:
    pdir = run_dir / "points" / point
    summary = json.loads((pdir / "engine_summary.json").read_text())
    lag = (summary.get("self_checks") or {}).get("loop_lag_ms") or {}
    tool_ns = 0
    with open(pdir / "turns.jsonl", "rb") as f:
        for line in f:
            tool_ns += json.loads(line).get("tool_time_ns") or 0
    return {
        "p50": lag.get("p50"),
        "p99": lag.get("p99"),
        "max": lag.get("max"),
        "n": lag.get("count"),
        "valid": row.get("valid"),
        "tool_s": tool_ns / 1e9,
        "reasons": row.get("verdict_reasons") or "",
    }


async def _round(
    trajs: list[Any],
    url: str,
    out: Path,
    r: int,
    order: tuple[str, ...],
    concurrency: list[int],
    per_slot: int,
    tasks: dict[str, Any],
    idle_s: float,
) -> dict[tuple[str, int], dict[str, Any]]:
    figures: dict[tuple[str, int], dict[str, Any]] = {}
    figures[("idle", 0)] = f = await _idle_lag(idle_s)
    print(
        f"round {r} idle {idle_s:g} s  lag p50 {f['p50']:6.2f}  p99 {f['p99']:7.2f}  max {f['max']:7.2f} ms"
        f"  n {f['count']:5}",
        flush=True,
    )
    for c in concurrency:
        for variant in order:
            run_dir = out / f"r{r}-{variant}"
            row = await run_point(
                trajs,
                url,
                run_dir,
                ReplayPoint(load=f"closed:{c}", episodes=max(c, per_slot * c), mode="execute"),
                run_id=f"lag-r{r}-{variant}",
                sandbox_factory=_factory(variant),
                tasks=tasks,
            )
            figures[(variant, c)] = f = _point_figures(run_dir, f"c{c}", row)
            print(
                f"round {r} c{c:<3} {variant:8} lag p50 {f['p50']:6.2f}  p99 {f['p99']:7.2f}  max {f['max']:7.2f} ms"
                f"  n {f['n']:5}  valid {str(f['valid']):5}  tool {f['tool_s']:6.2f} s"
                + (f"  ({f['reasons']})" if f["reasons"] else ""),
                flush=True,
            )
    return figures


def _load() -> str:
    return open("/proc/loadavg").read().split()[0]


async def main_async(args: argparse.Namespace) -> None:
    concurrency = [int(x) for x in args.concurrency.split(",")]
    trajs = list(iter_trajectories(RECORDING))
    task = load_task(TASK_DIR)
    tasks = {task.task_id: task}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        with tempfile.TemporaryDirectory(prefix="bm-execute-lag-") as tmp:
            out = Path(tmp)
            traj_file = out / "trajectories.jsonl"
            traj_file.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
            print(
                f"execute-mode loop lag: {len(trajs)} trajectory, points c{',c'.join(map(str, concurrency))}, "
                f"{args.episodes_per_slot} episodes per slot, {args.rounds} paired rounds, {args.hogs} CPU hogs, "
                f"{os.cpu_count()} CPUs, load {_load()}"
            )
            results: list[dict[tuple[str, int], dict[str, Any]]] = []
            with start_replay_server(traj_file) as srv:
                for r in range(args.rounds):
                    order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
                    results.append(
                        await _round(
                            trajs, srv.url, out, r, order, concurrency, args.episodes_per_slot, tasks, args.idle_s
                        )
                    )
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print(
        f"\nload at the end {_load()}; medians over {args.rounds} rounds, lag in ms; "
        f"d = inline - variant, paired per round; tool = point's tool time in s"
    )
    print(f"{'point':6} {'variant':8} {'p50':>7} {'p99':>7} {'max':>7} {'d p50':>7} {'d p99':>7} {'tool':>7}  valid")
    for c in concurrency:
        for v in VARIANTS:

            def med(k: str, v: str = v, c: int = c) -> float:
                return statistics.median(res[(v, c)][k] for res in results)

            d50 = statistics.median(res[("inline", c)]["p50"] - res[(v, c)]["p50"] for res in results)
            d99 = statistics.median(res[("inline", c)]["p99"] - res[(v, c)]["p99"] for res in results)
            n_valid = sum(bool(res[(v, c)]["valid"]) for res in results)
            print(
                f"c{c:<5} {v:8} {med('p50'):7.2f} {med('p99'):7.2f} {med('max'):7.2f} {d50:7.2f} {d99:7.2f} "
                f"{med('tool_s'):7.2f}  {n_valid} of {args.rounds}"
            )
    idle = statistics.median(res[("idle", 0)]["p99"] for res in results)
    print(f"idle loop p99 (median over rounds): {idle:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--episodes-per-slot", type=int, default=2)
    ap.add_argument("--idle-s", type=float, default=3.0, help="seconds of idle-loop lag sampled per round")
    ap.add_argument("--hogs", type=int, default=0, help="busy-looping processes for the whole run (a loaded host)")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
