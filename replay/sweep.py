"""Concurrency sweeps of agent replays: run one sweep point, summarise it, write the
run-level files (issue #4 items 1 and 3). Plain functions; the Prefect tasks in
`tasks/` are thin shells over them.

    name = point_name(5)                                  # "c5"
    row = await run_point(traj, base_url, run_dir, run_id=rid, concurrency=5, episodes=10)
    row["valid"], row["achieved_max_concurrency"], row["p99_e2e_ms"]
    write_sweep_points(run_dir, [row, ...])               # run_dir/sweep_points.jsonl

Layout under a run directory (notes/CONTRACTS.md):

    <run_dir>/manifest.json                   write_run_manifest
    <run_dir>/points/<point>/episodes.jsonl   the harness (replay.harness.run_episodes)
    <run_dir>/points/<point>/turns.jsonl      the harness
    <run_dir>/points/<point>/samples.jsonl    turns_to_samples: one Sample per model call,
                                              so the warehouse's request views cover it
    <run_dir>/points/<point>/server_stats.json  replay server /stats after the point
    <run_dir>/points/<point>/point_summary.json summarize_point's row
    <run_dir>/sweep_points.jsonl              one summary row per point (the warehouse
                                              loads run_id-less rows into sweep_points;
                                              extra keys are ignored there)

A point's summary row: replay.point_summary.summarize_point (re-exported here), the SQL
files that define every request and episode metric and the point's verdict once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import orjson

from benchmaker.bundle import build_manifest, wall_ns, write_json_atomic
from benchmaker.records import Sample
from replay.harness import SandboxFactory, concurrency_proof, run_episode, run_episodes
from replay.model_client import ModelClient
from replay.point_summary import (TABLE_COLUMNS, engine_point_row, summarize_point, sweep_table_markdown,
                                  sweep_table_rows, write_point_summary)
from replay.trajectory import Trajectory
from replay.verifier import TaskSpec, task_id_of

__all__ = [
    "TABLE_COLUMNS",
    "engine_point_name",
    "engine_point_row",
    "episode_plan",
    "play_episodes",
    "point_complete",
    "point_dir",
    "point_name",
    "read_sweep_points",
    "reset_point_dir",
    "run_engine_point",
    "run_point",
    "summarize_point",
    "sweep_table_markdown",
    "sweep_table_rows",
    "turns_to_samples",
    "write_point_summary",
    "write_run_manifest",
    "write_sweep_points",
]

def point_name(concurrency: int) -> str:
    """The sweep_point label of the point at `concurrency` episodes in flight: "c<N>"."""
    return f"c{concurrency}"


def point_dir(run_dir: Path, sweep_point: str) -> Path:
    """`<run_dir>/points/<sweep_point>` (where the warehouse loader looks for point files)."""
    return Path(run_dir) / "points" / sweep_point


def point_complete(pdir: Path) -> bool:
    """Whether `pdir` still holds a finished point: its point_summary.json, a
    samples*.jsonl when the point had requests and episodes.jsonl when it had
    episodes. A resumed flow run checks this for each point its task cache says
    finished (a cache hit never looks at the files) and measures the point again
    when something was deleted meanwhile."""
    pdir = Path(pdir)
    summary = pdir / "point_summary.json"
    if not summary.is_file():
        return False
    row = orjson.loads(summary.read_bytes())
    if (row.get("n_requests") or 0) > 0 and not any(pdir.glob("samples*.jsonl")):
        return False
    return not ((row.get("n_episodes") or 0) > 0 and not (pdir / "episodes.jsonl").is_file())


def reset_point_dir(pdir: Path) -> Path:
    """Remove whatever an earlier attempt of this point left in `pdir` and recreate it
    empty, so a retried point never mixes two attempts' lines. Returns `pdir`."""
    pdir = Path(pdir)
    if pdir.exists():
        shutil.rmtree(pdir)
    pdir.mkdir(parents=True)
    return pdir


