"""examples/: the tiny task resolves when its pi recording is replayed in execute mode
with the local sandbox; a tampered observation is reported as a divergence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmaker.agent.harness import local_sandbox_factory, run_episode
from benchmaker.agent.verifier import load_task
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.trajectory import Trajectory

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = ROOT / "examples" / "tiny-task"
RECORDING = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"


def _trajectory() -> Trajectory:
    (traj,) = list(iter_trajectories(RECORDING))
    return traj


def _write(traj: Trajectory, path: Path) -> Path:
    path.write_text(traj.model_dump_json() + "\n")
    return path


def test_task_fails_before_the_fix():
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=TASK_DIR,
        capture_output=True,
        text=True,
        env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": ""},
    )
    assert p.returncode == 1 and "2 failed" in p.stdout


def test_recording_converts_to_four_turns():
    traj = _trajectory()
    # read, edit, bash, final answer (examples/recordings/tiny-task.pi.jsonl)
    assert [t.response.finish_reason for t in traj.turns] == ["tool_calls", "tool_calls", "tool_calls", "stop"]
    assert [tc.name for t in traj.turns for tc in t.response.tool_calls] == ["read", "edit", "bash"]
    assert traj.match_key == "task:tiny-task"


async def test_execute_mode_resolves_the_task(tmp_path: Path):
    traj = _trajectory()
    with start_replay_server(_write(traj, tmp_path / "t.jsonl"), divergence="content") as srv:
        res = await run_episode(
            traj, srv.url, mode="execute", sandbox=local_sandbox_factory(), task=load_task(TASK_DIR), run_id="ex"
        )
        stats = srv.stats()
    ep = res.episode
    assert (ep.outcome, ep.error) == ("ok", None)
    assert (ep.n_turns, ep.n_requests) == (4, 4)
    assert (ep.divergences, ep.misses_diverged, ep.misses_unknown_key, ep.misses_beyond_turns) == (0, 0, 0, 0)
    assert (ep.resolved, ep.reverified) == (True, True)
    assert [t.byte_equal for t in res.turns] == [True, True, True, True]
    assert "-    return list(range(start, stop))\n+    return list(range(start, stop + 1))" in res.diff
    # usage recorded on all 4 turns: prompt 412 + 498+384 + 152+448 + 60+576, output 24+61+38+22
    assert ep.usage_complete is True
    assert (ep.prompt_tokens, ep.output_tokens) == (2530, 145)
    assert ep.tool_time_ns > 0 and all(t.n_tool_calls == n for t, n in zip(res.turns, [1, 1, 1, 0], strict=False))
    assert (stats["served"], stats["misses"]["total"], stats["divergences"]["total"]) == (4, 0, 0)
    assert (TASK_DIR / "tinycalc" / "ranges.py").read_text().endswith("range(start, stop))\n")  # source untouched


def _tampered(content: str | None = None, is_error: bool | None = None) -> Trajectory:
    traj = _trajectory()
    obs = traj.turns[2].observations[0]  # the bash test run
    if content is not None:
        obs.content = content
    if is_error is not None:
        obs.is_error = is_error
    return traj


async def test_tampered_observation_is_a_divergence_under_content_policy(tmp_path: Path):
    traj = _tampered(content="all tests passed (tampered)\n")
    with start_replay_server(_write(traj, tmp_path / "t.jsonl"), divergence="content") as srv:
        res = await run_episode(
            traj, srv.url, mode="execute", sandbox=local_sandbox_factory(), task=load_task(TASK_DIR)
        )
    ep = res.episode
    # harness: executed "all tests passed\n" != recorded; server: 412 on turn 3
    assert ep.divergences == 1
    assert res.divergence_details == ["turn 2 call call_bash_3: content"]
    assert ep.misses_diverged == 1 and res.turns[-1].miss_kind == "diverged" and res.calls[-1].status == 412
    assert (ep.outcome, ep.n_turns, ep.n_requests) == ("error", 3, 4)
    assert ep.usage_complete is False and ep.prompt_tokens is None  # the refused call had no usage
    assert ep.resolved is True  # the fix was applied before the divergence


async def test_tampered_status_is_a_divergence_under_status_policy(tmp_path: Path):
    traj = _tampered(content="Command exited with code 1", is_error=True)
    with start_replay_server(_write(traj, tmp_path / "t.jsonl"), divergence="status") as srv:
        res = await run_episode(
            traj, srv.url, mode="execute", sandbox=local_sandbox_factory(), task=load_task(TASK_DIR)
        )
        stats = srv.stats()
    ep = res.episode
    assert ep.divergences == 1 and "is_error False != recorded True" in res.divergence_details[0]
    # the status policy serves the turn but marks it (x-replay-divergence: status)
    assert (ep.outcome, ep.misses_diverged, res.server_divergences) == ("ok", 0, 1)
    assert stats["divergences"] == {"status": 1, "content": 0, "total": 1}


async def test_recorded_mode_carries_the_recorded_outcome(tmp_path: Path):
    traj = _trajectory()
    with start_replay_server(_write(traj, tmp_path / "t.jsonl"), divergence="content") as srv:
        res = await run_episode(traj, srv.url, mode="recorded")
    ep = res.episode
    assert (ep.outcome, ep.n_turns, ep.divergences, ep.misses_diverged) == ("ok", 4, 0, 0)
    assert (ep.resolved, ep.reverified, ep.diff_sha256) == (None, False, None)  # nothing recorded, no workspace
