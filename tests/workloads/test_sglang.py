"""SGLang `/generate` workload: request bodies, the cumulative-text parser's token
timeline and per-event token counts, usage and outcomes; end to end through the
scenario server's `/generate` and through the runner."""

from __future__ import annotations

import orjson
import pytest

from benchmaker.apis.sglang import SGLangParser
from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import Sample
from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.types import StreamParser, Workload
from benchmaker.testing import Scenario, ScenarioServer
from benchmaker.workloads.datasets import DatasetError, Item, StaticDataset
from benchmaker.workloads.registry import build_workload
from benchmaker.workloads.sglang import SGLangWorkload, read_input_ids
from tests.workloads._drive import drive

MS = 1_000_000  # ns per ms
DONE = b"data: [DONE]\n\n"


def ev(text=None, ct=None, finish=None, **extra) -> bytes:
    obj: dict = {}
    if text is not None:
        obj["text"] = text
    meta = {"id": "r", "finish_reason": finish, "prompt_tokens": 7, "cached_tokens": 3}
    if ct is not None:
        meta["completion_tokens"] = ct
    obj["meta_info"] = meta
    obj.update(extra)
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def run(reads, incremental=False) -> tuple[Sample, SGLangParser]:
    p = SGLangParser(stream=True, incremental=incremental)
    s = Sample(run_id="t", seq=0)
    for t, data in reads:
        p.feed(data, t, s)
    p.finish(s)
    return s, p


# -- request building -------------------------------------------------------------------------


def test_text_body_carries_sampling_params_and_meta_keeps_the_reference():
    ds = StaticDataset([Item(prompt="2+2?", reference="4"), [{"role": "user", "content": "hi"}]])
    wl = SGLangWorkload(
        "http://h/generate",
        ds,
        max_new_tokens=16,
        temperature=0.0,
        sampling_params={"top_p": 0.5, "temperature": 0.7},
        extra_body={"rid": "x"},
    )
    spec = wl.request(0)
    assert isinstance(wl, Workload) and isinstance(wl.parser(spec), StreamParser)
    assert orjson.loads(spec.body) == {
        "text": "2+2?",
        # sampling_params merged over max_new_tokens/temperature: temperature 0.7 wins
        "sampling_params": {"max_new_tokens": 16, "temperature": 0.7, "top_p": 0.5},
        "stream": True,
        "rid": "x",
    }
    assert spec.meta == {"dataset": "static", "row": 0, "reference": "4"}
    assert spec.headers["Accept"] == "text/event-stream"
    # item 1 has messages and no reference: text is the joined contents, no reference key
    assert orjson.loads(wl.request(1).body)["text"] == "hi"
    assert wl.request(1).meta == {"dataset": "static", "row": 1}


def test_input_ids_body_and_meta_cycle_through_rows():
    wl = SGLangWorkload("http://h/generate", input_ids=[[1, 2, 3], [9]], stream=False)
    assert orjson.loads(wl.request(3).body) == {"input_ids": [9], "sampling_params": {}, "stream": False}
    assert wl.request(2).meta == {"dataset": "input_ids", "row": 0, "input_tokens": 3}


def test_dataset_and_input_ids_are_exclusive_and_ids_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="exactly one"):
        SGLangWorkload("http://h/generate")
    with pytest.raises(DatasetError, match=r"input_ids\[1\]: expected a non-empty list of ints >= 0"):
        SGLangWorkload("http://h/generate", input_ids=[[1], [-2]])
    f = tmp_path / "ids.jsonl"
    f.write_text('[1, 2]\n\n{"input_ids": [3]}\n["a"]\n')
    with pytest.raises(DatasetError, match=r"ids.jsonl:4: input_ids: expected a non-empty list"):
        read_input_ids(f)
    f.write_text('[1, 2]\n\n{"input_ids": [3]}\n')
    assert read_input_ids(f) == [[1, 2], [3]]


# -- streaming parser ---------------------------------------------------------------------------


def test_cumulative_text_gives_deltas_and_token_counts_per_event():
    s, p = run(
        [
            (10 * MS, ev("", 0)),  # empty first event: not a token
            (20 * MS, ev("Hel", 1)),  # token event 1: 1 token
            (30 * MS, ev("Hel", 2) + ev("Hello", 3)),  # a partial token, then "lo": 3-1 = 2 tokens
            (40 * MS, ev("Hello world", 5)),  # 2 tokens
            (50 * MS, ev("Hello world", 6, finish={"type": "stop", "matched": 2}) + DONE),  # stop token, no text
        ]
    )
    assert p.text == "Hello world"
    assert s.outcome == "ok" and s.error is None
    assert s.first_token_ns == s.first_content_ns == 20 * MS
    assert s.token_event_ns == [20 * MS, 30 * MS, 40 * MS]
    assert s.token_event_tokens == [1, 2, 2]
    assert s.n_token_events == 3
    # usage from the last meta_info: 6 completion tokens including the stop token
    assert (s.output_tokens, s.prompt_tokens, s.cached_tokens, s.usage_present) == (6, 7, 3, True)
    assert s.finish_reason == "stop" and s.output_chars == 11


