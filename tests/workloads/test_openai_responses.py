"""OpenAI Responses: request bodies, the parser's token timeline, usage and outcomes
(direct feeds with exact stamps), and `benchmaker llm --api responses` against the
scripted server on 127.0.0.1 with a known timeline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from benchmaker.apis.openai_responses import OpenAIResponsesParser, chat_messages, input_items
from benchmaker.engine.records import Sample
from benchmaker.recipes.cli import main
from benchmaker.testing import Scenario, ScenarioServer, ToolCallScript
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.openai_responses import OpenAIResponsesWorkload
from tests.workloads._drive import drive

MS = 1_000_000  # ns per ms


def ev(kind: str, seq: int = 0, **body) -> bytes:
    return (
        b"event: "
        + kind.encode()
        + b"\ndata: "
        + orjson.dumps({"type": kind, "sequence_number": seq, **body})
        + b"\n\n"
    )


def resp(status: str = "completed", usage: dict | None = None, **extra) -> dict:
    return {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-x",
        "status": status,
        "output": [],
        "usage": usage,
        **extra,
    }


USAGE = {
    "input_tokens": 12,
    "input_tokens_details": {"cached_tokens": 8},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 20},
    "total_tokens": 42,
}


def run(reads: list[tuple[int, bytes]], stream: bool = True) -> tuple[Sample, OpenAIResponsesParser]:
    p = OpenAIResponsesParser(stream=stream)
    s = Sample(run_id="t", seq=0)
    for t, data in reads:
        p.feed(data, t, s)
    p.finish(s)
    return s, p


# -- request building ------------------------------------------------------------------


def test_body_sends_the_prompt_as_input_items_and_max_output_tokens():
    ds = StaticDataset([[{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]])
    wl = OpenAIResponsesWorkload(
        "http://h/v1/responses", "m", ds, max_tokens=64, temperature=0.0, extra_body={"top_p": 0.5}
    )
    spec = wl.request(0)
    assert orjson.loads(spec.body) == {
        "model": "m",
        "stream": True,
        "max_output_tokens": 64,
        "temperature": 0.0,
        "top_p": 0.5,
        "input": [
            {"type": "message", "role": "system", "content": "be brief"},
            {"type": "message", "role": "user", "content": "2+2?"},
        ],
    }
    assert spec.headers["Accept"] == "text/event-stream"


def test_input_items_and_chat_messages_are_inverse_for_a_tool_turn():
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "let me look",
            "reasoning_content": "hmm",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"c":1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ]
    assert chat_messages({"input": input_items(messages)}) == messages


def test_chat_messages_reads_instructions_images_custom_calls_and_merges_one_turn():
    req = {
        "instructions": "sys",
        "input": [
            {"role": "developer", "content": "perm"},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AA"},
                ],
            },
            {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "x"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"},
        ],
    }
    assert chat_messages(req) == [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": "perm"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "apply_patch", "arguments": "*** Begin Patch"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "Done"},
    ]


def test_chat_messages_names_the_bad_field():
    with pytest.raises(ValueError, match=r"^input\[1\]\.role: expected user, assistant, system or developer"):
        chat_messages({"input": [{"role": "user", "content": "a"}, {"type": "message", "role": "bot"}]})
    with pytest.raises(ValueError, match=r"^input: missing"):
        chat_messages({"model": "m"})


# -- the parser, exact stamps -------------------------------------------------------------


def test_every_generated_delta_is_a_token_event_and_usage_comes_from_completed():
    reads = [
        (
            1 * MS,
            ev("response.created", 0, response=resp("in_progress"))
            + ev("response.in_progress", 1, response=resp("in_progress")),
        ),
        (
            5 * MS,
            ev("response.output_item.added", 2, output_index=0, item={"type": "reasoning", "id": "rs"})
            + ev("response.reasoning_summary_text.delta", 3, delta="think"),
        ),
        (
            9 * MS,
            ev("response.output_item.added", 4, output_index=1, item={"type": "message", "content": []})
            + ev("response.content_part.added", 5, part={"type": "output_text", "text": ""}),
        ),
        (10 * MS, ev("response.output_text.delta", 6, delta="Hel")),
        (
            12 * MS,
            ev("response.output_text.delta", 7, delta="")  # empty: not a token
            + ev("response.output_text.delta", 8, delta="lo"),
        ),
        (
            20 * MS,
            ev(
                "response.output_item.added",
                9,
                output_index=2,
                item={"type": "function_call", "name": "bash", "arguments": "", "call_id": "c"},
            ),
        ),
        (25 * MS, ev("response.function_call_arguments.delta", 10, delta="{}")),
        (30 * MS, ev("response.completed", 11, response=resp("completed", USAGE))),
    ]
    s, p = run(reads)
    assert s.outcome == "ok", s.error
    # reasoning 5, text 10 and 12, the call's name 20, its arguments 25
    assert s.token_event_ns == [5 * MS, 10 * MS, 12 * MS, 20 * MS, 25 * MS]
    assert (s.first_token_ns, s.first_content_ns, s.n_token_events) == (5 * MS, 10 * MS, 5)
    assert (s.prompt_tokens, s.cached_tokens, s.output_tokens, s.reasoning_tokens) == (12, 8, 30, 20)
    assert (s.finish_reason, s.finish_class, s.model) == ("completed", "tool_calls", "gpt-x")
    assert p.text == "Hello" and s.output_chars == len("think") + 5 + len("bash") + 2
    assert s.token_event_tokens is None


def test_incomplete_is_length_failed_is_aborted_error_event_is_protocol_error():
    s, _ = run(
        [
            (1, ev("response.output_text.delta", delta="a")),
            (
                2,
                ev(
                    "response.incomplete",
                    response=resp("incomplete", USAGE, incomplete_details={"reason": "max_output_tokens"}),
                ),
            ),
        ]
    )
    assert (s.outcome, s.finish_reason, s.finish_class, s.output_tokens) == ("ok", "max_output_tokens", "length", 30)
    s, _ = run(
        [
            (1, ev("response.output_text.delta", delta="a")),
            (2, ev("response.failed", response=resp("failed", error={"code": "server_error", "message": "boom"}))),
        ]
    )
    assert (s.outcome, s.finish_class) == ("aborted", "error")
    assert s.error.endswith(": boom")
    s, _ = run(
        [(1, ev("response.output_text.delta", delta="a")), (2, ev("error", code="rate_limit", message="slow down"))]
    )
    assert (s.outcome, s.error) == ("protocol_error", "error event in stream: slow down")


def test_cut_stream_and_no_token_stream():
    s, _ = run([(1, ev("response.output_text.delta", delta="a"))])
    assert (s.outcome, s.error) == ("protocol_error", "stream ended before response.completed after 1 token events")
    s, _ = run([(1, ev("response.completed", response=resp("completed", USAGE)))])
    assert s.outcome == "empty_output" and s.first_token_ns is None


def test_non_streamed_body():
    body = resp(
        "completed",
        USAGE,
        output=[
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Paris"}]},
        ],
    )
    raw = orjson.dumps(body)
    s, p = run([(1, raw[:10]), (2, raw[10:])], stream=False)
    assert (s.outcome, p.text, s.output_tokens, s.reasoning_tokens, s.finish_class) == ("ok", "Paris", 30, 20, "stop")
    assert s.first_token_ns is None


# -- against the scripted server ----------------------------------------------------------------


async def test_scenario_responses_stream_token_events_and_usage():
    sc = Scenario(
        ttft_ms=30,
        itl_ms=10,
        reasoning_chunks=2,
        content_chunks=3,
        tokens_per_chunk=2,
        tool_call=ToolCallScript(),
        prompt_tokens=9,
        cached_tokens=4,
    )
    async with ScenarioServer(sc) as server:
        wl = OpenAIResponsesWorkload(server.responses_url, "m", StaticDataset(["hi"]), max_tokens=50)
        s, p = await drive(wl)
        assert server.last_body["max_output_tokens"] == 50
        whole, pw = await drive(OpenAIResponsesWorkload(server.responses_url, "m", StaticDataset(["hi"]), stream=False))
    assert s.outcome == "ok", s.error
    # 2 reasoning + 3 content + the call's name + 2 argument chunks, event k due at 30 + 10 k ms
    assert s.n_token_events == 8
    assert all(t >= (30 + 10 * k) * MS for k, t in enumerate(s.token_event_ns)), s.token_event_ns
    assert s.first_content_ns == s.token_event_ns[2]
    # (2 + 3) chunks x 2 tokens + 1 name + 2 argument chunks = 13 (Scenario.generated_tokens)
    assert (s.output_tokens, s.prompt_tokens, s.cached_tokens, s.reasoning_tokens) == (13, 9, 4, 4)
    assert p.text == "tok " * 6 and s.finish_class == "tool_calls"
    assert (whole.outcome, pw.text, whole.output_tokens) == ("ok", "tok " * 6, 13)


@pytest.fixture(scope="module")
def server():
    scenario = {"ttft_ms": 100, "itl_ms": 20, "content_chunks": 6, "tokens_per_chunk": 1, "prompt_tokens": 7}
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


def test_llm_api_responses_measures_the_scripted_timeline(server, tmp_path: Path):
    code = main(
        [
            "llm",
            "--api",
            "responses",
            "--url",
            server + "/v1/responses",
            "--model",
            "m",
            "--rate",
            "closed:1",
            "--max-requests",
            "4",
            "--max-tokens",
            "16",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
            "--max-loop-lag-ms",
            "1000",
        ]
    )
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run_ = orjson.loads((bundle / "summary.json").read_bytes())["run"]
    assert code == 0
    assert run_["n_ok"] == 4
    assert run_["output_tokens_total"] == 24  # 4 requests x 6 one-token chunks
    # token event k is due at 100 + 20 k ms and never sent sooner; the upper bounds only
    # catch a hang (a busy host delays events, it cannot advance them)
    assert 100.0 <= run_["ttft_ms"]["min"] and run_["ttft_ms"]["max"] < 1100.0
    # TPOT = (last - first token) / (6 - 1) = 100 ms / 5 = 20 ms per token, ITL 20 ms, on
    # time; a first event delivered late by d ms shortens the span: 10 ms leaves d = 50 ms
    assert 10.0 <= run_["tpot_ms"]["p50"] < 120.0
    assert 10.0 <= run_["itl_event_ms"]["p50"] < 120.0
    samples = [orjson.loads(x) for x in (bundle / "samples.jsonl").read_bytes().splitlines()]
    assert [x["n_token_events"] for x in samples] == [6] * 4
    assert [x["prompt_tokens"] for x in samples] == [7] * 4
    # the last token event is due 100 + 5 x 20 ms after the request arrived
    assert all(x["token_event_ns"][-1] - x["sent_ns"] >= 200 * MS for x in samples)
    assert all(x["finish_reason"] == "completed" and x["outcome"] == "ok" for x in samples)


def test_yaml_api_responses_builds_the_responses_workload():
    from pydantic import TypeAdapter

    from benchmaker.workloads.registry import WorkloadSpec, build_workload

    spec = TypeAdapter(WorkloadSpec).validate_python(
        {
            "type": "openai-chat",
            "api": "responses",
            "url": "http://127.0.0.1:1/v1/responses",
            "model": "m",
            "max_tokens": 8,
            "dataset": {"type": "static", "items": ["hi"]},
        }
    )
    wl = build_workload(spec)
    assert type(wl) is OpenAIResponsesWorkload
    assert orjson.loads(wl.request(0).body) == {
        "model": "m",
        "stream": True,
        "max_output_tokens": 8,
        "input": [{"type": "message", "role": "user", "content": "hi"}],
    }
    with pytest.raises(ValueError, match="api"):
        TypeAdapter(WorkloadSpec).validate_python(
            {"type": "openai-chat", "api": "graphql", "url": "http://127.0.0.1:1/v1/x", "model": "m"}
        )


def test_sse_event_lines_on_the_fast_path_keep_the_spec_rules():
    from benchmaker.engine.sse import SSEParser

    # `event: x` (fast path), `event:` with no value (no type), `event:y` (no space)
    got = SSEParser().feed(b"event: x\ndata: 1\n\nevent:\ndata: 2\n\nevent:y\ndata: 3\n\nevent: \xc3\xa9\ndata: 4\n\n")
    assert got == [("x", b"1"), (None, b"2"), ("y", b"3"), ("\u00e9", b"4")]
