"""SWE-bench-sized corpora: conversion speed, replay store load time
and RSS, request matching cost at 500 vs 5 trajectories, warehouse load of a run of
that size.

    .venv/bin/python benchmarks/corpus.py [--trajectories 500] [--min-turns 50]
        [--max-turns 450] [--rounds 7] [--conversion-rounds 3] [--workers N] [--repeat 20]
        [--keep DIR] [--conversion-only]

Needs the real pi session ../shared/data/real/pi-session-v1-large.jsonl (SOURCES.md:
914 messages, 453 assistant turns, 0.97 MB); exits 0 with a note when it is absent.

1. Logs: `--trajectories` pi session files, each the real session cut after its n-th
   assistant message (n drawn uniformly from [min, max] turns, seeded) with its first
   user message made unique (" [corpus task i]" appended: a distinct match key per
   file, as 500 SWE-bench tasks have), in one directory.
2. Conversion: benchmaker.trajectories.convert.convert_paths over the directory into one
   trajectories.jsonl, as a user runs it, in a fresh interpreter per conversion (its
   imports not counted; starting the workers' forkserver and pool counted), `--rounds`
   rounds alternating (which goes first alternates too), median: 1 process
   (`workers=1`): MB of logs per CPU s (process_time) and per wall s; the workers
   (automatic choice, or `--workers N`): MB of logs per wall s and per CPU s counting
   every process (the parent's process_time, with the first units it converts itself
   while the workers start (report.workers_units: the others) and the joining of the
   workers' part files, each worker's process_time when it sent its last unit,
   report.workers_cpu_s, and the forkserver's own CPU from /proc). The
   outputs must be byte-identical (sha256 printed). Target >= 50 MB of logs per wall s
   with the workers; the per-CPU figures beside it (on a shared 2-core machine the wall
   clock also measures the neighbours: the load average is printed at the start and
   the end). `--profile N` converts a second time in one process under cProfile and
   prints its N costliest functions (own time); `--compare-rev REV` converts the same
   logs in one process (BENCHMAKER_CONVERT_WORKERS=1) with the code of git revision REV
   (`git archive` into a temp dir) and with this checkout, each in a fresh process,
   alternating, `--compare-rounds` times, and prints both figures (median) and their
   ratio: before/after on the same host at the same load. `--conversion-only` stops
   after this step.
3. Store: `python -m benchmaker.replay_server.server` on the corpus (benchmaker.replay_server.process.start_replay_server):
   the server process's CPU s when /health first answers (imports, the store load,
   which is nearly all of it, and the GC freeze; wall s beside it; ReplayStore.load is
   also timed in this process, after the server has stopped: a second 1.6 GB store alive
   beside the server's load made its page faults cost ~2.5x the system CPU), and its
   VmRSS after start-up and after the matching requests below. Targets: load <= 10 CPU
   s, RSS <= 2 GB.
4. Matching: the replay app (benchmaker.replay_server.server.create_app) over the 500-trajectory store and
   over a store of 5 of them, both in this process; the same requests (for those 5
   trajectories, at turns 0, 10, 50, 100, 200, 400 where they have them, bodies as an
   agent sends them: benchmaker.trajectories.context.request_messages, the whole history) pass through
   each app's ASGI callable `--repeat` times per measurement, `--rounds` measurements
   each, alternating (which store goes first alternates too), after gc.freeze() as the
   server does after its load. Cost = CPU s (process_time) per request: the JSON parse
   of the body, the key hash, the lookup and the response. Ratio = median over rounds
   of (500-store / 5-store). Target: within 10% (<= 1.10).
5. Warehouse: a run bundle of the corpus's size (one samples.jsonl row per turn, made
   as benchmarks/warehouse_load.py makes them) loaded with benchmaker.warehouse.loader.load_run
   into a fresh DuckDB file; s and rows/s. (The corpus is not replayed here: 500
   episodes resend ~25 GB of history.)

Prints a table (figure, value, target, PASS/FAIL); exit 1 when a target fails.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from benchmaker.replay_server.latency import parse_latency  # noqa: E402
from benchmaker.replay_server.process import start_replay_server  # noqa: E402
from benchmaker.replay_server.server import create_app  # noqa: E402
from benchmaker.replay_server.store import ReplayStore  # noqa: E402
from benchmaker.trajectories.context import request_messages  # noqa: E402
from benchmaker.trajectories.convert import convert_paths, read_trajectories  # noqa: E402
from benchmaker.trajectories.trajectory import Trajectory  # noqa: E402

REAL = REPO.parent / "shared" / "data" / "real" / "pi-session-v1-large.jsonl"
MATCH_TURNS = (0, 10, 50, 100, 200, 400)


def build_logs(src: Path, out_dir: Path, n: int, min_turns: int, max_turns: int, seed: int) -> tuple[int, int]:
    """Write `n` pi session files cut from `src` (module doc); returns (bytes, turns)."""
    lines = src.read_bytes().splitlines()
    # index of each assistant message line, and of the first user message
    assistant_at = []
    first_user_at = None
    for i, raw in enumerate(lines):
        if b'"type":"message"' not in raw:
            continue
        role = orjson.loads(raw)["message"]["role"]
        if role == "assistant":
            assistant_at.append(i)
        elif role == "user" and first_user_at is None:
            first_user_at = i
    assert first_user_at is not None, f"{src}: no user message"
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    total = turns = 0
    for k in range(n):
        n_turns = min(rng.randint(min_turns, max_turns), len(assistant_at))
        end = assistant_at[n_turns] if n_turns < len(assistant_at) else len(lines)
        entry = orjson.loads(lines[first_user_at])
        for part in entry["message"]["content"]:
            if part.get("type") == "text":
                part["text"] += f" [corpus task {k}]"
                break
        body = lines[:first_user_at] + [orjson.dumps(entry)] + lines[first_user_at + 1 : end]
        data = b"\n".join(body) + b"\n"
        (out_dir / f"session-{k:03d}.jsonl").write_bytes(data)
        total += len(data)
        turns += n_turns
    return total, turns


def request_body(traj: Trajectory, turn: int) -> bytes:
    """The body an agent replaying `traj` sends for `turn` (benchmaker.trajectories.context.request_messages:
    the whole history as the log built it)."""
    return orjson.dumps({"model": traj.model or "replay", "messages": request_messages(traj, turn)})


async def _serve_all(app: Any, bodies: list[bytes]) -> tuple[float, int]:
    """Pass every body through the ASGI app; (CPU s, responses that were not 200)."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
    }
    bad = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal bad
        if message["type"] == "http.response.start" and message["status"] != 200:
            bad += 1

    cpu0 = time.process_time()
    for body in bodies:

        async def receive(body: bytes = body) -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await app(dict(scope), receive, send)
    return time.process_time() - cpu0, bad


