"""Several worker processes driving one run on one host (docs/several-machines.md).

    result = run_sharded(BenchConfig(load="poisson:4000", duration_s=60), lanes_factory, workers=2)

Each worker process runs `BenchRunner(worker=k, shards=N)`: it owns a fixed slice of the
one arrival timeline (`benchmaker.engine.load_models`: arrival i of a deterministic schedule goes
to worker i mod N; Poisson and gamma run independent rate/N streams, whose union is the
full-rate process; closed-loop concurrency is divided), and writes its own samples shard
`samples-w<k>.jsonl` in the one bundle. All workers start on one t0: time.perf_counter_ns
is CLOCK_MONOTONIC on Linux, one clock for every process of the host, so the parent
picks a start instant shortly after every worker reported ready and each worker waits
for it. Durations never mix clocks of two hosts (each shard stamps with its own clock;
its wall-clock t0 is stored in its worker-k.json report).

The parent then computes the run's summary.json with the same function and SQL as a
single-process run (benchmaker.engine.summary.build_summary), over the union of the shards, and puts every worker's self-checks (loop lag,
CPU, in-flight, connections, wall-clock t0) under `self_checks.workers`. A worker that
dies is a verdict reason ("worker 1 died (exit code -9)"); the others' samples are kept.
A worker whose run fails (RunFailed: a full disk under its `samples-w<k>.jsonl`, which
keeps the whole samples of its last good flush) sends the one line of its failure to the
parent and exits 1 without a traceback; once every worker ended, the parent raises
RunFailed with those lines (each names its shard's file and the samples kept there) and
writes no summary, as a single-process run whose samples file could not be written.

Signals: SIGTERM or SIGHUP to the parent is passed on to every worker, each of which
stops as on Ctrl-C (BenchRunner: in-flight requests cancelled and recorded, its report
written with `interrupted`); the parent merges a partial summary and raises
KeyboardInterrupt(signal name). Ctrl-C in a terminal reaches every process of the group
by itself.

`lanes_factory` must be picklable (a module-level function or a functools.partial of
one): each worker builds its own workloads with it, after the process started.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.bundle import new_run_id, write_json_atomic
from benchmaker.engine.config import BenchConfig, usable_cpus
from benchmaker.engine.errors import ConfigError, RunFailed
from benchmaker.engine.load_models import ClosedLoop, LoadModel
from benchmaker.engine.runner import BenchRunner, Lane, RunResult, lane_loads, run_on_fresh_loop
from benchmaker.engine.summary import build_summary

LanesFactory = Callable[[], list[Lane]]

_READY_TIMEOUT_S = 120.0
_START_LEAD_NS = 200_000_000  # start 0.2 s after the last worker reported ready


def resolve_workers(value: int | str) -> int:
    """Number of worker processes: an int >= 1, or "auto" = the CPUs this process may
    use (os.sched_getaffinity). Raises ConfigError otherwise."""
    if value == "auto":
        return usable_cpus()
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"workers: expected a whole number >= 1 or 'auto' (got {value!r})") from None
    if n < 1:
        raise ConfigError(f"workers: expected a whole number >= 1 or 'auto' (got {value!r})")
    return n


def single_lane(build_workload: Callable[[], Any]) -> list[Lane]:
    """A lanes factory of one default lane whose workload `build_workload()` makes."""
    return [Lane("default", build_workload())]


def _worker_main(
    k: int,
    n: int,
    config_json: str,
    lanes_factory: LanesFactory,
    base_dir: str | None,
    manifest_extra: dict[str, Any] | None,
    ready: Any,
    start: Any,
    failed: Any,
) -> None:
    config = BenchConfig.model_validate_json(config_json)
    lanes = lanes_factory()
    ready.put(k)
    start_at_ns = start.get(timeout=_READY_TIMEOUT_S)
    runner = BenchRunner(
        config,
        lanes=lanes,
        worker=k,
        shards=n,
        samples_name=f"samples-w{k}.jsonl",
        base_dir=Path(base_dir) if base_dir else None,
        manifest_extra=manifest_extra,
        start_at_ns=start_at_ns,
    )
    try:
        run_on_fresh_loop(runner.run())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass  # stopped by a signal: the partial report is written, the parent merges it
    except RunFailed as exc:  # its one line goes to the parent, which says it (no traceback here)
        failed.put((k, str(exc)))
        failed.close()
        failed.join_thread()  # the line is in the pipe before this process ends
        raise SystemExit(1) from None


def _merge_self_checks(reports: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    checks = [r["self_checks"] for r in reports]
    worst: dict[str, Any] = max((c["loop_lag_ms"] for c in checks), key=lambda s: s.get("p99") or 0.0, default={})
    merged = {
        "workers": checks,
        "loop_lag_ms": worst,
        "client_cpu_s": sum(c["client_cpu_s"] for c in checks),
        "wall_s": max((c["wall_s"] for c in checks), default=None),
        "max_in_flight": sum(c["max_in_flight"] for c in checks),
        "in_flight_cap": sum(c.get("in_flight_cap") or 0 for c in checks),
        "in_flight_cap_source": next((c.get("in_flight_cap_source") for c in checks), None),
        "cap_waits": sum(c.get("cap_waits") or 0 for c in checks),
        "connections_opened": sum(c["connections_opened"] or 0 for c in checks),
    }
    return merged, worst


def merge_shards(
    bundle_dir: Path,
    config: BenchConfig,
    loads: Mapping[str, LoadModel],
    n: int,
    exit_codes: list[int | None] | None = None,
    interrupted: bool = False,
    interrupted_by: str | None = None,
) -> dict[str, Any]:
    """Write and return the summary.json of the run `config` (its run_id set; else the name of `bundle_dir`, which is out_dir/run_id) whose `n`
    shards wrote `samples-w<k>.jsonl` and `worker-<k>.json` into `bundle_dir` (one host
    or several sharing a path): benchmaker.engine.summary.build_summary with the targets of
    the whole run (`loads`: lane name -> load model, see lane_loads). A shard whose exit
    code is non-zero ("worker k died (exit code C)"), None ("worker k did not finish in
    time (stopped)") or that left no report ("worker k left no report") is a verdict
    reason; its samples, if any, still count. `interrupted_by`: the stop signal this
    process passed on, else the first a shard reported."""
    bundle_dir = Path(bundle_dir)
    failures, reports = [], []
    for k in range(n):
        report = bundle_dir / f"worker-{k}.json"
        code = exit_codes[k] if exit_codes is not None else 0
        if code is None:
            failures.append(f"worker {k} did not finish in time (stopped)")
        elif code != 0:
            failures.append(f"worker {k} died (exit code {code})")
        elif not report.exists():
            failures.append(f"worker {k} left no report")
        if report.exists():
            rep = orjson.loads(report.read_bytes())
            interrupted = interrupted or rep.get("interrupted", False)
            interrupted_by = interrupted_by or rep.get("interrupted_by")  # a shard's SIGTERM
            reports.append(rep)
    self_checks, worst_lag = _merge_self_checks(reports)
    paths = sorted(bundle_dir.glob("samples-w*.jsonl"))
    summary = build_summary(
        config,
        loads,
        paths,
        self_checks,
        worst_lag,
        interrupted,
        failures,
        run_id=config.run_id or bundle_dir.name,
        interrupted_by=interrupted_by,
    )
    summary["workers"] = n
    bundle_dir.mkdir(parents=True, exist_ok=True)  # no shard ran (all stopped before their start)
    write_json_atomic(bundle_dir / "summary.json", summary)
    return summary


def _failed_lines(failed: Any) -> list[str]:
    """The lines failed workers sent on `failed`, in worker order. Called once every
    worker has ended: what each sent is in the queue's pipe (it waited for that)."""
    lines: dict[int, str] = {}
    while True:
        try:
            k, line = failed.get_nowait()
        except queue_mod.Empty:
            return [lines[k] for k in sorted(lines)]
        lines[k] = line


def check_shares(loads: Mapping[str, LoadModel], n: int, what: str = "workers") -> None:
    """Refuse a closed loop of fewer requests in flight than `n` workers: a worker whose
    share is none would send nothing, and its share of max_requests would never be sent
    (closed:1 on 4 workers sent 1 request of 2). Raises ConfigError naming `what`. The
    CLI's fixed-load commands call it before run_sharded; a sweep point's share is its
    own (benchmaker.sweep)."""
    for name, model in loads.items():
        if isinstance(model, ClosedLoop) and model.concurrency < n:
            lane = "" if name == "default" else f" (lane {name})"
            raise ConfigError(
                f"{what}: {n} worker processes share {model.concurrency} closed-loop request(s) in flight{lane}: "
                f"give at most {model.concurrency} workers, or more concurrency"
            )


def run_sharded(
    config: BenchConfig,
    lanes_factory: LanesFactory,
    workers: int,
    *,
    base_dir: Path | None = None,
    manifest_extra: dict[str, Any] | None = None,
) -> RunResult:
    """Run `config` with `workers` processes and merge them into one bundle (see the
    module docstring). Returns the merged RunResult; `self_checks.max_in_flight` is the
    sum of the workers' maxima (an upper bound of the run's). Raises ConfigError when
    `workers` < 1, RuntimeError when a worker never reported ready, and RunFailed (the
    failed workers' lines, in worker order; no summary written) when a worker's run
    failed."""
    n = resolve_workers(workers)
    run_id = config.run_id or new_run_id(config.kind)
    config = config.model_copy(update={"run_id": run_id, "workers": n})
    loads = lane_loads(config, lanes_factory(), base_dir)  # refuses bad lanes before any process starts
    bundle_dir = Path(config.out_dir) / run_id
    bundle_dir.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    ready, failed = ctx.Queue(), ctx.Queue()
    starts = [ctx.Queue() for _ in range(n)]
    procs = [
        ctx.Process(
            target=_worker_main,
            name=f"benchmaker-worker-{k}",
            args=(
                k,
                n,
                config.model_dump_json(),
                lanes_factory,
                str(base_dir) if base_dir else None,
                manifest_extra,
                ready,
                starts[k],
                failed,
            ),
        )
        for k in range(n)
    ]
    for p in procs:
        p.start()
    interrupted = False
    received: list[str] = []

    def pass_on(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signum)
        raise KeyboardInterrupt(received[0])

    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        try:
            previous[name] = signal.signal(getattr(signal, name), pass_on)
        except (ValueError, AttributeError):  # not the main thread / not POSIX
            pass
    try:
        pending, started = set(range(n)), set()
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while pending:
            try:
                k = ready.get(timeout=0.5)
                pending.discard(k)
                started.add(k)
            except queue_mod.Empty:
                pending -= {k for k in pending if not procs[k].is_alive()}  # died: see failures
                if pending and time.monotonic() > deadline:
                    raise RuntimeError(f"worker(s) {sorted(pending)} not ready after {_READY_TIMEOUT_S:g} s") from None
        if not started:
            raise RuntimeError("no worker process started (see their stderr)")
        start_at_ns = time.perf_counter_ns() + _START_LEAD_NS
        for q in starts:
            q.put(start_at_ns)
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        interrupted = True
        for p in procs:
            p.join(timeout=30)
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    failures = _failed_lines(failed)
    if failures:
        raise RunFailed("; ".join(failures))
    summary = merge_shards(
        bundle_dir,
        config,
        loads,
        n,
        [p.exitcode for p in procs],
        interrupted,
        interrupted_by=received[0] if received else None,
    )
    result = RunResult(run_id, bundle_dir, summary)
    if interrupted or summary["partial"]:
        raise KeyboardInterrupt(*received[:1])
    return result
