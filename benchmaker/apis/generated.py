"""What a model generated, and how its response ended: the one rule every parser of
generated output applies (OpenAI chat streamed and whole bodies, SGLang `/generate`, and,
through the OpenAI parser, the replay model client).

    out = message_output(delta)          # a streamed `delta` or a whole-body `message`
    out.chars > 0                        # the model generated something (a token event)
    finish_class("eos_token")            # -> "stop"
    FINISH_FAILS["abort"]                # -> True: the request failed

Generated output (docs/metrics.md "token") is any non-empty text in a field that carries the
model's output. The fields of an OpenAI chat `delta` / `message`:

    content            a string, or a list of typed parts: `{"type": "text"|"output_text",
                       "text"}` is content, `{"type": "refusal", "refusal"}` a refusal, any
                       other part's string under its own type name or under `text` is
                       reasoning (`{"type": "thinking", "thinking"}`, `"reasoning_text"`)
    reasoning_content  DeepSeek, SGLang, llama.cpp, vLLM before `reasoning`
    reasoning          OpenRouter, Ollama, Groq, newer vLLM
    reasoning_text     GitHub Copilot-style proxies
    thinking           Ollama's native field, passed through by some proxies
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

from dataclasses import dataclass
from typing import Any

__all__ = [
    "FINISH_CLASSES",
    "FINISH_FAILS",
    "Output",
    "finish_class",
    "finish_error",
    "message_output",
    "scan_output",
]

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

    content    its `content` text (string, or text parts joined), '' when none
    chars      characters of every generated field (content, reasoning, refusal, tool
               calls, transcript); > 0 exactly when the model generated something
    refusal    it carried non-empty refusal text
    reasoning  its reasoning text: the reasoning strings of every spelling joined, else
               the texts of `reasoning_details`, plus content parts that are neither
               text nor refusal (`thinking`, `reasoning_text`); '' when none
    """

    content: str = ""
    chars: int = 0
    refusal: bool = False
    reasoning: str = ""


def _s(value: Any) -> int:
    """Characters of a string value, 0 for anything else."""
    return len(value) if type(value) is str else 0


def _tool_chars(calls: Any) -> int:
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
                        n += len(name)
                    if type(text) is str:
                        n += len(text)
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


# delta/message keys that carry generated output -> how to read them
_CONTENT, _REASONING, _DETAILS, _REFUSAL, _TOOLS, _FUNCTION, _AUDIO = range(7)
_FIELDS = {
    "content": _CONTENT,
    "reasoning_content": _REASONING,
    "reasoning": _REASONING,
    "reasoning_text": _REASONING,
    "thinking": _REASONING,
    "reasoning_details": _DETAILS,
    "refusal": _REFUSAL,
    "tool_calls": _TOOLS,
    "function_call": _FUNCTION,
    "audio": _AUDIO,
}


def scan_output(msg: dict[str, Any]) -> tuple[str, int, bool, str]:
    """`message_output` as a tuple `(content, chars, refusal, reasoning)`, for parsers'
    hot loops (one pass over the keys; no object built)."""
    content = reasoning = ""
    chars = 0
    refusal = False
    thoughts: list[str] | None = None
    details: Any = None
    for key, value in msg.items():
        kind = _FIELDS.get(key)
        if kind is None or not value:
            continue
        if kind == _CONTENT:
            if type(value) is str:
                content = value
                chars += len(value)
            elif type(value) is list:
                texts = []
                for part in value:
                    if type(part) is not dict:
                        continue
                    part_kind, text = _part_text(part)
                    if not text:
                        continue
                    chars += len(text)
                    if part_kind == "content":
                        texts.append(text)
                    elif part_kind == "refusal":
                        refusal = True
                    else:
                        thoughts = [*(thoughts or ()), text]
                content = "".join(texts)
        elif kind == _REASONING:
            if type(value) is str:
                reasoning += value
                chars += len(value)
        elif kind == _DETAILS:
            details = value
        elif kind == _REFUSAL:
            if type(value) is str:
                refusal = True
                chars += len(value)
        elif kind == _TOOLS:
            chars += _tool_chars(value)
        elif kind == _FUNCTION:
            if type(value) is dict:
                chars += _s(value.get("name")) + _s(value.get("arguments"))
        elif type(value) is dict:  # _AUDIO
            chars += _s(value.get("transcript"))
    if details is not None and not reasoning and type(details) is list:
        for part in details:
            if type(part) is dict:
                text = _part_text(part)[1]
                if text:
                    reasoning += text
                    chars += len(text)
    if thoughts:
        reasoning = "".join(thoughts) + reasoning
    return content, chars, refusal, reasoning


def message_output(msg: Any) -> Output:
    """Generated output of one chat `delta` (streamed) or `message` (whole body): see the
    module docstring for the fields. Anything that is not a dict yields Output()."""
    if type(msg) is not dict:
        return Output()
    return Output(*scan_output(msg))