def _cpu_s(pid: int) -> float:
    """CPU s of process `pid` so far: its threads' /proc/<pid>/task/*/schedstat field 1 (ns)."""
    return sum(int(p.read_text().split()[0]) for p in Path(f"/proc/{pid}/task").glob("*/schedstat")) / 1e9


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=500)
    ap.add_argument("--min-turns", type=int, default=50)
    ap.add_argument("--max-turns", type=int, default=450)
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds of the matching figure")
    ap.add_argument("--repeat", type=int, default=20, help="passes over the matching requests per measurement")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None, help="work directory kept (default: a temp dir, removed)")
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="convert again under cProfile and print the N costliest functions",
    )
    ap.add_argument("--conversion-only", action="store_true", help="stop after the conversion figure")
    ap.add_argument(
        "--compare-rev",
        default=None,
        metavar="REV",
        help="also convert with git revision REV's code, alternating with this checkout's",
    )
    ap.add_argument("--compare-rounds", type=int, default=2, help="alternating rounds of --compare-rev")
    ap.add_argument(
        "--conversion-rounds",
        type=int,
        default=3,
        help="alternating rounds of the conversion figures (1 process, workers)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="workers of the parallel conversion (default: convert_paths' automatic choice)",
    )
    args = ap.parse_args()
    print(f"load average at start: {_loadavg()}")
    if not REAL.exists():
        print(f"{REAL} is absent: nothing to build the corpus from (skipped)")
        return 0
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="bench-corpus-")
    work = args.keep or Path(tmp.name)
    rows = []
    try:
        log_dir = work / "logs"
        t0 = time.perf_counter()
        log_bytes, n_turns = build_logs(REAL, log_dir, args.trajectories, args.min_turns, args.max_turns, args.seed)
        print(
            f"1. logs: {args.trajectories} pi sessions, {n_turns:,} turns, {log_bytes / 1e6:,.1f} MB"
            f" (built in {time.perf_counter() - t0:.1f} s)"
        )

        conv = measure_conversion(log_dir, work, args.conversion_rounds, args.workers)
        traj_path = conv.pop("out")
        mb = log_bytes / 1e6
        serial_cpu, serial_wall = mb / conv["serial_cpu_s"], mb / conv["serial_wall_s"]
        par_wall, par_cpu = mb / conv["par_wall_s"], mb / conv["par_cpu_s"]
        n_workers = conv["workers"]
        print(
            f"2. conversion, median of {args.conversion_rounds} alternating round(s), fresh processes:"
            f" 1 process {conv['serial_wall_s']:.2f} s wall, {conv['serial_cpu_s']:.2f} s CPU:"
            f" {serial_cpu:,.1f} MB of logs per CPU s ({serial_wall:,.1f} per wall s); {n_workers} workers"
            f" {conv['par_wall_s']:.2f} s wall, {conv['par_cpu_s']:.2f} s CPU of all processes"
            f" (parent {conv['par_parent_cpu_s']:.2f} with the {conv['par_parent_units']:.0f} of"
            f" {conv['units']} units it converted while the workers started, workers"
            f" {conv['par_workers_cpu_s']:.2f},"
            f" forkserver {conv['par_server_cpu_s']:.2f}): {par_wall:,.1f} MB of logs per wall s"
            f" ({par_cpu:,.1f} per CPU s); wall {conv['serial_wall_s'] / conv['par_wall_s']:.2f}x of 1 process"
            f" -> {traj_path.stat().st_size / 1e6:,.1f} MB trajectories, sha256 {conv['sha256'][:16]} both"
        )
        rows.append(
            (f"conversion, {n_workers} workers (MB of logs per wall s)", par_wall, ">= 50", par_wall >= 50, "{:,.1f}")
        )
        rows.append((f"  ({n_workers} workers, MB per CPU s of all processes)", par_cpu, "-", None, "{:,.1f}"))
        rows.append(("  (1 process, MB of logs per CPU s)", serial_cpu, "-", None, "{:,.1f}"))
        rows.append(("  (1 process, MB of logs per wall s)", serial_wall, "-", None, "{:,.1f}"))
        rows.append(
            (
                f"  ({n_workers} workers / 1 process, wall s)",
                conv["serial_wall_s"] / conv["par_wall_s"],
                "-",
                None,
                "{:.2f}x",
            )
        )
        if args.profile:
            profile_conversion(log_dir, work / "trajectories-profiled.jsonl", args.profile)
        if args.compare_rev:
            old, new = compare_conversion(args.compare_rev, log_dir, work, args.compare_rounds)
            print(
                f"   before/after, {args.compare_rounds} alternating round(s) in fresh processes:"
                f" {args.compare_rev} {log_bytes / 1e6 / old:,.1f} MB per CPU s ({old:.2f} CPU s),"
                f" this checkout {log_bytes / 1e6 / new:,.1f} ({new:.2f} CPU s): {old / new:.2f}x"
            )
        if args.conversion_only:
            return _table(rows)

        # the server first, while this process holds no store: with the in-process store
        # (1.6 GB) alive, the server's 557,000 page faults of its load cost it 3.3-3.8 s of
        # system CPU instead of 1.4 (measured, same fault count), and this process's
        # collections over that store burnt ~2 CPU s beside it
        t0 = time.perf_counter()
        with start_replay_server(traj_path, startup_timeout_s=300) as srv:
            start_s = time.perf_counter() - t0
            start_cpu = _cpu_s(srv.pid)
            rss0 = _rss_kib(srv.pid)
            trajs = list(read_trajectories(traj_path))
            picked = trajs[:: max(1, len(trajs) // 5)][:5]
            bodies = [request_body(t, k) for t in picked for k in MATCH_TURNS if k < len(t.turns)]
            import httpx

            with httpx.Client(timeout=60) as client:
                for body in bodies:
                    r = client.post(
                        srv.url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
                    )
                    assert r.status_code == 200, (r.status_code, r.text[:200])
            rss1 = _rss_kib(srv.pid)
        t0, c0 = time.perf_counter(), time.process_time()
        store = ReplayStore.load(traj_path, latency=parse_latency("instant"))
        load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"3. store: {store.n_turns:,} turns of {len(store.trajectories)} trajectories; ReplayStore.load"
            f" {load_s:.2f} s wall, {load_cpu:.2f} s CPU in-process; server ready after {start_s:.2f} s wall,"
            f" {start_cpu:.2f} s of its CPU (imports, load, GC freeze); server RSS {rss0 / 1024:,.0f} MiB"
            f" after start-up, {rss1 / 1024:,.0f} MiB after {len(bodies)} requests"
        )
        rows.append(("store load, server CPU s to /health", start_cpu, "<= 10", start_cpu <= 10, "{:.2f}"))
        rows.append(("  (server start to /health, wall s)", start_s, "-", None, "{:.2f}"))
        rows.append(("server RSS (MiB)", max(rss0, rss1) / 1024, "<= 2048", max(rss0, rss1) <= 2 * 2**20, "{:,.0f}"))

        small_path = work / "trajectories-5.jsonl"
        small_path.write_text("".join(t.model_dump_json() + "\n" for t in picked), encoding="utf-8")
        big_app = create_app(store)
        small_app = create_app(ReplayStore.load(small_path, latency=parse_latency("instant")))
        gc.collect()  # as benchmaker.replay_server.server.serve does after its load: the stores out of the GC's sight
        gc.freeze()
        sizes = [len(b) for b in bodies]
        big, small = [], []
        bad = 0
        pairs = [(big_app, big), (small_app, small)]
        for rnd in range(args.rounds):
            for app, out in pairs if rnd % 2 == 0 else pairs[::-1]:  # which goes first alternates
                cpu, nbad = asyncio.run(_serve_all(app, bodies * args.repeat))
                out.append(cpu / (len(bodies) * args.repeat))
                bad += nbad
        ratio = statistics.median(b / s for b, s in zip(big, small, strict=False))
        print(
            f"4. matching: {len(bodies)} requests (bodies {min(sizes) / 1e3:,.0f}-{max(sizes) / 1e3:,.0f} KB,"
            f" mean {statistics.mean(sizes) / 1e3:,.0f} KB), {args.rounds} rounds: "
            f"{statistics.median(big) * 1e6:,.0f} us per request at {len(store.trajectories)} trajectories,"
            f" {statistics.median(small) * 1e6:,.0f} us at 5; ratio {ratio:.3f}; non-200: {bad}"
        )
        rows.append(
            (
                f"matching {len(store.trajectories)} / 5 trajectories",
                ratio,
                "<= 1.10",
                ratio <= 1.10 and not bad,
                "{:.3f}",
            )
        )

        from warehouse_load import write_bundle

        from benchmaker.warehouse.loader import load_run

        run_dir = work / "run"
        size = write_bundle(run_dir, n_turns, 1, 32)
        t0, c0 = time.perf_counter(), time.process_time()
        rep = load_run(work / "warehouse.duckdb", run_dir)
        wh_s, wh_cpu = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"5. warehouse: {n_turns:,} request rows ({size / 1e6:,.0f} MB samples.jsonl) loaded in {wh_s:.2f} s"
            f" wall, {wh_cpu:.2f} s CPU (DuckDB's threads included) ({n_turns / wh_s:,.0f} rows/s;"
            f" requests table {rep.rows['requests']:,})"
        )
        rows.append(("warehouse load of a corpus-sized run (s)", wh_s, "-", None, "{:.2f}"))
    finally:
        if tmp is not None:
            tmp.cleanup()
    return _table(rows)


