"""benchmaker.progress (live progress of a sweep point) and benchmaker.sweep.plan (the plan before
work): ETA arithmetic, snapshots from /stats, the watcher's events, plan estimates."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmaker.progress import ProgressEvent, describe, eta_s, observe, snapshot, watch_point
from benchmaker.sweep.plan import context_chars, format_plan, planned_totals, sweep_plan
from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.trajectory import Trajectory

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
PI_LARGE = REPO.parent / "shared" / "data" / "real" / "pi-session-v1-large.jsonl"


def test_eta_is_the_calls_left_at_the_rate_so_far() -> None:
    assert eta_s(100, 400, 10.0) == 30.0  # 10 calls/s so far, 300 calls left
    assert eta_s(0, 400, 10.0) is None  # nothing answered yet: unknown
    assert eta_s(5, None, 4.0) is None  # no plan, no duration
    assert eta_s(5, None, 4.0, duration_s=10.0) == 6.0  # a point run for 10 s: the time left
    assert eta_s(500, 400, 10.0) == 0.0  # more than planned (retries): never negative


def test_snapshot_counts_answered_calls_and_requests_in_flight() -> None:
    stats = {"requests": 12, "served": 8, "bad_requests": 0, "unauthorized": 0, "misses": {"total": 1}}
    ev = snapshot("c4", stats, episodes_done=2, episodes_total=8, calls_total=36, elapsed_s=3.0)
    # answered = 8 served + 1 miss = 9; in flight = 12 received - 9; 9 calls in 3 s = 3/s; (36 - 9) / 3
    assert (ev.calls_done, ev.requests_in_flight, ev.misses, ev.calls_per_s, ev.eta_s) == (9, 3, 1, 3.0, 9.0)
    assert ev.fraction == 0.25  # 9 of 36 calls
    assert describe(ev) == (
        "sweep point c4: episodes 2/8, model calls 9/36 (3.0/s), requests in flight 3, misses 1, elapsed 3 s, ETA 9 s"
    )
    assert snapshot("c4", None, 0, None, None, 0.0).eta_s is None  # /stats not read yet


async def test_watch_point_emits_moving_progress_and_a_last_finished_event(tmp_path: Path) -> None:
    episodes = tmp_path / "episodes.jsonl"
    served = [0]

    def stats() -> dict:
        return {"requests": served[0] + 1, "served": served[0], "misses": {"total": 0}}

    events: list[ProgressEvent] = []
    with observe(events.append):
        async with watch_point(
            "c1", stats=stats, episodes_file=episodes, episodes_total=2, calls_total=6, interval_s=0.01
        ):
            for k in range(1, 7):
                served[0] = k
                if k in (3, 6):
                    with open(episodes, "a") as fh:
                        fh.write("{}\n")  # an episode of 3 calls finished
                await asyncio.sleep(0.03)
    assert events[-1].finished and events[-1].calls_done == 6 and events[-1].episodes_done == 2
    assert events[-1].eta_s == 0.0 and events[-1].fraction == 1.0
    done = [e.calls_done for e in events]
    assert done == sorted(done) and len(set(done)) >= 3  # it moved while the point ran


async def test_a_failing_observer_is_dropped_without_failing_the_point(tmp_path: Path) -> None:
    seen: list[ProgressEvent] = []

    def broken(ev: ProgressEvent) -> None:
        raise RuntimeError("terminal gone")

    with observe(seen.append), observe(broken):
        async with watch_point(
            "c2",
            stats=lambda: {},
            episodes_file=tmp_path / "none.jsonl",
            episodes_total=None,
            calls_total=None,
            interval_s=0.01,
        ):
            await asyncio.sleep(0.03)
    assert seen[-1].finished and seen[-1].episodes_done == 0


async def test_without_observers_nothing_is_polled(tmp_path: Path) -> None:
    def stats() -> dict:
        raise AssertionError("polled")

    async with watch_point("c1", stats=stats, episodes_file=tmp_path / "e.jsonl", episodes_total=1, calls_total=1):
        await asyncio.sleep(0.01)


def _traj(tid: str, n_turns: int, text: str = "x" * 40) -> Trajectory:
    return Trajectory.model_validate(
        {
            "trajectory_id": tid,
            "source": {"format": "test", "path": tid, "sha256": "0" * 64},
            "match_key": tid,
            "first_user": f"task {tid}",
            "turns": [{"index": i, "response": {"content": text}} for i in range(n_turns)],
        }
    )


def test_plan_estimates_episodes_on_slots_with_the_latency_model() -> None:
    trajs = [_traj("a", 3), _traj("b", 5)]
    # fixed:100:10 and 40 characters = 10 tokens: 100 + 10 x 9 = 190 ms a call, no overhead;
    # a = 3 x 0.19 = 0.57 s, b = 5 x 0.19 = 0.95 s
    plan = sweep_plan(trajs, [1, 2], latency="fixed:100:10", call_overhead_s=0.0, context_s_per_kchar=0.0)
    c1, c2 = plan.points
    assert (c1.episodes, c1.model_calls, c1.estimated_s) == (2, 8, pytest.approx(1.52))  # a then b on one slot
    assert (c2.episodes, c2.model_calls, c2.estimated_s) == (2, 8, pytest.approx(0.95))  # side by side
    three = sweep_plan(
        trajs, [2], episodes_per_point=3, latency="fixed:100:10", call_overhead_s=0.0, context_s_per_kchar=0.0
    )
    assert three.points[0].estimated_s == pytest.approx(1.14)  # a, b, then a again when a's slot frees at 0.57
    # instant latency: 50 ms of CPU per call does not overlap: 8 calls x 0.05 = 0.4 s (> b's 0.25 s)
    cpu = sweep_plan(trajs, [2], latency="instant", call_overhead_s=0.05, context_s_per_kchar=0.0)
    assert cpu.points[0].estimated_s == pytest.approx(0.4)
    timed = sweep_plan(trajs, [4], duration_s=30.0, latency="instant", call_overhead_s=0.05, context_s_per_kchar=0.0)
    # 30 s + one mean episode: (0.15 + 0.25) / 2
    assert (timed.points[0].episodes, timed.points[0].estimated_s) == (None, pytest.approx(30.2))
    assert planned_totals(trajs, 4, None, None) == (4, 16)  # max(4, 2) episodes: a, b, a, b
    assert planned_totals(trajs, None, None, None) == (2, 8)  # open loop: one per trajectory
    assert planned_totals(trajs, 4, None, 30.0) == (None, None)


def test_plan_of_the_bundled_example_reads_as_points_x_episodes_x_calls() -> None:
    trajs = list(iter_trajectories(EXAMPLE))
    text = format_plan(sweep_plan(trajs, [1, 2, 4], latency="instant"))
    assert text.splitlines()[:4] == [
        "plan: 3 sweep point(s) x 1 trajectory(ies) (4-4 model calls each, 4 in all)",
        "  c1     1 in flight: 1 episode(s), 4 model calls, ~0 s",
        "  c2     2 in flight: 2 episode(s), 8 model calls, ~0 s",
        "  c4     4 in flight: 4 episode(s), 16 model calls, ~0 s",
    ]


def test_plan_of_a_real_453_turn_pi_session() -> None:
    if not PI_LARGE.is_file():
        pytest.skip(f"real recording absent: {PI_LARGE}")
    trajs = list(iter_trajectories(PI_LARGE))
    plan = sweep_plan(
        trajs, [1, 5, 25], episodes_per_point=25, latency="instant", call_overhead_s=0.005, context_s_per_kchar=0.00003
    )
    # 25 episodes x 453 calls = 11,325 calls a point; one episode: 453 x 5 ms + 141,264.3 kchars
    # of context x 30 us = 2.265 + 4.238 = 6.503 s, CPU that does not overlap: 25 x that a point
    assert [p.model_calls for p in plan.points] == [11_325] * 3
    assert sum(context_chars(trajs[0])) == pytest.approx(141_264, abs=1)
    assert plan.points[0].estimated_s == pytest.approx(25 * (453 * 0.005 + sum(context_chars(trajs[0])) * 0.00003))
    assert plan.estimated_s == pytest.approx(3 * plan.points[0].estimated_s)


def test_work_estimator_prices_growing_calls_with_a_fitted_cost_model() -> None:
    from benchmaker.progress import WorkEstimator

    est = WorkEstimator([[1.0, 2.0, 3.0, 4.0]], slots=1)  # one episode, calls of context 1..4 (10 in all)
    # elapsed = 2 s start-up + 0.5 s a call + 0.1 s a context unit: after 1, 2, 3 calls
    # (context done 1, 3, 6): 2.6, 3.3, 4.1 s
    assert est.observe(2.6, 1, 0) is None and est.observe(3.3, 2, 0) is None  # fewer than 3 samples
    # the fit on increments recovers a = 0.5, b = 0.1: left = 0.5 x 1 call + 0.1 x (10 - 6)
    assert est.observe(4.1, 3, 0) == pytest.approx(0.9)
    # two slots: 3 calls with episode 0 (2 calls) done = 2 units + 1 call spread over
    # episodes 1 and 2, half a call each (0.5 + 0.5 units)
    assert WorkEstimator([[1.0, 1.0]] * 3, slots=2).units_done(3, 1) == pytest.approx(3.0)


def test_context_chars_grow_with_every_earlier_turn() -> None:
    from benchmaker.sweep.plan import context_chars, planned_work

    t = _traj("a", 3, text="y" * 500)  # first user "task a" (6 characters), 500 characters a response
    assert context_chars(t) == pytest.approx([0.006, 0.506, 1.006])  # in thousands of characters
    assert planned_work([t], 2, None, None) == [context_chars(t)] * 2 and planned_work([t], 2, None, 5.0) is None


def test_stage_events_reach_sync_observers_and_skip_async_ones() -> None:
    from benchmaker.progress import StageEvent, stage

    seen: list[StageEvent] = []
    now = [0.0]

    async def async_observer(ev: object) -> None:  # e.g. the Prefect artifact: never called here
        raise AssertionError("called")

    with observe(seen.append), observe(async_observer):
        with stage("grade", "sweep points", total=2, clock=lambda: now[0]) as advance:
            now[0] = 1.5
            advance(1)
            now[0] = 4.0
            advance(1)
    assert [(e.done, e.total, e.elapsed_s, e.finished) for e in seen] == [
        (0, 2, 0.0, False),
        (1, 2, 1.5, False),
        (2, 2, 4.0, False),
        (2, 2, 4.0, True),
    ]


async def test_watch_engine_reports_an_engine_point_from_its_live_counters() -> None:
    from benchmaker.engine.runner import LiveStats
    from benchmaker.progress import watch_engine

    live = LiveStats()
    events: list[ProgressEvent] = []
    with observe(events.append):
        async with watch_engine("c2", live, calls_total=10, duration_s=None, interval_s=0.01):
            for k in range(1, 11):
                live.finished, live.in_flight, live.errors = k, 2 if k < 10 else 0, k // 5
                await asyncio.sleep(0.02)
    last = events[-1]
    assert last.finished and (last.calls_done, last.calls_total, last.errors, last.eta_s) == (10, 10, 2, 0.0)
    assert describe(last).endswith("requests in flight 0, misses 0, errors 2, elapsed 0 s, ETA done")
    assert len({e.calls_done for e in events}) >= 3  # it moved