def write_sweep_points(run_dir: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write one JSON line per summary row to `run_dir`/sweep_points.jsonl (temp file +
    rename, replacing an earlier one); returns the path."""
    path = Path(run_dir) / "sweep_points.jsonl"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        for row in rows:
            fh.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE, default=str))
    os.replace(tmp, path)
    return path


def read_sweep_points(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of `run_dir`/sweep_points.jsonl ([] when absent)."""
    path = Path(run_dir) / "sweep_points.jsonl"
    if not path.is_file():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def write_run_manifest(
    run_dir: Path,
    *,
    run_id: str,
    kind: str,
    label: str | None,
    config: dict[str, Any],
    seed: int | None = None,
    workers: int = 1,
) -> Path:
    """Write `run_dir`/manifest.json (notes/CONTRACTS.md run bundle; secrets in `config`
    redacted by benchmaker.bundle.build_manifest); returns the path. The wall clock
    dates the manifest only."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = build_manifest(run_id=run_id, kind=kind, label=label, config=config, seed=seed,
                              t0_wall_ns=wall_ns(), workers=workers)
    path = run_dir / "manifest.json"
    write_json_atomic(path, manifest)
    return path


def episode_plan(trajectories: Sequence[Trajectory], concurrency: int, episodes: int | None) -> list[Trajectory]:
    """The trajectories a point plays, in order: `episodes` of them (default
    max(concurrency, len(trajectories)), so every worker has one), cycling through
    `trajectories`. Raises ValueError when there is no trajectory or episodes < 1."""
    if not trajectories:
        raise ValueError("trajectories: expected at least one trajectory (got none)")
    n = max(concurrency, len(trajectories)) if episodes is None else episodes
    if n < 1:
        raise ValueError(f"episodes: expected >= 1 (got {n})")
    return [trajectories[i % len(trajectories)] for i in range(n)]


async def run_point(
    trajectories: Sequence[Trajectory],
    base_url: str,
    run_dir: Path,
    *,
    run_id: str,
    concurrency: int,
    episodes: int | None = None,
    duration_s: float | None = None,
    mode: str = "recorded",
    sandbox_factory: SandboxFactory | None = None,
    tasks: dict[str, TaskSpec] | None = None,
    command: list[str] | None = None,
    api_key: str | None = None,
    t0_ns: int | None = None,
) -> dict[str, Any]:
    """Run one sweep point: `concurrency` episodes in flight against `base_url` (an
    OpenAI-compatible base URL, e.g. the replay server's), then summarise it.

    Either a fixed number of episodes (`episodes`, default see `episode_plan`) through
    `replay.harness.run_episodes`, or, with `duration_s`, workers that keep starting
    episodes (cycling through `trajectories`) until `duration_s` s have passed since
    the point started, each started episode running to its end. Files go to
    `run_dir/points/c<N>/` (emptied first: a retried point never mixes attempts):
    episodes.jsonl, turns.jsonl, concurrency.json, point_summary.json. `t0_ns`: the
    run's perf_counter_ns origin for the episode stamps (default: the point's start).

    Returns the summary row (`summarize_point`). Raises ValueError for concurrency < 1,
    no trajectories or a bad mode (from the harness); episode failures never raise
    (they are episodes with outcome "error").
    """
    if concurrency < 1:
        raise ValueError(f"concurrency: expected >= 1 (got {concurrency})")
    sp = point_name(concurrency)
    pdir = reset_point_dir(point_dir(run_dir, sp))
    plan = None if duration_s is not None else episode_plan(trajectories, concurrency, episodes)
    await play_episodes(plan if plan is not None else trajectories, base_url, pdir, run_id=run_id, sweep_point=sp,
                        concurrency=concurrency, duration_s=duration_s, mode=mode,
                        sandbox_factory=sandbox_factory, tasks=tasks, command=command, api_key=api_key,
                        t0_ns=t0_ns)
    target = None if plan is None else len(plan)
    turns_to_samples(pdir / "turns.jsonl", pdir / "samples.jsonl")
    row = summarize_point(pdir, sweep_point=sp, concurrency=concurrency, episodes_target=target,
                          duration_s=duration_s)
    write_point_summary(pdir, row)
    return row


async def play_episodes(
    trajectories: Sequence[Trajectory],
    base_url: str,
    out_dir: Path,
    *,
    run_id: str,
    sweep_point: str,
    concurrency: int,
    duration_s: float | None = None,
    mode: str = "recorded",
    sandbox_factory: SandboxFactory | None = None,
    tasks: dict[str, TaskSpec] | None = None,
    command: list[str] | None = None,
    api_key: str | None = None,
    t0_ns: int | None = None,
    episode_prefix: str | None = None,
    index_start: int = 0,
    index_step: int = 1,
) -> None:
    """Play episodes with `concurrency` in flight into `out_dir` (episodes.jsonl,
    turns.jsonl, concurrency.json): without `duration_s`, one episode per item of
    `trajectories` (an episode plan) through replay.harness.run_episodes; with it,
    workers that keep starting episodes until `duration_s` s after the call, each
    started episode running to its end, episode i playing trajectories[i mod len] for
    i = index_start, index_start + index_step, ... (a shard's share of the one cycle).
    Episode ids are `<episode_prefix or sweep_point>-<index>`; stamps are
    perf_counter_ns minus `t0_ns` (default: now). Raises ValueError for no
    trajectories."""
    if not trajectories:
        raise ValueError("trajectories: expected at least one trajectory (got none)")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter_ns() if t0_ns is None else t0_ns
    common: dict[str, Any] = dict(mode=mode, run_id=run_id, sweep_point=sweep_point,
                                  sandbox_factory=sandbox_factory, tasks=tasks, t0_ns=t0, api_key=api_key,
                                  command=command, episode_prefix=episode_prefix)
    if duration_s is None:
        await run_episodes(list(trajectories), base_url, concurrency, out_dir=out_dir, **common)
    else:
        await _run_for_duration(list(trajectories), base_url, concurrency, duration_s, out_dir, **common,
                                index_start=index_start, index_step=index_step)


def turns_to_samples(turns_path: Path, samples_path: Path) -> int:
    """Write one `benchmaker.records.Sample` per line of turns.jsonl (a model call is a
    request) to `samples_path`; returns the count. Lane "agent", closed loop
    (intended = sent), seq = line index, `usage_present` when output_tokens is known,
    meta {"episode_id", "turn_index", "miss_kind"}. Token events are not in turns.jsonl,
    so ITL is not available from these samples (TTFT, E2E and TPOT are)."""
    n = 0
    with open(turns_path, "rb") as src, open(samples_path, "wb") as dst:
        for line in src:
            if not line.strip():
                continue
            t = orjson.loads(line)
            sample = Sample(
                run_id=t["run_id"], seq=n, lane="agent", sweep_point=t["sweep_point"], outcome=t["outcome"],
                http_status=t["http_status"], intended_ns=t["sent_ns"], sent_ns=t["sent_ns"],
                first_token_ns=t["first_token_ns"], end_ns=t["end_ns"],
                usage_present=t["output_tokens"] is not None, prompt_tokens=t["prompt_tokens"],
                output_tokens=t["output_tokens"], cached_tokens=t["cached_tokens"],
                meta={"episode_id": t["episode_id"], "turn_index": t["turn_index"], "miss_kind": t["miss_kind"]},
            )
            dst.write(orjson.dumps(sample.to_dict(), option=orjson.OPT_APPEND_NEWLINE))
            n += 1
    return n


async def _run_for_duration(
    trajectories: list[Trajectory], base_url: str, concurrency: int, duration_s: float, out_dir: Path, *,
    mode: str, run_id: str, sweep_point: str, sandbox_factory: SandboxFactory | None,
    tasks: dict[str, TaskSpec] | None, t0_ns: int, api_key: str | None, command: list[str] | None,
    episode_prefix: str | None = None, index_start: int = 0, index_step: int = 1,
) -> None:
    """`concurrency` workers start episodes until `duration_s` after the call, writing
    the same files as run_episodes (episode ids `<episode_prefix or sweep_point>-<index>`).
    Episode i plays trajectories[i mod len], i = index_start, index_start + index_step, ...
    in the order workers come free (a shard k of N takes k, k + N, ...)."""
    prefix = episode_prefix or sweep_point
    import aiohttp

    tasks = tasks or {}
    deadline = time.perf_counter_ns() + int(duration_s * 1e9)
    counter = itertools.count(index_start, index_step)
    intervals: list[tuple[int, int]] = []
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    ep_f = open(out_dir / "episodes.jsonl", "w", encoding="utf-8")
    turn_f = open(out_dir / "turns.jsonl", "w", encoding="utf-8")

    async def worker(k: int) -> None:
        while time.perf_counter_ns() < deadline:
            i = next(counter)
            traj = trajectories[i % len(trajectories)]
            tid = task_id_of(traj)
            client = ModelClient(base_url, api_key=api_key, model=traj.model, session=session)
            res = await run_episode(
                traj, base_url, mode=mode, sandbox=sandbox_factory, task=tasks.get(tid) if tid else None,
                run_id=run_id, sweep_point=sweep_point, concurrency=concurrency,
                episode_id=f"{prefix}-{i}", worker=k, t0_ns=t0_ns, client=client, api_key=api_key,
                command=command,
            )
            intervals.append((res.episode.started_ns, res.episode.ended_ns))
            ep_f.write(json.dumps(res.episode.to_dict()) + "\n")
            turn_f.writelines(json.dumps(t.to_dict()) + "\n" for t in res.turns)
            ep_f.flush()
            turn_f.flush()

    try:
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
    finally:
        await session.close()
        ep_f.close()
        turn_f.close()
    proof = concurrency_proof(intervals, concurrency)
    (out_dir / "concurrency.json").write_text(json.dumps(proof.to_dict(), indent=1) + "\n")


# --- engine sweeps (llm-sweep): one BenchRunner run per point --------------------------

def engine_point_name(load: str) -> str:
    """The sweep_point label of an engine point from its rate spec: characters other
    than letters, digits, '.', '_' and '-' become '-' ("closed:8" -> "closed-8")."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", load).strip("-") or "point"


async def run_engine_point(
    config: Any,
    workload: Any,
    run_dir: Path,
) -> dict[str, Any]:
    """Run one engine sweep point: `config` is a `benchmaker.BenchConfig` whose
    `run_id` is the sweep's run id and `sweep_point` the point label (every sample
    carries it); `workload` a Workload. The engine writes its bundle to a staging
    directory; its samples.jsonl and summary.json are moved to
    `run_dir/points/<sweep_point>/` (samples.jsonl, engine_summary.json), which is
    emptied first. Returns the point's summary row: target (load spec, concurrency,
    rate), requests, throughput, E2E/TTFT percentiles (summary.sql), achieved max/mean
    concurrency, and `valid` / `invalid_reason` from the engine's verdict."""
    from benchmaker.runner import BenchRunner

    sp = config.sweep_point
    pdir = reset_point_dir(point_dir(run_dir, sp))
    staging = pdir / "_engine"
    cfg = config.model_copy(update={"out_dir": staging})
    runner = BenchRunner(cfg, workload=workload)
    result = await runner.run()
    os.replace(result.bundle_dir / "samples.jsonl", pdir / "samples.jsonl")
    os.replace(result.bundle_dir / "summary.json", pdir / "engine_summary.json")
    shutil.rmtree(staging)
    row = engine_point_row(pdir, result.summary, sp, config.duration_s)
    write_point_summary(pdir, row)
    return row
