"""How many agent episodes one host keeps in flight on the engine.

    .venv/bin/python benchmarks/replay_scale.py [--concurrency 1,16,128,512,1024]
        [--poisson 100] [--poisson-duration 5] [--episodes-per-slot 2]
        [--trajectory examples/recordings/tiny-task.pi.jsonl] [--workers 1]
        [--transport raw,aiohttp]

What it does: converts one recorded trajectory (default: the 4-turn pi example), starts
one replay server on it (its own process, instant latency: the model answers at once,
so every cost measured is the client's or the server's), then runs sweep points exactly
as `swebench-replay` does (benchmaker.sweep.point_run.run_point: the engine with an episode as
its unit of work, each model call parsed by the engine's OpenAI parser and written to
samples.jsonl): closed loops of C = 1, 16, 128, 512, 1,024 episodes in flight
(`--episodes-per-slot` x C episodes each), then Poisson episode arrivals at
`--poisson` episodes/s for `--poisson-duration` s.

Printed per point, as a table:

    target        C, or the Poisson rate (offered episodes/s)
    max conc      most episodes in flight at once (the engine's count over its episode
                  samples: sent .. end)
    episodes / turns / misses   episodes played, model calls, replay-server misses
                  (/stats: unknown key, beyond the recorded turns, diverged)
    valid         the point's verdict (engine self-checks, concurrency proof)
    ep/s          achieved episode rate (episodes / window, the engine's definition)
    lag p99       event-loop lag p99 in ms (benchmaker.engine.selfcheck.LoopLagMonitor)
    sched p99     episode schedule lag p99 in ms (sent - intended; open loop: queueing)
    client us/turn  client CPU per model call: the process's CPU time over the point
                  (time.process_time, the engine's self-check) / turns, in us
    server us/turn  replay-server CPU per model call: its threads' schedstat ns over the
                  point / turns, in us

At the end one line says whether 1,024 episodes were in flight with 0 misses and loop
lag p99 <= 10 ms (the issue's target), or at which point and why not. `--transport`
names the engine transports the model calls go on (benchmaker.sweep.point_run.run_point's
`transport`; default `raw`, the engine's HTTP/1.1 client): with several, every point
runs on each in turn (column `transport`), and a last line gives the client CPU per
turn of each against the first, point by point. `--workers N`
runs each point in N engine worker processes (client us/turn is then the sum of their
CPU per turn).

Measured here (2 shared cores, busy with other work; 2026-12-01): every level reaches
its concurrency with 0 misses and 0 failed calls (1,024 in flight: 2,048 episodes,
8,192 turns), at 400-600 us of client CPU and 65-120 us of replay-server CPU per turn;
loop lag p99 grows with the episodes in flight (87 ms at 16, 3.3 s at 1,024), so points
from 16 up are invalid: with an instant model every episode is always ready and one
loop runs ~2,000 turns/s. With the model calls on the engine's own HTTP/1.1 client
(`--concurrency 16,128 --episodes-per-slot 16 --poisson 0 --transport
aiohttp,raw`, 2026-12-01, two runs in either order): client CPU per turn 268-273 us raw
vs 332-365 us aiohttp at C=16, 300-317 us vs 376-391 us at C=128 (aiohttp / raw
1.23-1.34x). Exit code 1 when a
point had misses or failed episodes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmaker.engine.runner import run_on_fresh_loop  # noqa: E402
from benchmaker.replay_server.process import ReplayServerHandle, start_replay_server  # noqa: E402
from benchmaker.sweep.point import ReplayPoint  # noqa: E402
from benchmaker.sweep.point_run import run_point  # noqa: E402
from benchmaker.trajectories.convert import convert_paths, read_trajectories  # noqa: E402

_LAG_TARGET_MS = 10.0


def _server_cpu_s(pid: int) -> float:
    """CPU time of process `pid` in s: the sum over its threads of
    /proc/<pid>/task/<tid>/schedstat field 1 (ns on CPU)."""
    return sum(int(p.read_text().split()[0]) for p in Path(f"/proc/{pid}/task").glob("*/schedstat")) / 1e9


async def _point(
    server: ReplayServerHandle,
    trajs: list,
    run_dir: Path,
    *,
    concurrency: int | None,
    load: str | None,
    episodes: int | None,
    duration_s: float | None,
    workers: int,
    transport: str = "raw",
) -> dict[str, Any]:
    await asyncio.to_thread(server.reset_stats)
    cpu0 = _server_cpu_s(server.pid)
    row = await run_point(
        trajs,
        server.url,
        run_dir,
        ReplayPoint(
            load=load if load is not None else f"closed:{concurrency}",
            episodes=episodes,
            duration_s=duration_s,
            workers=workers,
        ),
        run_id="scale",
        transport=transport,
    )
    server_cpu = _server_cpu_s(server.pid) - cpu0
    stats = await asyncio.to_thread(server.stats)
    turns = row["n_requests"] or 0
    return {
        "target": str(concurrency) if load is None else load,
        "transport": transport,
        "max_conc": row["achieved_max_concurrency"],
        "episodes": row["n_episodes"],
        "failed_episodes": row.get("n_episodes_failed"),
        "turns": turns,
        "misses": stats["misses"]["total"],
        "valid": row["valid"],
        "reason": row.get("invalid_reason"),
        "ep_per_s": row.get("achieved_episode_rate_per_s"),
        "lag_p99_ms": row.get("loop_lag_p99_ms"),
        "sched_p99_ms": row.get("episode_schedule_lag_p99_ms"),
        "client_us_per_turn": row["client_cpu_s"] / turns * 1e6 if turns and row.get("client_cpu_s") else None,
        "server_us_per_turn": server_cpu / turns * 1e6 if turns else None,
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return str(v)


_COLUMNS = (
    ("target", "target"),
    ("transport", "transport"),
    ("max_conc", "max conc"),
    ("episodes", "episodes"),
    ("turns", "turns"),
    ("misses", "misses"),
    ("valid", "valid"),
    ("ep_per_s", "ep/s"),
    ("lag_p99_ms", "lag p99 ms"),
    ("sched_p99_ms", "sched p99 ms"),
    ("client_us_per_turn", "client us/turn"),
    ("server_us_per_turn", "server us/turn"),
)


def print_table(rows: list[dict[str, Any]]) -> None:
    """Print `rows` as an aligned table, then each invalid point's reason."""
    cells = [[h for _, h in _COLUMNS]] + [[_fmt(r[k]) for k, _ in _COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=False)))
    for r in rows:
        if not r["valid"]:
            print(f"  {r['target']}: invalid: {r['reason']}")


