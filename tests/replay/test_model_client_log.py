"""benchmaker.agent.model_client.MessageLog: a conversation whose messages keep
their JSON bytes as they are appended sends, byte for byte, what encoding the whole body
gives, and falls back to that encoding for a message orjson refuses."""

from __future__ import annotations

import json

import orjson
import pytest

from benchmaker.agent.model_client import MessageLog, ModelClient
from tests.replay.test_harness_client import ScriptServer, _chunk

_MSGS = [
    {"role": "system", "content": 'sé \u2028 "quoted" \\ back'},
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "think",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a\nb", "is_error": False},
    {"role": "user", "content": "🙂 and more"},
]


@pytest.mark.parametrize("model", ["m", None])
@pytest.mark.parametrize("extra", [{}, {"stream": False}, {"temperature": 0.5, "tools": [{"type": "function"}]}])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_log_bytes_equal_the_whole_body_encoded(model: str | None, extra: dict, n: int) -> None:
    client = ModelClient("http://unused", model=model)
    log = MessageLog(_MSGS[:1] if n else ())
    log.extend(_MSGS[1:n])  # grown message by message, as the harness does
    want = client.encode(client.body(_MSGS[:n], **extra))
    assert log.body_bytes(client.body([], **extra)) == want
    assert orjson.loads(want)["messages"] == _MSGS[:n]
    assert (len(log), list(log)) == (n, _MSGS[:n])


def test_a_message_orjson_refuses_turns_the_log_to_whole_body_encoding() -> None:
    client = ModelClient("http://unused", model="m")
    msgs = [*_MSGS[:2], {"role": "user", "content": "lone \ud800 surrogate"}, *_MSGS[2:]]
    log = MessageLog(msgs)
    got = log.body_bytes(client.body([]))
    assert got == client.encode(client.body(msgs))
    assert got.startswith(b'{"model": "m", "messages": [')  # json.dumps's form: orjson refused the body
    assert json.loads(got)["messages"][2]["content"] == "lone \ud800 surrogate"


async def test_a_call_with_a_log_sends_the_logs_bytes() -> None:
    done = [
        (0.0, _chunk({"role": "assistant"})),
        (0.0, _chunk({"content": "ok"})),
        (0.0, _chunk(finish="stop")),
        (0.0, b"data: [DONE]\n\n"),
    ]
    async with ScriptServer(done) as srv:
        async with ModelClient(srv.url, model="m") as client:
            r = await client.chat(MessageLog(_MSGS))
            r_list = await client.chat(_MSGS)
    assert (r.outcome, r.content) == ("ok", "ok")
    assert (
        srv.bodies[0]
        == srv.bodies[1]
        == {"model": "m", "messages": _MSGS, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert r.sample.bytes_sent == r_list.sample.bytes_sent == len(client.encode(client.body(_MSGS)))


def test_a_long_log_keeps_few_immutable_segments_and_its_bytes_stay_exact() -> None:
    # 300 turns of 1-3 messages of varied sizes, sent after each turn: the pieces join to
    # the whole body's encoding every time, each is bytes (never a buffer the log later
    # changes), and they stay few (segment sizes at least halve from one to the next)
    client = ModelClient("http://unused", model="m")
    log, msgs = MessageLog(_MSGS[:2]), list(_MSGS[:2])
    pieces_seen = []
    for turn in range(300):
        for k in range(1 + turn % 3):
            m = {"role": "tool", "tool_call_id": f"c{turn}", "content": "x" * ((turn * 37 + k * 101) % 900)}
            log.append(m)
            msgs.append(m)
        pieces = log.body_pieces(client.body([], stream=False))
        assert b"".join(pieces) == client.encode(client.body(msgs, stream=False))
        assert all(type(p) is bytes for p in pieces)
        segments = pieces[1:-1]
        assert all(len(a) > 2 * len(b) for a, b in zip(segments, segments[1:], strict=False))
        pieces_seen.append(len(pieces))
    assert max(pieces_seen) == 8  # the frame and at most 6 segments for a ~280 KB history
    assert len(log._new) == 0


@pytest.mark.parametrize(
    ("model", "stream", "extra"), [("m", True, {}), (None, False, {}), ("m", False, {"seed": 1}), ("other", True, {})]
)
def test_a_client_sends_a_log_as_pieces_of_exactly_the_encoded_body(model, stream, extra) -> None:
    # the frame around the messages is kept per (model, stream); extra fields rebuild it
    client = ModelClient("http://unused", model="m")
    log = MessageLog(_MSGS[:3])
    for _ in range(2):  # the second call takes the kept frame
        payload = client.stream(log, stream=stream, model=model, **extra)._payload
        assert b"".join(payload) == client.encode(client.body(_MSGS[:3], stream=stream, model=model, **extra))
    refused = MessageLog([{"role": "user", "content": "lone \ud800"}])
    payload = client.stream(refused, stream=stream, model=model, **extra)._payload
    assert payload == client.encode(client.body(refused.messages, stream=stream, model=model, **extra))


async def test_a_log_goes_whole_through_an_aiohttp_session_and_a_given_transport() -> None:
    import aiohttp

    from benchmaker.engine.transport import AiohttpTransport

    done = [(0.0, _chunk({"content": "ok"})), (0.0, _chunk(finish="stop")), (0.0, b"data: [DONE]\n\n")]
    want = len(ModelClient.encode(ModelClient("http://unused", model="m").body(_MSGS)))
    async with ScriptServer(done) as srv:
        async with aiohttp.ClientSession() as session:
            r_session = await ModelClient(srv.url, model="m", session=session).chat(MessageLog(_MSGS))
        transport = AiohttpTransport()
        try:
            r_transport = await ModelClient(srv.url, model="m", transport=transport).chat(MessageLog(_MSGS))
        finally:
            await transport.aclose()
    assert (r_session.outcome, r_session.content, r_transport.outcome, r_transport.content) == ("ok", "ok", "ok", "ok")
    assert (
        srv.bodies == [{"model": "m", "messages": _MSGS, "stream": True, "stream_options": {"include_usage": True}}] * 2
    )
    assert r_session.sample.bytes_sent == r_transport.sample.bytes_sent == want
