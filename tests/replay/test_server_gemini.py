"""The replay server's Gemini API paths over real HTTP on 127.0.0.1: raw httpx and the
official google-genai SDK read the recorded turns back in Gemini's shape."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from benchmaker.trajectories.trajectory import Trajectory
from tests.replay.test_server_fixtures import (
    NASTY,
    NASTY_ARGS,
    NASTY_REASONING,
    first_user_for,
    make_trajectory,
    request_messages,
    running_server,
    write_store,
)


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[Trajectory]]:
    trajs = [make_trajectory("alpha", 3), make_trajectory("beta", 2, usage=False)]
    return write_store(tmp_path / "trajectories.jsonl", trajs), trajs


def gemini_request(traj: Trajectory, turn: int, *, with_ids: bool = True) -> dict:
    """The GenerateContentRequest Gemini CLI sends for `turn` of `traj`: the system prompt
    as systemInstruction, the conversation as contents (tool calls as functionCall parts,
    observations as functionResponse parts with {"output": text})."""
    contents: list[dict] = []
    for msg in request_messages(traj, turn, system=False):
        if msg["role"] == "user":
            contents.append({"role": "user", "parts": [{"text": msg["content"]}]})
        elif msg["role"] == "assistant":
            parts = [{"text": msg["content"]}]
            for tc in msg.get("tool_calls", []):
                call = {"name": tc["function"]["name"], "args": orjson.loads(tc["function"]["arguments"])}
                if with_ids:
                    call["id"] = tc["id"]
                parts.append({"functionCall": call})
            contents.append({"role": "model", "parts": parts})
        else:
            resp = {"name": "bash", "response": {"output": msg["content"]}}
            if with_ids:
                resp["id"] = msg["tool_call_id"]
            contents.append({"role": "user", "parts": [{"functionResponse": resp}]})
    return {
        "systemInstruction": {"parts": [{"text": traj.system}]},
        "contents": contents,
        "tools": [{"functionDeclarations": [{"name": "bash", "description": "run"}]}],
    }


def _post(client: httpx.Client, url: str, method: str, body: dict, query: str = "") -> httpx.Response:
    return client.post(f"{url}/v1beta/models/rec-model:{method}{query}", json=body)


def test_generate_content_answers_each_turn_in_gemini_shape(store):
    path, (alpha, beta) = store
    with running_server(path) as url, httpx.Client() as client:
        for t in range(3):
            r = _post(client, url, "generateContent", gemini_request(alpha, t))
            assert r.status_code == 200, r.text
            assert r.headers["x-replay-turn"] == str(t)
            body = r.json()
            parts = ([{"text": NASTY_REASONING, "thought": True}] if t == 0 else []) + [{"text": f"{NASTY} #{t}"}]
            if t < 2:
                parts.append({"functionCall": {"id": f"call_{t}", "name": "bash", "args": orjson.loads(NASTY_ARGS)}})
            assert body["candidates"] == [
                {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
            ]
            # make_trajectory's usage: prompt 100 + t, completion 20 + t (no reasoning
            # count, so all of it is candidates), total 120 + 2t, cached 64
            assert body["usageMetadata"] == {
                "promptTokenCount": 100 + t,
                "candidatesTokenCount": 20 + t,
                "cachedContentTokenCount": 64,
                "totalTokenCount": 120 + 2 * t,
            }
            assert body["modelVersion"] == "rec-model"
        r = _post(client, url, "generateContent", gemini_request(beta, 1))
        assert "usageMetadata" not in r.json()  # beta was recorded without usage
        stats = client.get(url + "/stats").json()
    assert stats["served"] == 4
    assert stats["requests_by_api"] == {"gemini": 4}
    assert stats["misses"]["total"] == 0


def _sse_chunks(raw: bytes) -> list[dict]:
    assert raw.endswith(b"\r\n\r\n")
    return [orjson.loads(event[len(b"data: ") :]) for event in raw.split(b"\r\n\r\n") if event]


@pytest.mark.parametrize("latency", ["instant", "fixed:5:1"])
def test_stream_generate_content_sse_reassembles_to_the_recorded_turn(store, latency):
    path, (alpha, _) = store
    with running_server(path, latency=latency) as url, httpx.Client() as client:
        r = _post(client, url, "streamGenerateContent", gemini_request(alpha, 0), "?alt=sse")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks = _sse_chunks(r.content)
        stats = client.get(url + "/stats").json()
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert "".join(p["text"] for p in parts if p.get("thought")) == NASTY_REASONING
    assert "".join(p["text"] for p in parts if "text" in p and not p.get("thought")) == f"{NASTY} #0"
    assert [p["functionCall"] for p in parts if "functionCall" in p] == [
        {"id": "call_0", "name": "bash", "args": orjson.loads(NASTY_ARGS)}
    ]
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert chunks[-1]["usageMetadata"]["promptTokenCount"] == 100
    assert stats["served_stream"] == 1


def test_stream_generate_content_without_alt_sse_is_a_json_array(store):
    path, (alpha, _) = store
    with running_server(path) as url, httpx.Client() as client:
        r = _post(client, url, "streamGenerateContent", gemini_request(alpha, 2))
    body = r.json()
    assert isinstance(body, list) and len(body) == 1
    assert body[0]["candidates"][0]["content"]["parts"] == [{"text": f"{NASTY} #2"}]


def test_function_responses_without_ids_pair_with_their_calls(store):
    path, (alpha, _) = store
    with running_server(path, divergence="content") as url, httpx.Client() as client:
        r = _post(client, url, "generateContent", gemini_request(alpha, 2, with_ids=False))
        assert r.status_code == 200, r.text
        req = gemini_request(alpha, 2)
        req["contents"][-1]["parts"][0]["functionResponse"]["response"] = {"output": "other output"}
        r = _post(client, url, "generateContent", req)
        assert r.status_code == 412
        assert r.headers["x-replay-miss"] == "diverged"
        assert r.json()["error"]["status"] == "FAILED_PRECONDITION"
        stats = client.get(url + "/stats").json()
    assert stats["misses_by_api"] == {"gemini": {"diverged": 1}}
    assert stats["divergences"]["content"] == 1


def test_gemini_misses_are_counted_by_kind_with_google_error_bodies(store):
    path, (alpha, _) = store
    with running_server(path) as url, httpx.Client() as client:
        unknown = {"contents": [{"role": "user", "parts": [{"text": first_user_for("nope")}]}]}
        r = _post(client, url, "generateContent", unknown)
        assert r.status_code == 404
        assert r.headers["x-replay-miss"] == "unknown_key"
        assert r.json()["error"]["code"] == 404 and r.json()["error"]["status"] == "NOT_FOUND"
        req = gemini_request(alpha, 2)
        req["contents"].append({"role": "model", "parts": [{"text": "x"}]})
        r = _post(client, url, "streamGenerateContent", req, "?alt=sse")
        assert r.status_code == 409
        r = _post(client, url, "generateContent", {"contents": "not a list"})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "bad_request: contents: must be a list (got str)"
        stats = client.get(url + "/stats").json()
    assert stats["misses_by_api"] == {"gemini": {"unknown_key": 1, "beyond_turns": 1}}
    assert stats["misses"] == {"unknown_key": 1, "beyond_turns": 1, "diverged": 0, "total": 2}
    assert stats["bad_requests"] == 1


def test_gemini_key_in_header_or_query(store):
    path, (alpha, _) = store
    with running_server(path, token="sekrit") as url, httpx.Client() as client:
        body = gemini_request(alpha, 0)
        assert _post(client, url, "generateContent", body).status_code == 401
        assert (
            client.post(
                f"{url}/v1beta/models/m:generateContent", json=body, headers={"x-goog-api-key": "sekrit"}
            ).status_code
            == 200
        )
        assert _post(client, url, "generateContent", body, "?key=sekrit").status_code == 200
        assert _post(client, url, "generateContent", body, "?key=wrong").status_code == 401


def test_router_json_call_is_answered_as_side_traffic(store):
    # Gemini CLI's classifier: a non-streamed generateContent asking for JSON by schema
    schema = {
        "type": "OBJECT",
        "properties": {"reasoning": {"type": "STRING"}, "model_choice": {"type": "STRING", "enum": ["flash", "pro"]}},
        "required": ["reasoning", "model_choice"],
    }
    body = {
        "contents": [{"role": "user", "parts": [{"text": "list the files"}]}],
        "systemInstruction": {"parts": [{"text": "You are a specialized Task Routing AI."}]},
        "generationConfig": {"responseMimeType": "application/json", "responseSchema": schema},
    }
    path, (alpha, _) = store
    with running_server(path) as url, httpx.Client() as client:
        r = _post(client, url, "generateContent", body)
        # the router repeats the user's prompt: a side request even when a trajectory has its key
        on_task = {**body, "contents": gemini_request(alpha, 0)["contents"]}
        r2 = _post(client, url, "generateContent", on_task)
        stats = client.get(url + "/stats").json()
    assert r.status_code == 200
    assert r.headers["x-replay-side"] == "json_answer"
    text = r.json()["candidates"][0]["content"]["parts"][0]["text"]
    assert orjson.loads(text) == {"reasoning": "", "model_choice": "flash"}
    assert r2.content == r.content
    assert stats["side_requests"] == {"json_answer": 2}
    assert stats["served"] == 0
    assert stats["misses"]["total"] == 0


def test_gemini_models_listing(store):
    path, _ = store
    with running_server(path) as url, httpx.Client() as client:
        body = client.get(url + "/v1beta/models").json()
    assert body["models"][0]["name"] == "models/rec-model"
    assert body["models"][0]["supportedGenerationMethods"] == ["generateContent", "streamGenerateContent"]


def test_google_genai_sdk_parses_the_replayed_turns(store):
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    path, (alpha, _) = store
    with running_server(path) as url:
        client = genai.Client(api_key="dummy", http_options=types.HttpOptions(base_url=url))
        req = gemini_request(alpha, 1)
        config = types.GenerateContentConfig(system_instruction=alpha.system)
        resp = client.models.generate_content(model="rec-model", contents=req["contents"], config=config)
        assert resp.text == f"{NASTY} #1"
        assert [(c.id, c.name, c.args) for c in resp.function_calls] == [("call_1", "bash", orjson.loads(NASTY_ARGS))]
        assert resp.usage_metadata.prompt_token_count == 101
        assert resp.candidates[0].finish_reason == types.FinishReason.STOP
        chunks = list(client.models.generate_content_stream(model="rec-model", contents=req["contents"], config=config))
        text = "".join(p.text for c in chunks for p in c.candidates[0].content.parts or [] if p.text and not p.thought)
        assert text == f"{NASTY} #1"
        assert chunks[-1].usage_metadata.total_token_count == 122
        client.close()