def _loadavg() -> str:
    """The 1, 5 and 15 min load averages (os.getloadavg), e.g. `1.65 0.94 0.49`."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _table(rows: list[tuple[str, float, str, bool | None, str]]) -> int:
    """Print the figures table and the load average; 0 when no target failed, else 1."""
    print(f"\n{'figure':<52} {'value':>10} {'target':>9}  result")
    for name, value, target, ok, fmt in rows:
        print(f"{name:<52} {fmt.format(value):>10} {target:>9}  {'' if ok is None else 'PASS' if ok else 'FAIL'}")
    print(f"load average at end: {_loadavg()}")
    return 0 if all(ok is not False for *_, ok, _ in rows) else 1


_CONVERT_ROUND = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from benchmaker.trajectories.convert import convert_paths

def forkserver_cpu_s():
    # the forkserver's own CPU s (utime + stime of /proc/<pid>/stat; its workers are not in it)
    total = 0.0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and b"multiprocessing.forkserver" in (d / "cmdline").read_bytes():
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    return total

if __name__ == "__main__":
    workers = None if sys.argv[4] == "auto" else int(sys.argv[4])
    t0, c0 = time.perf_counter(), time.process_time()
    report = convert_paths([Path(sys.argv[2])], Path(sys.argv[3]), workers=workers)
    wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"wall_s": wall_s, "cpu_s": cpu_s, "workers": report.workers,
                      "workers_cpu_s": report.workers_cpu_s, "workers_units": report.workers_units,
                      "units": len(report.files), "server_cpu_s": forkserver_cpu_s()}))
"""


