"""benchmaker.agent.harness builds each turn's request with the log's context edits applied:
a pi compaction is replayed through a
real sweep point (engine, EpisodeWorkload, replay server process on 127.0.0.1) and the
request bodies are checked turn by turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.agent.model_client import ModelClient
from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.convert import convert_paths, read_trajectories
from tests.replay.replay_turns import harness_bodies, point_samples

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "logs"


def _expected_bytes(traj, k: int) -> int:
    """Length of the body the agent sent for turn k: the turn's request messages with
    the recorded responses (the replay is byte-exact), serialised as ModelClient does."""
    client = ModelClient("http://unused")
    return len(client.encode(client.body(request_messages(traj, k), model=traj.model)))


async def test_pi_compaction_replayed_by_a_sweep_point_sends_what_the_agent_sent(tmp_path: Path) -> None:
    out = tmp_path / "trajectories.jsonl"
    convert_paths([CASES / "pi-compaction-small.jsonl"], out)
    (traj,) = read_trajectories(out)
    row, stats, samples = await point_samples(out, traj, tmp_path / "run")
    assert stats["misses"]["total"] == 0 and stats["served"] == 6  # 1 episode x 6 turns
    assert row["misses_total"] == 0 and row["n_requests"] == 6
    sent = [s["bytes_sent"] for s in samples]
    assert all(s["outcome"] == "ok" for s in samples)
    # turn by turn, exactly the body of request_messages (summary + kept entries after the
    # compaction on turn 4), as the agent sent it
    assert sent == [_expected_bytes(traj, k) for k in range(6)]
    # the shape of the recorded prompts (900, 2300, 2350, 2380 -> 160, 200 tokens):
    # 152, 5263, 5560, 5658 -> 457, 786 bytes; the 4 KB tool result is in turns 1-3,
    # gone at the compaction, and turn 5 grows from turn 4 by its own block only (the
    # whole history before turn 5 alone would be 5995 bytes: no jump back up)
    assert sent == [152, 5263, 5560, 5658, 457, 786]


@pytest.mark.parametrize("mode", ["recorded", "execute"])
async def test_requests_after_a_compaction_carry_the_summary_then_grow(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "trajectories.jsonl"
    convert_paths([CASES / "pi-compaction-small.jsonl"], out)
    (traj,) = read_trajectories(out)
    # execute: the pi tools run in an empty workspace (read app.py fails there:
    # divergences, but the requests follow the same context rule)
    res, msgs = await harness_bodies(out, traj, mode=mode)
    assert res.episode.outcome == "ok" and res.episode.n_turns == 6
    assert res.episode.misses_unknown_key + res.episode.misses_beyond_turns == 0
    summary_turns = [k for k, m in enumerate(msgs) if "<summary>" in json.dumps(m)]
    assert summary_turns == [4, 5]  # the compaction is on turn 4 and stays in force
    # turn 4: summary, then the kept entries from "Now add a test for it" on
    assert [m["content"] for m in msgs[4][1:4]] == ["Now add a test for it", "Which test framework?", "pytest, please"]
    assert "x = 1\nx = 1" not in json.dumps(msgs[4])  # the 4 KB read result is gone
    # turn 5 = turn 4's request + turn 4's response and its tool result: the list grew again
    assert msgs[5][: len(msgs[4])] == msgs[4] and len(msgs[5]) == len(msgs[4]) + 2
    assert msgs[5][len(msgs[4])]["role"] == "assistant" and msgs[5][-1]["role"] == "tool"
    if mode == "execute":  # the tool result of turn 4 is the one the sandbox gave
        assert msgs[5][-1]["tool_call_id"] == "t3" and res.turns[4].tool_time_ns > 0
