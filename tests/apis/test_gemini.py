"""benchmaker.apis.gemini: a Gemini request read as chat messages, usage and errors."""

from __future__ import annotations

import orjson
import pytest

from benchmaker.apis import gemini


def test_request_messages_maps_every_part_kind():
    req = {
        "systemInstruction": {"role": "user", "parts": [{"text": "be brief"}, {"text": "use tools"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "fix it"}, {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
            {
                "role": "model",
                "parts": [
                    {"text": "plan", "thought": True},
                    {"text": "Looking"},
                    {"text": "."},
                    {"functionCall": {"id": "c1", "name": "read", "args": {"p": "a"}}},
                    {"functionCall": {"name": "ls"}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "read", "response": {"output": "A"}}},
                    {"functionResponse": {"id": "x", "name": "ls", "response": {"error": "denied"}}},
                    {"text": "also this"},
                ],
            },
        ],
    }
    assert gemini.request_messages(req) == [
        {"role": "system", "content": "be brief\nuse tools"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "fix it"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Looking.",
            "reasoning_content": "plan",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p":"a"}'}},
                {"id": "call_1_4", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
            ],
        },
        # the response without id takes the id of the call with its name
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "A"},
        {"role": "tool", "tool_call_id": "x", "name": "ls", "content": "denied", "is_error": True},
        {"role": "user", "content": "also this"},
    ]


def test_function_response_text():
    assert gemini.function_response_text({"output": "ok"}) == ("ok", False)
    assert gemini.function_response_text({"error": "no"}) == ("no", True)
    assert gemini.function_response_text({"output": "a", "extra": 1}) == ('{"output":"a","extra":1}', False)
    assert gemini.function_response_text(None) == ("", False)


@pytest.mark.parametrize(
    "body, problem",
    [
        ([], "request body must be a JSON object (got list)"),
        ({}, "contents: missing (a list of Content objects is required)"),
        ({"contents": [{"parts": "x"}]}, "contents[0].parts: must be a list (got str)"),
        ({"contents": [{"parts": [1]}]}, "contents[0].parts[0]: must be an object (got int)"),
    ],
)
def test_malformed_requests_name_the_field(body, problem):
    with pytest.raises(ValueError) as exc:
        gemini.request_messages(body)
    assert str(exc.value) == problem


def test_usage_metadata_counts_thoughts_apart_from_candidates():
    # 30 completion tokens of which 12 reasoning: 18 candidates + 12 thoughts
    assert gemini.usage_metadata(100, 30, 64, 12, None) == {
        "promptTokenCount": 100,
        "candidatesTokenCount": 18,
        "thoughtsTokenCount": 12,
        "cachedContentTokenCount": 64,
        "totalTokenCount": 130,
    }
    assert gemini.usage_metadata(None, None, None, None, None) is None


def test_paths_and_sse():
    assert gemini.parse_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent") == (
        "gemini-2.5-pro",
        "streamGenerateContent",
    )
    assert gemini.parse_path("/v1/models/m:generateContent") == ("m", "generateContent")
    assert gemini.parse_path("/v1/chat/completions") is None
    assert gemini.wants_sse(b"alt=sse&key=k") and not gemini.wants_sse(b"")
    assert gemini.finish_reason("length") == "MAX_TOKENS"
    assert gemini.finish_reason("tool_calls") == "STOP"
    assert orjson.loads(gemini.error_body(404, "m")) == {"error": {"code": 404, "message": "m", "status": "NOT_FOUND"}}


def test_gemini_cli_call_id_prefix_is_read_off():
    # Gemini CLI answers the server's call id "call_1" as "write_file__call_1" (turn.ts)
    assert gemini.client_call_id("write_file__call_1", "write_file") == "call_1"
    assert gemini.client_call_id("call_1", "write_file") == "call_1"
    assert gemini.client_call_id("write_file__", "write_file") == "write_file__"
    req = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {
                "role": "model",
                "parts": [{"functionCall": {"id": "write_file__call_1", "name": "write_file", "args": {}}}],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "write_file__call_1",
                            "name": "write_file",
                            "response": {"output": "ok"},
                        }
                    }
                ],
            },
        ]
    }
    messages = gemini.request_messages(req)
    assert messages[1]["tool_calls"][0]["id"] == "call_1"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "name": "write_file", "content": "ok"}