def measure_conversion(log_dir: Path, work: Path, rounds: int, workers: int | None) -> dict[str, Any]:
    """Median conversion figures of `log_dir` in 1 process and with workers (module doc,
    step 2), `rounds` alternating rounds, each conversion in a fresh interpreter. Raises
    AssertionError when the two outputs differ; `out`: the workers' output file."""
    runs: dict[str, list[dict[str, Any]]] = {"serial": [], "par": []}
    outs = {"serial": work / "trajectories-1-process.jsonl", "par": work / "trajectories.jsonl"}
    arg = {"serial": "1", "par": "auto" if workers is None else str(workers)}
    env = {k: v for k, v in os.environ.items() if k != "BENCHMAKER_CONVERT_WORKERS"}
    for rnd in range(rounds):
        for kind in ("serial", "par") if rnd % 2 == 0 else ("par", "serial"):
            run = subprocess.run(
                [sys.executable, "-c", _CONVERT_ROUND, str(REPO), str(log_dir), str(outs[kind]), arg[kind]],
                check=True,
                capture_output=True,
                text=True,
                cwd=work,
                env=env,
            )
            runs[kind].append(json.loads(run.stdout.strip().splitlines()[-1]))
    digests = {kind: hashlib.sha256(path.read_bytes()).hexdigest() for kind, path in outs.items()}
    assert digests["serial"] == digests["par"], f"outputs differ: {digests}"
    outs["serial"].unlink()
    par = runs["par"]
    med = statistics.median
    return {
        "serial_wall_s": med(r["wall_s"] for r in runs["serial"]),
        "serial_cpu_s": med(r["cpu_s"] for r in runs["serial"]),
        "par_wall_s": med(r["wall_s"] for r in par),
        "par_cpu_s": med(r["cpu_s"] + r["workers_cpu_s"] + r["server_cpu_s"] for r in par),
        "par_parent_cpu_s": med(r["cpu_s"] for r in par),
        "par_workers_cpu_s": med(r["workers_cpu_s"] for r in par),
        "par_server_cpu_s": med(r["server_cpu_s"] for r in par),
        "workers": par[-1]["workers"],
        "par_parent_units": med(r["units"] - r["workers_units"] for r in par),
        "units": par[-1]["units"],
        "sha256": digests["par"],
        "out": outs["par"],
    }


