"""One shard of a distributed agent-replay sweep point, and the merge of a point's
shards (docs/several-machines.md). Plain functions; the Prefect flows in
flows/swebench_replay_shard.py are thin shells over them.

Which episode slots and episodes shard k owns (`shard_concurrency`, `shard_plan`: the
first C episodes start together across the shards), its own loopback replay server, the
readiness barrier (benchmaker.engine.shared_start: `ready-w<k>.json`, start at
max(`start_wall_ns`, the last ready time + MIN_START_LEAD_S)) and the clocks (each
shard stamps on its own monotonic clock, `t0_ns` the shared start on it):
docs/several-machines.md. Each shard plays its episodes and leaves in
`<run_dir>/points/<point>/_shards/a<start_wall_ns>/w<k>/`:

    samples.jsonl, episodes.jsonl, turns.jsonl,     benchmaker.sweep.point_run.play_episodes (the engine,
    episode_samples.jsonl, engine_summary.json      closed:<the shard's concurrency>)
    server_stats.json                               its replay server's /stats
    shard.json                                      its report (run_replay_shard)

and, while it plays, its live progress in `<run_dir>/points/<point>/_shards/a<start_wall_ns>/
progress-w<k>.json` (the exchange's same key): the latest benchmaker.progress.ProgressEvent of
the shard (episodes and model calls done/planned, requests in flight, misses, its ETA),
rewritten every second. The coordinator merges the shards' files into the point's
progress (`read_shard_progress`, benchmaker.progress.watch_shards).

    report = await run_replay_shard(ReplayShardPoint(...worker=k, shards=N...), trajs)
    row = merge_replay_point(run_dir, "c8", attempt=T, concurrency=8, exit_codes=[0, 0])

When the hosts share no filesystem, `exchange` (a path or fsspec URL,
benchmaker.engine.exchange) carries the files instead: the orchestrator uploads the
trajectories there, each shard downloads them, writes into a temporary directory and
uploads its files under `<run_id>/points/<point>/_shards/a<start_wall_ns>/w<k>/`, and
`fetch_replay_shards` brings them into the same place under the run directory before
the merge.

`merge_replay_point` writes the point's files as a single-process point has them
(episodes.jsonl and turns.jsonl with `shard` on every line, samples-w<k>.jsonl per
shard, server_stats.json summed over the shards, concurrency.json over all episodes)
plus shards.json, and returns the row of benchmaker.sweep.sweep.summarize_point.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from benchmaker.agent.harness import SandboxFactory, concurrency_proof
from benchmaker.agent.verifier import TaskSpec
from benchmaker.engine.bundle import write_json_atomic
from benchmaker.engine.exchange import Exchange, shards_key
from benchmaker.engine.shared_start import (
    LATE_START_LIMIT_MS,
    ReadyBoard,
    StartBarrier,
    measure_clock_offset,
    sleep_until,
)
from benchmaker.progress import ProgressEvent, ProgressWriter, event_from_json, watch_point
from benchmaker.replay_server import process as _process
from benchmaker.sweep.plan import context_chars
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import (
    EPISODE_SAMPLES,
    append_episode_lines,
    engine_reasons,
    engine_self_checks,
    play_episodes,
)
from benchmaker.sweep.sweep import episode_plan, point_dir, summarize_point, write_point_summary
from benchmaker.trajectories.convert import read_trajectories
from benchmaker.trajectories.trajectory import Trajectory

__all__ = [
    "ReplayShardPoint",
    "fetch_replay_shards",
    "merge_replay_point",
    "merge_server_stats",
    "progress_name",
    "read_shard_progress",
    "run_replay_shard",
    "shard_concurrency",
    "shard_dir",
    "shard_plan",
    "shards_for",
    "write_atomic",
]


@dataclass(frozen=True)
class ReplayShardPoint:
    """What one shard of one agent-replay sweep point needs (all JSON-able: it is a
    flow/task parameter): the whole point's spec `point` (benchmaker.sweep.point.
    ReplayPoint: a closed loop; its `episodes` and concurrency are the WHOLE point's,
    `point.shards` the number of shards, shards_for), where the run is, and which shard
    of which attempt this is. `trajectories`, `run_dir` and the point's `task_dirs`
    must be the same absolute paths on every host. With `exchange` (a path or fsspec
    URL, benchmaker.engine.exchange), `trajectories` is a key under it and `run_dir` is
    not written by the shard. `start_wall_ns` is the attempt's earliest start;
    `ready_timeout_s` how long after it the shards wait for each other's ready records
    (None: DEFAULT_READY_TIMEOUT_S; module docstring)."""

    point: ReplayPoint
    trajectories: str
    run_dir: str
    run_id: str
    worker: int
    start_wall_ns: int
    exchange: str | None = None
    ready_timeout_s: float | None = None

    @property
    def sweep_point(self) -> str:
        """The point's label, "c<concurrency>"."""
        return self.point.name

    @property
    def concurrency(self) -> int:
        """Episodes in flight of the whole point (its closed loop)."""
        c = self.point.concurrency
        assert c is not None, "a sharded point is a closed loop (the parameters model's rule)"
        return c

    @property
    def shards(self) -> int:
        """The number of shards of the point."""
        return self.point.shards

    def as_params(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (flow-run parameters)."""
        return {**asdict(self), "point": self.point.model_dump(mode="json")}


def shards_for(concurrency: int, shards: int) -> int:
    """How many shards a point at `concurrency` runs on `shards` hosts: min of the two
    (a shard owns at least one episode slot)."""
    return max(1, min(concurrency, shards))


def shard_concurrency(concurrency: int, shards: int, worker: int) -> int:
    """Episodes in flight on shard `worker` of `shards`: the slots s < `concurrency`
    with s mod shards == worker, i.e. concurrency // shards, plus one when
    worker < concurrency mod shards. The shards' figures sum to `concurrency`."""
    return concurrency // shards + (1 if worker < concurrency % shards else 0)


def shard_plan(plan: Sequence[Trajectory], concurrency: int, shards: int, worker: int) -> list[Trajectory]:
    """The episodes of the point's `plan` that shard `worker` of `shards` plays: those
    whose slot (index mod `concurrency`) the shard owns (shard_concurrency), in plan
    order. The shards' plans partition `plan`."""
    return [t for i, t in enumerate(plan) if (i % concurrency) % shards == worker]


def shard_dir(run_dir: Path, sweep_point: str, worker: int, attempt: int) -> Path:
    """`<run_dir>/points/<sweep_point>/_shards/a<attempt>/w<worker>`: where shard `worker`
    of one attempt of the point (`attempt` = its shared start, `start_wall_ns`) leaves
    its files, so a straggler of an earlier attempt never mixes in (removed by
    merge_replay_point)."""
    return point_dir(Path(run_dir), sweep_point) / "_shards" / f"a{attempt}" / f"w{worker}"


def progress_name(worker: int) -> str:
    """The file name of shard `worker`'s live progress, beside the attempt's shard dirs."""
    return f"progress-w{worker}.json"


_PROGRESS_FILE = re.compile(r"a(\d+)/progress-w(\d+)\.json$")


def read_shard_progress(
    run_dir: Path, run_id: str, sweep_point: str, exchange: str | None = None
) -> tuple[int | None, list[ProgressEvent]]:
    """The live progress of a distributed point's shards (a benchmaker.progress.ShardReader):
    (the latest attempt's shared start in wall-clock ns, or None when no shard has
    written yet; the events of that attempt's shards, by worker), read from the run
    directory or, with `exchange`, from there. A file being rewritten or unreadable is
    skipped this time."""
    if exchange:
        found = Exchange(exchange).read_glob(f"{shards_key(run_id, sweep_point)}/a*/progress-w*.json")
    else:
        found = {}
        for path in (point_dir(Path(run_dir), sweep_point) / "_shards").glob("a*/progress-w*.json"):
            try:
                found[path.parent.name + "/" + path.name] = path.read_bytes()
            except OSError:
                continue
    by_attempt: dict[int, dict[int, ProgressEvent]] = {}
    for key, data in found.items():
        m = _PROGRESS_FILE.search(key)
        if m is None:
            continue
        try:
            by_attempt.setdefault(int(m.group(1)), {})[int(m.group(2))] = event_from_json(data)
        except ValueError:
            continue
    if not by_attempt:
        return None, []
    attempt = max(by_attempt)
    return attempt, [ev for _, ev in sorted(by_attempt[attempt].items())]


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file beside it (readers never see part of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


async def run_replay_shard(
    p: ReplayShardPoint,
    trajectories: Sequence[Trajectory] | None = None,
    *,
    sandbox_factory: SandboxFactory | None = None,
    tasks: dict[str, TaskSpec] | None = None,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Run shard `p.worker` of `p.shards` of one sweep point on this host (module
    docstring): start a replay server over `p.trajectories` (`p.point.latency`,
    `p.point.divergence`), wait for `p.start_wall_ns`, play the shard's episodes
    (`trajectories`: the file's trajectories in order, read from it when None) with
    its share of the concurrency, then write its files into shard_dir and stop the
    server. With `p.exchange`, `p.trajectories` is a key there and the files go through
    it (module docstring); so does its progress, progress-w<k>.json, while it plays.

    Returns the shard's report (also written to shard.json): {"worker", "shards",
    "concurrency" (this shard's), "episodes_planned" (None for a duration), "hostname",
    "pid", "clock" (benchmaker.engine.shared_start.measure_clock_offset, or
    Exchange.clock_offset against the exchange), "start_wall_ns" (the shared start the
    barrier gave), "barrier" (benchmaker.engine.shared_start.SharedStart.as_dict), "start_late_ns" (t0
    by this host's wall clock minus the shared start), "wake_late_ns" (on the monotonic
    clock: when the shard's first episode was sent after the shared start, or the
    wake-up's lateness when it had none), "server_pid", "engine" (the engine's figures
    of the shard's episodes, benchmaker.sweep.point_run.engine_self_checks, and its verdict
    reasons, which the merge makes the point's)}. The engine sets up (files, manifest)
    before the shared start and starts the episodes on it.

    Raises ValueError when not 0 <= worker < shards <= concurrency; ShardsNotReady
    naming the missing shards when they are not ready `p.ready_timeout_s` after
    `p.start_wall_ns`, ShardLate when this shard saw the last ready record only after
    the shared start (nothing is sent then); ReplayServerError when
    the server does not start. Episode failures are episodes, never exceptions."""
    if not 0 <= p.worker < p.shards <= p.concurrency:
        raise ValueError(
            f"worker: expected 0 <= worker < shards <= concurrency={p.concurrency} "
            f"(got worker {p.worker}, shards {p.shards})"
        )
    what = f"shard {p.worker}/{p.shards} of {p.sweep_point}"
    exchange = Exchange(p.exchange) if p.exchange else None
    local = Path(tempfile.mkdtemp(prefix="benchmaker-replay-shard-")) if exchange else None
    try:
        key = shards_key(p.run_id, p.sweep_point, p.start_wall_ns)
        if exchange is not None and local is not None:
            traj_path = exchange.get_file(p.trajectories, local / "trajectories.jsonl")
            out = local / f"w{p.worker}"
            clock = exchange.clock_offset(key)
            board = ReadyBoard.in_exchange(exchange, key)
            put = partial(exchange.put_bytes, f"{key}/{progress_name(p.worker)}")
        else:
            traj_path = Path(p.trajectories)
            out = shard_dir(Path(p.run_dir), p.sweep_point, p.worker, p.start_wall_ns)
            clock = measure_clock_offset(out.parent)
            board = ReadyBoard.in_dir(out.parent)
            put = partial(write_atomic, out.parent / progress_name(p.worker))
        trajs = list(read_trajectories(traj_path)) if trajectories is None else trajectories
        report = await _play_shard(
            p,
            trajs,
            traj_path,
            out,
            board,
            what,
            sandbox_factory=sandbox_factory,
            tasks=tasks,
            api_key=api_key,
            progress=put,
        )
        report["clock"] = clock
        write_json_atomic(out / "shard.json", report)
        if exchange is not None:
            exchange.put_dir(out, f"{key}/w{p.worker}")
    finally:
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)
    return report


async def _start_server(traj_path: Path, latency: str, divergence: str) -> _process.ReplayServerHandle:
    """benchmaker.replay_server.process.start_replay_server in a thread, with a fresh
    bearer token (256 random bits; the handle's `token`); a server that comes up after
    the caller was cancelled is stopped, never left running."""
    started = asyncio.ensure_future(
        asyncio.to_thread(
            _process.start_replay_server,
            traj_path,
            latency=latency,
            divergence=divergence,
            token=secrets.token_urlsafe(32),
        )
    )
    try:
        return await asyncio.shield(started)
    except asyncio.CancelledError:
        started.add_done_callback(_stop_if_started)
        raise


def _stop_if_started(fut: asyncio.Future) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().stop(grace_s=2.0)


async def _play_shard(
    p: ReplayShardPoint,
    trajectories: Sequence[Trajectory],
    traj_path: Path,
    out: Path,
    board: ReadyBoard,
    what: str,
    *,
    sandbox_factory: SandboxFactory | None,
    tasks: dict[str, TaskSpec] | None,
    api_key: str | None,
    progress: Callable[[bytes], None] | None = None,
) -> dict[str, Any]:
    """The shard's replay server, wait and episodes (run_replay_shard), its progress
    through `progress` (a ProgressWriter's put: watch_point's events every second); its
    report without the clock."""
    conc = shard_concurrency(p.concurrency, p.shards, p.worker)
    plan = None
    if p.point.duration_s is None:
        plan = shard_plan(
            episode_plan(trajectories, p.concurrency, p.point.episodes), p.concurrency, p.shards, p.worker
        )
    server = await _start_server(traj_path, p.point.latency, p.point.divergence)
    watching = AsyncExitStack()
    try:
        # with the server up and the engine set up: the barrier, then t0 on this host's clock
        ready = StartBarrier(
            board,
            worker=p.worker,
            shards=p.shards,
            earliest_wall_ns=p.start_wall_ns,
            timeout_s=p.ready_timeout_s,
            what=what,
        )
        if out.exists():
            shutil.rmtree(out)
        if progress is not None:  # totals and the ETA's work from the shard's plan (None: run for a duration)
            watch = watch_point(
                p.sweep_point,
                stats=server.stats,
                episodes_file=out / "episodes.jsonl",
                episodes_total=None if plan is None else len(plan),
                calls_total=None if plan is None else sum(len(t.turns) for t in plan),
                duration_s=p.point.duration_s,
                work=None if plan is None else [context_chars(t) for t in plan],
                slots=conc,
                sink=ProgressWriter(progress),
            )
            await watching.enter_async_context(watch)
        engine: dict[str, Any] = {}
        if plan == []:  # fewer episodes than slots: this shard's slots got none
            wake_late_ns: int | None = await sleep_until(await ready())
            t0_wall_ns = time.time_ns()
            out.mkdir(parents=True)
            for name in ("samples.jsonl", "episodes.jsonl", "turns.jsonl"):
                (out / name).touch()
        else:
            # the engine sets up (files, manifest) before the shared start, then waits for it
            played = await play_episodes(
                plan if plan is not None else trajectories,
                server.url,
                out,
                p.point.with_load(f"closed:{conc}"),  # this shard's share of the slots
                run_id=p.run_id,
                sweep_point=p.sweep_point,
                sandbox_factory=sandbox_factory,
                tasks=tasks,
                api_key=api_key or server.token,
                ready=ready,
                episode_prefix=f"{p.sweep_point}-w{p.worker}",
                index_start=p.worker,
                index_step=p.shards,
            )
            summary = played.engine_summary
            t0_wall_ns = summary["self_checks"]["t0_wall_ns"]
            wake_late_ns = _first_sent_ns(out / EPISODE_SAMPLES)
            engine = {**engine_self_checks(summary), "verdict_reasons": engine_reasons(summary)}
        write_json_atomic(out / "server_stats.json", await asyncio.to_thread(server.stats))
    finally:
        await watching.aclose()  # its last (finished) event, while the server still answers /stats
        await asyncio.to_thread(server.stop)
    shared = ready.shared
    assert shared is not None, "set by the barrier, which both branches awaited"
    return {
        "worker": p.worker,
        "shards": p.shards,
        "concurrency": conc,
        "episodes_planned": None if plan is None else len(plan),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "clock": None,
        "start_wall_ns": shared.start_wall_ns,
        "barrier": shared.as_dict(),
        "start_late_ns": t0_wall_ns - shared.start_wall_ns,
        "wake_late_ns": wake_late_ns,
        "server_pid": server.pid,
        "engine": engine,
    }


def _first_sent_ns(path: Path) -> int | None:
    """The earliest `sent_ns` in an engine samples file (ns after its t0), None when none."""
    sent = [orjson.loads(line).get("sent_ns") for line in path.read_bytes().splitlines() if line.strip()]
    return min((t for t in sent if t is not None), default=None)


def fetch_replay_shards(run_dir: Path, run_id: str, sweep_point: str, exchange: str | None, attempt: int) -> list[Path]:
    """Download the shards' files of attempt `attempt` (its start_wall_ns) of
    `sweep_point` from the exchange at `exchange` into
    `<run_dir>/points/<sweep_point>/_shards/a<attempt>/`, then delete the point's shard
    files there (of every attempt); returns the local paths. Nothing to do (returns [])
    when `exchange` is None."""
    if not exchange:
        return []
    local = point_dir(Path(run_dir), sweep_point) / "_shards" / f"a{attempt}"
    return Exchange(exchange).fetch_attempt(run_id, sweep_point, attempt, local)


def merge_server_stats(stats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One replay-server /stats dict (benchmaker.replay_server.server ReplayStats.snapshot) for several
    servers: integer counters summed (nested dicts, e.g. misses, divergences and the
    per-trajectory counts, key by key), `uptime_s` the max, `recent_unknown_keys` the
    last 20 of all; plus "servers": the number merged."""

    def add(a: Any, b: Any, key: str) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            return {k: add(a[k], b[k], k) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}}
        if isinstance(a, list) and isinstance(b, list):
            return (a + b)[-20:]
        if key == "uptime_s":
            return max(a, b)
        return a + b

    merged: dict[str, Any] = {}
    for s in stats:
        merged = add(merged, s, "") if merged else dict(s)
    merged["servers"] = len(stats)
    return merged


def merge_replay_point(
    run_dir: Path,
    sweep_point: str,
    *,
    attempt: int,
    concurrency: int,
    exit_codes: Sequence[int | None],
    shard_info: Sequence[dict[str, Any]] | None = None,
    episodes_target: int | None = None,
    duration_s: float | None = None,
) -> dict[str, Any]:
    """Merge the `len(exit_codes)` shards of attempt `attempt` (its start_wall_ns) of
    the point `sweep_point` (target `concurrency`) under `run_dir` into the point's files (module docstring) and
    return its summary row (benchmaker.sweep.sweep.summarize_point, plus `shards`).

    Exit code 0 = the shard's run completed; anything else is a verdict reason ("shard
    k failed (exit code C)", or for None "shard k did not finish in time (stopped)"), a
    completed shard without shard.json one too, and whatever episodes it wrote still count. Episode
    lines get the point's `concurrency` and their slot in the point as `worker`. A shard that started more than
    LATE_START_LIMIT_MS after the shared start is a reason too. shards.json keeps every
    shard's report with its exit code and `shard_info` (flow run ids, states)."""
    pdir = point_dir(Path(run_dir), sweep_point)
    n = len(exit_codes)
    reasons: list[str] = []
    reports: list[dict[str, Any]] = []
    stats: list[dict[str, Any]] = []
    intervals: list[tuple[int, int]] = []
    info = list(shard_info or [{} for _ in range(n)])
    with open(pdir / "episodes.jsonl", "wb") as ep_f, open(pdir / "turns.jsonl", "wb") as turn_f:
        for k in range(n):
            sdir = shard_dir(Path(run_dir), sweep_point, k, attempt)
            # an episode records the point's target concurrency, not its shard's share
            eps = append_episode_lines(sdir / "episodes.jsonl", ep_f, k, n, {"shard": k, "concurrency": concurrency})
            intervals += [(e["started_ns"], e["ended_ns"]) for e in eps]
            append_episode_lines(sdir / "turns.jsonl", turn_f, k, n, {"shard": k})
            if (sdir / "samples.jsonl").is_file():  # the shard's model calls: its requests
                os.replace(sdir / "samples.jsonl", pdir / f"samples-w{k}.jsonl")
            if (sdir / EPISODE_SAMPLES).is_file():
                os.replace(sdir / EPISODE_SAMPLES, pdir / f"episode_samples-w{k}.jsonl")
            if (sdir / "server_stats.json").is_file():
                stats.append(orjson.loads((sdir / "server_stats.json").read_bytes()))
            report = orjson.loads((sdir / "shard.json").read_bytes()) if (sdir / "shard.json").is_file() else None
            code = exit_codes[k]
            if code is None:
                reasons.append(f"shard {k} did not finish in time (stopped)")
            elif code != 0:
                reasons.append(f"shard {k} failed (exit code {code})")
            elif report is None:
                reasons.append(f"shard {k} completed but left no report (shard.json)")
            elif report["start_late_ns"] / 1e6 > LATE_START_LIMIT_MS:
                reasons.append(
                    f"shard {k} started {report['start_late_ns'] / 1e6:.1f} ms after the shared start "
                    f"(limit {LATE_START_LIMIT_MS:g} ms)"
                )
            if report is not None:
                reasons.extend(
                    f"shard {k} engine: {r}" for r in (report.get("engine") or {}).get("verdict_reasons", [])
                )
            reports.append({**(report or {"worker": k}), "exit_code": code, **(info[k] if k < len(info) else {})})
    if stats:
        write_json_atomic(pdir / "server_stats.json", merge_server_stats(stats))
    proof = concurrency_proof(intervals, concurrency)
    write_json_atomic(pdir / "concurrency.json", proof.to_dict())
    write_json_atomic(pdir / "shards.json", reports)
    shutil.rmtree(pdir / "_shards", ignore_errors=True)
    row = summarize_point(
        pdir,
        sweep_point=sweep_point,
        concurrency=concurrency,
        episodes_target=episodes_target,
        duration_s=duration_s,
        verdict_reasons=reasons,
        shards=n,
    )
    write_point_summary(pdir, row)
    return row
