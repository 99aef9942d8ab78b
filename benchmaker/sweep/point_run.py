"""Run one agent-replay sweep point on the engine.

    row = await run_point(trajs, base_url, run_dir, run_id="r1", concurrency=8, episodes=16)
    row = await run_point(trajs, base_url, run_dir, run_id="r1", load="poisson:0.5", duration_s=120)
    out = await play_episodes(plan, base_url, out_dir, run_id="r1", sweep_point="c8", load="closed:8")

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
from typing import Any

import orjson

from benchmaker.agent.harness import SandboxFactory, concurrency_proof
from benchmaker.agent.verifier import TaskSpec
from benchmaker.engine.bundle import write_json_atomic
from benchmaker.engine.config import BenchConfig, Timeouts
from benchmaker.engine.load_models import ClosedLoop, ParsedRateSpec, load_model_of
from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.workers import run_sharded, single_lane
from benchmaker.sweep.point_summary import summarize_point, write_point_summary
from benchmaker.sweep.sweep import engine_point_name, episode_plan, point_dir, point_name, reset_point_dir
from benchmaker.trajectories.trajectory import Trajectory
from benchmaker.workloads.agent_episode import EpisodeWorkload

__all__ = [
    "EPISODE_SAMPLES",
    "PlayedEpisodes",
    "engine_reasons",
    "engine_self_checks",
    "play_episodes",
    "replay_point_name",
    "run_point",
]

EPISODE_SAMPLES = "episode_samples.jsonl"
"""The engine's samples of a point's episodes (not requests: the loader's samples*.jsonl
glob does not match it)."""

_NO_DRAIN_S = 7 * 24 * 3600.0  # episodes started before the end run to their end


def replay_point_name(concurrency: int | None, load: str | None) -> str:
    """The sweep_point label: "c<C>" for a closed loop of C episodes (given as
    `concurrency` or as load "closed:C"), else the rate spec made a label
    ("poisson:0.5" -> "poisson-0.5", benchmaker.sweep.sweep.engine_point_name)."""
    if load is None:
        if concurrency is None:
            raise ValueError("give concurrency or load")
        return point_name(concurrency)
    model = load_model_of(load)  # a ParsedRateSpec's model: nothing parsed again
    if isinstance(model, ClosedLoop) and not model.think_s:
        return point_name(model.concurrency)
    return engine_point_name(load)


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
    *,
    run_id: str,
    sweep_point: str,
    load: str,
    episodes: int | None = None,
    duration_s: float | None = None,
    concurrency: int | None = None,
    mode: str = "recorded",
    sandbox_factory: SandboxFactory | None = None,
    tasks: dict[str, TaskSpec] | None = None,
    command: list[str] | None = None,
    api_key: str | None = None,
    start_at_ns: int | None = None,
    ready: Callable[[], Awaitable[int]] | None = None,
    episode_prefix: str | None = None,
    index_start: int = 0,
    index_step: int = 1,
    seed: int = 0,
    keep_results: bool = False,
    base_dir: Path | None = None,
    workers: int = 1,
    checks: dict[str, Any] | None = None,
    transport: str = "raw",
) -> PlayedEpisodes:
    """Play episodes on the engine into `out_dir` (samples.jsonl, episodes.jsonl,
    turns.jsonl, episode_samples.jsonl, engine_summary.json, and with `concurrency`
    concurrency.json; module docstring).

    `load` is the engine rate spec of episode starts (`closed:C`, `poisson:R`, ...;
    benchmaker.engine.load_models), a ParsedRateSpec (its model used, not parsed again) or a
    string parsed here. `checks`: the engine's self-check limits
    (benchmaker.engine.config.SelfCheckLimits fields, e.g. {"max_loop_lag_p99_ms": 50.0};
    default: the environment's or 10 ms). `transport`: the engine config's transport the
    model calls go on (`raw` default, `aiohttp`; one per point or engine worker process,
    opened before the clock; EpisodeWorkload). Without `duration_s`, one episode per item of
    `trajectories` (an episode plan, `episodes` defaulting to its length); with it,
    episodes start until `duration_s` s, episode seq playing
    trajectories[(index_start + seq * index_step) mod len] (a shard's share of the one
    cycle) and at most `episodes` of them. `concurrency` is recorded on the episode lines.
    `start_at_ns`: the perf_counter_ns instant of t0 (a shared start; default: now).
    `ready`: awaited once the engine is set up, returns that instant instead
    (benchmaker.engine.runner.BenchRunner; a shards' readiness barrier).
    `workers` > 1 runs the episodes in that many engine worker processes
    (benchmaker.engine.workers.run_sharded: each takes its share of the load, e.g. C/N episodes
    in flight, on one t0) and merges their files into the point's; recorded mode only
    (a sandbox factory does not cross processes), `start_at_ns`, `ready` and `keep_results`
    unused there.
    Raises ValueError for no trajectories, benchmaker.engine.errors.RateSpecError for a bad
    `load`. Episode failures never raise: they are samples with an outcome."""
    if not trajectories:
        raise ValueError("trajectories: expected at least one trajectory (got none)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_max = episodes if duration_s is not None else (episodes or len(trajectories))
    if workers > 1 and (mode != "recorded" or sandbox_factory is not None):
        raise ValueError(
            f"workers: more than one engine worker needs mode recorded without a sandbox "
            f"(got workers={workers}, mode={mode})"
        )
    wl_args: dict[str, Any] = dict(
        run_id=run_id,
        sweep_point=sweep_point,
        concurrency=concurrency,
        mode=mode,
        sandbox_factory=sandbox_factory,
        tasks=tasks,
        command=command,
        api_key=api_key,
        episode_prefix=episode_prefix,
        index_start=index_start if duration_s is not None else 0,
        index_step=index_step if duration_s is not None else 1,
        transport=transport,
    )
    staging = out_dir / "_engine"
    cfg = BenchConfig(
        load=load,
        duration_s=duration_s,
        max_requests=n_max,
        run_id=run_id,
        kind="agent-replay",
        sweep_point=sweep_point,
        out_dir=staging,
        seed=seed,
        drain_s=_NO_DRAIN_S,
        timeouts=Timeouts(connect_s=None, total_s=None),  # each model call has its own (ModelClient)
        checks=checks or {},
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
            if eps.is_file():
                for line in eps.read_bytes().splitlines():
                    if line.strip():
                        row = orjson.loads(line)
                        row["worker"] = row["worker"] * workers + k
                        intervals.append((row["started_ns"], row["ended_ns"]))
                        ep_f.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
                eps.unlink()
            if turns.is_file():
                turn_f.write(turns.read_bytes())
                turns.unlink()
            if (bundle_dir / f"samples-w{k}.jsonl").is_file():
                os.replace(bundle_dir / f"samples-w{k}.jsonl", out_dir / f"episode_samples-w{k}.jsonl")
    return intervals


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
    *,
    run_id: str,
    concurrency: int | None = None,
    load: str | None = None,
    episodes: int | None = None,
    duration_s: float | None = None,
    mode: str = "recorded",
    sandbox_factory: SandboxFactory | None = None,
    tasks: dict[str, TaskSpec] | None = None,
    command: list[str] | None = None,
    api_key: str | None = None,
    t0_ns: int | None = None,
    seed: int = 0,
    workers: int = 1,
    checks: dict[str, Any] | None = None,
    transport: str = "raw",
) -> dict[str, Any]:
    """Run one sweep point against `base_url` (an OpenAI-compatible base URL, e.g. the
    replay server's) and summarise it; files in `run_dir/points/<point>/` (module
    docstring), emptied first (a retried point never mixes attempts).

    The load is `closed:<concurrency>` (point "c<C>") or `load` (any engine rate spec;
    an open-loop point is named after it, replay_point_name). Either a fixed number of
    episodes (`episodes`, default benchmaker.sweep.sweep.episode_plan: max(C, trajectories)) or,
    with `duration_s`, episodes started until then, cycling through `trajectories`.
    Open loop without `duration_s` plays `episodes` (default one per trajectory).

    `t0_ns`: the run's perf_counter_ns origin, so the stamps of a closed-loop point lie
    on the run's one timeline (default: the point's start); an open-loop point's
    schedule starts at the point's start, so its stamps do too (an origin in the past
    would make its first arrivals late).

    `workers`: engine worker processes (play_episodes), as `--workers` of engine runs.
    `checks`: the engine's self-check limits (play_episodes), e.g. the loop-lag limit.
    `transport`: the model calls' engine transport (play_episodes; `raw` default).
    `load` may be a ParsedRateSpec (a flow's parameter: its model is used, nothing is
    parsed again); a plain string is parsed here, once (a trace file relative to the
    working directory).

    Returns summarize_point's row with the engine verdict's reasons (engine_reasons) as verdict reasons
    plus engine_self_checks (offered vs achieved episode rate, schedule lag, loop lag,
    client CPU). Raises ValueError for concurrency < 1, no concurrency nor load, or no
    trajectories; episode failures never raise."""
    if load is None:
        if concurrency is None or concurrency < 1:
            raise ValueError(f"concurrency: expected >= 1 (got {concurrency})")
        load = ParsedRateSpec.of_model(ClosedLoop(concurrency))  # "closed:C", built, not parsed
    load = ParsedRateSpec.of(load)
    model = load.model
    closed = isinstance(model, ClosedLoop)
    target_c = model.concurrency if isinstance(model, ClosedLoop) else None
    sp = replay_point_name(None, load)
    pdir = reset_point_dir(point_dir(run_dir, sp))
    if duration_s is None:
        plan = (
            episode_plan(trajectories, target_c or 1, episodes) if closed else episode_plan(trajectories, 1, episodes)
        )
    else:
        plan = list(trajectories)
    played = await play_episodes(
        plan,
        base_url,
        pdir,
        run_id=run_id,
        sweep_point=sp,
        load=load,
        episodes=episodes if duration_s is not None else len(plan),
        duration_s=duration_s,
        concurrency=target_c,
        mode=mode,
        sandbox_factory=sandbox_factory,
        tasks=tasks,
        command=command,
        api_key=api_key,
        start_at_ns=t0_ns if closed and workers == 1 else None,
        seed=seed,
        workers=workers,
        checks=checks,
        transport=transport,
    )
    row = summarize_point(
        pdir,
        sweep_point=sp,
        concurrency=target_c,
        rate_per_s=model.target_rate_per_s(),
        episodes_target=len(plan) if duration_s is None else episodes,
        duration_s=duration_s,
        verdict_reasons=[f"engine: {r}" for r in engine_reasons(played.engine_summary)],
        run_id=run_id,
    )
    row.update(engine_self_checks(played.engine_summary))
    write_point_summary(pdir, row)
    return row
