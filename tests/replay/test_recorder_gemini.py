"""`benchmaker record` on the Gemini API: Gemini calls through the recording proxy in front
of a replay server become a trajectory equal to the original, which replays with 0
misses over chat completions and over the Gemini API."""

from __future__ import annotations

import asyncio
import socket

import httpx
import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.store import load_trajectories
from benchmaker.trajectories.context import request_messages
from tests.replay.replay_turns import replay_turns
from tests.replay.test_gemini_cli import _to_gemini
from tests.replay.test_recorder import _proxy, _traj, _write


def _answers(traj) -> list[tuple]:
    return [
        (
            t.response.content,
            t.response.reasoning,
            [(c.id, c.name, c.arguments) for c in t.response.tool_calls],
            t.response.finish_reason,
            t.usage,
            t.observations,
            t.user_after,
        )
        for t in traj.turns
    ]


@pytest.mark.parametrize(
    "method, query", [("streamGenerateContent", "?alt=sse"), ("streamGenerateContent", ""), ("generateContent", "")]
)
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
        original.match_key,
        original.system,
        original.first_user,
        original.user_before_turns,
        "m-1",
    )
    # everything but the raw argument bytes (the Gemini API sends args as an object)
    assert _answers(rec) == _answers(original)
    assert rec.turns[0].response.tool_calls[0].arguments_raw == '{"path":"calc.py"}'
    assert all(t.timing is not None and t.timing.duration_ms > 0 for t in rec.turns)
    replayed = replay_turns(out, rec, divergence="content")
    assert replayed.stats["misses"]["total"] == 0


async def test_calls_without_ids_are_recorded_under_the_clients_ids(tmp_path):
    # an upstream that, like the Gemini API, sends function calls without `id`
    answers = [
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"functionCall": {"name": "run", "args": {"cmd": "ls"}}}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3, "totalTokenCount": 13},
        },
        {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": "done"}]}, "finishReason": "STOP", "index": 0}
            ]
        },
    ]

    async def upstream_call(request):
        body = orjson.loads(await request.body())
        n_model = sum(1 for c in body["contents"] if c.get("role") == "model")
        return Response(b"data: " + orjson.dumps(answers[n_model]) + b"\r\n\r\n", media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1beta/models/{call}", upstream_call, methods=["POST"])])
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", access_log=False, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.005)
    out = tmp_path / "recorded.jsonl"
    user = {"role": "user", "parts": [{"text": "list files"}]}
    try:
        async with _proxy(f"http://127.0.0.1:{sock.getsockname()[1]}", out) as (url, _app):
            async with httpx.AsyncClient() as client:
                call_url = f"{url}/v1beta/models/m:streamGenerateContent?alt=sse"
                assert (await client.post(call_url, json={"contents": [user]})).status_code == 200
                # Gemini CLI names the call itself ("run__" + its own id) and answers with that id
                cid = "run__run_1764000000000_0"
                second = {
                    "contents": [
                        user,
                        {
                            "role": "model",
                            "parts": [{"functionCall": {"id": cid, "name": "run", "args": {"cmd": "ls"}}}],
                        },
                        {
                            "role": "user",
                            "parts": [
                                {"functionResponse": {"id": cid, "name": "run", "response": {"output": "a.txt"}}}
                            ],
                        },
                    ]
                }
                assert (await client.post(call_url, json=second)).status_code == 200
                await client.post(url + "/flush")
    finally:
        server.should_exit = True
        await task
        sock.close()
    (rec,) = [t for _, t in load_trajectories(out)]
    t0 = rec.turns[0]
    assert [(c.id, c.name, c.arguments) for c in t0.response.tool_calls] == [
        ("run_1764000000000_0", "run", {"cmd": "ls"})
    ]
    assert [(o.tool_call_id, o.content) for o in t0.observations] == [("run_1764000000000_0", "a.txt")]
    assert t0.usage.total_tokens == 13 and rec.turns[1].response.content == "done"
