"""The sweep stage: one async Prefect task per sweep point (never one per request:
each task run costs ~6.5 ms).

    row = await run_sweep_point(key, traj, run_dir, run_id, ReplayPoint(load="closed:5", episodes=10))

Cache key: the inputs except the server key and t0 (a restarted server has a new port;
t0 changes when the flow body re-runs), the task's source, and the flow run id
(RUN_ID). Within one flow run a retried flow (benchmaker.flows.retry) resumes at the first point
that did not complete (earlier points are cache hits, read back from the persisted
results); a separate run never reuses a measurement.

Retries (2, after 2 s and 5 s) only on transient faults (benchmaker.tasks.transient): connection
refused/reset, or the replay server found dead after the point, in which case the
point's files are discarded and the point runs again on a restarted server.

Trajectories: a point reads them with `point_trajectories` (every line validated, with
automatic garbage collection paused: benchmaker.trajectories.convert.load_trajectories), and keeps them
for the next point of the same run (one file, while its size, mtime and inode stay the
same): the task gets a path, not 100k-turn objects (a task's inputs are hashed for its
cache key), and a run reads the file once per flow process, not once per point.

Tests only: with the environment variable BENCHMAKER_TEST_FAIL_POINT set to a point's
name (e.g. "c2"), that point measures, writes its files, then fails with InjectedFault
(not transient: no task retry), so the flow run ends Failed at that point.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import INPUTS, RUN_ID, TASK_SOURCE
from prefect.logging import get_run_logger

from benchmaker.agent.harness import SandboxFactory, local_sandbox_factory
from benchmaker.agent.verifier import TaskSpec, load_task
from benchmaker.engine.bundle import write_json_atomic
from benchmaker.engine.runner import run_on_own_loop
from benchmaker.progress import watch_point
from benchmaker.sweep.plan import planned_totals, planned_work
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import run_point
from benchmaker.sweep.sweep import point_dir
from benchmaker.tasks.progress import progress_artifact
from benchmaker.tasks.serve import server_handle, server_url
from benchmaker.tasks.transient import ReplayServerDied, retry_on_transient
from benchmaker.trajectories.convert import load_trajectories
from benchmaker.trajectories.trajectory import Trajectory

__all__ = [
    "FAIL_POINT_ENV",
    "InjectedFault",
    "load_tasks",
    "log_point_row",
    "point_trajectories",
    "run_sweep_point",
    "sandbox_factory_of",
    "sweep_point_policy",
]

sweep_point_policy = (INPUTS - "server_key" - "t0_ns") + TASK_SOURCE + RUN_ID

FAIL_POINT_ENV = "BENCHMAKER_TEST_FAIL_POINT"


class InjectedFault(RuntimeError):
    """The failure a test asked for through FAIL_POINT_ENV (never transient)."""


def sandbox_factory_of(point: ReplayPoint) -> SandboxFactory | None:
    """The harness's sandbox factory for `point`: None in recorded mode (no tool runs),
    else by `point.sandbox`: "local" (a temp workspace per episode, from the task's
    repo, its commands confined by bubblewrap), "none" (the same workspace, commands
    unconfined: a warning is logged) or "flash" (Flash Sandbox at `point.sandbox_url`
    running `point.sandbox_image`, which the parameters model requires). Raises
    ConfinementError (benchmaker.agent.sandbox) for "local" without a usable bwrap."""
    if point.mode == "recorded":
        return None
    if point.sandbox == "local":
        return local_sandbox_factory()
    if point.sandbox == "none":
        logging.getLogger(__name__).warning("sandbox none: tool commands and the verifier run unconfined")
        return local_sandbox_factory(confined=False)
    from benchmaker.agent.sandbox.flash import FlashSandbox

    url, image = str(point.sandbox_url), str(point.sandbox_image)

    async def make(task_spec: TaskSpec | None) -> Any:
        return await FlashSandbox.create(url, image=image, env=task_spec.env if task_spec else None)

    return make


_kept: tuple[tuple[Any, ...], tuple[Trajectory, ...]] | None = None
_kept_lock = threading.Lock()


def point_trajectories(path: Path) -> list[Trajectory]:
    """The trajectories of `path` for a sweep point (module doc), each validated
    (benchmaker.trajectories.convert.load_trajectories; raises benchmaker.trajectories.errors.TrajectoryFormatError
    `path:line: field: problem` at a bad line, OSError when the file cannot be read).
    The last file read is kept, keyed on its resolved path, size, mtime (ns) and inode,
    so the points of one run read it once; a new list each call (the models are shared:
    the replay never changes them)."""
    global _kept
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns, st.st_ino)
    with _kept_lock:
        if _kept is not None and _kept[0] == key:
            return list(_kept[1])
        _kept = None  # the earlier file's models are freed before this one is read
        trajs = tuple(load_trajectories(p))
        _kept = (key, trajs)
        return list(trajs)


def load_tasks(task_dirs: list[Path]) -> dict[str, TaskSpec]:
    """task id -> TaskSpec of each directory's task.json (benchmaker.agent.verifier.load_task)."""
    specs = [load_task(Path(d)) for d in task_dirs]
    return {s.task_id: s for s in specs}


