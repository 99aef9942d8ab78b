"""The replay server's Anthropic Messages routes (`POST /v1/messages`, count_tokens): the
official `anthropic` SDK against a real server on 127.0.0.1 gets the recorded turn, and
the raw stream has the API's event order with `event:` lines."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import orjson
import pytest

from benchmaker.trajectories.trajectory import match_key_for
from tests.replay.test_server_fixtures import running_server

anthropic = pytest.importorskip("anthropic")

TASK = "Fix the failing test in calc.py"
SYSTEM = "You are a coding agent."


def _trajectory() -> dict:
    return {
        "trajectory_id": "cc-1",
        "source": {"format": "test", "path": "x", "sha256": "0"},
        "match_key": match_key_for(TASK),
        "model": "claude-test",
        "system": SYSTEM,
        "first_user": TASK,
        "turns": [
            {
                "index": 0,
                "response": {
                    "content": "Let me look at the file.",
                    "reasoning": "The test fails; read calc.py first.",
                    "tool_calls": [
                        {
                            "id": "toolu_01",
                            "name": "Read",
                            "arguments_raw": '{"path": "calc.py"}',
                            "arguments": {"path": "calc.py"},
                        }
                    ],
                    "finish_reason": "tool_calls",
                },
                "usage": {"prompt_tokens": 1200, "completion_tokens": 42, "cached_tokens": 1000},
                "observations": [{"tool_call_id": "toolu_01", "content": "def add(a, b): return a - b"}],
            },
            {
                "index": 1,
                "response": {"content": "Fixed: add now returns a + b.", "finish_reason": "stop"},
                "usage": {"prompt_tokens": 1300, "completion_tokens": 9, "cached_tokens": 1200},
            },
        ],
    }


@pytest.fixture
def server(tmp_path: Path):
    store = tmp_path / "trajectories.jsonl"
    store.write_text(json.dumps(_trajectory()) + "\n")
    with running_server(store, divergence="content", token="sekret") as url:
        yield url


@pytest.fixture
def client(server: str):
    with anthropic.Anthropic(base_url=server, api_key="sekret", max_retries=0) as sdk:
        yield sdk


def _turn1_messages() -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "text", "text": TASK}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "The test fails; read calc.py first.", "signature": "sig"},
                {"type": "text", "text": "Let me look at the file."},
                {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"path": "calc.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": "def add(a, b): return a - b"}],
                }
            ],
        },
    ]


def test_sdk_create_gets_recorded_blocks_and_usage(client):
    msg = client.messages.create(
        model="claude-test",
        max_tokens=100,
        system=[{"type": "text", "text": SYSTEM}],
        messages=[{"role": "user", "content": TASK}],
    )
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
    assert msg.content[0].thinking == "The test fails; read calc.py first."
    assert msg.content[1].text == "Let me look at the file."
    assert (msg.content[2].id, msg.content[2].name, msg.content[2].input) == ("toolu_01", "Read", {"path": "calc.py"})
    assert msg.stop_reason == "tool_use"
    assert msg.model == "claude-test"
    # input_tokens 1200 - 1000 cached: Anthropic counts the uncached part only
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens, msg.usage.output_tokens) == (200, 1000, 42)
    assert msg.usage.cache_creation_input_tokens == 0


def test_sdk_stream_second_turn_after_tool_result(client):
    with client.messages.stream(
        model="claude-test", max_tokens=100, system=SYSTEM, messages=_turn1_messages()
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == "Fixed: add now returns a + b."
    assert len(texts) > 1  # streamed in pieces
    assert [b.type for b in final.content] == ["text"]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens, final.usage.output_tokens) == (100, 1200, 9)


def test_sdk_stream_first_turn_thinking_and_tool_use(client):
    with client.messages.stream(
        model="claude-test", max_tokens=100, system=SYSTEM, messages=[{"role": "user", "content": TASK}]
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == "The test fails; read calc.py first."
    assert final.content[0].signature.startswith("replay-")
    assert final.content[1].text == "Let me look at the file."
    assert final.content[2].input == {"path": "calc.py"}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 42


def test_raw_stream_event_order_with_event_lines(server):
    body = {"model": "claude-test", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": TASK}]}
    r = httpx.post(server + "/v1/messages?beta=true", json=body, headers={"x-api-key": "sekret"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    kinds = []
    for block in r.content.split(b"\n\n")[:-1]:
        event_line, data_line = block.split(b"\n")
        kind = event_line.removeprefix(b"event: ").decode()
        assert orjson.loads(data_line.removeprefix(b"data: "))["type"] == kind
        kinds.append(kind)
    collapsed = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert collapsed == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",  # thinking
        "content_block_start",
        "content_block_delta",
        "content_block_stop",  # text
        "content_block_start",
        "content_block_delta",
        "content_block_stop",  # tool_use
        "message_delta",
        "message_stop",
    ]
    deltas = [
        orjson.loads(b.split(b"\n")[1][6:])["delta"]["type"]
        for b in r.content.split(b"\n\n")[:-1]
        if b.startswith(b"event: content_block_delta")
    ]
    assert deltas.count("signature_delta") == 1
    assert deltas.index("signature_delta") == deltas.count("thinking_delta")  # right after the thinking
    assert set(deltas) == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}


def test_misses_and_errors_are_counted_in_stats(server):
    headers = {"x-api-key": "sekret"}
    unknown = httpx.post(
        server + "/v1/messages",
        headers=headers,
        json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "other"}]},
    )
    assert unknown.status_code == 404
    assert unknown.json()["type"] == "error"
    assert unknown.json()["error"]["type"] == "not_found_error"
    assert unknown.headers["x-replay-miss"] == "unknown_key"
    wrong = _turn1_messages()
    wrong[2]["content"][0]["content"] = "something else"
    diverged = httpx.post(
        server + "/v1/messages", headers=headers, json={"model": "m", "max_tokens": 5, "messages": wrong}
    )
    assert diverged.status_code == 412
    bad = httpx.post(server + "/v1/messages", headers=headers, json={"model": "m", "messages": [{"role": "x"}]})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == (
        "bad_request: messages[0].role: expected user, assistant or system (got 'x')"
    )
    denied = httpx.post(server + "/v1/messages", json={"model": "m", "messages": []})
    assert denied.status_code == 401
    stats = httpx.get(server + "/stats", headers={"Authorization": "Bearer sekret"}).json()
    assert stats["requests"] == 4
    assert stats["requests_by_api"] == {"messages": 4}
    assert stats["misses"] == {"unknown_key": 1, "beyond_turns": 0, "diverged": 1, "total": 2}
    assert (stats["bad_requests"], stats["unauthorized"]) == (1, 1)


def test_count_tokens_gives_recorded_prompt_tokens(server, client):
    counted = client.messages.count_tokens(model="claude-test", system=SYSTEM, messages=_turn1_messages())
    assert counted.input_tokens == 1300  # turn 1's recorded prompt_tokens
    stats = httpx.get(server + "/stats", headers={"Authorization": "Bearer sekret"}).json()
    assert (stats["side_requests"], stats["requests"]) == ({"count_tokens": 1}, 0)
