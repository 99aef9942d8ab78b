"""Anthropic Messages on the engine side: the request body and headers, the stream parser
(token events, usage with cache tokens, stop reasons, errors) with injected stamps, and
end to end: the scenario server's `/v1/messages` through the parser and through
`benchmaker llm --api messages`, its TTFT/ITL/TPOT and tokens against the scripted truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from pydantic import TypeAdapter

from benchmaker.apis.anthropic_messages import AnthropicMessagesParser, chat_messages
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import Sample
from benchmaker.recipes.cli import main
from benchmaker.testing import Scenario, ScenarioServer
from benchmaker.workloads.anthropic_messages import AnthropicMessagesWorkload
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.registry import WorkloadSpec, build_workload
from tests.workloads._drive import drive

MS = 1_000_000  # ns per ms


def ev(obj: dict) -> bytes:
    return b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def start(usage: dict | None = None) -> bytes:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }
    if usage is not None:
        message["usage"] = usage
    return ev({"type": "message_start", "message": message})


def block(index: int, kind: str, **fields) -> bytes:
    return ev({"type": "content_block_start", "index": index, "content_block": {"type": kind, **fields}})


def delta(index: int, kind: str, field: str, value: str) -> bytes:
    return ev({"type": "content_block_delta", "index": index, "delta": {"type": kind, field: value}})


def end(stop_reason: str, output_tokens: int | None = 5) -> bytes:
    body: dict = {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}}
    if output_tokens is not None:
        body["usage"] = {"output_tokens": output_tokens}
    return ev(body) + ev({"type": "message_stop"})


def run(reads: list[tuple[int, bytes]]) -> tuple[Sample, AnthropicMessagesParser]:
    p = AnthropicMessagesParser(stream=True)
    s = Sample(run_id="t", seq=0)
    for t, data in reads:
        p.feed(data, t, s)
    p.finish(s)
    return s, p


USAGE = {"input_tokens": 20, "cache_creation_input_tokens": 30, "cache_read_input_tokens": 100, "output_tokens": 1}


# -- requests ----------------------------------------------------------------------------------


def test_body_moves_system_out_and_headers_carry_key_and_version():
    ds = StaticDataset([[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]])
    wl = AnthropicMessagesWorkload(
        "http://h/v1/messages", "m", ds, max_tokens=16, temperature=0.0, api_key="k", extra_body={"top_k": 5}
    )
    spec = wl.request(0)
    assert orjson.loads(spec.body) == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 16,
        "stream": True,
        "system": "Be brief.",
        "temperature": 0.0,
        "top_k": 5,
    }
    assert spec.headers["x-api-key"] == "k" and spec.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in spec.headers
    with pytest.raises(ConfigError, match="max_tokens: required"):
        AnthropicMessagesWorkload("http://h/v1/messages", "m", ds)


def test_yaml_api_messages_builds_the_messages_workload():
    spec = TypeAdapter(WorkloadSpec).validate_python(
        {
            "type": "openai-chat",
            "api": "messages",
            "url": "http://127.0.0.1:1/v1/messages",
            "model": "m",
            "max_tokens": 8,
            "dataset": {"type": "static", "items": ["hi"]},
        }
    )
    wl = build_workload(spec)
    assert isinstance(wl, AnthropicMessagesWorkload)
    assert orjson.loads(wl.request(0).body)["max_tokens"] == 8


def test_request_maps_to_chat_messages():
    req = {
        "system": [{"type": "text", "text": "S"}],
        "messages": [
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "x"},
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "ls", "input": {"d": "."}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a\nb", "is_error": True},
                    {"type": "text", "text": "go on"},
                ],
            },
        ],
    }
    assert chat_messages(req) == [
        {"role": "system", "content": [{"type": "text", "text": "S"}]},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "ok",
            "reasoning_content": "hm",
            "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "ls", "arguments": '{"d":"."}'}}],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "a\nb", "is_error": True},
        {"role": "user", "content": [{"type": "text", "text": "go on"}]},
    ]
    # Claude Code 2.1.3xx puts its environment in a message with role system after the prompt
    env = [{"type": "text", "text": "# Environment"}]
    assert chat_messages({"messages": [{"role": "user", "content": "task"}, {"role": "system", "content": env}]}) == [
        {"role": "user", "content": "task"},
        {"role": "system", "content": env},
    ]
    with pytest.raises(ValueError, match=r"messages\[0\]\.content: expected a string or a list"):
        chat_messages({"messages": [{"role": "user", "content": 3}]})


# -- the stream parser, stamps injected ---------------------------------------------------------------


def test_every_text_thinking_and_json_delta_is_a_token_event():
    s, p = run(
        [
            (5 * MS, start(USAGE)),
            (10 * MS, block(0, "thinking", thinking="", signature="") + ev({"type": "ping"})),  # no token yet
            (20 * MS, delta(0, "thinking_delta", "thinking", "Let me")),
            (30 * MS, delta(0, "signature_delta", "signature", "sig") + ev({"type": "content_block_stop", "index": 0})),
            (40 * MS, block(1, "text", text="") + delta(1, "text_delta", "text", "Hi")),
            (50 * MS, delta(1, "text_delta", "text", "")),  # empty: not a token
            (
                60 * MS,
                block(2, "tool_use", id="t", name="ls", input={}) + delta(2, "input_json_delta", "partial_json", "{}"),
            ),
            (70 * MS, end("tool_use", 9)),
        ]
    )
    assert (s.outcome, s.error) == ("ok", None)
    assert s.token_event_ns == [20 * MS, 40 * MS, 60 * MS] and s.n_token_events == 3
    assert (s.first_token_ns, s.first_content_ns) == (20 * MS, 40 * MS)
    # prompt = 20 uncached + 100 read + 30 written; output from message_delta (cumulative)
    assert (s.prompt_tokens, s.cached_tokens, s.output_tokens, s.usage_present) == (150, 100, 9, True)
    assert (s.finish_reason, s.finish_class, s.model) == ("tool_use", "tool_calls", "claude-x")
    assert s.output_chars == len("Let me") + len("Hi") + len("{}")
    assert (p.text, p.reasoning, p.blocks[0]["signature"], p.blocks[2]["input_json"]) == ("Hi", "Let me", "sig", "{}")


@pytest.mark.parametrize(
    ("reads", "outcome", "error"),
    [
        (
            [start(USAGE), block(0, "text", text=""), delta(0, "text_delta", "text", "a")],
            "protocol_error",
            "stream ended before message_stop after 1 token events",
        ),
        (
            [start(USAGE), ev({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})],
            "protocol_error",
            "error event in stream: Overloaded",
        ),
        ([start(USAGE), end("end_turn")], "empty_output", "complete stream without a generated token"),
        ([b"data: {nope\n\n"], "protocol_error", None),
        (
            [start(USAGE), delta(0, "text_delta", "text", "a"), end("aborted")],
            "aborted",
            "finish_reason 'aborted' (class abort): the server aborted the request",
        ),
    ],
)
def test_failed_streams_get_their_outcome(reads, outcome, error):
    s, _ = run([(i * MS, r) for i, r in enumerate(reads)])
    assert s.outcome == outcome
    if error is not None:
        assert s.error == error
    else:
        assert s.error.startswith("bad JSON in data line")


@pytest.mark.parametrize(
    ("reason", "cls"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
    ],
)
def test_stop_reasons_complete_the_request(reason, cls):
    s, _ = run([(0, start(USAGE) + delta(0, "text_delta", "text", "a") + end(reason))])
    assert (s.outcome, s.finish_reason, s.finish_class) == ("ok", reason, cls)


def test_no_usage_is_none_never_zero():
    s, _ = run([(0, start(None) + delta(0, "text_delta", "text", "a") + end("end_turn", None))])
    assert (s.outcome, s.output_tokens, s.prompt_tokens, s.usage_present) == ("ok", None, None, False)


def test_non_streamed_body():
    body = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "Paris"}],
        "usage": {
            "input_tokens": 7,
            "cache_read_input_tokens": 3,
            "output_tokens": 2,
            "output_tokens_details": {"thinking_tokens": 0},
        },
    }
    p = AnthropicMessagesParser(stream=False)
    s = Sample(run_id="t", seq=0)
    p.feed(orjson.dumps(body), 0, s)
    p.finish(s)
    assert (s.outcome, p.text, s.prompt_tokens, s.cached_tokens, s.output_tokens, s.reasoning_tokens) == (
        "ok",
        "Paris",
        10,
        3,
        2,
        0,
    )
    assert s.first_token_ns is None and s.token_event_ns is None
    err = AnthropicMessagesParser(stream=False)
    err.feed(b'{"type": "error", "error": {"type": "api_error", "message": "boom"}}', 0, s)
    err.finish(s)
    assert (s.outcome, s.error) == ("protocol_error", "error in body: boom")


# -- end to end --------------------------------------------------------------------------------------


async def test_scenario_server_messages_stream_timeline():
    sc = Scenario(
        ttft_ms=30,
        itl_ms=10,
        reasoning_chunks=2,
        content_chunks=3,
        tokens_per_chunk=2,
        prompt_tokens=50,
        cached_tokens=40,
    )
    async with ScenarioServer(sc) as server:
        wl = AnthropicMessagesWorkload(server.messages_url, "m", StaticDataset(["hi"]), max_tokens=64)
        s, p = await drive(wl)
        assert server.last_body == {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 64,
            "stream": True,
        }
    assert s.outcome == "ok", s.error
    assert (p.reasoning, p.text) == ("think think " * 2, "tok tok " * 3)
    assert s.n_token_events == 5
    # 5 chunks x 2 tokens; prompt 50 = 10 uncached + 40 read
    assert (s.output_tokens, s.prompt_tokens, s.cached_tokens, s.finish_reason) == (10, 50, 40, "end_turn")
    # event k is due at 30 + 10 k ms and never sent sooner; a busy machine only delays it
    assert all(t >= (30 + 10 * k) * MS for k, t in enumerate(s.token_event_ns)), s.token_event_ns
    assert s.first_content_ns >= 50 * MS  # the first text delta is chunk 2


async def test_scenario_server_messages_whole_body_with_tool_use():
    async with ScenarioServer(Scenario(content_chunks=2, tool_call={"name": "ls"})) as server:
        s, p = await drive(
            AnthropicMessagesWorkload(server.messages_url, "m", StaticDataset(["hi"]), max_tokens=8, stream=False)
        )
    assert (s.outcome, p.text, s.output_tokens, s.finish_reason) == ("ok", "tok tok ", 4, "tool_use")
    assert p.blocks[1] == {"type": "tool_use", "id": "call_0", "name": "ls", "input": {"city": "Paris"}}


@pytest.fixture(scope="module")
def server():
    scenario = {"ttft_ms": 40, "itl_ms": 20, "content_chunks": 6, "prompt_tokens": 30, "cached_tokens": 10}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmaker.testing.scenario_server", "--port", "0", "--scenario", json.dumps(scenario)],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    yield url
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


def test_llm_api_messages_measures_the_scripted_timeline(server, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MSG_KEY", "k")
    code = main(
        [
            "llm",
            "--url",
            server + "/v1/messages",
            "--api",
            "messages",
            "--model",
            "m",
            "--max-tokens",
            "64",
            "--api-key-env",
            "MSG_KEY",
            "--rate",
            "closed:1",
            "--max-requests",
            "5",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
            "--max-loop-lag-ms",
            "1000",
        ]
    )
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = orjson.loads((bundle / "summary.json").read_bytes())
    run = summary["run"]
    assert code == 0, summary["verdict"]
    assert run["n_ok"] == 5 and run["output_tokens_total"] == 30  # 5 requests x 6 one-token chunks
    assert run["cached_tokens_total"] == 50
    # truth: first token at 40 ms, then one every 20 ms; TPOT = (140 - 40) / (6 - 1) = 20 ms.
    # Events are never sent early; a busy machine delays them (upper margins catch a hang
    # or a wrong rule, e.g. TTFT taken at message_start (~0 ms) or TPOT over all 6 tokens (~16.7 ms))
    assert 40.0 <= run["ttft_ms"]["min"] and run["ttft_ms"]["p50"] < 140.0
    assert 17.5 < run["tpot_ms"]["p50"] < 40.0
    assert 17.5 < run["itl_event_ms"]["p50"] < 40.0
    manifest = orjson.loads((bundle / "manifest.json").read_bytes())
    assert manifest["workload"]["type"] == "anthropic-messages"
    assert "k" not in (bundle / "manifest.json").read_text().split('"')  # the key is never written


def test_llm_api_messages_without_max_tokens_is_one_line_exit_2(tmp_path, capsys):
    code = main(
        [
            "llm",
            "--url",
            "http://127.0.0.1:9/v1/messages",
            "--api",
            "messages",
            "--model",
            "m",
            "--max-requests",
            "1",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 2
    assert "--max-tokens: required with --api messages" in capsys.readouterr().err
