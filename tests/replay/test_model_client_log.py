"""replay.model_client.MessageLog (issue #17 item 4): a conversation whose messages keep
their JSON bytes as they are appended sends, byte for byte, what encoding the whole body
gives, and falls back to that encoding for a message orjson refuses."""

from __future__ import annotations

import json

import orjson
import pytest

from replay.model_client import MessageLog, ModelClient
from tests.replay.test_harness_client import ScriptServer, _chunk

_MSGS = [
    {"role": "system", "content": "sé \u2028 \"quoted\" \\ back"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": None, "reasoning_content": "think",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"ls\"}"}}]},
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
    done = [(0.0, _chunk({"role": "assistant"})), (0.0, _chunk({"content": "ok"})), (0.0, _chunk(finish="stop")),
            (0.0, b"data: [DONE]\n\n")]
    async with ScriptServer(done) as srv:
        async with ModelClient(srv.url, model="m") as client:
            r = await client.chat(MessageLog(_MSGS))
            r_list = await client.chat(_MSGS)
    assert (r.outcome, r.content) == ("ok", "ok")
    assert srv.bodies[0] == srv.bodies[1] == {"model": "m", "messages": _MSGS, "stream": True,
                                              "stream_options": {"include_usage": True}}
    assert r.sample.bytes_sent == r_list.sample.bytes_sent == len(client.encode(client.body(_MSGS)))
