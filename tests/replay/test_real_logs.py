"""Every agent log in ../shared/data/real and ../shared/data/real-agents (public logs
written by the agents themselves; each folder's SOURCES.md names them) converts with one
turn per model call its log shows, and replays turn by turn through the replay server
with 0 misses and 0 divergences under `--divergence content`.

The model calls of a log: as its SOURCES.md states them, else counted here from the raw
log, not through the converter (SWE-agent: `info.model_stats.api_calls`; mini-swe-agent
1.x message lists: the assistant messages; OpenHands: the distinct `model_response` ids
of its actions). Every file SOURCES.md lists is such a log or in NOT_LOGS with what it
is, and every file in the folders is listed: a new log fails
test_every_listed_file_is_covered until it has its count here. Skipped cleanly when the
folders are absent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmaker.trajectories.convert import iter_trajectories
from tests.replay.replay_turns import replay_turns
from tests.replay.test_server_fixtures import write_store

_SHARED = [Path(__file__).resolve().parents[2].parent / "shared" / "data", Path("/work/shared/data")]
DATA = next((d for d in _SHARED if (d / "real").is_dir()), _SHARED[0])
FOLDERS = ("real", "real-agents")


def _swe_agent_api_calls(path: Path) -> list[int]:
    return [json.loads(path.read_text())["info"]["model_stats"]["api_calls"]]


def _assistant_messages(path: Path) -> list[int]:
    return [sum(1 for m in json.loads(path.read_text()) if m.get("role") == "assistant")]


def _openhands_responses(path: Path) -> list[int]:
    ids = {
        e["tool_call_metadata"]["model_response"]["id"]
        for e in json.loads(path.read_text())
        if (e.get("tool_call_metadata") or {}).get("model_response")
    }
    return [len(ids)]


# folder/file: model calls per trajectory it converts to, or how to count them in the log
LOGS: dict[str, list[int] | Callable[[Path], list[int]]] = {
    "real/pi-session-v1-large.jsonl": [453],  # SOURCES.md: 453 assistant turns
    "real/swe-agent-pydicom-1458.traj": _swe_agent_api_calls,
    "real/mini-swe-agent-github-issue.traj.json": _assistant_messages,
    "real/openhands-basic.traj.json": _openhands_responses,
    "real-agents/claude-code-2.1.38-tool-heavy.jsonl": [4],  # SOURCES.md: 4 (distinct requestId)
    # SOURCES.md: 12 in the main thread; the Task subagent's thread is a trajectory of its
    # own, its 5 calls the distinct requestIds of its agent_progress lines
    "real-agents/claude-code-2.1.38-subagent-task.jsonl": [12, 5],
    "real-agents/codex-0.125-rollout-019e1625.jsonl": [66],  # SOURCES.md: 66 (one token_count per response)
    "real-agents/gemini-cli-session-2026-01-16T11-01-file-ops-37b7abef.json": [9],  # SOURCES.md: 9
    "real-agents/swe-agent-6e44b9-sweagenttestrepo-1c2844.traj": [
        5
    ],  # SOURCES.md: api_calls 5, the last in trajectory only
    "real-agents/mini-swe-agent-1.15.0-gemini3-django-16429.traj.json": [20],  # SOURCES.md: 20
}

NOT_LOGS = {
    "real/openai-gpt4o-toolcall.chunks.jsonl": "streamed chat.completion.chunk objects (a stream case)",
    "real/deepseek-v4-flash-toolcall.chunks.jsonl": "streamed chat.completion.chunk objects (a stream case)",
    "real/swe-agent-pydicom-1458.all_preds.jsonl": "the SWE-agent run's prediction record",
    "real/swe-agent-pydicom-1458.patch": "the SWE-agent run's patch",
}


def _listed(folder: str) -> set[str]:
    """The files the first column of `<folder>/SOURCES.md`'s table names (a name that
    starts with "." is the row's first name with that suffix: `x.all_preds.jsonl`,
    `.patch` -> x.patch)."""
    names: set[str] = set()
    for line in (DATA / folder / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        first = None
        for name in re.findall(r"`([^`]+)`", cell):
            if name.startswith(".") and first is not None:
                name = first.split(".")[0] + name
            first = first or name
            names.add(f"{folder}/{name}")
    return names


def _need(folder: str) -> None:
    if not (DATA / folder / "SOURCES.md").is_file():
        pytest.skip(f"real logs not present ({DATA / folder})")


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_listed_file_is_covered(folder: str) -> None:
    _need(folder)
    listed = _listed(folder)
    on_disk = {f"{folder}/{p.name}" for p in (DATA / folder).iterdir() if p.name != "SOURCES.md"}
    assert listed == on_disk
    ours = {k for k in [*LOGS, *NOT_LOGS] if k.startswith(folder + "/")}
    assert listed == ours


SLOW = {"real/pi-session-v1-large.jsonl"}  # 453 turns, each resending the history: ~1 min on a busy host


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(LOGS)])
def test_real_log_converts_one_turn_per_model_call_and_replays(name: str, tmp_path: Path) -> None:
    folder = name.split("/")[0]
    _need(folder)
    path = DATA / name
    expected = LOGS[name]
    calls = expected(path) if callable(expected) else expected
    trajs = list(iter_trajectories(path))
    assert [len(t.turns) for t in trajs] == calls
    store = write_store(tmp_path / "trajectories.jsonl", trajs)
    for traj in trajs:
        replayed = replay_turns(store, traj, divergence="content")
        assert len(replayed.responses) == len(traj.turns)
        assert replayed.stats["misses"]["total"] == 0, (traj.trajectory_id, replayed.stats["misses"])
        assert replayed.stats["divergences"]["total"] == 0, (traj.trajectory_id, replayed.stats["divergences"])