@task(
    name="run-sweep-point",
    cache_policy=sweep_point_policy,
    persist_result=True,
    retries=2,
    retry_delay_seconds=[2, 5],
    retry_condition_fn=retry_on_transient,
)
async def run_sweep_point(
    server_key: str,
    trajectories: Path,
    run_dir: Path,
    run_id: str,
    point: ReplayPoint,
    t0_ns: int | None = None,
) -> dict[str, Any]:
    """Prefect shell over benchmaker.sweep.point_run.run_point (documented there): runs
    `point` (benchmaker.sweep.point.ReplayPoint, as the flow's parameters model built
    it) against the replay server registered under `server_key` (benchmaker.tasks.serve),
    whose /stats it resets first; every request carries the server's bearer token (its
    handle's `token`). Writes `points/<point>/server_stats.json`, returns the summary
    row. Raises ReplayServerDied (transient) when the server exited during the point."""
    url = server_url(server_key)  # restarts the server when an earlier attempt killed it
    handle = server_handle(server_key)
    await asyncio.to_thread(handle.reset_stats)
    trajs = await asyncio.to_thread(point_trajectories, Path(trajectories))
    sp, concurrency, episodes, duration_s = point.name, point.concurrency, point.episodes, point.duration_s
    episodes_total, calls_total = planned_totals(trajs, concurrency, episodes, duration_s)
    with progress_artifact(run_id, sp):  # live progress: terminal view and Prefect artifact (benchmaker.progress)
        async with watch_point(
            sp,
            stats=handle.stats,
            episodes_file=point_dir(Path(run_dir), sp) / "episodes.jsonl",
            episodes_total=episodes_total,
            calls_total=calls_total,
            duration_s=duration_s,
            work=planned_work(trajs, concurrency, episodes, duration_s),
            slots=concurrency,
        ):
            # the point runs on an event loop of its own (benchmaker.engine.runner.run_on_own_loop): the
            # progress polls and Prefect's API calls on this task's loop add no lag to its stamps
            row = await run_on_own_loop(
                run_point(
                    trajs,
                    url,
                    Path(run_dir),
                    point,
                    run_id=run_id,
                    sandbox_factory=sandbox_factory_of(point),
                    tasks=load_tasks([Path(d) for d in point.task_dirs]),
                    t0_ns=t0_ns,
                    api_key=handle.token,
                )
            )
    if handle.proc.poll() is not None:
        raise ReplayServerDied(
            f"replay server (pid {handle.pid}) exited with code {handle.proc.returncode} during "
            f"sweep point {sp}; the point runs again on a restarted server"
        )
    stats = await asyncio.to_thread(handle.stats)
    write_json_atomic(point_dir(Path(run_dir), sp) / "server_stats.json", stats)
    if os.environ.get(FAIL_POINT_ENV) == sp:
        raise InjectedFault(f"sweep point {sp}: failure injected by {FAIL_POINT_ENV}")
    log_point_row(row, slots=point.load if concurrency is None else concurrency)
    return row


def log_point_row(row: dict[str, Any], *, slots: Any = None, shards: int | None = None) -> None:
    """Log a finished sweep point's summary row on the run logger: a replay point's
    episodes, requests, max concurrency of its `slots` (concurrency, or its load) and
    replay misses, or (`slots` None) an engine point's requests, throughput and p99
    E2E; "over N shards" for a distributed point of `shards`; why it is invalid."""
    over = f" over {shards} shards" if shards else ""
    if slots is not None:
        text = (
            f"{row['n_episodes']} episodes{over}, {row['n_requests']} requests, max concurrency "
            f"{row['achieved_max_concurrency']}/{slots}, misses {row['misses_total']}"
        )
    else:
        throughput = row["request_throughput_per_s"] or 0.0
        text = f"{row['n_requests']} requests{over}, {throughput:.1f} req/s, p99 E2E {row['p99_e2e_ms']} ms"
    invalid = "" if row["valid"] else f" INVALID: {row['invalid_reason']}"
    get_run_logger().info("sweep point %s: %s%s", row["sweep_point"], text, invalid)
