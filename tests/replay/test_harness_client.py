"""benchmaker.agent.model_client: reassembly, first-token rules and model time."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import orjson
from aiohttp import web

from benchmaker.agent.model_client import ModelClient


def _chunk(delta: dict | None = None, *, finish: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict = {"id": "c1", "object": "chat.completion.chunk", "choices": []}
    if delta is not None or finish is not None:
        obj["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class ScriptServer:
    """aiohttp server on 127.0.0.1:0 whose /v1/chat/completions plays `script`: a list
    of (delay_s, bytes) steps, each bytes written and flushed after its delay."""

    def __init__(self, script: list[tuple[float, bytes]], status: int = 200):
        self.script = script
        self.status = status
        self.bodies: list[dict] = []

    async def handler(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        if self.status >= 400:
            return web.Response(status=self.status, text='{"error": "nope"}')
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for delay, data in self.script:
            if delay:
                await asyncio.sleep(delay)
            await resp.write(data)
        await resp.write_eof()
        return resp

    async def __aenter__(self) -> ScriptServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handler)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        await web.SockSite(self.runner, sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


async def _consume(url: str, pause_s: float) -> tuple[object, int, int]:
    """(result, wall ns of the whole iteration, number of reads yielded)."""
    async with ModelClient(url) as client:
        s = client.stream([{"role": "user", "content": "hi"}])
        t0 = time.perf_counter_ns()
        reads = 0
        async for _data in s:
            reads += 1
            if pause_s:
                await asyncio.sleep(pause_s)
        return s.result, time.perf_counter_ns() - t0, reads


# Nothing for 300 ms, then the role chunk, 5 content chunks 20 ms apart (so each is its
# own read), finish, usage and [DONE]: the model keeps us waiting 300 + 100 ms whatever
# the consumer does.
_GOLDEN = (
    [(0.3, _chunk({"role": "assistant"}))]
    + [(0.02, _chunk({"content": f"t{i}"})) for i in range(5)]
    + [
        (0.0, _chunk(finish="stop")),
        (0.0, _chunk(usage={"prompt_tokens": 3, "completion_tokens": 5})),
        (0.0, b"data: [DONE]\n\n"),
    ]
)


async def test_model_time_ignores_consumer_pause_per_chunk():
    async with ScriptServer(_GOLDEN) as srv:
        fast, _, _ = await _consume(srv.url, 0.0)
        slow, slow_wall_ns, reads = await _consume(srv.url, 0.2)
    # every read yielded costs a 200 ms pause; the server's 300 ms come first
    assert reads >= 1
    assert slow_wall_ns >= 300_000_000 + reads * 200_000_000
    # the model made us wait ~300 ms (server TTFT) + at most the 100 ms of gaps (which the
    # pauses hide); the pauses are not model time
    assert 300_000_000 <= fast.model_time_ns < 600_000_000
    assert 300_000_000 <= slow.model_time_ns < 600_000_000
    # E2E of the paused call includes the pauses before the body ended: that is what
    # model time must not do; the last read brought the end (as the runner stamps it),
    # so the pause after it is the consumer's alone
    assert slow.end_ns - slow.sent_ns >= 300_000_000 + (reads - 1) * 200_000_000
    assert slow.content == "t0t1t2t3t4"
    assert slow.usage == {"prompt_tokens": 3, "completion_tokens": 5}
    assert slow.outcome == "ok"


async def test_role_only_chunk_is_not_first_token_and_visible_time_is_separate():
    script = [
        (0.0, _chunk({"role": "assistant"})),
        (0.2, _chunk({"reasoning_content": "think"})),
        (1.0, _chunk({"content": "answer"})),
        (0.0, _chunk(finish="stop")),
        (0.0, b"data: [DONE]\n\n"),
    ]
    async with ScriptServer(script) as srv:
        res, _, _ = await _consume(srv.url, 0.0)
    ttft_ms = (res.first_token_ns - res.sent_ns) / 1e6
    visible_ms = (res.first_visible_ns - res.sent_ns) / 1e6
    # role-only chunk at ~0 ms is no token; reasoning at 200 ms is; content at 1,200 ms is
    # visible. The 1 s between them leaves a busy host 800 ms of slack (load average 13
    # delayed a read by ~350 ms here) while content taken for the first token still fails.
    assert 190 <= ttft_ms < 1000
    assert 1190 <= visible_ms < 2200 and ttft_ms <= visible_ms
    assert res.reasoning == "think"
    assert res.usage is None  # server sent no usage: None, never zeros
    assert res.prompt_tokens is None and res.output_tokens is None


async def test_tool_calls_reassembled_by_index_with_arguments_concatenated():
    script = [
        (0.0, _chunk({"role": "assistant", "content": None})),
        (
            0.0,
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "bash", "arguments": ""}}
                    ]
                }
            ),
        ),
        (
            0.0,
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "read", "arguments": '{"pa'},
                        }
                    ]
                }
            ),
        ),
        (0.0, _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"command": "ls"}'}}]})),
        (0.0, _chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'th": "a.py"}'}}]})),
        (0.0, _chunk(finish="tool_calls")),
        (0.0, b"data: [DONE]\n\n"),
    ]
    async with ScriptServer(script) as srv:
        res, _, _ = await _consume(srv.url, 0.0)
    assert res.message() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}},
        ],
    }
    assert res.finish_reason == "tool_calls"
    assert res.outcome == "ok"


async def test_http_error_keeps_status_and_body():
    async with ScriptServer([], status=409) as srv:
        res, _, _ = await _consume(srv.url, 0.0)
    assert (res.outcome, res.status, res.error) == ("http_error", 409, '{"error": "nope"}')


async def test_stream_cut_before_done_is_protocol_error_and_request_asks_for_usage():
    script = [(0.0, _chunk({"content": "partial"}))]
    async with ScriptServer(script) as srv:
        res, _, _ = await _consume(srv.url, 0.0)
        body = srv.bodies[0]
    assert res.outcome == "protocol_error"
    assert res.content == "partial"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_the_call_is_an_engine_sample_with_bytes_events_and_the_deepseek_cached_fallback():
    script = [
        (0.0, _chunk({"role": "assistant"})),
        (0.0, _chunk({"content": "a"})),
        (0.05, _chunk({"content": "b"}, finish="stop")),
        (0.0, _chunk(usage={"prompt_tokens": 9, "completion_tokens": 2, "prompt_cache_hit_tokens": 4})),
        (0.0, b"data: [DONE]\n\n"),
    ]
    body_len = sum(len(d) for _, d in script)
    async with ScriptServer(script) as srv:
        async with ModelClient(srv.url, t0_ns=time.perf_counter_ns()) as client:
            res = await client.chat([{"role": "user", "content": "hi"}])
        sent = orjson.dumps(client.body([{"role": "user", "content": "hi"}]))
    s = res.sample
    # the engine's parser: 2 token events (role-only is none), usage with DeepSeek's
    # prompt_cache_hit_tokens as cached_tokens, finish_reason, every byte counted
    assert (s.outcome, s.n_token_events, s.finish_reason, s.http_status) == ("ok", 2, "stop", 200)
    assert (s.prompt_tokens, s.output_tokens, s.cached_tokens, s.usage_present) == (9, 2, 4, True)
    assert (s.bytes_sent, s.bytes_received) == (len(sent), body_len)
    assert len(s.token_event_ns) == 2 and s.token_event_ns[0] == s.first_token_ns == s.first_content_ns
    assert s.token_event_ns[1] - s.token_event_ns[0] >= 50_000_000  # the 50 ms the server waited
    # stamps are offsets from the client's t0; the result gives them back absolute
    assert 0 <= s.sent_ns < s.first_token_ns < s.end_ns
    assert res.first_token_ns - res.sent_ns == s.first_token_ns - s.sent_ns
    assert (res.content, res.usage["prompt_cache_hit_tokens"]) == ("ab", 4)


async def test_a_non_streamed_body_has_no_token_timeline_as_in_the_engine():
    body = json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": "ok",
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4},
        }
    ).encode()
    async with ScriptServer([(0.0, body)]) as srv:
        async with ModelClient(srv.url) as client:
            res = await client.chat([{"role": "user", "content": "hi"}], stream=False)
        assert srv.bodies[0]["stream"] is False and "stream_options" not in srv.bodies[0]
    # benchmaker/apis/openai_chat.py: the first byte of a whole body is no first token
    assert (res.outcome, res.first_token_ns, res.sample.token_event_ns) == ("ok", None, None)
    assert (res.output_tokens, res.finish_reason, res.usage) == (
        4,
        "tool_calls",
        {"prompt_tokens": 3, "completion_tokens": 4},
    )
    assert res.message()["tool_calls"][0]["function"] == {"name": "bash", "arguments": "{}"}
    assert res.content == "ok" and res.sample.bytes_received == len(body)


def test_request_body_is_compact_utf8_and_a_lone_surrogate_still_encodes():
    client = ModelClient("http://unused")
    body = client.body([{"role": "user", "content": "héllo 😀"}], model="m")
    assert client.encode(body) == orjson.dumps(body)  # compact UTF-8, not ASCII escapes
    assert b'"role":"user"' in client.encode(body)  # no separators' spaces
    assert "héllo 😀".encode() in client.encode(body)
    lone = client.body([{"role": "user", "content": "\ud83d"}])  # orjson refuses a lone half
    assert json.loads(client.encode(lone))["messages"][0]["content"] == "\ud83d"