def test_missing_completion_tokens_gives_none_counts_and_no_usage():
    s, _ = run([(1, ev("a")), (2, ev("ab")), (3, ev("abc", 3)), (4, ev("abcd", 4) + DONE)])
    # first two events lack a count; the third has no previous count; the fourth: 4 - 3
    assert s.token_event_tokens == [None, None, None, 1]
    s, _ = run([(1, ev("a")), (2, ev("ab") + DONE)])
    assert s.outcome == "ok" and s.output_tokens is None and s.usage_present is False


def test_incremental_mode_appends_each_events_text():
    s, p = run([(1, ev("He", 1)), (2, ev("llo", 2, finish={"type": "length", "length": 2}) + DONE)], incremental=True)
    assert p.text == "Hello" and s.token_event_tokens == [1, 1] and s.finish_reason == "length"


def test_text_that_does_not_extend_the_previous_is_a_protocol_error():
    s, _ = run([(1, ev("He", 1)), (2, ev("llo", 2) + DONE)])
    assert s.outcome == "protocol_error"
    assert s.error.startswith("cumulative text does not extend the previous event's text after 1 token events")


@pytest.mark.parametrize(
    ("reads", "outcome", "error"),
    [
        ([(1, ev("a", 1))], "protocol_error", "stream ended before data: [DONE] after 1 token events"),
        ([(1, b'data: {"error": {"message": "boom"}}\n\n' + DONE)], "protocol_error", "error in stream: boom"),
        ([(1, b"data: {bad\n\n" + DONE)], "protocol_error", "bad JSON in data line"),
        ([(1, ev("", 1, finish={"type": "stop"}) + DONE)], "empty_output", "complete stream without generated text"),
        (
            [(1, ev("a", 1, finish={"type": "abort", "message": "too long"}) + DONE)],
            "aborted",
            "finish_reason 'abort' (class abort): the server aborted the request: too long",
        ),
        ([(1, b'data: {"text": "a"')], "protocol_error", "stream ended inside an event"),
        ([(1, b"hello")], "protocol_error", "no SSE event in body (got hello)"),
    ],
)
def test_failed_streams_get_their_outcome(reads, outcome, error):
    s, _ = run(reads)
    assert s.outcome == outcome and s.error.startswith(error), s.error


@pytest.mark.parametrize(
    ("finish", "outcome", "cls"),
    [
        ({"type": "stop", "matched": 2}, "ok", "stop"),
        ({"type": "length", "length": 8}, "ok", "length"),
        ("length", "ok", "length"),
        ({"type": "abort"}, "aborted", "abort"),
        ({"type": "eos_or_what"}, "ok", "unknown"),
    ],
)
def test_finish_reason_is_classified_like_openai(finish, outcome, cls):
    s, _ = run([(1, ev("a", 1) + ev("ab", 2, finish=finish) + DONE)])
    assert (s.outcome, s.finish_class, s.n_token_events) == (outcome, cls, 2)


@pytest.mark.parametrize("cumulative", [True, False])
def test_token_id_output_without_text_counts_by_completion_tokens(cumulative):
    # --skip-tokenizer-init: events carry output_ids and no text; ids [5], [5, 6, 7], then
    # the final event repeats the count (no new token) with the finish reason
    ids = [[5], [5, 6, 7], [5, 6, 7]] if cumulative else [[5], [6, 7], [7]]
    reads = [
        (1 * MS, ev(ct=1, output_ids=ids[0])),
        (2 * MS, ev(ct=3, output_ids=ids[1])),
        (3 * MS, ev(ct=3, output_ids=ids[2], finish={"type": "stop"}) + DONE),
    ]
    s, p = run(reads)
    assert (s.outcome, s.first_token_ns, s.token_event_ns) == ("ok", 1 * MS, [1 * MS, 2 * MS])
    assert s.token_event_tokens == [1, 2]  # 1 - 0, 3 - 1
    assert (s.output_tokens, s.output_chars, p.text, s.finish_class) == (3, 0, "", "stop")


def test_non_streamed_token_ids_are_generated_output():
    p = SGLangParser(stream=False)
    s = Sample(run_id="t", seq=0)
    p.feed(b'{"output_ids": [5, 6], "meta_info": {"completion_tokens": 2, "finish_reason": {"type": "length"}}}', 1, s)
    p.finish(s)
    assert (s.outcome, s.output_tokens, s.finish_class) == ("ok", 2, "length")


