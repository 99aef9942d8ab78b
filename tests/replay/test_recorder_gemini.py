"""`benchmaker record` on the Gemini API: Gemini calls through the recording proxy in front
of a replay server become a trajectory equal to the original, which replays with 0
misses over chat completions and over the Gemini API."""

from __future__ import annotations

import httpx
import pytest

from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.store import load_trajectories
from benchmaker.trajectories.context import request_messages
from tests.replay.replay_turns import replay_turns
from tests.replay.test_gemini_cli import _to_gemini
from tests.replay.test_recorder import _proxy, _traj, _write


def _answers(traj) -> list[tuple]:
    return [(t.response.content, t.response.reasoning, [(c.id, c.name, c.arguments) for c in t.response.tool_calls],
             t.response.finish_reason, t.usage, t.observations, t.user_after) for t in traj.turns]


@pytest.mark.parametrize("method, query", [("streamGenerateContent", "?alt=sse"), ("streamGenerateContent", ""),
                                           ("generateContent", "")])
async def test_gemini_calls_through_the_proxy_record_the_conversation(tmp_path, method, query):
    original = _traj()
    out = tmp_path / "recorded.jsonl"
    with start_replay_server(_write([original], tmp_path / "t0.jsonl")) as upstream:
        async with _proxy(upstream.url, out) as (url, _app):
            async with httpx.AsyncClient() as client:
                for k in range(len(original.turns)):
                    body = _to_gemini(request_messages(original, k))
                    r = await client.post(f"{url}/v1beta/models/m-1:{method}{query}", json=body)
                    assert r.status_code == 200, r.text
                flushed = (await client.post(url + "/flush")).json()
    assert flushed == {"path": str(out), "trajectories": 1, "turns": 3, "skipped": {}}
    (rec,) = [t for _, t in load_trajectories(out)]
    assert (rec.match_key, rec.system, rec.first_user, rec.user_before_turns, rec.model) == (
        original.match_key, original.system, original.first_user, original.user_before_turns, "m-1")
    # everything but the raw argument bytes (the Gemini API sends args as an object)
    assert _answers(rec) == _answers(original)
    assert rec.turns[0].response.tool_calls[0].arguments_raw == '{"path":"calc.py"}'
    assert all(t.timing is not None and t.timing.duration_ms > 0 for t in rec.turns)
    replayed = replay_turns(out, rec, divergence="content")
    assert replayed.stats["misses"]["total"] == 0
