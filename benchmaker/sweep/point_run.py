"""Run one agent-replay sweep point on the engine.

    row = await run_point(trajs, base_url, run_dir, ReplayPoint(load="closed:8", episodes=16), run_id="r1")
    row = await run_point(trajs, base_url, run_dir, ReplayPoint(load="poisson:0.5", duration_s=120), run_id="r1")
    out = await play_episodes(plan, base_url, out_dir, ReplayPoint(load="closed:8"), run_id="r1", sweep_point="c8")

The point (benchmaker.sweep.point.ReplayPoint) is built and checked where the run's
parameters enter; these functions take it as it is.

One instrument: the point is one `benchmaker.engine.runner.BenchRunner` run whose unit of work
is an episode (benchmaker.workloads.agent_episode.EpisodeWorkload). The engine's load model starts
episodes: `closed:C` keeps C in flight (the concurrency sweep point), `poisson:R`,
`constant:R`, `trace:FILE` start them at a rate, as agent sessions arrive in production.
Schedule lag, queueing, achieved concurrency, loop lag, client CPU and the verdict of the
point are the engine's, computed by the engine's summary SQL over the episode samples
(`episode_samples.jsonl`), exactly as for requests of an engine run.

Files of a point (`<run_dir>/points/<point>/`, emptied first):

    samples.jsonl          one engine Sample per model call (the point's requests)
    episodes.jsonl         one line per episode (benchmaker.agent.episodes.Episode)
    turns.jsonl            one line per turn (benchmaker.agent.episodes.TurnRecord)
    episode_samples.jsonl  the engine's sample of each episode (the unit of work)
    concurrency.json       benchmaker.agent.harness.concurrency_proof over the episodes (closed loop)
    engine_summary.json    the engine's summary.json over the episodes: target (load,
                           rate, concurrency), episode schedule lag, achieved episode
                           rate and concurrency, self_checks (loop lag, client CPU),
                           verdict
    point_summary.json     benchmaker.sweep.point_summary.summarize_point's row, whose
                           verdict_reasons are the engine verdict's reasons

An episode started before the end of `duration_s` runs to its end (the run's drain is
unbounded); a point with `episodes` starts exactly that many.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from benchmaker.agent.harness import SandboxFactory, concurrency_proof
from benchmaker.agent.verifier import TaskSpec
from benchmaker.engine.bundle import write_json_atomic
from benchmaker.engine.config import BenchConfig, Timeouts
from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.workers import run_sharded, single_lane
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_summary import summarize_point, write_point_summary
from benchmaker.sweep.sweep import episode_plan, point_dir, reset_point_dir
from benchmaker.trajectories.trajectory import Trajectory
from benchmaker.workloads.agent_episode import EpisodeWorkload

__all__ = [
    "EPISODE_SAMPLES",
    "PlayedEpisodes",
    "append_episode_lines",
    "engine_reasons",
    "engine_self_checks",
    "play_episodes",
    "run_point",
]

EPISODE_SAMPLES = "episode_samples.jsonl"
"""The engine's samples of a point's episodes (not requests: the loader's samples*.jsonl
glob does not match it)."""

_NO_DRAIN_S = 7 * 24 * 3600.0  # episodes started before the end run to their end


@dataclass(slots=True)
class PlayedEpisodes:
    """What `play_episodes` produced: the engine's summary (summary.json dict) of the
    episodes, the number of model calls written to samples.jsonl, and the workload
    (its `results` when `keep_results`)."""

    engine_summary: dict[str, Any]
    n_calls: int
    workload: EpisodeWorkload


async def play_episodes(
    trajectories: Sequence[Trajectory],
    base_url: str,
    out_dir: Path,
    point: ReplayPoint,
    *,
    run_id: str,
    sweep_point: str,
    sandbox_factory: SandboxFactory | None = None,
    tasks: dict[str, TaskSpec] | None = None,
    api_key: str | None = None,
    start_at_ns: int | None = None,
    ready: Callable[[], Awaitable[int]] | None = None,
    episode_prefix: str | None = None,
    index_start: int = 0,
    index_step: int = 1,
    seed: int = 0,
    keep_results: bool = False,
    base_dir: Path | None = None,
    transport: str = "raw",
) -> PlayedEpisodes:
    """Play the episodes of `point` on the engine into `out_dir` (samples.jsonl,
    episodes.jsonl, turns.jsonl, episode_samples.jsonl, engine_summary.json, and for a
    closed loop concurrency.json; module docstring), labelled `sweep_point`.

    Episodes start at `point.load` (its parsed model; `closed:C` keeps C in flight and
    C is recorded on the episode lines), under the point's lag limits
    (`point.checks()`), in `point.workers` engine worker processes. Without
    `point.duration_s`, one episode per item of `trajectories` (an episode plan); with
    it, episodes start until `duration_s` s, episode seq playing
    trajectories[(index_start + seq * index_step) mod len] (a shard's share of the one
    cycle) and at most `point.episodes` of them. `transport`: the engine config's
    transport the model calls go on (`raw` default, `aiohttp`; one per point or engine
    worker process, opened before the clock; EpisodeWorkload).
    `start_at_ns`: the perf_counter_ns instant of t0 (a shared start; default: now).
    `ready`: awaited once the engine is set up, returns that instant instead
    (benchmaker.engine.runner.BenchRunner; a shards' readiness barrier).
    `point.workers` > 1 runs the episodes in that many engine worker processes
    (benchmaker.engine.workers.run_sharded: each takes its share of the load, e.g. C/N
    episodes in flight, on one t0) and merges their files into the point's; the
    parameters model allows it in recorded mode only (a sandbox factory does not cross
    processes); `start_at_ns`, `ready` and `keep_results` unused there.
    Raises ValueError for no trajectories. Episode failures never raise: they are
    samples with an outcome."""
    if not trajectories:
        raise ValueError("trajectories: expected at least one trajectory (got none)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    duration_s, workers, concurrency = point.duration_s, point.workers, point.concurrency
    n_max = point.episodes if duration_s is not None else len(trajectories)
    wl_args: dict[str, Any] = dict(
        run_id=run_id,
        sweep_point=sweep_point,
        concurrency=concurrency,
        mode=point.mode,
        sandbox_factory=sandbox_factory,
        tasks=tasks,
        command=list(point.command) if point.command else None,
        stray_grace_s=point.stray_grace_s,
        api_key=api_key,
        episode_prefix=episode_prefix,
        index_start=index_start if duration_s is not None else 0,
        index_step=index_step if duration_s is not None else 1,
        transport=transport,
    )
    staging = out_dir / "_engine"
    cfg = BenchConfig(
        load=point.load,
        duration_s=duration_s,
        max_requests=n_max,
        run_id=run_id,
        kind="agent-replay",
        sweep_point=sweep_point,
        out_dir=staging,
        seed=seed,
        drain_s=_NO_DRAIN_S,
        timeouts=Timeouts(connect_s=None, total_s=None),  # each model call has its own (ModelClient)
        checks=point.checks(),
        transport=transport,
    )
    if workers > 1:
        factory = partial(
            single_lane,
            partial(EpisodeWorkload, list(trajectories), base_url, out_dir, per_worker_files=True, **wl_args),
        )
        result = await asyncio.to_thread(run_sharded, cfg, factory, workers, base_dir=base_dir)
        workload = EpisodeWorkload(trajectories, base_url, out_dir, **wl_args)
        intervals = _merge_worker_files(out_dir, result.bundle_dir, workers)
        n_calls = sum(_count_lines(p) for p in out_dir.glob("samples-w*.jsonl"))
    else:
        workload = EpisodeWorkload(trajectories, base_url, out_dir, keep_results=keep_results, **wl_args)
        runner = BenchRunner(
            cfg,
            workload=workload,
            samples_name=EPISODE_SAMPLES,
            start_at_ns=start_at_ns,
            ready=ready,
            base_dir=base_dir,
        )
        result = await runner.run()
        os.replace(result.bundle_dir / EPISODE_SAMPLES, out_dir / EPISODE_SAMPLES)
        intervals, n_calls = workload.intervals, workload.n_calls
    os.replace(result.bundle_dir / "summary.json", out_dir / "engine_summary.json")
    shutil.rmtree(staging, ignore_errors=True)
    if concurrency is not None:
        proof = concurrency_proof(intervals, concurrency)
        write_json_atomic(out_dir / "concurrency.json", proof.to_dict())
    return PlayedEpisodes(result.summary, n_calls, workload)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _merge_worker_files(out_dir: Path, bundle_dir: Path, workers: int) -> list[tuple[int, int]]:
    """After a run in `workers` processes: append each worker's episodes-w<k>.jsonl and
    turns-w<k>.jsonl to episodes.jsonl / turns.jsonl (an episode's slot j on worker k
    becomes the point's slot j * workers + k, as shards do), move the engine's episode
    samples `bundle_dir`/samples-w<k>.jsonl to episode_samples-w<k>.jsonl; the model
    calls' samples-w<k>.jsonl stay (the loader reads them as shard k). Returns the
    episodes' (started_ns, ended_ns): every worker stamps from the one shared t0."""
    intervals: list[tuple[int, int]] = []
    with open(out_dir / "episodes.jsonl", "ab") as ep_f, open(out_dir / "turns.jsonl", "ab") as turn_f:
        for k in range(workers):
            eps, turns = out_dir / f"episodes-w{k}.jsonl", out_dir / f"turns-w{k}.jsonl"
            intervals += [(e["started_ns"], e["ended_ns"]) for e in append_episode_lines(eps, ep_f, k, workers)]
            eps.unlink(missing_ok=True)
            if turns.is_file():
                turn_f.write(turns.read_bytes())
                turns.unlink()
            if (bundle_dir / f"samples-w{k}.jsonl").is_file():
                os.replace(bundle_dir / f"samples-w{k}.jsonl", out_dir / f"episode_samples-w{k}.jsonl")
    return intervals


def append_episode_lines(
    src: Path, dst: BinaryIO, worker: int, workers: int, extra: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Append the JSON lines of `src` (an engine worker's or a shard's episodes or turns
    file; nothing when it is missing) to `dst` with the keys of `extra` set; an
    episode's `worker` (its slot j on worker `worker` of `workers`) becomes the point's
    slot j * workers + worker, as in a single-process run. Returns the rows."""
    rows = []
    if src.is_file():
        for line in src.read_bytes().splitlines():
            if line.strip():
                row = orjson.loads(line)
                row.update(extra or {})
                if isinstance(row.get("worker"), int):
                    row["worker"] = row["worker"] * workers + worker
                dst.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
                rows.append(row)
    return rows


_NO_REQUEST_SUCCEEDED = "no request succeeded"
"""benchmaker.engine.selfcheck.verdict's reason when no unit of work ended ok."""


def engine_reasons(summary: dict[str, Any]) -> list[str]:
    """The engine verdict's reasons of an episode run (its summary.json dict) that a
    sweep point takes as its own: all but "no request succeeded", which there means no
    *episode* ended ok (the engine's unit of work is an episode) while some of their
    model calls may have; benchmaker/sweep/sql/sweep_summary.sql decides that case with
    the counts of both ("no episode succeeded: ...")."""
    return [r for r in summary["verdict"]["reasons"] if not r.startswith(_NO_REQUEST_SUCCEEDED)]


def engine_self_checks(summary: dict[str, Any]) -> dict[str, Any]:
    """The engine figures a replay point adds to its row: offered vs achieved episode
    rate (per s), episode schedule lag p50/p99 (ms, sent - intended: queueing of
    open-loop episode starts), event-loop lag p99 (ms), client CPU (s and fraction of
    one core) and the in-flight maximum the engine saw."""
    run = summary.get("run") or {}
    sc = summary.get("self_checks") or {}
    lanes = (summary.get("target") or {}).get("lanes") or {}
    lane: dict[str, Any] = next(iter(lanes.values()), {})
    lag = run.get("schedule_lag_ms") or {}
    return {
        "load": lane.get("load"),
        "offered_episode_rate_per_s": lane.get("target_rate_per_s"),
        "achieved_episode_rate_per_s": run.get("request_throughput_per_s"),
        "episode_schedule_lag_p50_ms": lag.get("p50"),
        "episode_schedule_lag_p99_ms": lag.get("p99"),
        "loop_lag_p99_ms": (sc.get("loop_lag_ms") or {}).get("p99"),
        "client_cpu_s": sc.get("client_cpu_s"),
        "client_cpu_util": sc.get("client_cpu_util"),
        "engine_max_in_flight": sc.get("max_in_flight"),
    }


async def run_point(
    trajectories: Sequence[Trajectory],
    base_url: str,
    run_dir: Path,
    point: ReplayPoint,
    *,
    run_id: str,
    sandbox_factory: SandboxFactory | None = None,
    tasks: dict[str, TaskSpec] | None = None,
    api_key: str | None = None,
    t0_ns: int | None = None,
    seed: int = 0,
    transport: str = "raw",
) -> dict[str, Any]:
    """Run the sweep point `point` against `base_url` (an OpenAI-compatible base URL,
    e.g. the replay server's) and summarise it; files in
    `run_dir/points/<point.name>/` (module docstring), emptied first (a retried point
    never mixes attempts).

    Either a fixed number of episodes (`point.episodes`, default
    benchmaker.sweep.sweep.episode_plan: max(C, trajectories); open loop: one per
    trajectory) or, with `point.duration_s`, episodes started until then, cycling
    through `trajectories` (play_episodes).

    `t0_ns`: the run's perf_counter_ns origin, so the stamps of a closed-loop point lie
    on the run's one timeline (default: the point's start); an open-loop point's
    schedule starts at the point's start, so its stamps do too (an origin in the past
    would make its first arrivals late). `transport`: the model calls' engine
    transport (play_episodes; `raw` default).

    Returns summarize_point's row with the engine verdict's reasons (engine_reasons) as verdict reasons
    plus engine_self_checks (offered vs achieved episode rate, schedule lag, loop lag,
    client CPU). Raises ValueError for no trajectories; episode failures never raise."""
    target_c = point.concurrency
    sp = point.name
    pdir = reset_point_dir(point_dir(run_dir, sp))
    if point.duration_s is None:
        plan = episode_plan(trajectories, target_c or 1, point.episodes)
    else:
        plan = list(trajectories)
    played = await play_episodes(
        plan,
        base_url,
        pdir,
        point,
        run_id=run_id,
        sweep_point=sp,
        sandbox_factory=sandbox_factory,
        tasks=tasks,
        api_key=api_key,
        start_at_ns=t0_ns if target_c is not None and point.workers == 1 else None,
        seed=seed,
        transport=transport,
    )
    row = summarize_point(
        pdir,
        sweep_point=sp,
        concurrency=target_c,
        rate_per_s=point.load.model.target_rate_per_s(),
        episodes_target=len(plan) if point.duration_s is None else point.episodes,
        duration_s=point.duration_s,
        verdict_reasons=[f"engine: {r}" for r in engine_reasons(played.engine_summary)],
        run_id=run_id,
    )
    row.update(engine_self_checks(played.engine_summary))
    write_point_summary(pdir, row)
    return row
