"""One exchange: a stalled stream, served on 127.0.0.1, ends with the same outcome and the
same timing fields through the engine's runner and through the agent's model client
(both on benchmaker.engine.request), and a consumer's pause is not waiting."""

from __future__ import annotations

import asyncio

import orjson

from benchmaker.agent.model_client import ModelClient
from benchmaker.engine.config import BenchConfig, Timeouts
from benchmaker.engine.runner import BenchRunner
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from tests.replay.test_harness_client import ScriptServer, _chunk

IDLE_S = 0.4
# margin for a deadline to fire past its time on a busy 2-core host: one check period
# (20 ms) plus the loop's lag behind a neighbour's load
LATE_S = 0.5
STALL = [
    (0.0, _chunk({"role": "assistant"})),
    (0.0, _chunk({"content": "a"})),
    (0.05, _chunk({"content": "b"})),
    (5.0, _chunk({"content": "never"})),  # well past the holds, IDLE_S and LATE_S: the client has ended
]
_COMPARED = (
    "outcome",
    "timeout_kind",
    "error",
    "http_status",
    "n_token_events",
    "first_token_ns",
    "first_content_ns",
    "first_byte_ns",
    "end_ns",
    "bytes_received",
)


def _view(sample: dict) -> dict:
    """The compared fields, stamps as present or not, and the idle gap: end - last token event (s)."""
    v = {k: (sample[k] is not None if k.endswith("_ns") else sample[k]) for k in _COMPARED}
    v["idle_gap_s"] = (sample["end_ns"] - sample["token_event_ns"][-1]) / 1e9
    return v


async def _through_the_runner(url: str, tmp_path) -> dict:
    cfg = BenchConfig(
        load="closed:1",
        max_requests=1,
        out_dir=tmp_path,
        timeouts=Timeouts(total_s=None, idle_s=IDLE_S),
        checks={"max_error_rate": 1.0},
    )
    wl = OpenAIChatWorkload(url + "/v1/chat/completions", "m", StaticDataset(["hi"]), max_tokens=8)
    result = await BenchRunner(cfg, workload=wl).run()
    (line,) = result.samples_path.read_bytes().splitlines()
    return orjson.loads(line)


async def test_a_stalled_stream_ends_alike_through_the_runner_and_the_model_client(tmp_path):
    async with ScriptServer(STALL) as srv:
        runner = _view(await _through_the_runner(srv.url, tmp_path))
        async with ModelClient(srv.url, timeout_s=None, idle_timeout_s=IDLE_S) as client:
            r = await client.chat([{"role": "user", "content": "hi"}])
        client_view = _view(orjson.loads(orjson.dumps(r.sample)))
    gaps = {"runner": runner.pop("idle_gap_s"), "client": client_view.pop("idle_gap_s")}
    assert (
        runner
        == client_view
        == {
            "outcome": "timeout",
            "timeout_kind": "idle",
            "error": None,
            "http_status": 200,
            "n_token_events": 2,
            "first_token_ns": True,
            "first_content_ns": True,
            "first_byte_ns": True,
            "end_ns": True,
            "bytes_received": runner["bytes_received"],
        }
    )
    for where, gap in gaps.items():  # the end: the idle deadline after the last read, by one rule
        assert IDLE_S <= gap < IDLE_S + LATE_S, (where, gaps)


async def test_a_consumer_that_holds_each_read_does_not_wait_and_meets_the_idle_deadline_later():
    hold_s = 0.6  # longer than the idle deadline, outside the exchange's waits
    async with ScriptServer(STALL) as srv:
        async with ModelClient(srv.url, timeout_s=None, idle_timeout_s=IDLE_S) as client:
            s = client.stream([{"role": "user", "content": "hi"}])
            async for _data in s:
                await asyncio.sleep(hold_s)
    r = s.result
    assert (r.outcome, r.timeout_kind, r.content) == ("timeout", "idle", "ab")
    # the last read's hold, then the full idle deadline of waiting
    gap_s = (r.sample.end_ns - r.sample.token_event_ns[-1]) / 1e9
    assert hold_s + IDLE_S <= gap_s < hold_s + IDLE_S + LATE_S
    assert r.model_time_ns < r.sample.end_ns - r.sample.sent_ns - hold_s * 1e9
