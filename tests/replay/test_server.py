"""Replay server over real HTTP on 127.0.0.1 (in-process uvicorn, port 0), driven by httpx."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from benchmaker.trajectories.trajectory import (
    Response,
    ToolCall,
    Trajectory,
    Turn,
    match_key_for,
    match_key_for_messages,
)
from tests.replay.test_server_fixtures import (
    NASTY,
    NASTY_ARGS,
    NASTY_REASONING,
    first_user_for,
    make_trajectory,
    reassemble,
    request_messages,
    running_server,
    source,
    sse_events,
    write_store,
)


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[Trajectory]]:
    trajs = [make_trajectory("alpha", 3), make_trajectory("beta", 2, usage=False)]
    return write_store(tmp_path / "trajectories.jsonl", trajs), trajs


def _chat(client: httpx.Client, url: str, messages: list, **extra) -> httpx.Response:
    return client.post(url + "/v1/chat/completions", json={"model": "x", "messages": messages, **extra})


def test_non_streaming_serves_each_turn_byte_exact(store):
    path, (alpha, beta) = store
    with running_server(path) as url, httpx.Client() as client:
        for t, turn in enumerate(alpha.turns):
            r = _chat(client, url, request_messages(alpha, t))
            assert r.status_code == 200
            assert r.headers["x-replay-turn"] == str(t)
            assert r.headers["x-replay-trajectory"] == "traj-alpha"
            body = r.json()
            assert body["object"] == "chat.completion"
            assert body["model"] == "rec-model"
            msg = body["choices"][0]["message"]
            assert msg["role"] == "assistant"
            assert msg["content"] == turn.response.content  # NASTY + " #t", byte-exact
            assert body["choices"][0]["finish_reason"] == turn.response.finish_reason
            if t == 0:
                assert msg["reasoning_content"] == NASTY_REASONING
            else:
                assert "reasoning_content" not in msg  # only when recorded
            if turn.response.tool_calls:
                assert msg["tool_calls"] == [
                    {"id": f"call_{t}", "type": "function", "function": {"name": "bash", "arguments": NASTY_ARGS}}
                ]
            else:
                assert "tool_calls" not in msg
            # Usage as recorded by make_trajectory: 100 + t, 20 + t, 120 + 2t, cached 64.
            assert body["usage"] == {
                "prompt_tokens": 100 + t,
                "completion_tokens": 20 + t,
                "total_tokens": 120 + 2 * t,
                "prompt_tokens_details": {"cached_tokens": 64},
            }
        # beta was recorded without usage: no "usage" key at all.
        r = client.post(url + "/chat/completions", json={"messages": request_messages(beta, 1)})
        assert r.status_code == 200
        assert "usage" not in r.json()
        assert r.json()["choices"][0]["message"]["content"] == f"{NASTY} #1"
        # Raw bytes: the JSON string on the wire decodes to the recorded text exactly.
        assert (
            orjson.loads(r.content)["choices"][0]["message"]["content"].encode()
            == beta.turns[1].response.content.encode()
        )


def test_misses_by_kind_in_stats(store):
    path, (alpha, beta) = store
    with running_server(path) as url, httpx.Client() as client:
        r = _chat(client, url, [{"role": "user", "content": first_user_for("nope")}])
        assert r.status_code == 404
        assert r.headers["x-replay-miss"] == "unknown_key"
        assert r.json()["error"]["code"] == "unknown_key"
        r = _chat(client, url, [{"role": "user", "content": "no task line here"}])
        assert r.status_code == 404
        # alpha has 3 turns: a request with 3 assistant messages asks for turn 3.
        msgs = request_messages(alpha, 2) + [{"role": "assistant", "content": "x"}]
        r = _chat(client, url, msgs)
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "beyond_turns"
        assert r.headers["x-replay-miss"] == "beyond_turns"
        assert _chat(client, url, request_messages(beta, 0)).status_code == 200
        stats = client.get(url + "/stats").json()
    assert stats["requests"] == 4
    assert stats["served"] == 1
    assert stats["misses"] == {"unknown_key": 2, "beyond_turns": 1, "diverged": 0, "total": 3}
    assert stats["trajectories"]["traj-alpha"]["misses"] == {"beyond_turns": 1, "diverged": 0}
    assert stats["trajectories"]["traj-beta"]["served"] == 1
    assert stats["recent_unknown_keys"] == ["task:nope", match_key_for("no task line here")]


def test_bad_requests_get_400_with_message(store):
    path, _ = store
    with running_server(path) as url, httpx.Client() as client:
        r = client.post(url + "/v1/chat/completions", content=b'{"messages": [')
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == "bad_json"
        assert err["message"].startswith("request body is not valid JSON: ")
        r = client.post(url + "/v1/chat/completions", json={"model": "m"})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "messages: missing (a list of chat messages is required)"
        r = client.post(url + "/v1/chat/completions", json={"messages": "hi"})
        assert r.json()["error"]["message"] == "messages: must be a list (got str)"
        r = client.post(url + "/v1/chat/completions", json={"messages": [{"role": "system", "content": "s"}]})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "messages: no message with role 'user'"
        r = client.post(url + "/v1/chat/completions", json=[1])
        assert r.status_code == 400
        assert client.get(url + "/v1/chat/completions").status_code == 405
        stats = client.get(url + "/stats").json()
    assert stats["bad_requests"] == 5
    assert stats["misses"]["total"] == 0


def test_bearer_token(store):
    path, (alpha, _) = store
    with running_server(path, token="s3cret") as url, httpx.Client() as client:
        good = {"authorization": "Bearer s3cret"}
        body = {"messages": request_messages(alpha, 0)}
        r = client.post(url + "/v1/chat/completions", json=body)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "unauthorized"
        r = client.post(url + "/v1/chat/completions", json=body, headers={"authorization": "Bearer wrong"})
        assert r.status_code == 401
        assert client.post(url + "/v1/chat/completions", json=body, headers=good).status_code == 200
        assert client.get(url + "/v1/models").status_code == 401
        assert client.get(url + "/stats").status_code == 401
        assert client.get(url + "/health").status_code == 200  # readiness stays open
        stats = client.get(url + "/stats", headers=good).json()
    assert stats["unauthorized"] == 2
    assert stats["served"] == 1


def test_models_health_and_stats_reset(store):
    path, (alpha, _) = store
    with running_server(path) as url, httpx.Client() as client:
        assert client.get(url + "/health").json() == {"status": "ok", "trajectories": 2, "turns": 5}
        models = client.get(url + "/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["rec-model"]
        assert _chat(client, url, request_messages(alpha, 0)).status_code == 200
        assert client.get(url + "/stats").json()["served"] == 1
        assert client.post(url + "/stats/reset").json()["served"] == 0
        assert client.get(url + "/stats").json()["requests"] == 0


def test_byte_counts(store):
    path, (alpha, _) = store
    with running_server(path) as url, httpx.Client() as client:
        sent = received = 0
        for t in range(3):
            body = orjson.dumps({"messages": request_messages(alpha, t), "stream": t == 1})
            r = client.post(url + "/v1/chat/completions", content=body)
            sent += len(body)
            received += len(r.content)
        stats = client.get(url + "/stats").json()
    assert stats["bytes_in"] == sent
    assert stats["bytes_out"] == received
    assert stats["trajectories"]["traj-alpha"]["bytes_out"] == received


def test_same_key_picks_by_system_then_file_order(tmp_path):
    a = make_trajectory("dup", 2, trajectory_id="first", system="sys A")
    b = make_trajectory("dup", 2, trajectory_id="second", system="sys B")
    path = write_store(tmp_path / "t.jsonl", [a, b])
    with running_server(path) as url, httpx.Client() as client:

        def served(msgs):
            return _chat(client, url, msgs).headers["x-replay-trajectory"]

        assert served(request_messages(a, 0)) == "first"
        assert served(request_messages(b, 0)) == "second"  # system "sys B" disambiguates
        assert served(request_messages(b, 0, system=False)) == "first"  # no system: file order
        other = [{"role": "system", "content": "unknown"}, {"role": "user", "content": b.first_user}]
        assert served(other) == "first"  # no system match: file order


def test_shared_first_user_is_told_apart_by_the_user_messages_before_the_first_turn(tmp_path):
    # SWE-agent shape: the same demonstration first, the task prompt second, no task_id
    # line. Observations go back as role "user" (tool_call_ids=False): user messages after
    # the first assistant message must not enter the key.
    demo = "Here is a demonstration of how to correctly accomplish this task."
    trajs = []
    for name in ("one", "two"):
        prompt = f"We're currently solving issue {name}."
        trajs.append(
            make_trajectory(name, 2, tool_call_ids=False).model_copy(
                update={
                    "first_user": demo,
                    "user_before_turns": [prompt],
                    "match_key": match_key_for_messages([demo, prompt]),
                }
            )
        )
    assert trajs[0].match_key != trajs[1].match_key
    path = write_store(tmp_path / "t.jsonl", trajs)
    with running_server(path, divergence="content") as url, httpx.Client() as client:
        for traj in trajs:
            for t, turn in enumerate(traj.turns):
                r = _chat(client, url, request_messages(traj, t))
                assert r.status_code == 200, r.text
                assert r.headers["x-replay-trajectory"] == traj.trajectory_id
                assert r.headers["x-replay-turn"] == str(t)
                assert r.json()["choices"][0]["message"]["content"] == turn.response.content
        # The demonstration alone is the key neither trajectory has.
        r = _chat(client, url, [{"role": "system", "content": trajs[0].system}, {"role": "user", "content": demo}])
        assert r.status_code == 404
        stats = client.get(url + "/stats").json()
    assert stats["served"] == 4  # 2 trajectories x 2 turns
    assert stats["misses"] == {"unknown_key": 1, "beyond_turns": 0, "diverged": 0, "total": 1}
    assert stats["recent_unknown_keys"] == [match_key_for(demo)]


def test_list_content_first_user_matches(store):
    path, (alpha, _) = store
    # flatten_content joins text parts with "\n" and skips non-text parts.
    head, tail = alpha.first_user.split("\n", 1)
    parts = [
        {"type": "text", "text": head},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": tail},
    ]
    with running_server(path) as url, httpx.Client() as client:
        r = _chat(client, url, [{"role": "user", "content": parts}])
    assert r.status_code == 200
    assert r.headers["x-replay-trajectory"] == "traj-alpha"


# --- streaming ---------------------------------------------------------------------


def _stream(client, url, messages, include_usage: bool | None):
    body = {"messages": messages, "stream": True}
    if include_usage is not None:
        body["stream_options"] = {"include_usage": include_usage}
    r = client.post(url + "/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    return sse_events(r.content)


@pytest.mark.parametrize("latency", ["instant", "fixed:0:0"])
def test_streaming_shapes_and_byte_equality(store, latency):
    path, (alpha, beta) = store
    with running_server(path, latency=latency) as url, httpx.Client() as client:
        events = _stream(client, url, request_messages(alpha, 0), include_usage=True)
        first = orjson.loads(events[0])
        assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert events[-1] == b"[DONE]"
        usage_chunk = orjson.loads(events[-2])
        assert usage_chunk["choices"] == []
        assert usage_chunk["usage"] == {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 64},
        }
        finish = orjson.loads(events[-3])
        assert finish["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
        # Tool-call deltas: the first carries index/id/type/name, the rest only pieces.
        tc_deltas = [
            orjson.loads(e)["choices"][0]["delta"]["tool_calls"][0] for e in events[:-1] if b'"tool_calls":[' in e
        ]
        assert tc_deltas[0] == {
            "index": 0,
            "id": "call_0",
            "type": "function",
            "function": {"name": "bash", "arguments": ""},
        }
        assert all(d.keys() == {"index", "function"} and d["index"] == 0 for d in tc_deltas[1:])
        assert len(tc_deltas) > 3  # NASTY_ARGS split into several pieces
        got = reassemble(events)
        assert got["role"] == "assistant"
        assert got["content"] == alpha.turns[0].response.content
        assert got["reasoning"] == NASTY_REASONING
        assert got["tool_calls"] == [{"id": "call_0", "type": "function", "name": "bash", "arguments": NASTY_ARGS}]
        assert got["content"].encode("utf-8") == alpha.turns[0].response.content.encode("utf-8")
        assert got["done"]
        # Without include_usage: no usage chunk; the finish chunk is right before [DONE].
        events = _stream(client, url, request_messages(alpha, 2), include_usage=None)
        assert b'"usage"' not in b"".join(events)
        assert orjson.loads(events[-2])["choices"][0]["finish_reason"] == "stop"
        got = reassemble(events)
        assert got["content"] == alpha.turns[2].response.content
        assert got["reasoning"] is None
        assert got["tool_calls"] == []
        # include_usage on a recording without usage: no usage chunk either.
        events = _stream(client, url, request_messages(beta, 0), include_usage=True)
        assert orjson.loads(events[-2])["choices"][0]["finish_reason"] == "tool_calls"
        assert reassemble(events)["usage"] is None


def test_streaming_two_tool_calls_and_null_content(tmp_path):
    first_user = first_user_for("multi")
    traj = Trajectory(
        trajectory_id="multi",
        source=source(),
        match_key=match_key_for(first_user),
        first_user=first_user,
        turns=[
            Turn(
                index=0,
                response=Response(
                    content=None,
                    finish_reason="tool_calls",
                    tool_calls=[
                        ToolCall(id="a", name="read", arguments_raw='{"path": "x.py"}'),
                        ToolCall(id="b", name="edit", arguments_raw=""),
                    ],
                ),
            )
        ],
    )
    path = write_store(tmp_path / "t.jsonl", [traj])
    with running_server(path) as url, httpx.Client() as client:
        events = _stream(client, url, [{"role": "user", "content": first_user}], include_usage=True)
        body = _chat(client, url, [{"role": "user", "content": first_user}]).json()
    assert orjson.loads(events[0])["choices"][0]["delta"] == {"role": "assistant", "content": None}
    got = reassemble(events)
    assert got["content"] is None
    assert got["tool_calls"] == [
        {"id": "a", "type": "function", "name": "read", "arguments": '{"path": "x.py"}'},
        {"id": "b", "type": "function", "name": "edit", "arguments": ""},
    ]
    heads = [
        d
        for e in events[:-1]
        for c in orjson.loads(e)["choices"]
        for d in c["delta"].get("tool_calls", [])
        if "id" in d
    ]
    assert [h["index"] for h in heads] == [0, 1]
    assert body["model"] == "replay"  # no recorded model
    assert body["choices"][0]["message"]["content"] is None
    assert "usage" not in body


# --- divergence --------------------------------------------------------------------


def _tamper(messages: list, **changes) -> list:
    out = [dict(m) for m in messages]
    last_tool = max(i for i, m in enumerate(out) if m["role"] in ("tool", "user"))
    out[last_tool].update(changes)
    return out


def test_divergence_off_counts_nothing(store):
    path, (alpha, _) = store
    with running_server(path, divergence="off") as url, httpx.Client() as client:
        msgs = _tamper(request_messages(alpha, 1), content="out 0\nexit code 1")
        assert _chat(client, url, msgs).status_code == 200
        stats = client.get(url + "/stats").json()
    assert stats["divergences"] == {"status": 0, "content": 0, "total": 0}


def test_divergence_status_counts_and_serves(store):
    path, (alpha, _) = store
    with running_server(path, divergence="status") as url, httpx.Client() as client:
        assert _chat(client, url, request_messages(alpha, 1)).status_code == 200  # faithful
        # Content differs but the status (exit code 0) matches: not a status divergence.
        r = _chat(client, url, _tamper(request_messages(alpha, 1), content="other\nexit code 0"))
        assert r.status_code == 200 and "x-replay-divergence" not in r.headers
        # Exit code stated in the text differs from the recorded exit_code 0.
        r = _chat(client, url, _tamper(request_messages(alpha, 1), content="out 0\nexit code 2"))
        assert r.status_code == 200
        assert r.headers["x-replay-divergence"] == "status"
        assert r.json()["choices"][0]["message"]["content"] == alpha.turns[1].response.content
        # Non-standard is_error field contradicts the recorded is_error False.
        r = _chat(client, url, _tamper(request_messages(alpha, 2), is_error=True))
        assert r.headers["x-replay-divergence"] == "status"
        # Observation missing (tool message dropped).
        msgs = [m for m in request_messages(alpha, 1) if m["role"] != "tool"]
        assert _chat(client, url, msgs).headers["x-replay-divergence"] == "status"
        stats = client.get(url + "/stats").json()
    assert stats["divergences"] == {"status": 3, "content": 0, "total": 3}
    assert stats["misses"]["diverged"] == 0
    assert stats["served"] == 5
    assert stats["trajectories"]["traj-alpha"]["divergences"] == {"status": 3, "content": 0}


def test_divergence_content_refuses(store):
    path, (alpha, _) = store
    with running_server(path, divergence="content") as url, httpx.Client() as client:
        assert _chat(client, url, request_messages(alpha, 2)).status_code == 200  # faithful
        r = _chat(client, url, _tamper(request_messages(alpha, 1), content="out 0 \nexit code 0"))
        assert r.status_code == 412
        assert r.headers["x-replay-miss"] == "diverged"
        assert r.json()["error"]["code"] == "diverged"
        r = _chat(client, url, _tamper(request_messages(alpha, 1), exit_code=1))
        assert r.status_code == 412
        assert "differ in status" in r.json()["error"]["message"]
        # Turn 0 has no previous observations: never diverges.
        assert _chat(client, url, request_messages(alpha, 0)).status_code == 200
        stats = client.get(url + "/stats").json()
    assert stats["divergences"] == {"status": 1, "content": 1, "total": 2}
    assert stats["misses"]["diverged"] == 2
    assert stats["trajectories"]["traj-alpha"]["misses"]["diverged"] == 2
    assert stats["served"] == 2


def test_divergence_text_action_pairs_in_order(tmp_path):
    traj = make_trajectory("text", 3, tool_call_ids=False)
    path = write_store(tmp_path / "t.jsonl", [traj])
    with running_server(path, divergence="content") as url, httpx.Client() as client:
        msgs = request_messages(traj, 2)
        assert msgs[-1] == {"role": "user", "content": "out 1\nexit code 0"}
        assert _chat(client, url, msgs).status_code == 200
        # A follow-up user message after the observation is not an observation.
        assert _chat(client, url, msgs + [{"role": "user", "content": "go on"}]).status_code == 200
        assert _chat(client, url, _tamper(msgs, content="changed")).status_code == 412


def test_each_api_refuses_a_bad_body_and_a_missing_token_in_its_own_error_shape(store):
    # one reader of a model request's auth, body and JSON for the four APIs; each answers
    # in the shape its SDK parses (OpenAI for chat and responses, Anthropic, Google)
    path, _ = store
    bad = b'{"messages": ['
    routes = {
        "chat": "/v1/chat/completions",
        "responses": "/v1/responses",
        "messages": "/v1/messages",
        "gemini": "/v1beta/models/m:generateContent",
    }
    with running_server(path, token="s3cret") as url, httpx.Client() as client:
        good = {"authorization": "Bearer s3cret"}
        got = {api: client.post(url + route, content=bad, headers=good) for api, route in routes.items()}
        denied = {api: client.post(url + route, content=bad) for api, route in routes.items()}
        stats = client.get(url + "/stats", headers=good).json()
    assert {api: r.status_code for api, r in got.items()} == dict.fromkeys(routes, 400)
    for api in ("chat", "responses"):
        error = got[api].json()["error"]
        assert (error["code"], error["type"]) == ("bad_json", "invalid_request_error")
        assert error["message"].startswith("request body is not valid JSON: ")
    assert got["messages"].json()["error"]["type"] == "invalid_request_error"
    assert got["messages"].json()["error"]["message"].startswith("bad_json: request body is not valid JSON: ")
    assert got["gemini"].json()["error"]["status"] == "INVALID_ARGUMENT"
    assert got["gemini"].json()["error"]["message"].startswith("bad_json: request body is not valid JSON: ")
    assert {api: r.status_code for api, r in denied.items()} == dict.fromkeys(routes, 401)
    assert [denied[api].json()["error"] for api in ("chat", "responses")] == [
        {
            "message": "missing or wrong bearer token",
            "type": "invalid_request_error",
            "param": None,
            "code": "unauthorized",
        }
    ] * 2
    assert denied["messages"].json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "unauthorized: missing or wrong API key"},
    }
    assert denied["gemini"].json() == {
        "error": {
            "code": 401,
            "message": "unauthorized: missing or wrong API key (x-goog-api-key, key= or bearer token)",
            "status": "UNAUTHENTICATED",
        }
    }
    assert [denied[api].headers.get("www-authenticate") for api in routes] == ["Bearer", "Bearer", "Bearer", None]
    assert (stats["requests"], stats["bad_requests"], stats["unauthorized"]) == (8, 4, 4)
    assert stats["requests_by_api"] == {"messages": 2, "gemini": 2}
