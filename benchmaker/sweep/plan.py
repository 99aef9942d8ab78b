"""The plan of a replay sweep before any work: per point the episodes,
the model calls they make (one per recorded turn) and an estimated duration; printed by
`benchmaker swebench-replay` before it starts, and alone with `--dry-run`.

    plan = sweep_plan(trajectories, [1, 5, 25], episodes_per_point=None, duration_s=None,
                      latency="instant")
    print(format_plan(plan))
    costs = plan_trajectories(Path("trajectories.jsonl"), trusted=True)   # what a plan needs
    plan = sweep_plan(costs, [1, 5, 25])                                   # the same plan

Estimate (a rough one: the live ETA of benchmaker.progress replaces it once calls are
measured): a model call takes `call_overhead_s` plus `context_s_per_kchar` per thousand
characters of context it sends (benchmaker.sweep.plan.context_chars: client, harness and replay
server work grow with the context; defaults CALL_OVERHEAD_S and CONTEXT_S_PER_KCHAR,
fitted on a 453-turn pi session here) plus the replay latency model's time for its
response: 0 for `instant`;
TTFT + ITL x (tokens - 1) for `fixed:TTFT:ITL` (tokens: recorded completion_tokens, else
characters / 4); the recorded duration (else TTFT) for `recorded`. An episode takes the
sum of its calls; a closed-loop point of C episodes in flight takes the makespan of
its episode plan in order on C slots (each episode starts when a slot frees), and at
least the per-call work of all its calls (that work is CPU in one client process and one
server process, so it does not overlap across episodes as waiting for latency does). A point
run for `duration_s` takes that plus one mean episode (started episodes run to their
end). Tool time (execute/command modes) and Prefect's own bookkeeping are not counted.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmaker.replay_server.latency import LatencyModel, parse_latency
from benchmaker.sweep.sweep import episode_plan, point_name
from benchmaker.trajectories.trajectory import Trajectory, Turn

__all__ = [
    "CALL_OVERHEAD_S",
    "CONTEXT_S_PER_KCHAR",
    "PlanTrajectory",
    "PointPlan",
    "SweepPlan",
    "context_chars",
    "format_plan",
    "plan_trajectories",
    "plan_trajectory",
    "planned_totals",
    "planned_work",
    "sweep_plan",
]

CALL_OVERHEAD_S = 0.005
"""Seconds of client + harness + replay-server work per model call at `instant` latency,
beside the part that grows with its context (CONTEXT_S_PER_KCHAR)."""

CONTEXT_S_PER_KCHAR = 0.00003
"""Seconds per thousand characters of context a replayed call sends. With CALL_OVERHEAD_S:
elapsed = a x calls + b x context fitted (least squares, benchmaker.progress.WorkEstimator)
on the 453-turn pi session of ../shared/data/real at concurrency 1 on a quiet 2-core
host: 453 calls, 141,264 kchars of context in all, ~6.8 s; a busy host is 2-3x slower."""


@dataclass(frozen=True, slots=True)
class PointPlan:
    """One sweep point of the plan: `episodes` and `model_calls` are None for a point run
    for a duration (unknown ahead); `estimated_s` in seconds."""

    sweep_point: str
    concurrency: int
    episodes: int | None
    model_calls: int | None
    estimated_s: float


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """The plan of a sweep: its points, the trajectories (count and model calls each, in
    order), the latency spec and per-call overhead the estimate assumed, the total."""

    points: list[PointPlan]
    trajectories: int
    calls_per_trajectory: list[int]
    latency: str
    call_overhead_s: float
    duration_s: float | None
    context_s_per_kchar: float = CONTEXT_S_PER_KCHAR

    @property
    def estimated_s(self) -> float:
        """Sum of the points' estimates, in seconds."""
        return sum(p.estimated_s for p in self.points)


def _call_seconds(model: LatencyModel, tokens: int, recorded_ms: float | None, call_overhead_s: float) -> float:
    """Estimated seconds of one replayed model call (module docstring) whose response is
    `tokens` long and took `recorded_ms` (None: no timing recorded), its overhead with
    the context's share included."""
    if model.kind == "fixed":
        return call_overhead_s + (model.ttft_ms + model.itl_ms * (tokens - 1)) / 1000.0
    if model.kind == "recorded" and recorded_ms is not None:
        return call_overhead_s + recorded_ms / 1000.0
    return call_overhead_s


def _turn_cost(turn: Turn) -> tuple[int, int, float | None]:
    """(characters the turn adds to the context after its call, the response's tokens
    for the fixed latency model, its recorded ms for the recorded one) of a Turn;
    `_dict_turn_cost` is the same of its JSON object."""
    r = turn.response
    added = len(r.content or "") + len(r.reasoning or "") + sum(len(c.arguments_raw) for c in r.tool_calls)
    added += sum(len(o.content) for o in turn.observations) + sum(map(len, turn.user_after))
    tokens = (turn.usage.completion_tokens if turn.usage and turn.usage.completion_tokens else None) or max(
        1, len((r.content or "") + (r.reasoning or "")) // 4
    )
    ms = None
    if turn.timing is not None:
        ms = turn.timing.duration_ms if turn.timing.duration_ms is not None else (turn.timing.ttft_ms or 0.0)
    return added, tokens, ms


