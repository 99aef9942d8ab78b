"""Conformance on real recordings (../shared/data/real, skipped when absent): each
converted trajectory is replayed turn by turn through the server, non-streaming and
streaming, with divergence policy `content` and faithful observations; every response
must be byte-equal to the recording and /stats must count no miss and no divergence.

Requests are lean: system, first user message, the user messages recorded before the
first turn (SWE-agent: the task prompt after the demonstration), t assistant placeholders (only their
count matters for matching) of which the last is the real previous response, then the
recorded observations of turn t-1 (role "tool" with tool_call_id, else role "user").
That is everything the server reads, without resending a 450-turn history each time.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from benchmaker.trajectories.trajectory import Trajectory
from tests.replay.test_server_fixtures import reassemble, running_server, sse_events, write_store

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"

RECORDINGS = {
    # file: recorded assistant turns (SOURCES.md: the pi session has 453)
    "pi-session-v1-large.jsonl": 453,
    "swe-agent-pydicom-1458.traj": None,
    "mini-swe-agent-github-issue.traj.json": None,
    "openhands-basic.traj.json": None,
}


def _convert(name: str) -> Trajectory:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"real recording {path} not present")
    convert = pytest.importorskip("benchmaker.trajectories.convert")
    trajectories = list(convert.iter_trajectories(path))
    assert len(trajectories) == 1
    return trajectories[0]


def _lean_messages(traj: Trajectory, t: int) -> list[dict]:
    messages: list[dict] = []
    if traj.system is not None:
        messages.append({"role": "system", "content": traj.system})
    messages.append({"role": "user", "content": traj.first_user})
    messages.extend({"role": "user", "content": u} for u in traj.user_before_turns)
    if t == 0:
        return messages
    messages += [{"role": "assistant", "content": ""}] * (t - 1)
    prev = traj.turns[t - 1]
    messages.append({"role": "assistant", "content": prev.response.content})
    for o in prev.observations:
        if o.tool_call_id is not None:
            messages.append({"role": "tool", "tool_call_id": o.tool_call_id, "content": o.content})
        else:
            messages.append({"role": "user", "content": o.content})
    return messages


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_real_recording_replays_byte_exact(tmp_path, name):
    traj = _convert(name)
    if RECORDINGS[name] is not None:
        assert len(traj.turns) == RECORDINGS[name]
    path = write_store(tmp_path / "trajectories.jsonl", [traj])
    with running_server(path, divergence="content") as url, httpx.Client(timeout=30) as client:
        for t, turn in enumerate(traj.turns):
            rec = turn.response
            messages = _lean_messages(traj, t)
            r = client.post(url + "/v1/chat/completions", content=orjson.dumps({"messages": messages}))
            assert r.status_code == 200, (t, r.text[:300])
            msg = r.json()["choices"][0]["message"]
            assert msg["content"] == rec.content, t
            assert msg.get("reasoning_content") == rec.reasoning, t
            assert [tc["function"]["arguments"] for tc in msg.get("tool_calls", [])] == [
                tc.arguments_raw for tc in rec.tool_calls
            ], t
            r = client.post(
                url + "/v1/chat/completions",
                content=orjson.dumps({"messages": messages, "stream": True, "stream_options": {"include_usage": True}}),
            )
            assert r.status_code == 200, (t, r.text[:300])
            got = reassemble(sse_events(r.content))
            assert got["content"] == rec.content, t
            assert got["reasoning"] == rec.reasoning, t
            assert [(c["id"], c["name"], c["arguments"]) for c in got["tool_calls"]] == [
                (c.id, c.name, c.arguments_raw) for c in rec.tool_calls
            ], t
            assert got["finish_reason"] == rec.finish_reason
            assert got["done"]
        stats = client.get(url + "/stats").json()
    assert stats["served"] == 2 * len(traj.turns)
    assert stats["misses"]["total"] == 0
    assert stats["divergences"]["total"] == 0
