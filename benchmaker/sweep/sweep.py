"""Concurrency sweeps of agent replays: the points' names and directories, the episode
plan, the run-level files. Plain functions; the Prefect tasks in
`tasks/` are thin shells over them. A point runs on the engine: benchmaker.sweep.point_run.

    name = point_name(5)                                  # "c5"
    row = await benchmaker.sweep.point_run.run_point(trajs, base_url, run_dir, ReplayPoint(load="closed:5"), run_id=rid)
    row["valid"], row["achieved_max_concurrency"], row["p99_e2e_ms"]
    write_sweep_points(run_dir, [row, ...])               # run_dir/sweep_points.jsonl

Layout under a run directory (docs/architecture.md):

    <run_dir>/manifest.json                   write_run_manifest
    <run_dir>/points/<point>/                 the point's files (benchmaker.sweep.point_run),
                                              and server_stats.json: replay server /stats after it
    <run_dir>/sweep_points.jsonl              one summary row per point (the warehouse
                                              loads run_id-less rows into sweep_points;
                                              extra keys are ignored there)

A point's summary row: benchmaker.sweep.point_summary.summarize_point (re-exported here), the SQL
files that define every request and episode metric and the point's verdict once.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from benchmaker.engine.bundle import build_manifest, wall_ns, write_json_atomic
from benchmaker.progress import watch_engine
from benchmaker.sweep.point_summary import (
    TABLE_COLUMNS,
    engine_point_row,
    summarize_point,
    sweep_table_markdown,
    sweep_table_rows,
    write_point_summary,
)

__all__ = [
    "TABLE_COLUMNS",
    "engine_point_name",
    "engine_point_row",
    "episode_plan",
    "point_complete",
    "point_dir",
    "point_name",
    "reset_point_dir",
    "run_engine_point",
    "summarize_point",
    "sweep_table_markdown",
    "sweep_table_rows",
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
    """Write `run_dir`/manifest.json (the run bundle's; secrets in `config`
    redacted by benchmaker.engine.bundle.build_manifest); returns the path. The wall clock
    dates the manifest only."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = build_manifest(
        run_id=run_id, kind=kind, label=label, config=config, seed=seed, t0_wall_ns=wall_ns(), workers=workers
    )
    path = run_dir / "manifest.json"
    write_json_atomic(path, manifest)
    return path


_T = TypeVar("_T")  # a Trajectory, or what a plan needs of one (sweep.plan.PlanTrajectory)


def episode_plan(trajectories: Sequence[_T], concurrency: int, episodes: int | None) -> list[_T]:
    """The trajectories a point plays, in order: `episodes` of them (default
    max(concurrency, len(trajectories)), so every worker has one), cycling through
    `trajectories`. Raises ValueError when there is no trajectory or episodes < 1."""
    if not trajectories:
        raise ValueError("trajectories: expected at least one trajectory (got none)")
    n = max(concurrency, len(trajectories)) if episodes is None else episodes
    if n < 1:
        raise ValueError(f"episodes: expected >= 1 (got {n})")
    return [trajectories[i % len(trajectories)] for i in range(n)]


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
    from benchmaker.engine.runner import BenchRunner, run_on_own_loop

    sp = config.sweep_point
    pdir = reset_point_dir(point_dir(run_dir, sp))
    staging = pdir / "_engine"
    cfg = config.model_copy(update={"out_dir": staging})
    runner = BenchRunner(cfg, workload=workload)
    async with watch_engine(sp, runner.live, calls_total=cfg.max_requests, duration_s=cfg.duration_s):
        # the run on a loop of its own: the progress view and Prefect's calls on this loop add no lag to it
        result = await run_on_own_loop(runner.run())
    os.replace(result.bundle_dir / "samples.jsonl", pdir / "samples.jsonl")
    os.replace(result.bundle_dir / "summary.json", pdir / "engine_summary.json")
    shutil.rmtree(staging)
    row = engine_point_row(pdir, result.summary, sp, config.duration_s)
    write_point_summary(pdir, row)
    return row
