"""pi session conversion shortcuts keep the old counts and models:
`arguments_raw_synthesized` counted once per tool call (also for the calls before a
malformed one in lenient mode), pi_usage's unvalidated Usage, the unvalidated models'
own fields sets."""

from __future__ import annotations

import orjson

from benchmaker.trajectories.converters.pi_session import convert, pi_usage
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.trajectory import Usage


def _session(*messages: dict) -> FileContext:
    lines = [
        {"type": "session", "id": "s", "timestamp": "2025-11-20T23:33:50.805Z", "cwd": "/"},
        {
            "type": "message",
            "timestamp": "2025-11-20T23:33:51.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "task"}], "timestamp": 1763681630000},
        },
    ]
    lines += [{"type": "message", "timestamp": "2025-11-20T23:34:00.500Z", "message": m} for m in messages]
    data = b"".join(orjson.dumps(x) + b"\n" for x in lines)
    return FileContext("s.jsonl", "0" * 64, data, lenient=True)


def _assistant(*parts: dict) -> dict:
    return {
        "role": "assistant",
        "content": list(parts),
        "stopReason": "toolUse",
        "timestamp": 1763681635000,
        "usage": {"input": 3, "output": 5, "cacheRead": 7, "cacheWrite": 1},
    }


CALL = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}


def test_each_tool_call_is_counted_and_a_bad_one_keeps_the_count_of_those_before() -> None:
    traj = next(
        convert(
            _session(
                _assistant(CALL, {**CALL, "id": "c2"}),
                _assistant(CALL, {"type": "toolCall", "name": "bash"}),  # no id: a bad entry
                _assistant({"type": "text", "text": "done"}),
            )
        )
    )
    assert len(traj.turns) == 2
    assert traj.skipped == {"arguments_raw_synthesized": 3, "bad_entry": 1}
    assert [c.arguments_raw for c in traj.turns[0].response.tool_calls] == ['{"command": "ls"}'] * 2
    assert traj.turns[0].timing.duration_ms == 5500.0
    assert traj.turns[0].timing.started_at == "2025-11-20T23:33:55Z"


def test_pi_usage_gives_the_validated_usage() -> None:
    for usage in (
        {"input": 3, "output": 5, "cacheRead": 7, "cacheWrite": 1},
        {"input": 3, "output": 5, "totalTokens": 99},
        {"output": 5},
        {"input": 0, "output": 0},
    ):
        got = pi_usage(usage)
        assert type(got) is Usage
        assert got == Usage.model_validate(got.model_dump())
        assert got.model_dump_json() == Usage.model_validate(got.model_dump()).model_dump_json()
    assert pi_usage({"input": 3, "output": 5, "cacheRead": 7, "cacheWrite": 1}) == Usage(
        prompt_tokens=11, completion_tokens=5, cached_tokens=7, total_tokens=16
    )
