"""Latency models over real HTTP: the server runs in its own process
(start_replay_server), so client and server timers do not share a GIL.

Tolerance: events must never arrive before their deadline (the client clock starts
before the request is sent, the server's after it has read the body, so arrival >=
deadline is exact), and at most _LATE_MS after it. Loopback adds well under 1 ms and
an asyncio timer fires within ~1 ms of its deadline on an idle host; a busy one is what
_LATE_MS = 140 is for (2 cores at load average 13, two CPU hogs: events 76-85 ms late,
tests/busy.sh). It stays below the 150 ms TTFT it checks, so a server that ignored TTFT
(lower bound), paced relative to the previous event (drift: ~440 ms where 199.5 ms is
due, see the 0.5 ms-ITL test), or doubled a delay (150 ms late) would fail.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import orjson

from benchmaker.replay_server.latency import regex_split
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.trajectory import Response, Timing, Trajectory, Turn, match_key_for
from tests.replay.test_server_fixtures import (
    make_trajectory,
    reassemble,
    request_messages,
    source,
    write_store,
)

_LATE_MS = 140.0


def _timed_stream(url: str, messages: list) -> tuple[list[tuple[float, bytes]], float]:
    """POST a streaming request; return [(arrival ms since send, event payload)] and
    the ms at which the response headers arrived."""
    body = orjson.dumps({"messages": messages, "stream": True})
    events: list[tuple[float, bytes]] = []
    buf = b""
    with httpx.Client(timeout=10) as client:
        t_send = time.perf_counter()
        with client.stream("POST", url + "/v1/chat/completions", content=body) as r:
            headers_ms = (time.perf_counter() - t_send) * 1000
            assert r.status_code == 200
            for data in r.iter_raw():
                now_ms = (time.perf_counter() - t_send) * 1000
                buf += data
                *complete, buf = buf.split(b"\n\n")
                events.extend((now_ms, e[len(b"data: ") :]) for e in complete)
    assert buf == b""
    return events, headers_ms


def _content_text(n_tokens: int) -> str:
    text = " word" * n_tokens  # regex_split: one token per " word"
    assert len(regex_split(text)) == n_tokens
    return text


def _single_turn_store(tmp_path: Path, content: str, timing: Timing | None = None) -> tuple[Path, Trajectory]:
    first_user = "task_id: timed\n"
    traj = Trajectory(
        trajectory_id="timed",
        source=source(),
        match_key=match_key_for(first_user),
        first_user=first_user,
        turns=[Turn(index=0, response=Response(content=content), timing=timing)],
    )
    return write_store(tmp_path / "t.jsonl", [traj]), traj


def test_fixed_ttft_and_itl(tmp_path):
    n = 20
    path, traj = _single_turn_store(tmp_path, _content_text(n))
    with start_replay_server(path, latency="fixed:150:10") as srv:
        events, headers_ms = _timed_stream(srv.url, request_messages(traj, 0))
    assert headers_ms < 150  # headers go out at once; only the tokens wait
    token_events = [(t, e) for t, e in events if b'"content":" word"' in e]
    assert len(token_events) == n
    for i, (arrival_ms, _) in enumerate(token_events):
        deadline_ms = 150 + 10 * i  # fixed:150:10 -> event i at TTFT + i * ITL
        assert deadline_ms <= arrival_ms <= deadline_ms + _LATE_MS, (i, arrival_ms)
    assert reassemble([e for _, e in events])["content"] == traj.turns[0].response.content


def test_fixed_pacing_sub_ms_itl_does_not_drift(tmp_path):
    # 400 events at 0.5 ms ITL: event i due at 0.5 * i ms, the last at 199.5 ms. Sleeping
    # 0.5 ms after each send instead of to absolute deadlines ends far from that both
    # ways: uvloop rounds a 0.5 ms timer to 0 (all at once, ~0 ms), the stock asyncio
    # loop rounds epoll waits up to 1 ms (~440 ms).
    n = 400
    path, traj = _single_turn_store(tmp_path, _content_text(n))
    with start_replay_server(path, latency="fixed:0:0.5") as srv:
        events, _ = _timed_stream(srv.url, request_messages(traj, 0))
    token_events = [t for t, e in events if b'"content":" word"' in e]
    assert len(token_events) == n
    for i, arrival_ms in enumerate(token_events):
        assert arrival_ms >= 0.5 * i, (i, arrival_ms)  # never before its deadline
    assert 199.5 <= token_events[-1] <= 199.5 + _LATE_MS, token_events[-1]
    # Mean ITL over the stream (what a client reports), (last - first) / (n - 1), with
    # first and last each up to _LATE_MS late: within 140 / 399 = 0.35 ms of 0.5 ms
    # (either drift above gives 0 or 1.1 ms).
    mean_itl_ms = (token_events[-1] - token_events[0]) / (n - 1)
    assert abs(mean_itl_ms - 0.5) <= _LATE_MS / (n - 1), mean_itl_ms


def test_recorded_timing_and_non_streaming_wait(tmp_path):
    n = 11
    # Recorded TTFT 100 ms, duration 1,000 ms: event 0 at 100, event 10 at 1,000, 90 ms apart.
    path, traj = _single_turn_store(tmp_path, _content_text(n), Timing(ttft_ms=100, duration_ms=1000))
    with start_replay_server(path, latency="recorded") as srv:
        events, _ = _timed_stream(srv.url, request_messages(traj, 0))
        token_events = [t for t, e in events if b'"content":" word"' in e]
        t_send = time.perf_counter()
        r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": request_messages(traj, 0)}, timeout=10)
        non_stream_ms = (time.perf_counter() - t_send) * 1000
    assert len(token_events) == n
    for i, arrival_ms in enumerate(token_events):
        deadline_ms = 100 + 90 * i
        assert deadline_ms <= arrival_ms <= deadline_ms + _LATE_MS, (i, arrival_ms)
    # The non-streaming body goes out with the last event: at 1,000 ms (+ a new client's
    # connection setup, 200 ms on a busy host; a body held for the duration twice: 2,000 ms)
    assert r.status_code == 200
    assert 1000 <= non_stream_ms <= 1000 + _LATE_MS + 200


def test_recorded_without_timing_is_instant(tmp_path):
    path = write_store(tmp_path / "t.jsonl", [make_trajectory("fast", 2)])
    traj = make_trajectory("fast", 2)
    with start_replay_server(path, latency="recorded") as srv:
        events, _ = _timed_stream(srv.url, request_messages(traj, 0))
    # No recorded timing: every event is due at 0 ms; only loopback and parsing remain.
    assert events[-1][0] < _LATE_MS
    assert events[-1][1] == b"[DONE]"
