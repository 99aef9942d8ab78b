"""Generic replay-server behaviour over real HTTP on 127.0.0.1: unknown paths get a named,
counted error; HEAD probes and title requests are answered as counted side traffic."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from benchmaker.replay_server.side import schema_answer
from tests.replay.test_server_fixtures import make_trajectory, request_messages, running_server, write_store


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return write_store(tmp_path / "trajectories.jsonl", [make_trajectory("alpha", 2)])


def test_unknown_path_gets_a_named_error_counted_by_path(store_path):
    with running_server(store_path) as url, httpx.Client() as client:
        r = client.post(url + "/v1/embeddings", json={"input": "x"})
        assert r.status_code == 404
        assert r.headers["x-replay-miss"] == "unknown_path"
        err = r.json()["error"]
        assert (err["code"], err["method"], err["path"]) == ("unknown_path", "POST", "/v1/embeddings")
        assert "POST /v1/chat/completions" in err["message"]
        client.post(url + "/v1/embeddings", json={})
        assert client.get(url + "/v1beta/models/m:embedContent").status_code == 404
        assert client.get(url + "/v1/chat/completions").status_code == 405  # served, with POST
        stats = client.get(url + "/stats").json()
    assert stats["unknown_paths"] == {
        "POST /v1/embeddings": 2,
        "GET /v1beta/models/m:embedContent": 1,
        "GET /v1/chat/completions": 1,
    }
    assert stats["misses"]["total"] == 0  # not a replay miss: no request of the agent's session


def test_head_probe_is_side_traffic(store_path):
    with running_server(store_path) as url, httpx.Client() as client:
        r = client.head(url + "/api/hello")
        assert r.status_code == 200
        assert r.headers["x-replay-side"] == "head_probe"
        assert client.head(url + "/health").status_code == 200  # a served GET route answers HEAD itself
        stats = client.get(url + "/stats").json()
    assert stats["side_requests"] == {"head_probe": 1}
    assert stats["unknown_paths"] == {}


def _title_request(stream: bool) -> dict:
    # opencode's title request: its title prompt, the user's message, no tools
    return {
        "model": "small",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
            {"role": "user", "content": "Generate a title for this conversation:"},
            {"role": "user", "content": "fix the failing test"},
        ],
    }


def test_title_request_is_side_traffic_streamed_or_not(store_path):
    with running_server(store_path) as url, httpx.Client() as client:
        r = client.post(url + "/v1/chat/completions", json=_title_request(False))
        assert r.status_code == 200
        assert r.headers["x-replay-side"] == "title"
        assert r.json()["choices"][0]["message"]["content"] == "Replayed session"
        r = client.post(url + "/v1/chat/completions", json=_title_request(True))
        events = [e[len(b"data: ") :] for e in r.content.split(b"\n\n") if e]
        assert events[-1] == b"[DONE]"
        assert orjson.loads(events[0])["choices"][0]["delta"]["content"] == "Replayed session"
        assert orjson.loads(events[1])["choices"][0]["finish_reason"] == "stop"
        with_tools = {**_title_request(False), "tools": [{"type": "function", "function": {"name": "bash"}}]}
        assert client.post(url + "/v1/chat/completions", json=with_tools).status_code == 404  # a real miss
        stats = client.get(url + "/stats").json()
    assert stats["side_requests"] == {"title": 2}
    assert stats["misses_by_api"] == {"chat_completions": {"unknown_key": 1}}
    assert stats["misses"]["unknown_key"] == 1


def test_chat_misses_are_counted_by_api(store_path, tmp_path):
    traj = make_trajectory("alpha", 2)
    with running_server(store_path) as url, httpx.Client() as client:
        msgs = request_messages(traj, 1) + [{"role": "assistant", "content": "x"}]
        assert client.post(url + "/v1/chat/completions", json={"messages": msgs}).status_code == 409
        stats = client.get(url + "/stats").json()
    assert stats["misses_by_api"] == {"chat_completions": {"beyond_turns": 1}}


def test_schema_answer_is_the_smallest_accepted_value():
    assert schema_answer(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": ["null", "boolean"]}, "c": {"type": "array"}},
        }
    ) == {"a": 1, "b": False, "c": []}
    assert schema_answer(
        {
            "type": "OBJECT",
            "properties": {"x": {"type": "STRING"}, "y": {"type": "NUMBER", "minimum": 5}},
            "required": ["y"],
        }
    ) == {"y": 5}
    # Gemini CLI's numerical router (numericalClassifierStrategy.ts) validates a score >= 1
    assert schema_answer(
        {
            "type": "OBJECT",
            "properties": {"complexity_reasoning": {"type": "STRING"}, "complexity_score": {"type": "INTEGER"}},
            "required": ["complexity_reasoning", "complexity_score"],
        }
    ) == {"complexity_reasoning": "", "complexity_score": 1}
    assert schema_answer({"enum": ["pro", "flash"]}) == "pro"
    assert schema_answer(None) is None


def test_gemini_count_tokens_is_side_traffic(store_path):
    body = {
        "contents": [{"role": "user", "parts": [{"text": "x" * 10}]}],
        "systemInstruction": {"parts": [{"text": "abc"}]},
    }
    with running_server(store_path) as url, httpx.Client() as client:
        r = client.post(url + "/v1beta/models/m:countTokens", json=body)
        stats = client.get(url + "/stats").json()
    assert r.status_code == 200 and r.headers["x-replay-side"] == "count_tokens"
    assert r.json() == {"totalTokens": 4}  # ceil(13 characters / 4)
    assert stats["side_requests"] == {"count_tokens": 1} and stats["unknown_paths"] == {}


def test_a_title_request_repeating_a_recorded_task_is_side_traffic(tmp_path):
    # opencode's title request carries the user's task, so its key is the session's: it is
    # side traffic all the same (the session's turn 0 is not replayed to it), unless the
    # trajectory it matches is a recorded title call
    session = make_trajectory("alpha", 2)
    store = tmp_path / "t.jsonl"
    store.write_text(session.model_dump_json() + "\n")
    title = {
        "model": "small",
        "messages": [
            {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
            {"role": "user", "content": "Generate a title for this conversation:"},
            {"role": "user", "content": session.first_user},
        ],
    }
    with running_server(store) as url, httpx.Client() as client:
        r = client.post(url + "/v1/chat/completions", json=title)
        assert (r.status_code, r.headers["x-replay-side"]) == (200, "title")
        assert r.json()["choices"][0]["message"]["content"] == "Replayed session"
        stats = client.get(url + "/stats").json()
    assert (stats["side_requests"], stats["served"], stats["misses"]["total"]) == ({"title": 1}, 0, 0)
    recorded_title = session.model_copy(update={"system": title["messages"][0]["content"]})
    store.write_text(recorded_title.model_dump_json() + "\n")
    with running_server(store) as url, httpx.Client() as client:
        r = client.post(url + "/v1/chat/completions", json=title)
        assert r.status_code == 200 and "x-replay-side" not in r.headers
        assert client.get(url + "/stats").json()["served"] == 1
