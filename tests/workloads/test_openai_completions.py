"""OpenAI completions workload: body, `choices[].text` tokens, e2e via the scenario server."""

from __future__ import annotations

import orjson

from benchmaker.engine.records import Sample
from benchmaker.testing import Scenario, ScenarioServer
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.openai_completions import OpenAICompletionsParser, OpenAICompletionsWorkload
from tests.workloads._drive import drive

MS = 1_000_000


def test_body_uses_prompt_from_messages_text():
    ds = StaticDataset([[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]])
    wl = OpenAICompletionsWorkload("http://h/v1/completions", "m", ds, max_tokens=8)
    assert orjson.loads(wl.request(0).body) == {
        "model": "m",
        "prompt": "Be brief.\n2+2?",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 8,
    }


def test_text_chunks_are_tokens_and_content():
    def c(text, finish=None):
        return b"data: " + orjson.dumps({"choices": [{"index": 0, "text": text, "finish_reason": finish}]}) + b"\n\n"

    p = OpenAICompletionsParser()
    s = Sample(run_id="t", seq=0)
    p.feed(c(""), 1 * MS, s)  # empty text is not a token
    p.feed(c("4"), 9 * MS, s)
    p.feed(
        c("", "stop")
        + b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\ndata: [DONE]\n\n',
        10 * MS,
        s,
    )
    p.finish(s)
    assert (s.first_token_ns, s.first_content_ns, s.token_event_ns) == (9 * MS, 9 * MS, [9 * MS])
    assert (s.outcome, s.output_tokens, s.finish_reason, p.text) == ("ok", 1, "stop", "4")


async def test_e2e_stream_and_non_stream():
    async with ScenarioServer(Scenario(content_chunks=5, tokens_per_chunk=2, ttft_ms=30)) as srv:
        wl = OpenAICompletionsWorkload(srv.completions_url, "m", StaticDataset(["hi"]))
        s, p = await drive(wl)
        assert (s.outcome, s.n_token_events, s.output_tokens, p.text) == ("ok", 5, 10, "tok " * 10)
        assert s.first_token_ns >= 30 * MS  # scripted first chunk at 30 ms
        wl = OpenAICompletionsWorkload(srv.completions_url, "m", StaticDataset(["hi"]), stream=False)
        s, p = await drive(wl)
        assert (s.outcome, s.first_token_ns, s.output_tokens, p.text) == ("ok", None, 10, "tok " * 10)