def verdict_line(rows: list[dict[str, Any]], top: int) -> str:
    """Whether `top` episodes were in flight with 0 misses and loop lag p99 <= 10 ms,
    or where and why not."""
    row = next((r for r in rows if r["target"] == str(top)), None)  # the first transport's
    if row is None:
        return f"target {top} not measured"
    why = []
    if (row["max_conc"] or 0) < top:
        why.append(f"max in flight {row['max_conc']} < {top}")
    if row["misses"]:
        why.append(f"{row['misses']} misses")
    if row["lag_p99_ms"] is not None and row["lag_p99_ms"] > _LAG_TARGET_MS:
        why.append(f"loop lag p99 {row['lag_p99_ms']:.1f} ms > {_LAG_TARGET_MS:g} ms")
    if not why:
        return f"REACHED: {top} episodes in flight, 0 misses, loop lag p99 {row['lag_p99_ms']:.2f} ms"
    cpu = row["client_us_per_turn"]
    if cpu:  # the loop holds every ready turn's client work: at instant latency it never idles
        why.append(
            f"the client spends {cpu:,.0f} us of CPU per turn, so one event loop serves at most "
            f"~{1e6 / cpu:,.0f} turns/s; with an instant model every episode in flight is always ready, "
            f"and the loop lags by the work of all of them"
        )
    return f"NOT REACHED at {top}: " + "; ".join(why)


def transport_line(rows: list[dict[str, Any]], kinds: list[str]) -> str:
    """Client CPU per turn of each transport / the first's, per point (e.g. `16: aiohttp
    812 us / raw 431 us = 1.88x`)."""
    parts = []
    for target in dict.fromkeys(r["target"] for r in rows):
        by = {r["transport"]: r["client_us_per_turn"] for r in rows if r["target"] == target}
        base = by.get(kinds[0])
        for kind in kinds[1:]:
            if base and by.get(kind):
                parts.append(
                    f"{target}: {kind} {by[kind]:,.0f} us / {kinds[0]} {base:,.0f} us = {by[kind] / base:.2f}x"
                )
    return "client CPU per turn by transport: " + ("; ".join(parts) or "-")


async def main_async(args: argparse.Namespace) -> int:
    levels = [int(x) for x in args.concurrency.split(",") if x]
    kinds = [x for x in args.transport.split(",") if x]
    with tempfile.TemporaryDirectory(prefix="bm-replay-scale-") as tmp:
        traj = Path(tmp) / "traj.jsonl"
        convert_paths([Path(args.trajectory)], traj)
        trajs = list(read_trajectories(traj))
        rows = []
        with start_replay_server(traj, latency="instant") as server:
            for c in levels:
                for kind in kinds:  # the transports back to back: one server, one moment of the host
                    rows.append(
                        await _point(
                            server,
                            trajs,
                            Path(tmp) / "run",
                            concurrency=c,
                            load=None,
                            episodes=c * args.episodes_per_slot,
                            duration_s=None,
                            workers=args.workers,
                            transport=kind,
                        )
                    )
                    print(f"done: closed {c} on {kind}", file=sys.stderr, flush=True)
            if args.poisson:
                for kind in kinds:
                    rows.append(
                        await _point(
                            server,
                            trajs,
                            Path(tmp) / "run",
                            concurrency=None,
                            load=f"poisson:{args.poisson:g}",
                            episodes=None,
                            duration_s=args.poisson_duration,
                            workers=args.workers,
                            transport=kind,
                        )
                    )
    print(f"trajectory {args.trajectory} ({len(trajs[0].turns)} turns), instant latency")
    print_table(rows)
    print(verdict_line(rows, max(levels)))
    if len(kinds) > 1:
        print(transport_line(rows, kinds))
    bad = [r for r in rows if r["misses"] or r["failed_episodes"]]
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,16,128,512,1024")
    ap.add_argument("--episodes-per-slot", type=int, default=2)
    ap.add_argument("--poisson", type=float, default=100.0, help="episodes/s (0: no Poisson point)")
    ap.add_argument("--poisson-duration", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=1, help="engine worker processes per point")
    ap.add_argument("--transport", default="raw", help="engine transports, comma-separated (raw, aiohttp)")
    ap.add_argument("--trajectory", default=str(REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"))
    return run_on_fresh_loop(main_async(ap.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