def test_non_streamed_abort_is_aborted_with_its_message():
    p = SGLangParser(stream=False)
    s = Sample(run_id="t", seq=0)
    p.feed(b'{"text": "a", "meta_info": {"finish_reason": {"type": "abort", "message": "OOM"}}}', 1, s)
    p.finish(s)
    assert (s.outcome, s.finish_class) == ("aborted", "abort")
    assert s.error == "finish_reason 'abort' (class abort): the server aborted the request: OOM"


def test_non_streamed_body_has_usage_and_no_timeline():
    p = SGLangParser(stream=False)
    s = Sample(run_id="t", seq=0)
    p.feed(b'{"text": "Paris", "meta_info": {"prompt_tokens": 5, "completion_tokens": 2, ', 1, s)
    p.feed(b'"cached_tokens": 0, "finish_reason": {"type": "length", "length": 2}}}', 2, s)
    p.finish(s)
    assert (s.outcome, p.text, s.output_tokens, s.cached_tokens, s.finish_reason) == ("ok", "Paris", 2, 0, "length")
    assert s.first_token_ns is None and s.token_event_ns is None


# -- end to end ------------------------------------------------------------------------------


async def test_scenario_server_generate_stream_end_to_end():
    sc = Scenario(ttft_ms=20, itl_ms=10, content_chunks=4, tokens_per_chunk=3, cached_tokens=2, prompt_tokens=9)
    async with ScenarioServer(sc) as server:
        wl = SGLangWorkload(server.generate_url, StaticDataset(["hi"]), max_new_tokens=12)
        s, p = await drive(wl)
        assert server.last_body == {"text": "hi", "sampling_params": {"max_new_tokens": 12}, "stream": True}
    assert s.outcome == "ok", s.error
    assert p.text == "tok " * 12  # 4 chunks x 3 words
    assert s.token_event_tokens == [3, 3, 3, 3] and s.n_token_events == 4
    assert (s.output_tokens, s.prompt_tokens, s.cached_tokens, s.finish_reason) == (12, 9, 2, "stop")
    # chunk k is due at 20 + 10 k ms and never sent sooner; a busy machine only delays it
    assert all(t >= (20 + 10 * k) * MS for k, t in enumerate(s.token_event_ns)), s.token_event_ns
    assert s.token_event_ns == sorted(s.token_event_ns) and s.token_event_ns[-1] < 2000 * MS


async def test_scenario_server_generate_whole_body():
    async with ScenarioServer(Scenario(content_chunks=2, finish_reason="length")) as server:
        s, p = await drive(SGLangWorkload(server.generate_url, StaticDataset(["hi"]), stream=False))
    assert (s.outcome, p.text, s.output_tokens, s.finish_reason) == ("ok", "tok tok ", 2, "length")


def test_runner_writes_token_counts_and_summary_tokens_per_event(tmp_path):
    async def main():
        async with ScenarioServer(Scenario(content_chunks=5, tokens_per_chunk=2, cached_tokens=4)) as server:
            wl = build_workload_from_yaml(server.generate_url)
            runner = BenchRunner(BenchConfig(load="closed:1", max_requests=3, out_dir=tmp_path), workload=wl)
            return await runner.run()

    import asyncio

    result = asyncio.run(main())
    lines = [orjson.loads(x) for x in result.samples_path.read_bytes().splitlines()]
    assert [x["token_event_tokens"] for x in lines] == [[2, 2, 2, 2, 2]] * 3
    assert [x["cached_tokens"] for x in lines] == [4, 4, 4]
    run = result.summary["run"]
    assert run["n_ok"] == 3 and run["output_tokens_total"] == 30  # 3 requests x 5 chunks x 2 tokens
    assert run["tokens_per_event"]["mean"] == 2.0 and run["cached_tokens_total"] == 12
    assert run["prefix_cache_hit_rate"] == 0.4  # 3 x 4 cached of 3 x 10 prompt tokens


def build_workload_from_yaml(url: str):
    from pydantic import TypeAdapter

    from benchmaker.workloads.registry import WorkloadSpec

    spec = TypeAdapter(WorkloadSpec).validate_python(
        {"type": "sglang", "url": url, "max_new_tokens": 10, "dataset": {"type": "static", "items": ["hi"]}}
    )
    wl = build_workload(spec)
    assert isinstance(wl, SGLangWorkload) and wl.sampling_params == {"max_new_tokens": 10}
    return wl


def test_a_count_above_max_new_tokens_is_flagged_not_summed():
    p = SGLangParser(stream=True, max_tokens=2)
    s = Sample(run_id="t", seq=0)
    for t, data in [(1, ev("a", 1)), (2, ev("ab", 2)), (3, ev("abc", 3, finish={"type": "length"}) + DONE)]:
        p.feed(data, t, s)
    p.finish(s)
    assert (s.outcome, s.output_tokens, s.token_event_tokens) == ("ok", 3, [1, 1, 1])
    assert s.usage_invalid_reason == "usage.completion_tokens 3 > the request's max_tokens 2"
    assert s.hidden_reasoning_tokens is None  # no reasoning count stated
