"""benchmaker.sweep.live: the live coding agent against a scripted OpenAI-compatible model (the
replay server over examples/recordings/tiny-task.pi.jsonl), local sandbox, verifier;
the trajectory it writes validates and replays with zero misses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.agent.harness import local_sandbox_factory, run_episode
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.live import LIVE_FORMAT, PI_TOOL_SCHEMAS, load_live_task, run_live
from benchmaker.trajectories.convert import iter_trajectories, read_trajectories

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = ROOT / "examples" / "tiny-task"
RECORDING = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"


@pytest.fixture
def model_recording(tmp_path: Path) -> Path:
    (traj,) = list(iter_trajectories(RECORDING))
    path = tmp_path / "model.jsonl"
    path.write_text(traj.model_dump_json() + "\n")
    return path


def test_prompt_carries_the_task_id_line():
    task = load_live_task(TASK_DIR)
    assert task.prompt.splitlines()[0] == "task_id: tiny-task"  # task.json has no prompt: default text
    assert "`python3 -m pytest -q -p no:cacheprovider` passes" in task.prompt
    assert [t["function"]["name"] for t in PI_TOOL_SCHEMAS] == ["bash", "read", "write", "edit"]


async def test_live_run_resolves_writes_trajectory_and_replays_with_zero_misses(tmp_path: Path, model_recording):
    task = load_live_task(TASK_DIR)
    out = tmp_path / "run"
    # content divergence policy + is_error: the "model" refuses any observation that differs from its recording
    with start_replay_server(model_recording, divergence="content") as srv:
        run = await run_live(
            [task],
            srv.url,
            model="gpt-4o-mini",
            sandbox_factory=local_sandbox_factory(),
            out_dir=out,
            run_id="live1",
            send_status_fields=True,
        )
        model_stats = srv.stats()
    (res,) = run.results
    ep = res.episode
    assert (ep.outcome, ep.error, ep.mode) == ("ok", None, "execute")
    assert (ep.n_turns, ep.n_requests, ep.resolved, ep.reverified) == (4, 4, True, True)
    # usage of the 4 recorded turns (tests/replay/test_example_task.py): prompt 2530, output 145
    assert (ep.usage_complete, ep.prompt_tokens, ep.output_tokens) == (True, 2530, 145)
    assert (model_stats["served"], model_stats["misses"]["total"], model_stats["divergences"]["total"]) == (4, 0, 0)
    assert "+    return list(range(start, stop + 1))" in res.diff

    (traj,) = list(read_trajectories(out / "trajectories.jsonl"))  # validates against the schema
    assert (traj.source.format, traj.task_id, traj.match_key, traj.terminated_by) == (
        LIVE_FORMAT,
        "tiny-task",
        "task:tiny-task",
        "stop",
    )
    assert (traj.outcome.resolved, traj.outcome.patch) == (True, res.diff)
    assert [tc.name for t in traj.turns for tc in t.response.tool_calls] == ["read", "edit", "bash"]
    assert traj.turns[2].observations[0].content == "all tests passed\n"  # run in the sandbox
    assert [t.usage.prompt_tokens for t in traj.turns] == [412, 882, 600, 636]
    grades = [json.loads(x) for x in (out / "grades.jsonl").read_text().splitlines()]
    assert [(g["grader"], g["verdict"], g["score"]) for g in grades] == [("verifier", "resolved", 1.0)]
    assert len((out / "turns.jsonl").read_text().splitlines()) == 4

    # swebench-replay style: serve the written trajectory and play it in recorded mode
    with start_replay_server(out / "trajectories.jsonl", divergence="content") as srv:
        replayed = await run_episode(traj, srv.url, mode="recorded")
        stats = srv.stats()
    rep = replayed.episode
    assert (rep.outcome, rep.n_turns, rep.misses_unknown_key, rep.misses_beyond_turns, rep.misses_diverged) == (
        "ok",
        4,
        0,
        0,
        0,
    )
    assert [t.byte_equal for t in replayed.turns] == [True] * 4
    assert (stats["served"], stats["misses"]["total"]) == (4, 0)


async def test_model_failure_ends_the_episode_with_error_and_unresolved_grade(tmp_path: Path, model_recording):
    task = load_live_task(TASK_DIR)
    task.prompt = "task_id: other-task\nno recording has this key"
    with start_replay_server(model_recording) as srv:
        run = await run_live(
            [task], srv.url, model="m", sandbox_factory=local_sandbox_factory(), out_dir=tmp_path, run_id="r"
        )
    (res,) = run.results
    # 404 unknown key from the replay server on the first call
    assert (res.episode.outcome, res.episode.misses_unknown_key, res.episode.n_turns) == ("error", 1, 0)
    assert res.trajectory.terminated_by == "error" and res.trajectory.turns == []
    assert (res.episode.resolved, res.verdict.resolved) == (False, False)  # untouched repo: tests fail
    (grade,) = [json.loads(x) for x in (tmp_path / "grades.jsonl").read_text().splitlines()]
    assert grade["verdict"] == "unresolved"
