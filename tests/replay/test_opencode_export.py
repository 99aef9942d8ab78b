"""benchmaker.trajectories.converters.opencode: a session export the real opencode wrote
(tests/data/written/SOURCES.md), and a hand-written one with what that run did not have
(reasoning, a failed tool, cached tokens, a failed call), both detected by content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.converters import detect_bytes
from benchmaker.trajectories.errors import ConvertError

WRITTEN = Path(__file__).resolve().parents[1] / "data" / "written" / "opencode-1.18-export.json"
TASK = (
    '"`wordstats.word_count` miscounts: it returns 1 for an empty string and counts the empty\n'
    'strings between repeated spaces as words. Make it count whitespace-separated words.\ntask_id: mswea-task"'
)


def test_the_real_export_converts_to_one_turn_per_model_call():
    assert detect_bytes(WRITTEN.read_bytes()) == "opencode"
    (t,) = list(iter_trajectories(WRITTEN))
    assert (t.source.format, t.first_user, t.match_key, t.model, t.system) == (
        "opencode",
        TASK,
        'task:mswea-task"',  # opencode's quotes are part of what the model got
        "fake-model",
        None,
    )
    assert t.skipped == {"arguments_raw_synthesized": 4}
    assert [tc.arguments_raw for turn in t.turns for tc in turn.response.tool_calls] == [
        '{"command":"cat wordstats/counts.py"}',
        '{"command":"python3 run_tests.py"}',
        '{"command":"sed -i \'s/text.split(\\" \\")/text.split()/\' wordstats/counts.py"}',
        '{"command":"python3 run_tests.py"}',
    ]
    assert [turn.response.finish_reason for turn in t.turns] == ["tool_calls"] * 4 + ["stop"]
    assert t.turns[-1].response.content == "The tests pass: word_count now counts whitespace-separated words."
    assert [[o.tool_call_id for o in turn.observations] for turn in t.turns] == [
        ["call_0"],
        ["call_1"],
        ["call_2"],
        ["call_3"],
        [],
    ]
    assert t.turns[1].observations[0].content.endswith("passed 1 failed 2\n")
    assert [(u.prompt_tokens, u.completion_tokens, u.total_tokens) for u in (turn.usage for turn in t.turns) if u] == [
        (2435, 19, 2454),
        (2473, 18, 2491),
        (2538, 37, 2575),
        (2559, 15, 2574),
        (2621, 16, 2637),
    ]
    first = t.turns[0].timing
    assert first is not None
    assert (first.started_at, first.duration_ms) == ("2026-12-03T21:01:52.980000Z", 4137.0)


def _export(messages: list[dict]) -> dict:
    return {"info": {"id": "ses_1", "directory": "/w", "version": "1.18.33"}, "messages": messages}


def _user(text: str) -> dict:
    return {"info": {"role": "user", "id": "u"}, "parts": [{"type": "text", "text": text}]}


def test_reasoning_failed_tools_cache_tokens_and_failed_calls(tmp_path: Path):
    tokens = {"total": 1300, "input": 200, "output": 30, "reasoning": 20, "cache": {"read": 1000, "write": 50}}
    doc = _export(
        [
            _user("task_id: t1\nfix it"),
            {
                "info": {"role": "assistant", "modelID": "m1", "time": {"created": 1000}, "tokens": tokens},
                "parts": [
                    {"type": "step-start"},
                    {"type": "reasoning", "text": "Think.", "time": {"start": 1100, "end": 1200}},
                    {
                        "type": "tool",
                        "tool": "bash",
                        "callID": "c1",
                        "state": {"status": "error", "input": {"command": "false"}, "error": "exit 1"},
                    },
                    {"type": "step-finish", "reason": "tool-calls", "tokens": tokens},
                    {"type": "step-start"},
                    {"type": "text", "text": "Done.", "time": {"start": 1500, "end": 1600}},
                    {"type": "step-finish", "reason": "stop"},
                ],
            },
            {"info": {"role": "assistant", "error": {"name": "APIError"}}, "parts": []},
        ]
    )
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    assert detect_bytes(path.read_bytes()) == "opencode"
    (t,) = list(iter_trajectories(path))
    first, second = t.turns
    assert (first.response.reasoning, first.response.content, first.response.finish_reason) == (
        "Think.",
        None,
        "tool_calls",
    )
    assert [(o.content, o.is_error) for o in first.observations] == [("exit 1", True)]
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens, first.usage.cached_tokens) == (1250, 50, 1000)
    assert (first.usage.reasoning_tokens, first.usage.total_tokens) == (20, 1300)
    assert (second.response.content, second.response.finish_reason) == ("Done.", "stop")
    assert second.usage is not None and second.usage.prompt_tokens == 1250  # the message's tokens
    assert second.timing is not None and second.timing.duration_ms == 100.0  # from the step's own first part
    assert t.skipped == {"arguments_raw_synthesized": 1, "failed_call": 1}


def test_an_export_without_a_model_call_is_refused(tmp_path: Path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps(_export([_user("hi")])))
    with pytest.raises(ConvertError, match="no assistant turn"):
        list(iter_trajectories(path))
