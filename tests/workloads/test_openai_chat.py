"""OpenAI chat workload: request bodies, and the parser's token timeline, usage and
outcome. Direct-feed tests control every stamp (t_ns) exactly; end-to-end tests go
through the scenario server on 127.0.0.1 with aiohttp, like the runner."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmaker.apis.openai_chat import OpenAIChatParser
from benchmaker.engine.records import Sample
from benchmaker.engine.types import StreamParser, Workload
from benchmaker.testing import Scenario, ScenarioServer, ToolCallScript
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from tests.workloads._drive import drive

MS = 1_000_000  # ns per ms
REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"


def chunk(delta=None, finish=None, usage=..., choices=None) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    obj["choices"] = choices if choices is not None else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not ...:
        obj["usage"] = usage
    return b"data: " + orjson.dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"
ROLE = chunk({"role": "assistant", "content": ""})


def run(reads: list[tuple[int, bytes]]) -> tuple[Sample, OpenAIChatParser]:
    """Feed (t_ns, bytes) reads to a fresh streaming parser and finish it."""
    p = OpenAIChatParser(stream=True)
    s = Sample(run_id="t", seq=0)
    for t, data in reads:
        p.feed(data, t, s)
    p.finish(s)
    return s, p


# -- request building -------------------------------------------------------------------------


def test_stream_body_asks_for_usage_and_merges_extra_body_last():
    ds = StaticDataset(["hello", [{"role": "user", "content": "2+2?"}]])
    wl = OpenAIChatWorkload(
        "http://h/v1/chat/completions",
        "m",
        ds,
        max_tokens=64,
        temperature=0.0,
        extra_body={"top_p": 0.5, "max_tokens": 32},
        api_key="sk-x",
    )
    spec = wl.request(3)  # seq 3 cycles to item 1
    assert isinstance(wl, Workload) and isinstance(wl.parser(spec), StreamParser)
    assert orjson.loads(spec.body) == {
        "model": "m",
        "messages": [{"role": "user", "content": "2+2?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 32,  # extra_body wins over max_tokens=64
        "temperature": 0.0,
        "top_p": 0.5,
    }
    assert spec.stream is True and spec.method == "POST"
    assert spec.headers["Authorization"] == "Bearer sk-x"
    assert spec.headers["Accept"] == "text/event-stream"
    assert spec.meta == {"dataset": "static", "row": 1}


def test_non_stream_body_has_no_stream_options():
    wl = OpenAIChatWorkload("http://h", "m", StaticDataset(["hi"]), stream=False)
    body = orjson.loads(wl.request(0).body)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    assert "Authorization" not in wl.request(0).headers


# -- golden timelines (direct feed, exact stamps) ---------------------------------------------------


def test_role_only_chunk_is_not_first_token():
    # docs/metrics.md: role chunk at 5 ms, first content at 500 ms -> TTFT 500 ms,
    # and no 495 ms "gap" (the role chunk is not an event).
    s, p = run(
        [
            (5 * MS, ROLE),
            (500 * MS, chunk({"content": "Hi"})),
            (
                520 * MS,
                chunk(
                    {"content": "!"},
                )
                + chunk({}, "stop")
                + DONE,
            ),
        ]
    )
    assert s.outcome == "ok"
    assert s.first_token_ns == 500 * MS
    assert s.first_content_ns == 500 * MS
    assert s.token_event_ns == [500 * MS, 520 * MS]
    assert s.n_token_events == 2
    assert p.text == "Hi!"
    assert s.finish_reason == "stop"


def test_only_done_is_empty_output():
    s, _ = run([(3 * MS, DONE)])
    assert (s.outcome, s.first_token_ns, s.token_event_ns, s.n_token_events) == ("empty_output", None, None, 0)


def test_only_usage_chunk_is_empty_output_and_never_sets_ttft():
    usage = {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}
    s, _ = run([(3 * MS, chunk(choices=[], usage=usage)), (4 * MS, DONE)])
    assert s.outcome == "empty_output"
    assert s.first_token_ns is None and s.first_content_ns is None
    assert (s.usage_present, s.prompt_tokens, s.output_tokens) == (True, 5, 0)


def test_reasoning_deltas_of_both_spellings_set_ttft_before_ttfc():
    reads = [(1 * MS, ROLE)]
    for k in range(50):  # 50 reasoning deltas at 2..51 ms, spellings alternating
        key = "reasoning_content" if k % 2 == 0 else "reasoning"
        reads.append(((2 + k) * MS, chunk({key: f"r{k} "})))
    reads.append((60 * MS, chunk({"content": "answer"}) + chunk({}, "stop") + DONE))
    s, p = run(reads)
    assert s.first_token_ns == 2 * MS  # first reasoning delta
    assert s.first_content_ns == 60 * MS  # first content delta
    assert s.n_token_events == 51  # 50 reasoning + 1 content
    assert s.token_event_ns == [(2 + k) * MS for k in range(50)] + [60 * MS]
    assert p.text == "answer"  # reasoning is not content
    assert s.outcome == "ok"


def test_four_tokens_per_chunk_gives_one_event_per_chunk():
    # 10 chunks of 4 tokens every 40 ms; usage 40 = 4 x 10 chunks.
    reads = [(40 * MS * (k + 1), chunk({"content": "a b c d "})) for k in range(10)]
    reads.append(
        (400 * MS, chunk({}, "stop") + chunk(choices=[], usage={"prompt_tokens": 3, "completion_tokens": 40}) + DONE)
    )
    s, _ = run(reads)
    assert s.token_event_ns == [40 * MS * (k + 1) for k in range(10)]
    assert s.n_token_events == 10
    assert s.output_tokens == 40
    assert s.token_event_tokens is None  # the protocol does not state tokens per event


def test_usage_omitted_leaves_token_counts_unknown():
    # 7 content chunks, no usage anywhere (max_tokens would be 100): null, never 0 or 100.
    reads = [(k * MS, chunk({"content": "x"})) for k in range(1, 8)] + [(8 * MS, chunk({}, "length") + DONE)]
    s, _ = run(reads)
    assert s.outcome == "ok"
    assert (s.output_tokens, s.prompt_tokens, s.usage_present) == (None, None, False)
    assert s.n_token_events == 7
    assert s.finish_reason == "length"


def test_usage_without_completion_tokens_is_not_usage():
    s, _ = run([(1 * MS, chunk({"content": "x"}) + chunk(choices=[], usage={"prompt_tokens": 9}) + DONE)])
    assert (s.prompt_tokens, s.output_tokens, s.usage_present) == (9, None, False)


def test_several_chunks_in_one_read_each_count_at_that_stamp():
    s, _ = run([(7 * MS, chunk({"content": "a"}) + chunk({"content": "b"}) + chunk({"content": "c"})), (9 * MS, DONE)])
    assert s.token_event_ns == [7 * MS, 7 * MS, 7 * MS]


def _framings() -> dict[str, list[tuple[int, bytes]]]:
    """One logical stream (role, 3 content events incl. a multi-byte character, finish,
    usage, [DONE]) in several framings; every token event completes at stamp 10/20/30 ms."""
    events = [
        ROLE,
        chunk({"content": "caf\u00e9 \u2028 "}),
        chunk({"content": "\u4e16\u754c"}),
        chunk({"content": "end"}),
        chunk({}, "stop"),
        chunk(choices=[], usage={"prompt_tokens": 2, "completion_tokens": 3}),
        DONE,
    ]
    stamps = [1, 10, 20, 30, 31, 31, 31]
    plain = [(t * MS, e) for t, e in zip(stamps, events, strict=True)]

    def split_inside(e: bytes, needle: bytes, offset: int) -> tuple[bytes, bytes]:
        i = e.index(needle) + offset
        return e[:i], e[i:]

    in_string, in_codepoint = [], []
    for t, e in plain:
        # the earlier piece arrives 1 ms before: the event completes on the later one
        if b'"content":"' in e and e != ROLE:
            a, b = split_inside(e, b'"content":"', 12)
            in_string += [(t - MS, a), (t, b)]
        else:
            in_string.append((t, e))
        if b"\xe4\xb8\x96" in e or b"\xc3\xa9" in e:
            a, b = split_inside(e, b"\xe4\xb8\x96" if b"\xe4\xb8\x96" in e else b"\xc3\xa9", 1)
            in_codepoint += [(t - MS, a), (t, b)]
        else:
            in_codepoint.append((t, e))
    crlf = [(t, e.replace(b"\n", b"\r\n")) for t, e in plain]
    crlf_split = []
    for t, e in crlf:  # CR | LF split across reads inside the event's first line end
        i = e.index(b"\r\n") + 1
        crlf_split += [(t - MS, e[:i]), (t, e[i:])]
    decorated = [(t, b": keep-alive\n\nevent: message\nid: 7\n" + e) for t, e in plain]
    return {
        "plain": plain,
        "split inside JSON string": in_string,
        "split inside UTF-8 code point": in_codepoint,
        "CRLF": crlf,
        "CR|LF split across reads": crlf_split,
        "CR only": [(t, e.replace(b"\n", b"\r")) for t, e in plain],
        "event: lines and : comments": decorated,
    }


@pytest.mark.parametrize("name", list(_framings()))
def test_sse_framing_variants_give_identical_timelines(name):
    s, p = run(_framings()[name])
    assert s.token_event_ns == [10 * MS, 20 * MS, 30 * MS], name
    assert (s.first_token_ns, s.first_content_ns) == (10 * MS, 10 * MS)
    assert p.text == "caf\u00e9 \u2028 \u4e16\u754cend"
    assert (s.outcome, s.output_tokens, s.output_chars) == ("ok", 3, 12)


def test_several_events_per_read_share_the_read_stamp():
    plain = _framings()["plain"]
    # events 1 and 2 (10 ms, 20 ms) arrive together in the 20 ms read
    merged = [plain[0], (20 * MS, plain[1][1] + plain[2][1])] + plain[3:]
    s, _ = run(merged)
    assert s.token_event_ns == [20 * MS, 20 * MS, 30 * MS]


# -- usage variants, failures -------------------------------------------------------------------


def test_usage_on_finish_chunk_with_null_elsewhere_and_details():
    usage = {
        "prompt_tokens": 374,
        "completion_tokens": 61,
        "prompt_tokens_details": {"cached_tokens": 256},
        "completion_tokens_details": {"reasoning_tokens": 17},
    }
    s, _ = run([(1 * MS, chunk({"content": "x"}, usage=None) + chunk({}, "stop", usage=usage) + DONE)])
    assert (s.prompt_tokens, s.output_tokens, s.cached_tokens, s.reasoning_tokens) == (374, 61, 256, 17)
    assert s.usage_present is True


def test_deepseek_prompt_cache_hit_tokens_is_the_cached_fallback():
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 8}
    s, _ = run([(1 * MS, chunk({"content": "x"}) + chunk(choices=[], usage=usage) + DONE)])
    assert s.cached_tokens == 8


def test_tool_call_name_counts_as_token_but_empty_arguments_do_not():
    empty_args = {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}
    named = {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]}
    s, p = run([(1 * MS, chunk(empty_args)), (2 * MS, chunk(named)), (3 * MS, chunk({}, "tool_calls") + DONE)])
    assert s.first_token_ns == 2 * MS
    assert s.first_content_ns is None
    assert (s.outcome, s.output_chars, p.text, s.finish_reason) == ("ok", 1, "", "tool_calls")


def test_bad_json_data_line_is_protocol_error():
    s, _ = run([(1 * MS, chunk({"content": "x"})), (2 * MS, b'data: {"choices": [\n\n' + DONE)])
    assert s.outcome == "protocol_error"
    assert s.error.startswith("bad JSON in data line:")
    assert s.first_token_ns == 1 * MS  # timings seen before the fault are kept


def test_error_object_in_stream_is_protocol_error():
    err = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    s, _ = run([(1 * MS, chunk({"content": "x"}) + err + DONE)])
    assert (s.outcome, s.error) == ("protocol_error", "error in stream: overloaded")


def test_mid_stream_error_chunk_is_protocol_error_with_its_finish_class():
    # OpenRouter's mid-stream error: an `error` object and finish_reason "error" in one chunk
    err = (
        b'data: {"error": {"code": "server_error", "message": "Provider disconnected"}, '
        b'"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}\n\n'
    )
    s, _ = run([(1 * MS, chunk({"content": "x"}) + err + DONE)])
    assert (s.outcome, s.error) == ("protocol_error", "error in stream: Provider disconnected")
    assert (s.finish_reason, s.finish_class) == ("error", "error")


def test_stream_cut_before_done_is_protocol_error_even_with_tokens():
    s, _ = run([(1 * MS, chunk({"content": "x"}) + chunk({"content": "y"}))])
    assert (s.outcome, s.error) == ("protocol_error", "stream ended before data: [DONE] after 2 token events")


def test_done_without_final_blank_line_is_accepted():
    s, _ = run([(1 * MS, chunk({"content": "x"}) + b"data: [DONE]")])
    assert s.outcome == "ok"


def test_json_body_to_a_stream_request_is_protocol_error():
    s, _ = run([(1 * MS, b'{"choices": []}')])
    assert (s.outcome, s.error) == ("protocol_error", 'no SSE event in body (got {"choices": []})')


def test_non_stream_body_has_no_token_timeline():
    body = orjson.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello", "reasoning_content": "hm"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 4, "completion_tokens": 3},
        }
    )
    p = OpenAIChatParser(stream=False)
    s = Sample(run_id="t", seq=0)
    p.feed(body[:10], 5 * MS, s)
    p.feed(body[10:], 6 * MS, s)
    p.finish(s)
    assert (s.outcome, s.first_token_ns, s.first_content_ns, s.token_event_ns) == ("ok", None, None, None)
    assert (s.output_tokens, s.finish_reason, s.output_chars, p.text) == (3, "stop", 7, "Hello")


def test_non_stream_without_generated_text_is_empty_output():
    body = orjson.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]}
    )
    p = OpenAIChatParser(stream=False)
    s = Sample(run_id="t", seq=0)
    p.feed(body, 1, s)
    p.finish(s)
    assert s.outcome == "empty_output"


def whole(obj) -> tuple[Sample, OpenAIChatParser]:
    """Parse a non-streamed body `obj` (a dict, or bytes as sent)."""
    p = OpenAIChatParser(stream=False)
    s = Sample(run_id="t", seq=0)
    p.feed(obj if isinstance(obj, bytes) else orjson.dumps(obj), 1, s)
    p.finish(s)
    return s, p


def test_non_stream_refusal_is_ok_and_flagged():
    s, p = whole(
        {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "refusal": "No."},
                    "finish_reason": "stop",
                }
            ]
        }
    )
    assert (s.outcome, s.refusal, s.output_chars, p.text, s.finish_class) == ("ok", True, 3, "", "stop")


def test_non_stream_content_parts_and_reasoning_spellings_are_output():
    msg = {"role": "assistant", "content": [{"type": "text", "text": "4"}], "reasoning": "2+2"}
    s, p = whole({"choices": [{"index": 0, "message": msg, "finish_reason": "length"}]})
    assert (s.outcome, s.output_chars, p.text, s.finish_reason, s.finish_class) == ("ok", 4, "4", "length", "length")


def test_non_stream_abort_fails_even_with_text():
    s, _ = whole({"choices": [{"index": 0, "message": {"content": "partial"}, "finish_reason": "abort"}]})
    assert (s.outcome, s.finish_class, s.output_chars) == ("aborted", "abort", 7)
    assert s.error == "finish_reason 'abort' (class abort): the server aborted the request"


def test_first_failing_choice_decides_the_class_and_the_last_reason_is_kept():
    # n=2: choice 1 errors, then choice 0 stops: the request failed (class error)
    both = [{"index": 1, "delta": {}, "finish_reason": "error"}, {"index": 0, "delta": {}, "finish_reason": "stop"}]
    s, _ = run([(1 * MS, chunk({"content": "x"}) + chunk(choices=both) + DONE)])
    assert (s.outcome, s.finish_reason, s.finish_class) == ("aborted", "stop", "error")


def test_cancelled_finish_after_tokens_is_aborted_not_ok():
    s, _ = run([(1 * MS, chunk({"content": "x"})), (2 * MS, chunk({}, "cancelled") + DONE)])
    assert (s.outcome, s.first_token_ns, s.finish_class) == ("aborted", 1 * MS, "cancelled")


def test_no_finish_reason_gives_no_class_and_the_outcome_stays_ok():
    s, _ = run([(1 * MS, chunk({"content": "x"}) + DONE)])
    assert (s.outcome, s.finish_reason, s.finish_class) == ("ok", None, None)


def test_surrogate_pair_split_across_events_is_joined():
    hi = b'data: {"choices":[{"index":0,"delta":{"content":"a\\ud83d"}}]}\n\n'
    lo = b'data: {"choices":[{"index":0,"delta":{"content":"\\ude00b"}}]}\n\n'
    s, p = run([(1 * MS, hi), (2 * MS, lo + chunk({}, "stop") + DONE)])
    assert (s.outcome, p.text, s.token_event_ns) == ("ok", "a\U0001f600b", [1 * MS, 2 * MS])
    assert s.output_chars == 3  # a + one emoji + b


def test_a_half_character_alone_is_no_token_and_joins_the_next_event():
    # a JavaScript server's stream: "\ud83d" alone at 1 ms, "\ude00" at 2 ms, in the
    # arguments of a tool call: the character (and the token) arrives at 2 ms
    def args(escaped: bytes) -> bytes:
        return (
            b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"'
            + escaped
            + b'"}}]}}]}\n\n'
        )

    s, _ = run([(1 * MS, args(b"\\ud83d")), (2 * MS, args(b"\\ude00") + chunk({}, "tool_calls") + DONE)])
    assert (s.outcome, s.first_token_ns, s.token_event_ns, s.output_chars) == ("ok", 2 * MS, [2 * MS], 1)


def test_whole_body_with_an_unpaired_half_gets_a_replacement_char():
    s, p = whole(b'{"choices":[{"index":0,"message":{"content":"ok \\ud83d"},"finish_reason":"stop"}]}')
    assert (s.outcome, p.text, s.output_chars) == ("ok", "ok \ufffd", 4)


def test_lone_surrogate_is_kept_as_replacement_char_not_an_error():
    s, p = run([(1 * MS, b'data: {"choices":[{"index":0,"delta":{"content":"x\\udc00"}}]}\n\n' + DONE)])
    assert (s.outcome, p.text) == ("ok", "x\ufffd")


def test_bad_json_with_a_surrogate_escape_is_still_a_protocol_error():
    s, _ = run([(1 * MS, b'data: {"content": "\\ud83d"\n\n' + DONE)])
    assert s.outcome == "protocol_error" and s.error.startswith("bad JSON in data line:")


def test_utf8_bytes_split_across_reads_are_joined():
    data = chunk({"content": "\u00e9\u4e2d\U0001f600"}) + DONE
    at = data.index("\u4e2d".encode()) + 1  # inside the 3-byte sequence of U+4E2D
    s, p = run([(1 * MS, data[:at]), (2 * MS, data[at:])])
    assert (s.outcome, p.text, s.output_chars, s.token_event_ns) == ("ok", "\u00e9\u4e2d\U0001f600", 3, [2 * MS])


# -- end to end through the scenario server ---------------------------------------------------------


def _wl(server: ScenarioServer, scenario: str, **kw) -> OpenAIChatWorkload:
    return OpenAIChatWorkload(server.chat_url, scenario, StaticDataset(["hi"]), **kw)


SCENARIOS = {
    "role5-ttft500": Scenario(role_delay_ms=5, ttft_ms=500, content_chunks=3, itl_ms=10),
    "only-done": Scenario(role_chunk=False, content_chunks=0, usage="none"),
    "only-usage": Scenario(role_chunk=False, content_chunks=0, usage="final"),
    "reasoning": Scenario(reasoning_chunks=50, reasoning_field="both", ttft_ms=20, itl_ms=1, content_chunks=2),
    "4-per-chunk": Scenario(content_chunks=10, tokens_per_chunk=4, itl_ms=40),
    "no-usage": Scenario(content_chunks=7, usage="none", finish_reason="stop"),
    "tool": Scenario(content_chunks=0, tool_call=ToolCallScript(), usage="finish", usage_null_elsewhere=True),
    "cut": Scenario(content_chunks=5, truncate_after=3),
    "http500": Scenario(status=500),
}


@pytest.fixture
async def server():
    async with ScenarioServer(Scenario(), SCENARIOS) as srv:
        yield srv


async def test_e2e_role_chunk_at_5ms_then_content_at_500ms(server):
    s, _ = await drive(_wl(server, "role5-ttft500"))
    assert s.outcome == "ok"
    # server sends the role chunk at 5 ms: the first read is about then, not at TTFT
    assert s.first_byte_ns < 1000 * MS  # the role chunk is due at 5 ms; a busy machine only delays it
    # TTFT is the content at 500 ms (plus loopback/scheduling slack < 50 ms), not ~5 ms
    assert 500 * MS <= s.first_token_ns < 1500 * MS  # due at 500 ms: never sooner, late only by load
    assert s.n_token_events == 3 and s.output_tokens == 3


async def test_e2e_only_done_and_only_usage_are_empty_output(server):
    s, _ = await drive(_wl(server, "only-done"))
    assert (s.outcome, s.first_token_ns, s.usage_present) == ("empty_output", None, False)
    s, _ = await drive(_wl(server, "only-usage"))
    assert (s.outcome, s.first_token_ns, s.output_tokens) == ("empty_output", None, 0)


async def test_e2e_reasoning_then_content(server):
    s, p = await drive(_wl(server, "reasoning"))
    assert s.n_token_events == 52  # 50 reasoning + 2 content chunks
    assert s.first_token_ns < s.first_content_ns  # reasoning first
    assert s.first_content_ns == s.token_event_ns[50]  # the 51st event is the first content
    assert s.reasoning_tokens == 50 and s.output_tokens == 52
    assert p.text == "tok tok "


async def test_e2e_four_tokens_per_chunk_every_40ms(server):
    s, _ = await drive(_wl(server, "4-per-chunk"))
    assert s.n_token_events == 10 and len(s.token_event_ns) == 10
    assert s.output_tokens == 40  # 4 x 10 chunks
    mean_gap_ms = (s.token_event_ns[-1] - s.token_event_ns[0]) / 9 / MS
    assert 30.0 <= mean_gap_ms <= 100.0  # 9 scripted gaps of 40 ms, deadline-paced (margins: a busy machine)


async def test_e2e_usage_omitted_is_null_with_max_tokens_100(server):
    s, _ = await drive(_wl(server, "no-usage", max_tokens=100))
    assert (s.outcome, s.output_tokens, s.usage_present, s.n_token_events) == ("ok", None, False, 7)
    assert server.last_body["max_tokens"] == 100
    assert server.last_body["stream_options"] == {"include_usage": True}


async def test_e2e_tool_call_with_usage_on_finish_chunk(server):
    s, _ = await drive(_wl(server, "tool"))
    # name chunk + 2 argument chunks; usage on the finish chunk counts 3 tokens
    assert (s.outcome, s.n_token_events, s.output_tokens, s.finish_reason) == ("ok", 3, 3, "tool_calls")
    assert s.first_content_ns is None


async def test_e2e_cut_stream_and_http_error(server):
    s, _ = await drive(_wl(server, "cut"))
    # role chunk + 2 content chunks, then the body ends without [DONE]
    assert (s.outcome, s.n_token_events) == ("protocol_error", 2)
    s, _ = await drive(_wl(server, "http500"))
    assert (s.outcome, s.http_status) == ("http_error", 500)
    assert "scenario status 500" in s.error


async def test_e2e_non_stream(server):
    s, p = await drive(_wl(server, "no-usage", stream=False))
    assert (s.outcome, s.first_token_ns, s.output_tokens, p.text) == ("ok", None, None, "tok " * 7)


# -- conformance: real captured streams ------------------------------------------------------------

GPT4O = REAL / "openai-gpt4o-toolcall.chunks.jsonl"
DEEPSEEK = REAL / "deepseek-v4-flash-toolcall.chunks.jsonl"

# Expected values read from the files (SOURCES.md describes them):
# gpt-4o: chunk 0 role-only (content ""), 1 "PRE", 2 "_TOOL", 3 tool name "weather"
# (arguments ""), 4 arguments "{}", 5 finish tool_calls, 6 usage-only (choices []).
# deepseek: chunk 0 role + reasoning_content "", 1-17 reasoning deltas, 18 tool name
# "weather", 19-28 argument pieces, 29 finish with usage (usage null elsewhere).
CONFORMANCE = {
    "gpt4o": dict(
        path=GPT4O,
        first=1,
        events=list(range(1, 5)),
        ttfc=1,
        prompt=58,
        output=12,
        cached=0,
        reasoning=0,
        chars=17,
        text="PRE_TOOL",
    ),
    "deepseek": dict(
        path=DEEPSEEK,
        first=1,
        events=list(range(1, 29)),
        ttfc=None,
        prompt=374,
        output=61,
        cached=256,
        reasoning=17,
        chars=116,
        text="",
    ),
}


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"real capture {path.name} absent (../shared/data/real)")


@pytest.mark.parametrize("name", list(CONFORMANCE))
def test_conformance_direct_feed(name):
    exp = CONFORMANCE[name]
    _need(exp["path"])
    lines = [ln for ln in exp["path"].read_bytes().splitlines() if ln.strip()]
    # chunk i arrives alone at i ms, so a stamp in ms is the chunk's index
    s, p = run([(i * MS, b"data: " + ln + b"\n\n") for i, ln in enumerate(lines)] + [(len(lines) * MS, DONE)])
    assert s.outcome == "ok"
    assert s.first_token_ns == exp["first"] * MS
    assert s.token_event_ns == [i * MS for i in exp["events"]]
    assert s.first_content_ns == (None if exp["ttfc"] is None else exp["ttfc"] * MS)
    assert (s.prompt_tokens, s.output_tokens, s.cached_tokens, s.reasoning_tokens) == (
        exp["prompt"],
        exp["output"],
        exp["cached"],
        exp["reasoning"],
    )
    assert (s.finish_reason, s.output_chars, p.text) == ("tool_calls", exp["chars"], exp["text"])


@pytest.mark.parametrize("name", list(CONFORMANCE))
async def test_conformance_through_scenario_server(name):
    exp = CONFORMANCE[name]
    _need(exp["path"])
    delay_ms = 20
    async with ScenarioServer(Scenario(replay=str(exp["path"]), replay_delay_ms=delay_ms)) as srv:
        s, p = await drive(OpenAIChatWorkload(srv.chat_url, "m", StaticDataset(["hi"])))
    assert s.outcome == "ok"
    # chunk i is sent i * 20 ms after the request arrives, never earlier: token event k
    # (chunk exp["events"][k]) arrives no sooner after the send (stamps count from it);
    # a busy machine may only delay it (no upper bound but order)
    assert len(s.token_event_ns) == len(exp["events"]) and s.token_event_ns == sorted(s.token_event_ns)
    assert all(t - s.sent_ns >= i * delay_ms * MS for t, i in zip(s.token_event_ns, exp["events"], strict=False))
    assert (s.output_tokens, s.finish_reason, p.text) == (exp["output"], "tool_calls", exp["text"])


def test_running_usage_on_each_chunk_states_the_tokens_of_each_event():
    # vLLM continuous_usage_stats: the role chunk (0), a bundled first chunk of 3 tokens,
    # then one token per chunk; the final usage chunk repeats the total
    run_usage = lambda n: {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}  # noqa: E731
    reads = [
        (1 * MS, chunk({"role": "assistant", "content": ""}, usage=run_usage(0))),
        (10 * MS, chunk({"content": "a b c"}, usage=run_usage(3))),
        (20 * MS, chunk({"content": " d"}, usage=run_usage(4))),
        (
            30 * MS,
            chunk({"content": " e"}, usage=run_usage(5))
            + chunk({}, "stop", usage=run_usage(5))
            + chunk(choices=[], usage=run_usage(5))
            + DONE,
        ),
    ]
    s, _ = run(reads)
    assert (s.token_event_ns, s.token_event_tokens, s.output_tokens) == ([10 * MS, 20 * MS, 30 * MS], [3, 1, 1], 5)


def test_usage_on_the_last_content_chunk_only_states_no_event_count():
    reads = [
        (10 * MS, chunk({"content": "a"})),
        (20 * MS, chunk({"content": "b"})),
        (30 * MS, chunk({"content": "c"}, "stop", usage={"prompt_tokens": 1, "completion_tokens": 3}) + DONE),
    ]
    s, _ = run(reads)
    assert s.token_event_tokens == [None, None, None] and s.output_tokens == 3