def _dict_turn_cost(turn: dict) -> tuple[int, int, float | None]:
    """`_turn_cost` of a turn as its JSON object (`Turn.model_dump_json`, every field
    present)."""
    r = turn["response"]
    content, reasoning = r["content"] or "", r["reasoning"] or ""
    added = len(content) + len(reasoning) + sum(len(c["arguments_raw"]) for c in r["tool_calls"])
    added += sum(len(o["content"]) for o in turn["observations"]) + sum(map(len, turn["user_after"]))
    usage, timing = turn["usage"], turn["timing"]
    tokens = (usage["completion_tokens"] if usage and usage["completion_tokens"] else None) or max(
        1, (len(content) + len(reasoning)) // 4
    )
    ms = None
    if timing is not None:
        ms = timing["duration_ms"] if timing["duration_ms"] is not None else (timing["ttft_ms"] or 0.0)
    return added, tokens, ms


@dataclass(frozen=True, slots=True)
class PlanTrajectory:
    """What a plan needs of one trajectory, per model call (one per recorded turn, in
    order): the context it sends in thousands of characters (`context_chars`), its
    response's tokens (recorded completion_tokens, else characters / 4) and its
    recorded duration in ms (duration_ms, else ttft_ms, else 0; None without timing).
    `turns` is the call count (sweep plans take it as they take a Trajectory's)."""

    trajectory_id: str
    context_kchars: tuple[float, ...]
    tokens: tuple[int, ...]
    recorded_ms: tuple[float | None, ...]

    @property
    def turns(self) -> tuple[float, ...]:
        """One item per model call (its context_kchars): `len(t.turns)` is the call count."""
        return self.context_kchars


def _plan_trajectory(
    trajectory_id: str, start_chars: int, costs: list[tuple[int, int, float | None]]
) -> PlanTrajectory:
    size, ctx = start_chars, []
    for added, _, _ in costs:
        ctx.append(size / 1000.0)
        size += added
    return PlanTrajectory(trajectory_id, tuple(ctx), tuple(c[1] for c in costs), tuple(c[2] for c in costs))


def plan_trajectory(trajectory: Trajectory | PlanTrajectory) -> PlanTrajectory:
    """The PlanTrajectory of a Trajectory (one given as it is)."""
    if isinstance(trajectory, PlanTrajectory):
        return trajectory
    t = trajectory
    start = len(t.system or "") + len(t.first_user) + sum(map(len, t.user_before_turns))
    return _plan_trajectory(t.trajectory_id, start, [_turn_cost(turn) for turn in t.turns])


def plan_trajectories(path: Path, *, trusted: bool = False) -> list[PlanTrajectory]:
    """The PlanTrajectory of each trajectory of a trajectories JSONL file, in order.
    `trusted`: the file is this converter's own output (benchmaker.trajectories.convert.convert_paths,
    e.g. the conversion cache of benchmaker.tasks.convert): each line is parsed as JSON (orjson)
    and only what a plan needs is read from it, with no schema validation (~10x less
    CPU than building the models for a large corpus). Otherwise every line is validated
    (benchmaker.trajectories.convert.read_trajectories; raises benchmaker.trajectories.errors.TrajectoryFormatError
    `path:line: field: problem` at the first bad one). Both give equal results."""
    from benchmaker.trajectories.convert import read_trajectories

    if not trusted:
        return [plan_trajectory(t) for t in read_trajectories(Path(path))]
    import orjson

    out = []
    with Path(path).open("rb") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            t = orjson.loads(raw)
            start = len(t["system"] or "") + len(t["first_user"]) + sum(map(len, t["user_before_turns"]))
            out.append(_plan_trajectory(t["trajectory_id"], start, [_dict_turn_cost(turn) for turn in t["turns"]]))
    return out


def _makespan(durations: Sequence[float], slots: int) -> float:
    """Seconds to run `durations` in order on `slots` parallel slots, each job starting
    on the first slot that frees (list scheduling)."""
    free = [0.0] * max(1, min(slots, len(durations) or 1))
    end = 0.0
    for d in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + d)
        end = max(end, start + d)
    return end


def _point_plan(
    trajectories: Sequence[Trajectory], concurrency: int | None, episodes: int | None, duration_s: float | None
) -> list[Trajectory] | None:
    """The episodes of `planned_totals` in order, as run_point plans them."""
    return None if duration_s is not None else episode_plan(trajectories, concurrency or 1, episodes)


