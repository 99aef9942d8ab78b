"""The scenario server: scenario choice, pacing without drift, failures, framing, CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from benchmaker.engine.selfcheck import LoopLagMonitor
from benchmaker.testing import Scenario, ScenarioServer
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from tests.workloads._drive import drive

MS = 1_000_000
ROOT = Path(__file__).resolve().parents[2]


def _wl(url: str, model: str = "m", **kw) -> OpenAIChatWorkload:
    return OpenAIChatWorkload(url, model, StaticDataset(["hi"]), **kw)


async def test_pacing_uses_absolute_deadlines():
    # 100 chunks 5 ms apart: the last is due at 495 ms after the first. Relative sleeps
    # would add each sleep's overshoot (~0.1-1 ms x 99); deadlines keep the total.
    # Server and client share this event loop: LoopLagMonitor measures how long the host
    # held it up (0-1 ms idle; hundreds of ms on a busy host), which no pacing can undo.
    lag = LoopLagMonitor(interval_s=0.005)
    lag.start()
    async with ScenarioServer(Scenario(content_chunks=100, itl_ms=5, ttft_ms=0)) as srv:
        s, _ = await drive(_wl(srv.chat_url))
    await lag.stop()
    last_ms = s.token_event_ns[-1] / MS  # from the send (drive stamps sent_ns = 0)
    assert s.n_token_events == 100
    # due at 495 ms; event-loop timers may fire up to 1 ms early (ms-granular timers), hence
    # 494. Late by at most 15 ms beyond twice the longest hold-up of the loop: the hold-up
    # itself, then the chunks that fell due during it, written and read on a CPU as starved
    # as it was (a hog on every core: 555.7 ms at a longest hold-up of 38.6 ms). 99 relative
    # sleeps pile up their overshoots even on an idle loop, absolute deadlines do not.
    assert 494.0 <= last_ms < 510.0 + 2 * (lag.stats()["max"] or 0.0), (last_ms, lag.stats())


async def test_itl_list_sets_each_gap():
    async with ScenarioServer(Scenario(content_chunks=3, ttft_ms=50, itl_ms=(300, 20))) as srv:
        s, _ = await drive(_wl(srv.chat_url))
    t = [x / MS for x in s.token_event_ns]
    # chunks due at 50, 350 and 370 ms (gaps 300 then 20): never early (timers may fire up
    # to 1 ms early), at most 200 ms late (a busy host's slack), which still tells the list
    # from one gap for all (300, 300: the last at 650 ms) or the list reversed (first gap 20)
    assert 49 <= t[0] < 250 and 349 <= t[1] < 550 and 369 <= t[2] < 570


async def test_scenario_by_header_by_model_and_unknown_header():
    named = {"slow": Scenario(ttft_ms=200, content_chunks=1), "two": Scenario(content_chunks=2)}
    async with ScenarioServer(Scenario(content_chunks=5), named) as srv:
        s, _ = await drive(_wl(srv.chat_url, "two"))
        assert s.n_token_events == 2  # chosen by model name
        s, _ = await drive(_wl(srv.chat_url, "two", headers={"x-scenario": "slow"}))
        assert s.n_token_events == 1 and s.first_token_ns >= 200 * MS  # header wins
        s, _ = await drive(_wl(srv.chat_url, "other"))
        assert s.n_token_events == 5  # default
        s, _ = await drive(_wl(srv.chat_url, headers={"x-scenario": "nope"}))
        assert (s.outcome, s.http_status) == ("http_error", 400)
        assert "unknown x-scenario 'nope'" in s.error
        assert srv.n_requests == 4


async def test_abort_truncation_is_a_transport_failure():
    async with ScenarioServer(Scenario(truncate_after=2, truncate_mode="abort")) as srv:
        s, _ = await drive(_wl(srv.chat_url))
    assert s.outcome == "transport_error"
    assert "ClientPayloadError" in s.error


async def test_error_event_after_n_chunks():
    async with ScenarioServer(Scenario(error_after=3)) as srv:
        s, _ = await drive(_wl(srv.chat_url))
    # role + 2 content chunks, then {"error": ...}
    assert (s.outcome, s.error, s.n_token_events) == ("protocol_error", "error in stream: scenario stream error", 2)


@pytest.mark.parametrize("line_ending", ["lf", "crlf", "cr"])
async def test_framing_options_give_the_same_counts(line_ending):
    sc = Scenario(content_chunks=4, itl_ms=2, line_ending=line_ending, keepalive_comments=True, usage="finish")
    async with ScenarioServer(sc) as srv:
        s, p = await drive(_wl(srv.chat_url))
    assert (s.outcome, s.n_token_events, s.output_tokens, p.text) == ("ok", 4, 4, "tok " * 4)


async def test_non_stream_total_latency_and_error_body():
    named = {"e": Scenario(status=429, error_body="slow down", latency_ms=30)}
    async with ScenarioServer(Scenario(latency_ms=120, content_chunks=3), named) as srv:
        s, p = await drive(_wl(srv.chat_url, stream=False))
        assert s.outcome == "ok" and p.text == "tok tok tok "
        assert 120 * MS <= s.end_ns < 320 * MS  # scripted total latency 120 ms (+ a busy host's slack)
        s, _ = await drive(_wl(srv.chat_url, "e"))
        assert (s.http_status, s.error) == (429, "slow down")
        assert s.end_ns >= 30 * MS


async def test_health_and_models():
    async with ScenarioServer(Scenario(), {"a": Scenario()}) as srv, aiohttp.ClientSession() as sess:
        async with sess.get(srv.url + "/health") as r:
            assert (r.status, await r.text()) == (200, "ok")
        async with sess.get(srv.url + "/v1/models") as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["scenario", "a"]


async def test_cli_prints_url_and_serves():
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmaker.testing.scenario_server",
        "--port",
        "0",
        "--scenario",
        json.dumps({"content_chunks": 3}),
        "--named",
        'x={"content_chunks": 1}',
        stdout=asyncio.subprocess.PIPE,
        cwd=str(ROOT),
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        url = line.decode().strip()
        assert url.startswith("http://127.0.0.1:")
        s, _ = await drive(_wl(url + "/v1/chat/completions"))
        assert (s.outcome, s.n_token_events) == ("ok", 3)
        s, _ = await drive(_wl(url + "/v1/chat/completions", "x"))
        assert s.n_token_events == 1
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0


def test_cli_rejects_unknown_scenario_field():
    out = subprocess.run(
        [sys.executable, "-m", "benchmaker.testing.scenario_server", "--scenario", '{"ttft": 5}'],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=20,
    )
    assert out.returncode == 1
    assert out.stderr.strip() == "--scenario: ttft: Extra inputs are not permitted (got 5)"


def test_testing_package_exports():
    import benchmaker.testing as testing

    assert testing.__all__ == sorted(testing.__all__)
    assert [getattr(testing, n).__name__ for n in testing.__all__] == testing.__all__
