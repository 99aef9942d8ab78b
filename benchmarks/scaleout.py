"""Scale-out on one host: 1 vs 2 engine processes (not run by CI).

    .venv/bin/python benchmarks/scaleout.py [--seconds 5] [--rate 100000] [--concurrency 64]

1. No-op transport (`BenchConfig(transport="null")`, HttpWorkload, nothing leaves the
   process), open loop: one process (BenchRunner) at `constant:RATE` (default 100,000/s,
   above its ceiling of ~45,000/s here) gives the 1-process ceiling C; then two
   processes (benchmaker.engine.workers.run_sharded, half the arrivals each) are offered
   `--target` x C (default 1.85). req/s = ok requests / self_checks.wall_s (the slowest
   process's wall time from t0 to its last response, so falling behind shows).
   Scaling = req/s(2) / C; target >= 1.8x (the machine has 2 cores and the client is
   CPU-bound, so this is the engine's scaling, minus what else runs on the machine).
   Offering two processes far more than they can do would make each pile up ~100k
   queued tasks, and that measures the backlog, not the engine.
2. Replay server (benchmaker.replay_server.process.start_replay_server, instant latency, one trajectory of
   16 words, OpenAIChatWorkload streaming), `closed:C` (default 64): the same 1 vs 2
   processes. The server is a third process on the same 2 cores; its CPU use
   (utime+stime from /proc/PID/stat over the run, in cores) is printed beside each
   figure: when the server takes a core, two client processes cannot reach 2x, and the
   figure says so.

First it prints how many cores two busy-looping processes get right now (`free_cores`):
on a machine that other work shares, that, not the engine, bounds the scaling.

Also prints each run's client CPU (sum over processes, in cores) and verdict.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmaker.engine.config import BenchConfig  # noqa: E402
from benchmaker.engine.runner import BenchRunner, RunResult  # noqa: E402
from benchmaker.engine.workers import run_sharded, single_lane  # noqa: E402
from benchmaker.replay_server.process import start_replay_server  # noqa: E402
from benchmaker.trajectories.trajectory import Response, Source, Trajectory, Turn, match_key_for  # noqa: E402
from benchmaker.workloads.datasets import StaticDataset  # noqa: E402
from benchmaker.workloads.http import HttpWorkload  # noqa: E402
from benchmaker.workloads.openai_chat import OpenAIChatWorkload  # noqa: E402

PROMPT = "scaleout probe"
_TICK = os.sysconf("SC_CLK_TCK")


def _null_workload() -> HttpWorkload:
    return HttpWorkload("http://null/")


def _chat_workload(url: str) -> OpenAIChatWorkload:
    return OpenAIChatWorkload(url, "m", StaticDataset([PROMPT]))


def _cpu_s(pid: int) -> float:
    """utime + stime of process `pid` in s (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _spin(seconds: float) -> float:
    cpu0 = time.process_time()  # not the interpreter's start-up
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return time.process_time() - cpu0


def free_cores(seconds: float = 1.0) -> float:
    """Cores two busy-looping processes actually get for `seconds` (CPU s / wall s, summed):
    2.0 on an idle 2-core machine; less when other work shares it, which caps any 1 -> 2
    process scaling figure below."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(2) as pool:
        return sum(pool.map(_spin, [seconds, seconds])) / seconds


def _run(cfg: BenchConfig, factory: Any, workers: int) -> RunResult:
    if workers == 1:
        return BenchRunner(cfg, lanes=factory()).run_sync()
    return run_sharded(cfg, factory, workers=workers)


def _figure(result: RunResult) -> tuple[float, float]:
    """(ok requests per s of the run's wall time, client CPU in cores = CPU s / wall s)."""
    s = result.summary
    sc = s["self_checks"]
    return s["run"]["n_ok"] / sc["wall_s"], sc["client_cpu_s"] / sc["wall_s"]


def _line(name: str, workers: int, result: RunResult, server_cores: float | None = None) -> float:
    rps, cores = _figure(result)
    v = result.summary["verdict"]
    extra = f", server {server_cores:.2f} cores" if server_cores is not None else ""
    print(
        f"  {name:8s} {workers} process(es): {rps:9,.0f} req/s, client {cores:.2f} cores{extra}, "
        f"{rps / cores if cores else 0:9,.0f} req per client CPU s; n_ok {result.summary['run']['n_ok']:,}; "
        f"load avg {os.getloadavg()[0]:.2f}; verdict valid={v['valid']}"
    )
    return rps


def _store(path: Path) -> None:
    content = " ".join(f"w{i}" for i in range(16))
    traj = Trajectory(
        trajectory_id="scaleout-probe",
        source=Source(format="synthetic", path=str(path), sha256=hashlib.sha256(content.encode()).hexdigest()),
        match_key=match_key_for(PROMPT),
        first_user=PROMPT,
        turns=[Turn(index=0, response=Response(content=content, finish_reason="stop"))],
    )
    path.write_text(traj.model_dump_json() + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rate", type=float, default=100_000.0, help="1-process offered rate (above its ceiling)")
    ap.add_argument("--target", type=float, default=1.85, help="2 processes get this times the 1-process ceiling")
    args = ap.parse_args()
    print(
        f"machine: {os.cpu_count()} CPUs, usable {len(os.sched_getaffinity(0))}, load avg {os.getloadavg()[0]:.2f}; "
        f"null: constant:{args.rate:g}; replay: closed:{args.concurrency}; "
        f"{args.seconds:g} s per run (+1 s warm-up left out)"
    )
    cores = free_cores()
    print(f"two busy-looping processes get {cores:.2f} cores (2.00 = idle machine; caps the scaling below)")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        base = dict(load=f"closed:{args.concurrency}", duration_s=args.seconds + 1.0, warmup_s=1.0)  # replay

        print("1. no-op transport (HttpWorkload, transport=null), open loop")
        cfg = BenchConfig(
            load=f"constant:{args.rate:g}", duration_s=args.seconds, transport="null", out_dir=Path(tmp) / "null"
        )
        factory = partial(single_lane, _null_workload)
        ceiling = _line("null", 1, _run(cfg, factory, 1))
        offered = round(ceiling * args.target)
        cfg = cfg.model_copy(update={"load": f"constant:{offered}"})
        print(
            f"  one process's ceiling: {ceiling:,.0f} req/s; two processes offered {args.target:g}x that = "
            f"constant:{offered}"
        )
        r2 = _line("null", 2, _run(cfg, factory, 2))
        scale = r2 / ceiling if ceiling else 0.0
        ok = scale >= 1.8
        print(f"  scaling 1 -> 2 processes: {scale:.2f}x (target >= 1.8x)  {'PASS' if ok else 'FAIL'}")

        print("2. replay server (instant latency, 16-word answer, streaming chat)")
        store = Path(tmp) / "trajectories.jsonl"
        _store(store)
        with start_replay_server(store) as server:
            cfg = BenchConfig(**base, out_dir=Path(tmp) / "replay")
            factory = partial(single_lane, partial(_chat_workload, server.url + "/v1/chat/completions"))
            rates = []
            for workers in (1, 2):
                c0, t0 = _cpu_s(server.pid), time.monotonic()
                result = _run(cfg, factory, workers)
                server_cores = (_cpu_s(server.pid) - c0) / (time.monotonic() - t0)
                rates.append(_line("replay", workers, result, server_cores))
            misses = server.stats().get("misses")
        print(
            f"  scaling 1 -> 2 processes: {rates[1] / rates[0]:.2f}x (client and server share "
            f"{len(os.sched_getaffinity(0))} cores; server misses {misses})"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
