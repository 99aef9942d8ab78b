"""benchmaker.apis.generated: the one "model generated something" rule and finish classes."""

from __future__ import annotations

import pytest

from benchmaker.apis.generated import FINISH_FAILS, Output, finish_class, finish_error, message_output


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        ({"role": "assistant"}, Output("", 0, False)),
        ({"role": "assistant", "content": "", "refusal": None}, Output("", 0, False)),
        ({"content": None, "reasoning_content": ""}, Output("", 0, False)),
        ({"content": "Hi"}, Output("Hi", 2, False)),
        ({"content": [{"type": "text", "text": "a"}, {"type": "output_text", "text": "bc"}]}, Output("abc", 3, False)),
        ({"content": [{"type": "refusal", "refusal": "no"}]}, Output("", 2, True)),
        (
            {"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "reasoning_text", "text": "x"}]},
            Output("", 4, False, "hmmx"),
        ),  # reasoning parts: 3 + 1 chars, not content
        ({"content": [{"type": "image_url", "image_url": {"url": "u"}}, "stray", None]}, Output("", 0, False)),
        (
            {"reasoning_content": "ab", "reasoning": "c", "reasoning_text": "d", "thinking": "e"},
            Output("", 5, False, "abcde"),
        ),
        (
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "abc"},
                    {"type": "reasoning.summary", "summary": "s"},
                    {"type": "reasoning.encrypted", "data": "QUJD"},
                ]
            },
            Output("", 4, False, "abcs"),
        ),
        # OpenRouter sends the same text in `reasoning` and `reasoning_details`: counted once
        (
            {"reasoning": "abc", "reasoning_details": [{"type": "reasoning.text", "text": "abc"}]},
            Output("", 3, False, "abc"),
        ),
        ({"refusal": "I can't"}, Output("", 7, True)),
        ({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}, Output("", 3, False)),
        ({"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": ""}}]}, Output("", 0, False)),
        ({"tool_calls": [{"type": "custom", "custom": {"name": "sh", "input": "ls"}}]}, Output("", 4, False)),
        ({"function_call": {"name": "g", "arguments": "[]"}}, Output("", 3, False)),
        ({"audio": {"id": "a", "transcript": "hey"}}, Output("", 3, False)),
        ("not a dict", Output("", 0, False)),
    ],
)
def test_message_output_reads_every_generated_field(msg, expected):
    assert message_output(msg) == expected


@pytest.mark.parametrize(
    ("reason", "cls"),
    [
        ("stop", "stop"),
        ("eos_token", "stop"),
        ("stop_sequence", "stop"),
        ("end_turn", "stop"),
        ("STOP", "stop"),
        ("length", "length"),
        ("max_tokens", "length"),
        ("MAX_TOKENS", "length"),
        ("model_length", "length"),
        ("max_output_tokens", "length"),
        ("tool_calls", "tool_calls"),
        ("function_call", "tool_calls"),
        ("tool_use", "tool_calls"),
        ("content_filter", "content_filter"),
        ("SAFETY", "content_filter"),
        ("refusal", "content_filter"),
        ("abort", "abort"),
        ("error", "error"),
        ("cancelled", "cancelled"),
        ("canceled", "cancelled"),
        ("insufficient_system_resource", "abort"),
        ("failed", "error"),
        ("stop_token_hit", "unknown"),
        ("", None),
        (3, "unknown"),
        (None, None),
    ],
)
def test_finish_reasons_fall_in_one_class(reason, cls):
    assert finish_class(reason) == cls


def test_only_the_classes_that_say_the_server_gave_up_fail():
    assert tuple(FINISH_FAILS) == (
        "stop",
        "length",
        "tool_calls",
        "content_filter",
        "abort",
        "error",
        "cancelled",
        "unknown",
    )
    assert [c for c in tuple(FINISH_FAILS) if FINISH_FAILS[c]] == ["abort", "error", "cancelled"]
    assert finish_error("cancelled", "cancelled") == (
        "finish_reason 'cancelled' (class cancelled): the server cancelled the request"
    )