_CONVERT_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from benchmaker.trajectories.convert import convert_paths
c0 = time.process_time()
convert_paths([Path(sys.argv[2])], Path(sys.argv[3]))
print(time.process_time() - c0)
"""


def compare_conversion(rev: str, log_dir: Path, work: Path, rounds: int) -> tuple[float, float]:
    """Median conversion CPU s of `log_dir` with revision `rev`'s code and with this
    checkout's, each run in a fresh interpreter (imports not counted), alternating, in
    one process each (BENCHMAKER_CONVERT_WORKERS=1: CPU s per process)."""

    old_tree = work / f"rev-{rev}"
    old_tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
    cpu: dict[Path, list[float]] = {old_tree: [], REPO: []}
    for rnd in range(rounds):
        for tree in (old_tree, REPO) if rnd % 2 == 0 else (REPO, old_tree):
            out = work / "trajectories-compare.jsonl"
            run = subprocess.run(
                [sys.executable, "-c", _CONVERT_CHILD, str(tree), str(log_dir), str(out)],
                check=True,
                capture_output=True,
                text=True,
                cwd=work,
                env={**os.environ, "BENCHMAKER_CONVERT_WORKERS": "1"},
            )
            cpu[tree].append(float(run.stdout.strip().splitlines()[-1]))
            out.unlink(missing_ok=True)
    return statistics.median(cpu[old_tree]), statistics.median(cpu[REPO])


def profile_conversion(log_dir: Path, out: Path, top: int) -> None:
    """Convert `log_dir` again in this process (workers=1) under cProfile and print the `top` functions by own time
    (cProfile's overhead inflates Python-level calls: read it as where, not how much)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(convert_paths, [log_dir], out, workers=1)  # the workers' time is not profiled here
    print(f"   conversion profile, top {top} by own time:")
    stats = pstats.Stats(prof)
    total = sum(tt for _, _, tt, _, _ in stats.stats.values())
    entries = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (file, line, fn), (_, calls, tt, ct, _) in entries:
        where = f"{Path(file).name}:{line}({fn})" if line else fn
        print(f"   {100 * tt / total:5.1f}% own {tt:6.2f} s  cum {ct:6.2f} s  {calls:>9,} calls  {where}")
    out.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
