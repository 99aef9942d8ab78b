"""benchmaker.sweep.plan.plan_trajectories: the plan's reader of a trajectories JSONL. Trusted
(the converter's own output, parsed as plain JSON with no schema validation) and
validated (read_trajectories) give the same PlanTrajectory, the same as built from the
Trajectory models, on the bundled example, the converter fixtures and the real
recordings (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmaker.sweep.plan import PlanTrajectory, context_chars, plan_trajectories, plan_trajectory, sweep_plan
from benchmaker.trajectories.convert import convert_paths, read_trajectories
from benchmaker.trajectories.errors import TrajectoryFormatError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
FIXTURES = REPO / "tests" / "replay" / "fixtures"
REAL = REPO.parent / "shared" / "data" / "real"
INPUTS = [
    EXAMPLE,
    *(
        FIXTURES / n
        for n in (
            "pi_events.jsonl",
            "pi_v3_tree.jsonl",
            "swe_agent_fc.traj",
            "swesmith_rows.jsonl",
            "harbor_trial.jsonl",
        )
    ),
]
REAL_INPUTS = [
    "pi-session-v1-large.jsonl",
    "swe-agent-pydicom-1458.traj",
    "openhands-basic.traj.json",
    "mini-swe-agent-github-issue.traj.json",
]


def test_the_example_reads_as_its_recorded_calls(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    convert_paths([EXAMPLE], out, progress=None)
    (t,) = plan_trajectories(out, trusted=True)
    # 4 calls: context 122, 314, 587, 702 characters; completion_tokens as recorded; durations in ms
    assert t == PlanTrajectory(
        t.trajectory_id, (0.122, 0.314, 0.587, 0.702), (24, 61, 38, 22), (640.0, 910.0, 520.0, 430.0)
    )
    assert len(t.turns) == 4
    # recorded latency: 4 x 5 ms + (640 + 910 + 520 + 430) ms; no context cost
    plan = sweep_plan([t], [1], latency="recorded", call_overhead_s=0.005, context_s_per_kchar=0.0)
    assert plan.points[0].estimated_s == pytest.approx(0.02 + 2.5)


def _check_same(out: Path) -> int:
    models = list(read_trajectories(out))
    fast = plan_trajectories(out, trusted=True)
    assert fast == plan_trajectories(out, trusted=False) == [plan_trajectory(t) for t in models]
    assert [list(p.context_kchars) for p in fast] == [context_chars(t) for t in models]
    for latency in ("instant", "fixed:200:20", "recorded"):
        assert sweep_plan(fast, [1, 3], latency=latency) == sweep_plan(models, [1, 3], latency=latency)
    return sum(len(p.turns) for p in fast)


def test_trusted_and_validated_reads_agree_on_every_fixture(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    report = convert_paths(INPUTS, out, lenient=True, progress=None)
    assert _check_same(out) == report.turns


def test_trusted_and_validated_reads_agree_on_the_real_recordings(tmp_path: Path) -> None:
    present = [REAL / n for n in REAL_INPUTS if (REAL / n).is_file()]
    if not present:
        pytest.skip(f"real recordings absent: {REAL}")
    out = tmp_path / "t.jsonl"
    report = convert_paths(present, out, lenient=True, progress=None)
    assert _check_same(out) == report.turns


def test_an_untrusted_file_is_validated(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"trajectory_id": "x"}\n')
    with pytest.raises(TrajectoryFormatError, match=r"t\.jsonl:1: "):
        plan_trajectories(bad)