def planned_totals(
    trajectories: Sequence[Trajectory], concurrency: int | None, episodes: int | None, duration_s: float | None
) -> tuple[int | None, int | None]:
    """(episodes, model calls) a point will play: its episode plan (benchmaker.sweep.sweep.episode_plan;
    one per trajectory for an open-loop point without `episodes`) and the recorded turns
    of those episodes; (None, None) for a point run for a duration."""
    plan = _point_plan(trajectories, concurrency, episodes, duration_s)
    return (None, None) if plan is None else (len(plan), sum(len(t.turns) for t in plan))


def sweep_plan(
    trajectories: Sequence[Trajectory | PlanTrajectory],
    concurrency_sweep: Sequence[int],
    *,
    episodes_per_point: int | None = None,
    duration_s: float | None = None,
    latency: str = "instant",
    call_overhead_s: float = CALL_OVERHEAD_S,
    context_s_per_kchar: float = CONTEXT_S_PER_KCHAR,
) -> SweepPlan:
    """The plan of a closed-loop replay sweep (module docstring) of Trajectories or their
    PlanTrajectory (`plan_trajectories`: the same plan). Raises ValueError for no
    trajectories or a concurrency < 1, LatencySpecError for a bad `latency`."""
    if not trajectories:
        raise ValueError("trajectories: expected at least one trajectory (got none)")
    model = parse_latency(latency)
    plans = [plan_trajectory(t) for t in trajectories]
    episode_s = {
        t.trajectory_id: sum(
            _call_seconds(model, tokens, ms, call_overhead_s + k * context_s_per_kchar)
            for k, tokens, ms in zip(t.context_kchars, t.tokens, t.recorded_ms, strict=True)
        )
        for t in plans
    }
    cpu_s = {
        t.trajectory_id: len(t.turns) * call_overhead_s + sum(t.context_kchars) * context_s_per_kchar for t in plans
    }
    mean_episode_s = sum(episode_s.values()) / len(episode_s)
    points = []
    for c in concurrency_sweep:
        if c < 1:
            raise ValueError(f"concurrency_sweep: expected integers >= 1 (got {c})")
        if duration_s is not None:
            points.append(PointPlan(point_name(c), c, None, None, duration_s + mean_episode_s))
            continue
        plan = episode_plan(plans, c, episodes_per_point)
        n_calls = sum(len(t.turns) for t in plan)
        points.append(
            PointPlan(
                point_name(c),
                c,
                len(plan),
                n_calls,
                max(
                    _makespan([episode_s[t.trajectory_id] for t in plan], c), sum(cpu_s[t.trajectory_id] for t in plan)
                ),
            )
        )
    return SweepPlan(
        points=points,
        trajectories=len(plans),
        calls_per_trajectory=[len(t.turns) for t in plans],
        latency=latency,
        call_overhead_s=call_overhead_s,
        duration_s=duration_s,
        context_s_per_kchar=context_s_per_kchar,
    )


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def format_plan(plan: SweepPlan) -> str:
    """The plan as text: one line per point (episodes x model calls, estimate), the total,
    and what the estimate assumed."""
    calls = plan.calls_per_trajectory
    lines = [
        f"plan: {len(plan.points)} sweep point(s) x {plan.trajectories} trajectory(ies) "
        f"({min(calls)}-{max(calls)} model calls each, {sum(calls)} in all)"
    ]
    for p in plan.points:
        if p.episodes is None:
            what = f"episodes for {plan.duration_s:g} s"
        else:
            what = f"{p.episodes} episode(s), {p.model_calls} model calls"
        lines.append(f"  {p.sweep_point:<6} {p.concurrency} in flight: {what}, ~{_duration(p.estimated_s)}")
    lines.append(
        f"  total ~{_duration(plan.estimated_s)} (estimate: {plan.call_overhead_s * 1000:g} ms a call + "
        f"{plan.context_s_per_kchar * 1e6:g} us per 1000 characters of context + latency {plan.latency}; "
        f"tool time not counted; the live ETA refines it)"
    )
    return "\n".join(lines)


def context_chars(trajectory: Trajectory) -> list[float]:
    """Per model call of `trajectory`, the characters of context it sends, in thousands:
    system, first user message and the user messages before the turns, plus every
    earlier turn's response (content, reasoning, tool-call arguments), observations and
    follow-up user messages. Context edits (compaction) are not subtracted, so late calls
    of a compacted session are overstated. The live ETA weighs calls by it: a replayed
    call's cost (building, sending, matching and answering the request) grows with it."""
    return list(plan_trajectory(trajectory).context_kchars)


def planned_work(
    trajectories: Sequence[Trajectory], concurrency: int | None, episodes: int | None, duration_s: float | None
) -> list[list[float]] | None:
    """Per planned episode of a point (`planned_totals`' plan, in order), the
    `context_chars` of each of its calls; None for a point run for a duration."""
    plan = _point_plan(trajectories, concurrency, episodes, duration_s)
    if plan is None:
        return None
    by_id = {t.trajectory_id: context_chars(t) for t in trajectories}
    return [by_id[t.trajectory_id] for t in plan]
