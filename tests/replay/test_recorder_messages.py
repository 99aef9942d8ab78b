"""`benchmaker record` for Anthropic Messages: the anthropic SDK talks to the recording
proxy in front of a scripted upstream (the scenario server's `/v1/messages`) and in front
of a replay server; the recorded trajectory holds the turns (thinking, text, tool_use,
stop reason, usage with cache tokens), streamed and not, and replays with zero misses."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.recorder import MessagesAssembler
from benchmaker.replay_server.store import load_trajectories
from benchmaker.testing import Scenario, ScenarioServer
from tests.replay.test_recorder import _proxy
from tests.replay.test_server_fixtures import running_server
from tests.replay.test_server_messages import SYSTEM, TASK, _trajectory, _turn1_messages

anthropic = pytest.importorskip("anthropic")


@pytest.mark.parametrize("stream", [True, False])
async def test_scripted_upstream_turn_is_recorded(tmp_path: Path, stream: bool):
    sc = Scenario(
        reasoning_chunks=2,
        content_chunks=3,
        tool_call={"name": "ls", "id": "toolu_9"},
        prompt_tokens=500,
        cached_tokens=400,
        ttft_ms=5,
        itl_ms=1,
    )
    out = tmp_path / "rec.jsonl"
    async with ScenarioServer(sc) as upstream, _proxy(upstream.url, out) as (url, _app):
        async with anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0) as client:
            if stream:
                async with client.messages.stream(
                    model="claude-x", max_tokens=50, system=SYSTEM, messages=[{"role": "user", "content": TASK}]
                ) as s:
                    msg = await s.get_final_message()
            else:
                msg = await client.messages.create(
                    model="claude-x", max_tokens=50, system=SYSTEM, messages=[{"role": "user", "content": TASK}]
                )
        assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
        async with httpx.AsyncClient() as c:
            flushed = (await c.post(url + "/flush")).json()
    assert flushed == {"path": str(out), "trajectories": 1, "turns": 1, "skipped": {}}
    (rec,) = [t for _, t in load_trajectories(out)]
    assert (rec.system, rec.first_user, rec.model) == (SYSTEM, TASK, "claude-x")
    (turn,) = rec.turns
    assert turn.response.reasoning == "think " * 2
    assert turn.response.content == "tok " * 3
    (call,) = turn.response.tool_calls
    assert (call.id, call.name, call.arguments_raw, call.arguments) == (
        "toolu_9",
        "ls",
        '{"city": "Paris"}' if stream else '{"city":"Paris"}',
        {"city": "Paris"},
    )
    assert turn.response.finish_reason == "tool_calls"
    # 100 uncached + 400 read; output: 2 + 3 chunks + 2 argument pieces (the scenario's count)
    assert (
        turn.usage.prompt_tokens,
        turn.usage.cached_tokens,
        turn.usage.cache_creation_tokens,
        turn.usage.completion_tokens,
    ) == (500, 400, 0, 7)
    assert turn.timing.duration_ms > 0
    assert (turn.timing.ttft_ms is not None) == stream


async def test_session_through_proxy_replays_with_zero_misses(tmp_path: Path):
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(_trajectory()) + "\n")
    out = tmp_path / "rec.jsonl"
    with running_server(src) as upstream:
        async with _proxy(upstream, out) as (url, _app):
            async with anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0) as client:
                first = await client.messages.create(
                    model="claude-test", max_tokens=50, system=SYSTEM, messages=[{"role": "user", "content": TASK}]
                )
                async with client.messages.stream(
                    model="claude-test", max_tokens=50, system=SYSTEM, messages=_turn1_messages()
                ) as s:
                    await s.get_final_message()
            async with httpx.AsyncClient() as c:
                await c.post(url + "/flush")
    assert first.stop_reason == "tool_use"
    (rec,) = [t for _, t in load_trajectories(out)]
    original = _trajectory()
    assert [t.response.model_dump() for t in rec.turns] == [
        {
            "content": "Let me look at the file.",
            "reasoning": "The test fails; read calc.py first.",
            "tool_calls": [
                {
                    "id": "toolu_01",
                    "name": "Read",
                    "arguments_raw": '{"path":"calc.py"}',
                    "arguments": {"path": "calc.py"},
                    "type": None,
                }
            ],
            "finish_reason": "tool_calls",
        },
        {"content": "Fixed: add now returns a + b.", "reasoning": None, "tool_calls": [], "finish_reason": "stop"},
    ]
    assert [(t.usage.prompt_tokens, t.usage.cached_tokens, t.usage.completion_tokens) for t in rec.turns] == [
        (u["usage"]["prompt_tokens"], u["usage"]["cached_tokens"], u["usage"]["completion_tokens"])
        for u in original["turns"]
    ]
    assert [(o.tool_call_id, o.content, o.is_error) for o in rec.turns[0].observations] == [
        ("toolu_01", "def add(a, b): return a - b", False)
    ]
    # the recording replays: the same two requests again, through a fresh server, no miss
    with running_server(out, divergence="content") as fresh:
        with anthropic.Anthropic(base_url=fresh, api_key="k", max_retries=0) as client:
            client.messages.create(
                model="claude-test", max_tokens=5, system=SYSTEM, messages=[{"role": "user", "content": TASK}]
            )
            again = client.messages.create(model="claude-test", max_tokens=5, system=SYSTEM, messages=_turn1_messages())
        stats = httpx.get(fresh + "/stats").json()
    assert again.content[0].text == "Fixed: add now returns a + b."
    assert (stats["served"], stats["misses"]["total"], stats["divergences"]["total"]) == (2, 0, 0)


def test_assembler_waits_for_message_stop_and_rejects_error_events():
    asm = MessagesAssembler(stream=True)
    head = (
        b'event: message_start\ndata: {"type":"message_start","message":{"model":"m","usage":'
        b'{"input_tokens":3,"output_tokens":1}}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
    )
    assert asm.feed(head, 10) is False
    assert asm.finish() is False and asm.error == "stream ended before message_stop after 1 token events"
    bad = MessagesAssembler(stream=True)
    bad.feed(head + b'event: error\ndata: {"type":"error","error":{"message":"Overloaded"}}\n\n', 10)
    assert bad.error == "error event in stream: Overloaded"
    ok = MessagesAssembler(stream=True)
    assert ok.feed(head + b'event: message_stop\ndata: {"type":"message_stop"}\n\n', 10) is True
    response, known = ok.response()
    assert (response.content, response.finish_reason, known, ok.first_token_ns) == ("hi", "stop", True, 10)
