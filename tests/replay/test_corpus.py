"""Conformance corpus (tests/data/corpus/, origins in tests/data/SOURCES.md): every public
recording converts with the values its file holds, the corpus converts as a directory
with no unreadable file, and each trajectory replays through the real replay server on
127.0.0.1 with 0 misses. On the real pi session (../shared/data/real) the request bytes
of every replayed turn track the recorded prompt tokens."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.convert import convert_paths, detect_format, iter_trajectories, read_trajectories
from tests.replay.test_server_fixtures import running_server

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"

# file -> (format, turns, tool calls, observations, task id, per-turn models, exit status)
EXPECTED = {
    "mini-swe-agent-2.3-toolcall.traj.json": (
        "mini-swe-agent",
        3,
        3,
        2,
        "astropy__astropy-12907",
        ["deepseek-v4-flash"] * 3,
        "Submitted",
    ),
    "mini-swe-agent-local.traj.json": ("mini-swe-agent", 2, 0, 2, "mini-swe-agent-local", [None, None], "Submitted"),
    # two agent messages without a model response, then the finish call (gpt-4o)
    "openhands-basic-interactions.json": ("openhands", 3, 1, 0, None, [None, None, "gpt-4o-2024-08-06"], None),
    "pi-session-v1-opus-head.jsonl": ("pi-session", 1, 2, 1, None, ["claude-opus-4-5"], None),
    "swe-agent-1x-function-calling.traj": ("swe-agent", 5, 5, 5, "swe-agent-1x-function-calling", [None] * 5, None),
    "swe-agent-enigma-ctf-networking_1.traj": (
        "swe-agent",
        3,
        0,
        2,
        "swe-agent-enigma-ctf-networking_1",
        [None] * 3,
        "submitted",
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_public_recording_converts(name):
    fmt, n_turns, n_calls, n_obs, task_id, models, exit_status = EXPECTED[name]
    path = CORPUS / name
    assert detect_format(path) == fmt
    (t,) = list(iter_trajectories(path))
    assert len(t.turns) == n_turns
    assert sum(len(x.response.tool_calls) for x in t.turns) == n_calls
    assert sum(len(x.observations) for x in t.turns) == n_obs
    assert t.task_id == task_id
    assert [x.model for x in t.turns] == models
    assert t.outcome.exit_status == exit_status


def test_recorded_values_are_kept_exactly():
    (mini,) = list(iter_trajectories(CORPUS / "mini-swe-agent-2.3-toolcall.traj.json"))
    # extra.response.usage of the first call: 1689 prompt, 76 completion, 1664 cached
    u = mini.turns[0].usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (1689, 76, 1664)
    assert mini.turns[0].response.tool_calls[0].arguments == {
        "command": 'cd /testbed && find . -path "*/separable*" -type f | head -20'
    }
    assert mini.outcome.patch.startswith("--- a/astropy/modeling/separable.py")  # info.submission wins over exit
    (swe,) = list(iter_trajectories(CORPUS / "swe-agent-1x-function-calling.traj"))
    assert swe.turns[2].response.tool_calls[0].arguments_raw == (
        '{"search":"def division(a: float, b: float) -> float","replace":"def division(a: float, b: float) -> float:"}'
    )
    (ctf,) = list(iter_trajectories(CORPUS / "swe-agent-enigma-ctf-networking_1.traj"))
    assert ctf.outcome.patch == "flag{d316759c281bf925d600be698a4973d5}"
    (oh,) = list(iter_trajectories(CORPUS / "openhands-basic-interactions.json"))
    assert oh.first_user == "what's 1+1?" and oh.turns[0].user_after == ["No, I mean by Goldbach's conjecture!"]
    assert oh.turns[2].usage.cached_tokens == 2304


def test_corpus_directory_converts_fully_and_replays_with_zero_misses(tmp_path):
    out = tmp_path / "trajectories.jsonl"
    report = convert_paths([CORPUS], out)
    assert [f.error for f in report.files] == [None] * len(EXPECTED)
    assert (report.trajectories, report.turns) == (6, 3 + 2 + 3 + 1 + 5 + 3)
    trajs = list(read_trajectories(out))
    served = 0
    with running_server(out) as url, httpx.Client() as client:
        for t in trajs:
            received: list[dict] = []
            for k, turn in enumerate(t.turns):
                for stream in (False, True):
                    body = {
                        "model": "m",
                        "messages": request_messages(t, k, responses_so_far=received),
                        "stream": stream,
                    }
                    r = client.post(url + "/v1/chat/completions", json=body)
                    assert r.status_code == 200, (t.source.path, k, r.text)
                    assert r.headers["x-replay-turn"] == str(k)
                    served += 1
                    if not stream:
                        msg = r.json()
                        assert msg["model"] == (turn.model or t.model or "replay")
                        assert msg["choices"][0]["message"]["content"] == turn.response.content
                received.append(msg["choices"][0]["message"])  # what the agent appends
        stats = client.get(url + "/stats").json()
    assert stats["misses"]["total"] == 0
    assert stats["served"] == served == 2 * 17


def test_real_pi_session_request_bytes_track_recorded_prompt_tokens():
    path = REAL / "pi-session-v1-large.jsonl"
    if not path.exists():
        pytest.skip("real recording pi-session-v1-large.jsonl not present under ../shared/data/real")
    (t,) = list(iter_trajectories(path))
    ratios = []
    previous = None
    for k, turn in enumerate(t.turns):
        size = len(json.dumps(request_messages(t, k)))
        tokens = turn.usage.prompt_tokens if turn.usage else None
        if tokens and tokens >= 10_000:  # below that pi's system prompt (not in the file) dominates
            ratios.append(size / tokens)
        if previous and tokens and previous[1] and tokens < 0.8 * previous[1]:
            assert size < previous[0]  # a drop in context is a drop in bytes sent, never a jump up
        previous = (size, tokens)
    # 438 turns with >= 10k prompt tokens: 2.80 to 3.96 bytes of JSON per recorded token
    assert len(ratios) == 438
    assert 2.5 < min(ratios) and max(ratios) < 4.5
