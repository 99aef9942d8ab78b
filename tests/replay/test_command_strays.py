"""Command mode when the agent strays (benchmaker.agent.harness): a scripted agent (a small
Python script run as the agent command) that sends an observation the recording does
not have is stopped promptly and reported diverged; the point's verdict counts what
succeeded; the patch hash covers the task's files only; nothing is left in the temp
folder."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

from benchmaker.agent.harness import EpisodeResult, local_sandbox_factory, run_episode, task_diff
from benchmaker.agent.verifier import load_task
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import run_point
from benchmaker.sweep.verdicts import pipeline_failures, reasons_of, verdict_line
from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.trajectory import Trajectory

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"
TASK_DIR = ROOT / "examples" / "tiny-task"

# The scripted agent (its flags: DIVERGE, RETRY, STRAYS in its docstring); every run
# here drops files of its own (STRAYS).
_AGENT = (Path(__file__).parent / "fixtures" / "tiny_task_agent.py").read_text()


def _example() -> Trajectory:
    (t,) = list(iter_trajectories(RECORDING))
    return t


class _TempFolder:
    """A folder made this process's and the agents' TMPDIR; `new()` lists the entries
    made since `mark()` (the replay server's own log files are there before)."""

    def __init__(self, path: Path):
        self.path = path
        self.before: set[Path] = set()

    def mark(self) -> None:
        self.before = set(self.path.iterdir())

    def new(self) -> list[Path]:
        return sorted(set(self.path.iterdir()) - self.before)


@pytest.fixture
def agent_tmp(tmp_path: Path, monkeypatch) -> _TempFolder:
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return _TempFolder(tmp)


@pytest.fixture
def agent(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("STRAYS", "1")
    path = tmp_path / "agent.py"
    path.write_text(_AGENT)
    return path


@pytest.fixture
def replay(tmp_path: Path):
    traj = _example()
    path = tmp_path / "t.jsonl"
    path.write_text(traj.model_dump_json() + "\n")
    with start_replay_server(path, divergence="content") as srv:
        yield traj, srv


async def _command_episode(replay, agent: Path, confined: bool = False, **kw) -> EpisodeResult:
    """One command-mode episode of the tiny task with the scripted agent (unconfined:
    it inherits this process's environment, the flags included)."""
    traj, srv = replay
    return await run_episode(
        traj,
        srv.url,
        mode="command",
        sandbox=local_sandbox_factory(confined=confined),
        task=load_task(TASK_DIR),
        command=[sys.executable, str(agent)],
        **kw,
    )


async def test_a_diverged_agent_retrying_is_stopped_after_the_grace(
    agent: Path, agent_tmp: _TempFolder, replay, monkeypatch
):
    monkeypatch.setenv("DIVERGE", "1")
    monkeypatch.setenv("RETRY", "1")
    agent_tmp.mark()
    t0 = time.monotonic()
    res = await _command_episode(replay, agent, stray_grace_s=0.5)
    elapsed_s = time.monotonic() - t0
    ep = res.episode
    # 0.5 s of grace, the agent's start and the verifier's pytest run; it would retry for
    # the command's 3600 s deadline otherwise (30 s: a margin for a busy machine)
    assert elapsed_s < 30.0
    assert ep.outcome == "diverged"
    assert ep.error == "turn 1: the replay server refused the agent's request (diverged, HTTP 412); stopped 0.5 s later"
    assert ep.n_turns == 1 and ep.misses_diverged >= 2  # the read turn, then the refused request retried
    assert ep.n_requests == 1 + ep.misses_diverged
    assert agent_tmp.new() == []  # the agent's temp folder went with the episode


async def test_a_confined_diverged_agent_retrying_is_stopped_too(agent: Path, tmp_path: Path):
    # confined (bubblewrap) the agent gets the sandbox's environment only: its flags go
    # in the script itself
    os.chmod(tmp_path, 0o755)  # readable by the sandbox's user
    agent.write_text('import os\nos.environ.update(DIVERGE="1", RETRY="1")\n' + _AGENT)
    os.chmod(agent, 0o644)
    traj = _example()
    path = tmp_path / "t.jsonl"
    path.write_text(traj.model_dump_json() + "\n")
    t0 = time.monotonic()
    with start_replay_server(path, divergence="content") as srv:
        res = await _command_episode((traj, srv), agent, confined=True, stray_grace_s=0.5)
    assert time.monotonic() - t0 < 30.0  # as above: a margin for a busy machine
    ep = res.episode
    assert ep.outcome == "diverged", ep.error
    assert ep.error == "turn 1: the replay server refused the agent's request (diverged, HTTP 412); stopped 0.5 s later"


async def test_a_diverged_agent_that_exits_is_reported_diverged(
    agent: Path, agent_tmp: _TempFolder, replay, monkeypatch
):
    monkeypatch.setenv("DIVERGE", "1")
    agent_tmp.mark()
    res = await _command_episode(replay, agent)
    ep = res.episode
    assert ep.outcome == "diverged"
    assert ep.error == (
        "turn 1: the replay server refused the agent's request (diverged, HTTP 412); it exited with code 3 after it"
    )
    assert (ep.n_turns, ep.n_requests, ep.misses_diverged) == (1, 2, 1)
    assert agent_tmp.new() == []


async def test_equal_task_changes_hash_equal_whatever_the_agent_drops(agent: Path, agent_tmp: _TempFolder, replay):
    agent_tmp.mark()
    results = [await _command_episode(replay, agent) for _ in range(2)]
    a, b = results
    assert [r.episode.outcome for r in results] == ["ok", "ok"]
    assert a.diff != b.diff  # each run dropped a file of its own under .agent/
    assert a.diff is not None and b.diff is not None and ".agent/" in a.diff and ".agent/" in b.diff
    patch = task_diff(a.diff)
    assert patch == task_diff(b.diff)
    assert patch.startswith("diff --git a/tinycalc/ranges.py b/tinycalc/ranges.py\n")
    assert patch.count("diff --git ") == 1  # the fix only
    assert a.episode.diff_sha256 == b.episode.diff_sha256 == hashlib.sha256(patch.encode()).hexdigest()
    assert agent_tmp.new() == []


async def test_a_point_whose_episodes_all_diverged_counts_what_succeeded(
    agent: Path, agent_tmp: _TempFolder, replay, tmp_path: Path, monkeypatch
):
    traj, srv = replay
    monkeypatch.setenv("DIVERGE", "1")
    agent_tmp.mark()
    row = await run_point(
        [traj],
        srv.url,
        tmp_path / "run",
        ReplayPoint(
            load="closed:2",
            episodes=2,
            mode="command",
            command=(sys.executable, str(agent)),
            max_loop_lag_ms=10_000.0,  # a busy machine is not under test here
        ),
        run_id="strays",
        sandbox_factory=local_sandbox_factory(confined=False),
        tasks={"tiny-task": load_task(TASK_DIR)},
    )
    # per episode: the read turn served (1 ok request), the next refused (412 diverged)
    assert (row["n_episodes"], row["n_episodes_failed"], row["n_episodes_diverged"]) == (2, 2, 2)
    assert (row["n_requests"], row["n_ok"], row["misses_diverged"]) == (4, 2, 2)
    texts = [r.text for r in reasons_of(row)]
    assert "no episode succeeded: 2 of 2 failed (2 diverged), 2 of 4 requests succeeded" in texts
    assert "no request succeeded" not in row["invalid_reason"]
    assert pipeline_failures([row]) == ["c2"]
    assert "no episode ran to its end: 2 of 2 failed (2 diverged), 2 of 4 requests succeeded" in verdict_line(row)
    assert agent_tmp.new() == []


async def test_a_point_gives_its_stray_grace_to_every_episode(
    agent: Path, agent_tmp: _TempFolder, replay, tmp_path: Path, monkeypatch
):
    traj, srv = replay
    monkeypatch.setenv("DIVERGE", "1")
    monkeypatch.setenv("RETRY", "1")
    agent_tmp.mark()
    point = ReplayPoint(
        load="closed:1",
        episodes=1,
        mode="command",
        command=(sys.executable, str(agent)),
        stray_grace_s=0.25,
        max_loop_lag_ms=10_000.0,  # a busy machine is not under test here
    )
    row = await run_point(
        [traj],
        srv.url,
        tmp_path / "run",
        point,
        run_id="grace",
        sandbox_factory=local_sandbox_factory(confined=False),
        tasks={"tiny-task": load_task(TASK_DIR)},
    )
    assert (row["n_episodes"], row["n_episodes_diverged"]) == (1, 1)
    (episodes,) = (tmp_path / "run").glob("points/*/episodes.jsonl")
    (episode,) = [json.loads(line) for line in episodes.read_text().splitlines()]
    assert episode["outcome"] == "diverged"
    assert episode["error"] == (
        "turn 1: the replay server refused the agent's request (diverged, HTTP 412); stopped 0.25 s later"
    )
    assert agent_tmp.new() == []
