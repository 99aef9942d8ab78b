"""The recording proxy's authentication (benchmaker.replay_server.secret_path): a request
without the secret first path segment is answered 401 JSON, reaches neither the
upstream nor the recording; with it, the segment is removed before anything is
forwarded or recorded, and the caller's own keys go upstream unchanged. The official
google-genai SDK keeps the prefix of its base_url (the openai and anthropic SDKs do in
test_recorder_responses and test_recorder_messages, through the same fixture)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.types import Receive, Scope, Send

from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.secret_path import SecretPath, check_secret
from benchmaker.replay_server.store import load_trajectories
from benchmaker.trajectories.context import request_messages
from tests.replay.test_gemini_cli import _to_gemini
from tests.replay.test_recorder import _proxy, _traj, _write
from tests.replay.test_recorder_relay import Seen, scripted_upstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Say hi"}]}
ANSWER = (
    b'{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}]}'
)
REFUSED = {
    "error": {
        "message": "missing or wrong secret path prefix: use the base URL the server printed",
        "type": "unauthorized",
        "param": None,
        "code": "unauthorized",
    }
}


async def _answer(req: Seen, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(ANSWER))
    writer.write(ANSWER)


def _wrong(secret: str) -> str:
    """`secret` with its last character changed: the same length, one place differs."""
    return secret[:-1] + ("A" if secret[-1] != "A" else "B")


async def test_requests_without_the_secret_are_refused_and_neither_relayed_nor_recorded(tmp_path: Path):
    out = tmp_path / "r.jsonl"
    async with scripted_upstream(_answer) as (upstream, seen):
        async with _proxy(upstream, out) as (url, app):
            origin, secret = url.rsplit("/", 1)
            attempts = [
                ("POST", f"{origin}/v1/chat/completions", {}),
                ("POST", f"{origin}/v1/chat/completions", {"authorization": f"Bearer {secret}"}),
                ("POST", f"{origin}/{_wrong(secret)}/v1/chat/completions", {}),
                ("POST", f"{origin}/{secret}x/v1/chat/completions", {}),
                ("POST", f"{origin}/x/{secret}/v1/chat/completions", {}),
                ("POST", f"{origin}/flush", {}),
                ("GET", f"{origin}/health", {}),
                ("GET", f"{origin}/v1/models", {}),
            ]
            async with httpx.AsyncClient() as c:
                for method, target, headers in attempts:
                    r = await c.request(method, target, json=CHAT, headers=headers)
                    assert (r.status_code, r.json()) == (401, REFUSED), target
                flushed = (await c.post(url + "/flush")).json()
            recorder = app.state.recorder
            assert recorder.conversations == []
    assert seen == []
    assert flushed == {"path": str(out), "trajectories": 0, "turns": 0, "skipped": {"unauthorized": 8}}
    assert out.read_text() == ""


async def test_the_secret_is_neither_forwarded_nor_recorded_and_the_callers_keys_are(tmp_path: Path):
    out = tmp_path / "r.jsonl"
    keys = {"authorization": "Bearer sk-agent", "x-api-key": "ak-agent", "x-goog-api-key": "gk-agent"}
    async with scripted_upstream(_answer) as (upstream, seen):
        async with _proxy(upstream, out) as (url, _app):
            secret = url.rsplit("/", 1)[1]
            async with httpx.AsyncClient() as c:
                r = await c.post(url + "/v1/chat/completions?tag=a", json=CHAT, headers=keys)
                assert (r.status_code, r.content) == (200, ANSWER)
                flushed = (await c.post(url + "/flush")).json()
    assert flushed == {"path": str(out), "trajectories": 1, "turns": 1, "skipped": {}}
    (req,) = seen
    assert req.target == "/v1/chat/completions?tag=a"
    assert {k: req.header(k) for k in keys} == keys
    assert not any(secret in v for _, v in req.headers)
    assert secret not in out.read_text()


async def test_google_genai_sdk_through_the_proxy_keeps_the_secret_prefix(tmp_path: Path):
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    original = _traj()
    out = tmp_path / "recorded.jsonl"
    body = _to_gemini(request_messages(original, 0))
    with start_replay_server(_write([original], tmp_path / "t0.jsonl")) as upstream:
        async with _proxy(upstream.url, out) as (url, _app):

            def stream() -> list[tuple]:  # the sync client (its async one warns on aiohttp)
                client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=url))
                config = types.GenerateContentConfig(system_instruction=original.system)
                chunks = client.models.generate_content_stream(model="m-1", contents=body["contents"], config=config)
                calls = [(c.id, c.name, c.args) for chunk in chunks for c in chunk.function_calls or []]
                client.close()
                return calls

            calls = await asyncio.to_thread(stream)
            async with httpx.AsyncClient() as c:
                flushed = (await c.post(url + "/flush")).json()
    call = original.turns[0].response.tool_calls[0]
    assert calls == [(call.id, call.name, orjson.loads(call.arguments_raw))]
    assert flushed == {"path": str(out), "trajectories": 1, "turns": 1, "skipped": {}}
    (rec,) = [t for _, t in load_trajectories(out)]
    assert rec.match_key == original.match_key and rec.turns[0].response.tool_calls[0].name == call.name


@pytest.mark.parametrize("secret", ["", "short", "a" * 21, "a" * 30 + "/b", "a" * 30 + "%2F", "a" * 30 + " "])
def test_a_secret_that_is_not_22_url_safe_characters_is_refused(secret: str):
    with pytest.raises(ValueError, match=r"secret: expected at least 22 URL-safe characters"):
        check_secret(secret)
    with pytest.raises(ValueError, match=r"secret: expected at least 22 URL-safe characters"):
        SecretPath(_nothing, secret=secret)


async def _nothing(scope: Scope, receive: Receive, send: Send) -> None:
    """An ASGI app that answers nothing (never called here)."""
