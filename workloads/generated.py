"""What a model generated, and how its response ended: the one rule every parser of
generated output applies (OpenAI chat streamed and whole bodies, SGLang `/generate`, and,
through the OpenAI parser, the replay model client).

    out = message_output(delta)          # a streamed `delta` or a whole-body `message`
    out.chars > 0                        # the model generated something (a token event)
    finish_class("eos_token")            # -> "stop"
    FINISH_FAILS["abort"]                # -> True: the request failed

Generated output (DESIGN §4 "token") is any non-empty text in a field that carries the
model's output. The fields of an OpenAI chat `delta` / `message`:

    content            a string, or a list of typed parts: `{"type": "text"|"output_text",
                       "text"}` is content, `{"type": "refusal", "refusal"}` a refusal, any
                       other part's string under its own type name or under `text` is other
                       output (`{"type": "thinking", "thinking"}`, `"reasoning_text"`)
    reasoning_content  DeepSeek, SGLang, llama.cpp, vLLM before `reasoning`
    reasoning          OpenRouter, Ollama, Groq, newer vLLM
    reasoning_text     GitHub Copilot-style proxies
    reasoning_details  OpenRouter: `[{"type": "reasoning.text", "text"} |
                       {"type": "reasoning.summary", "summary"}]`; read only when the same
                       delta has no reasoning string (OpenRouter sends the text twice)
    refusal            OpenAI structured outputs (`delta.refusal`, `message.refusal`)
    tool_calls[i]      `function.name` / `function.arguments`; custom tools `custom.name` /
                       `custom.input`
    function_call      legacy: `name` / `arguments`
    audio              `transcript` of audio output

A role-only delta, empty strings, `null` and unknown keys are not output. Encrypted
reasoning (`reasoning.encrypted`) carries no text and is not counted.

Finish reasons (`finish_reason` of a choice, SGLang `meta_info.finish_reason.type`),
compared case-insensitively, fall in one class (`Sample.finish_class`):

    stop            stop, eos, eos_token, stop_sequence (TGI), end_turn (Anthropic-style)
    length          length, max_tokens, model_length (Mistral), model_context_window_exceeded
    tool_calls      tool_calls, function_call (legacy), tool_use (Anthropic-style)
    content_filter  content_filter, refusal, safety, recitation, blocklist,
                    prohibited_content, spii (Gemini)
    abort           abort, aborted (vLLM, SGLang: the server gave up on the request)
    error           error (OpenRouter, Mistral, vLLM)
    cancelled       cancelled, canceled
    unknown         any other value (e.g. DeepSeek's insufficient_system_resource)

The first four are completions (outcome `ok` when output was generated); the last four
are failures (`FINISH_FAILS`): the parser records outcome `aborted` with the reason in
`error`. Sources: OpenAI chat API reference (finish_reason), vLLM `FinishReason`, SGLang
`FINISH_ABORT`, TGI `FinishReason`, OpenRouter and Mistral API references.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FINISH_CLASSES", "FINISH_FAILS", "Output", "finish_class", "finish_error", "message_output"]

# finish class -> does it fail the request
FINISH_FAILS: dict[str, bool] = {
    "stop": False,
    "length": False,
    "tool_calls": False,
    "content_filter": False,
    "abort": True,
    "error": True,
    "cancelled": True,
    "unknown": True,
}
FINISH_CLASSES = tuple(FINISH_FAILS)

_ALIASES: dict[str, str] = {
    "stop": "stop", "eos": "stop", "eos_token": "stop", "stop_sequence": "stop", "end_turn": "stop",
    "length": "length", "max_tokens": "length", "model_length": "length",
    "model_context_window_exceeded": "length",
    "tool_calls": "tool_calls", "function_call": "tool_calls", "tool_use": "tool_calls",
    "content_filter": "content_filter", "refusal": "content_filter", "safety": "content_filter",
    "recitation": "content_filter", "blocklist": "content_filter",
    "prohibited_content": "content_filter", "spii": "content_filter",
    "abort": "abort", "aborted": "abort",
    "error": "error",
    "cancelled": "cancelled", "canceled": "cancelled",
}


def finish_class(reason: Any) -> str | None:
    """The class of a finish reason (module docstring table); None when `reason` is None.
    A non-string reason is `unknown`."""
    if reason is None:
        return None
    if type(reason) is not str:
        return "unknown"
    return _ALIASES.get(reason) or _ALIASES.get(reason.lower(), "unknown")


def finish_error(reason: Any, cls: str) -> str:
    """The `error` text of a request failed by its finish reason, e.g.
    `finish_reason 'abort' (class abort): the server ended the response without completing it`."""
    what = {
        "abort": "the server aborted the request",
        "error": "the server ended the response with an error",
        "cancelled": "the server cancelled the request",
    }.get(cls, "not a known completion (expected one of stop, length, tool_calls, content_filter)")
    return f"finish_reason {reason!r} (class {cls}): {what}"


@dataclass(slots=True)
class Output:
    """The generated output of one delta or message.

    content  its `content` text (string, or text parts joined), '' when none
    chars    characters of every generated field (content, reasoning, refusal, tool
             calls, transcript); > 0 exactly when the model generated something
    refusal  it carried non-empty refusal text
    """

    content: str = ""
    chars: int = 0
    refusal: bool = False


_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_text")


def _s(value: Any, length: Callable[[str], int]) -> int:
    """Characters of a string value by `length`, 0 for anything else."""
    return length(value) if type(value) is str else 0


def _tool_chars(calls: Any, length: Callable[[str], int]) -> int:
    n = 0
    if type(calls) is list:
        for call in calls:
            if type(call) is not dict:
                continue
            for key, name_key, text_key in (("function", "name", "arguments"), ("custom", "name", "input")):
                fn = call.get(key)
                if type(fn) is dict:
                    name, text = fn.get(name_key), fn.get(text_key)
                    if type(name) is str:
                        n += length(name)
                    if type(text) is str:
                        n += length(text)
    return n


def _part_text(part: dict[str, Any]) -> tuple[str, str]:
    """(kind, text) of one typed content part: kind is 'content', 'refusal' or 'other'."""
    kind = part.get("type")
    if kind == "refusal":
        text = part.get("refusal")
        return "refusal", text if type(text) is str else ""
    text = part.get(kind) if type(kind) is str and kind != "type" else None
    if type(text) is not str:
        text = part.get("text")
        if type(text) is not str:
            text = part.get("summary")  # reasoning.summary
    if type(text) is not str:
        return "other", ""
    return ("content" if kind in ("text", "output_text", None) else "other"), text


def message_output(msg: Any, length: Callable[[str], int] = len) -> Output:
    """Generated output of one chat `delta` (streamed) or `message` (whole body): see the
    module docstring for the fields. Anything that is not a dict yields Output().

    `length` counts the characters of one string (default `len`; a parser that decoded
    split surrogate pairs passes a counter that counts a pair once)."""
    out = Output()
    if type(msg) is not dict or not msg:
        return out
    content = msg.get("content")
    if type(content) is str:
        out.content = content
        out.chars = length(content)
    elif type(content) is list:
        texts = []
        for part in content:
            if type(part) is not dict:
                continue
            kind, text = _part_text(part)
            if not text:
                continue
            out.chars += length(text)
            if kind == "content":
                texts.append(text)
            elif kind == "refusal":
                out.refusal = True
        out.content = "".join(texts)
    reasoning = 0
    for key in _REASONING_KEYS:
        reasoning += _s(msg.get(key), length)
    if not reasoning:
        details = msg.get("reasoning_details")
        if type(details) is list:
            for part in details:
                if type(part) is dict:
                    reasoning += _s(_part_text(part)[1], length)
    out.chars += reasoning
    refusal = _s(msg.get("refusal"), length)
    if refusal:
        out.refusal = True
        out.chars += refusal
    calls = msg.get("tool_calls")
    if calls:
        out.chars += _tool_chars(calls, length)
    fn = msg.get("function_call")
    if type(fn) is dict:
        out.chars += _s(fn.get("name"), length) + _s(fn.get("arguments"), length)
    audio = msg.get("audio")
    if type(audio) is dict:
        out.chars += _s(audio.get("transcript"), length)
    return out
