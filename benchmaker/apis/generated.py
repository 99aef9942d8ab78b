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
    length          length, max_tokens, max_output_tokens (Responses `incomplete_details`),
                    model_length (Mistral), model_context_window_exceeded
    tool_calls      tool_calls, function_call (legacy), tool_use (Anthropic-style)
    content_filter  content_filter, refusal, safety, recitation, blocklist,
                    prohibited_content, spii (Gemini)
    abort           abort, aborted (vLLM, SGLang: the server gave up on the request),
                    insufficient_system_resource (DeepSeek: interrupted for lack of
                    resources)
    error           error (OpenRouter, Mistral, vLLM), failed (Responses `status`)
    cancelled       cancelled, canceled
    unknown         any other value: the response completed with a reason the product
                    does not know (kept as sent, flagged by its class)

The rules every parser applies at the end of a response (`settle`; docs/stream-rules.md):

- `null` and `""` mean "not finished yet" (`finish_reason_sent`): SGLang 0.4.x and
  Ollama-style servers write `""` on every content chunk and the real reason on the last.
- The response's outcome is decided by the last reason the server sent.
- Only the classes that say the server gave up (`FINISH_FAILS`: abort, error, cancelled)
  fail the request: the parser records outcome `aborted` with `finish_error`'s text,
  which names that reason. Any other reason completes it; a reason the product does not
  know is kept as sent with class `unknown` (counted as `n_finish_unknown`).
- Reasoning tokens the stream did not show (usage `reasoning_tokens` with no reasoning
  delta seen) are `hidden_reasoning_tokens`: TPOT leaves them out.
- A server's token counts that cannot be true are a finding on the sample
  (`usage_problem` -> `usage_invalid_reason`), never a figure to sum.

How a response's end decides its outcome, the same cascade for every API: a stream
by `BodyReader._close` (protocol error, cut before the API's terminal event, aborted by its
finish, empty, ok), a whole body parsed by `whole_object` and closed by `close_whole`.

Sources: OpenAI chat API reference (finish_reason), vLLM `FinishReason`, SGLang
`FINISH_ABORT`, TGI `FinishReason`, OpenRouter, Mistral and DeepSeek API references.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from benchmaker.engine.records import Outcome, Sample
from benchmaker.engine.sse import SSEEvent, SSEParser

__all__ = [
    "BodyReader",
    "FINISH_FAILS",
    "Output",
    "close_whole",
    "error_text",
    "finish_class",
    "finish_error",
    "finish_outcome",
    "finish_reason_sent",
    "message_output",
    "scan_output",
    "settle",
    "short",
    "token_count",
    "usage_problem",
    "whole_object",
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
    "unknown": False,
}

_ALIASES: dict[str, str] = {
    "stop": "stop",
    "eos": "stop",
    "eos_token": "stop",
    "stop_sequence": "stop",
    "end_turn": "stop",
    "length": "length",
    "max_tokens": "length",
    "max_output_tokens": "length",
    "model_length": "length",
    "model_context_window_exceeded": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "tool_use": "tool_calls",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "safety": "content_filter",
    "recitation": "content_filter",
    "blocklist": "content_filter",
    "prohibited_content": "content_filter",
    "spii": "content_filter",
    "abort": "abort",
    "aborted": "abort",
    "insufficient_system_resource": "abort",
    "error": "error",
    "failed": "error",
    "cancelled": "cancelled",
    "canceled": "cancelled",
}


def short(data: bytes | str, limit: int = 200) -> str:
    """`data` as text for an error message: bytes decoded as UTF-8 (bad bytes replaced),
    cut to `limit` characters with "..." appended when longer."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else text[:limit] + "..."


def error_text(err: Any) -> str:
    """The text of an error object a server sent: its `message` string, else the
    object as compact JSON (`short`)."""
    if type(err) is dict:
        msg = err.get("message")
        if type(msg) is str:
            return msg
    return short(orjson.dumps(err))


def token_count(value: Any) -> int | None:
    """A token count a server sent: `value` when it is an int >= 0, else None (absent,
    null, negative, a float, a string, a bool)."""
    return value if type(value) is int and value >= 0 else None


def whole_object(
    body: bytes,
    sample: Sample,
    *,
    loads: Callable[[bytes], Any] = orjson.loads,
    error_of: Callable[[dict[str, Any]], Any] | None = None,
) -> dict[str, Any] | None:
    """The JSON object of a non-streamed response body, or None when the body is not
    one or states an error; then `sample` has outcome protocol_error and `error` one of

        bad JSON body: <decoder message> (got <body>)      loads raised JSONDecodeError
        body is not a JSON object (got <body>)
        error in body: <error_text>                         the error it states is not None

    `loads` decodes the bytes (raises orjson.JSONDecodeError); `error_of` returns the
    error object a body states (None: its `error` field), None when it states none.
    A string `model` in the object is set as `sample.model`, also on an error body."""
    try:
        obj = loads(body)
    except orjson.JSONDecodeError as exc:
        sample.outcome, sample.error = Outcome.PROTOCOL_ERROR.value, f"bad JSON body: {exc} (got {short(body)})"
        return None
    if type(obj) is not dict:
        sample.outcome, sample.error = Outcome.PROTOCOL_ERROR.value, f"body is not a JSON object (got {short(body)})"
        return None
    model = obj.get("model")
    if type(model) is str:
        sample.model = model
    err = obj.get("error") if error_of is None else error_of(obj)
    if err is not None:
        sample.outcome, sample.error = Outcome.PROTOCOL_ERROR.value, f"error in body: {error_text(err)}"
        return None
    return obj


def close_whole(sample: Sample, failed: str | None, generated: bool) -> None:
    """Set the outcome of a non-streamed response read by `whole_object`, first match
    wins: aborted with `failed` (settle's error of a failing finish class, None when
    none); ok when it `generated` output; else empty_output."""
    if failed is not None:
        sample.outcome, sample.error = Outcome.ABORTED.value, failed
    elif generated:
        sample.outcome = Outcome.OK.value
    else:
        sample.outcome, sample.error = Outcome.EMPTY_OUTPUT.value, "response without generated text"


def finish_class(reason: Any) -> str | None:
    """The class of a finish reason (module docstring table); None when `reason` is None
    or `""` (not finished). A non-string reason is `unknown`."""
    if reason is None or reason == "":
        return None
    if type(reason) is not str:
        return "unknown"
    return _ALIASES.get(reason) or _ALIASES.get(reason.lower(), "unknown")


def finish_error(reason: Any, cls: str) -> str:
    """The `error` text of a request failed by its finish reason, e.g.
    `finish_reason 'abort' (class abort): the server aborted the request`."""
    what = {
        "abort": "the server aborted the request",
        "error": "the server ended the response with an error",
        "cancelled": "the server cancelled the request",
    }.get(cls, "the server gave up on the request")
    return f"finish_reason {reason!r} (class {cls}): {what}"


def finish_reason_sent(value: Any) -> str | None:
    """The finish reason one chunk, event or body states, as text; None when it states
    none: `null` and `""` both mean "not finished yet". A string is returned as sent; any
    other JSON value (a number, an object) as its compact JSON text (class `unknown`)."""
    if value is None or value == "":
        return None
    if type(value) is str:
        return value
    text = orjson.dumps(value).decode()
    return text if len(text) <= 200 else text[:200] + "..."


def finish_outcome(reason: str | None) -> tuple[str | None, str | None]:
    """(finish class, error) of a response whose last stated finish reason is `reason`
    (None: it stated none). `error` is finish_error's text when the class fails the
    request (abort, error, cancelled), else None: stop, length, tool_calls,
    content_filter and `unknown` reasons complete it."""
    cls = finish_class(reason)
    if cls is not None and FINISH_FAILS[cls]:
        return cls, finish_error(reason, cls)
    return cls, None


def usage_problem(sample: Sample, *, total_tokens: Any = None, max_tokens: int | None = None) -> str | None:
    """Why the server's token counts on `sample` cannot be true, or None when they can.

    Reads the sample's prompt_tokens, output_tokens, reasoning_tokens, cached_tokens,
    hidden_reasoning_tokens, n_token_events and output_chars (set them first), the
    usage's `total_tokens` (any JSON value; only an int is checked) and the request's
    `max_tokens` (None: no cap sent). Every failed check is named, `; `-joined:

        output_tokens > max_tokens            the cap the request set
        prompt + output != total_tokens       the usage's own sum
        reasoning_tokens > output_tokens      (reasoning is part of the output)
        cached_tokens > prompt_tokens         (cached is part of the prompt)
        cumulative: the visible output tokens equal 1 + 2 + ... + k over k >= 3 token
                    events and exceed the characters generated: a server that summed
                    its running counts (each event re-counted every earlier token)
    """
    out, prompt = sample.output_tokens, sample.prompt_tokens
    problems = []
    if out is not None and max_tokens is not None and out > max_tokens:
        problems.append(f"usage.completion_tokens {out} > the request's max_tokens {max_tokens}")
    if out is not None and prompt is not None and type(total_tokens) is int and prompt + out != total_tokens:
        problems.append(f"usage.prompt_tokens {prompt} + completion_tokens {out} != total_tokens {total_tokens}")
    if out is not None and sample.reasoning_tokens is not None and sample.reasoning_tokens > out:
        problems.append(f"usage reasoning_tokens {sample.reasoning_tokens} > completion_tokens {out}")
    if prompt is not None and sample.cached_tokens is not None and sample.cached_tokens > prompt:
        problems.append(f"usage cached_tokens {sample.cached_tokens} > prompt_tokens {prompt}")
    k = sample.n_token_events
    if out is not None and k >= 3:
        visible = out - (sample.hidden_reasoning_tokens or 0)
        if sample.output_chars and visible == k * (k + 1) // 2 and visible > sample.output_chars:
            problems.append(
                f"usage.completion_tokens {out} = 1 + 2 + ... + {k} over {k} token events "
                f"({sample.output_chars} characters generated): counts summed cumulatively"
            )
    return "; ".join(problems) or None


def settle(
    sample: Sample, reason: str | None, *, reasoning_seen: bool, total_tokens: Any = None, max_tokens: int | None = None
) -> str | None:
    """Apply the end-of-response rules to `sample` once its usage fields, token events and
    output_chars are set: finish_reason (`reason`, the last one the server stated, from
    finish_reason_sent) and finish_class, hidden_reasoning_tokens, usage_invalid_reason
    (usage_problem). Returns the `error` of a finish class that fails the request (the
    parser then sets outcome `aborted`), else None.

    Every API's parser calls it at the end of a response:

        error = settle(sample, last_reason, reasoning_seen=saw_reasoning_delta,
                       total_tokens=usage.get("total_tokens"), max_tokens=request_cap)
    """
    sample.finish_reason = reason
    cls, error = finish_outcome(reason)
    sample.finish_class = cls
    # reasoning tokens the stream did not show: all of them when no reasoning delta came
    hidden = sample.reasoning_tokens
    sample.hidden_reasoning_tokens = None if hidden is None else 0 if reasoning_seen else hidden
    sample.usage_invalid_reason = usage_problem(sample, total_tokens=total_tokens, max_tokens=max_tokens)
    return error


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


class BodyReader:
    """What every API's response parser keeps of the body, streamed or whole: the
    SSE framing (benchmaker.engine.sse.SSEParser), the first protocol error, the
    count of SSE events and token events, the body's first 200 bytes (for error
    texts) and a whole body's bytes. A parser subclasses it:

        for event, payload in self._read(data):   # in feed(): a stream's SSE events
            obj = self._object(payload)             # (none for a whole body: kept)
        complete = self._close_sse(complete)        # in _finish_stream()
        self._close(sample, complete=..., failed=..., end="message_stop")
        body = self._whole()                        # in _finish_whole()
    """

    __slots__ = ("stream", "_sse", "_error", "_n_sse", "_n_events", "_chars", "_head", "_body")

    def __init__(self, stream: bool = True) -> None:
        self.stream = stream
        self._sse = SSEParser()
        self._error: str | None = None  # first protocol error
        self._n_sse = 0  # SSE events seen
        self._n_events = 0  # token events
        self._chars = 0  # characters of generated output (the sample's output_chars)
        self._head = b""  # first bytes of the body, for error messages
        self._body: list[bytes] = []

    def finish(self, sample: Sample) -> None:
        """Body ended (status < 400): set usage, finish_reason, output_chars, outcome."""
        if self.stream:
            self._finish_stream(sample)
        else:
            self._finish_whole(sample)

    def _finish_stream(self, sample: Sample) -> None:
        raise NotImplementedError

    def _finish_whole(self, sample: Sample) -> None:
        raise NotImplementedError

    @property
    def error(self) -> str | None:
        """The first protocol error seen (bad JSON, an error object or event), else None."""
        return self._error

    def _fail(self, message: str) -> None:
        if self._error is None:
            self._error = message

    def _read(self, data: bytes) -> list[SSEEvent]:
        """The SSE events one read of a streamed body completed; none for a whole body,
        whose bytes are kept for `_whole`."""
        if not self.stream:
            self._body.append(data)
            return []
        if not self._head:
            self._head = data[:200]
        events = self._sse.feed(data)
        self._n_sse += len(events)
        return events

    def _object(self, payload: bytes) -> dict[str, Any] | None:
        """The JSON object of one event's data; None, with the protocol error recorded,
        when it is bad JSON or not an object."""
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            self._fail(f"bad JSON in data line: {exc} (got {short(payload)})")
            return None
        if type(obj) is not dict:
            self._fail(f"data line is not a JSON object (got {short(payload)})")
            return None
        return obj

    def _close_sse(self, complete: bool, *, done: bool = False) -> bool:
        """End of a streamed body: a last event without its closing blank line is a
        protocol error unless the stream was already `complete`; with `done`, a last
        `[DONE]` without it completes the stream. Returns whether it is complete."""
        cut = self._sse.close()
        if cut is not None and not complete:
            if done and cut == b"[DONE]":
                return True
            self._fail(f"stream ended inside an event (got {short(cut)})")
        return complete

    def _close(
        self,
        sample: Sample,
        *,
        complete: bool,
        failed: str | None,
        end: str,
        empty: str = "complete stream without a generated token",
    ) -> None:
        """Set the outcome of this streamed body once it ended, first match wins:

        protocol_error  the first protocol error (bad JSON, an error event), else the
                        stream not `complete` (its API's terminal event `end` never
                        came): "no SSE event in body (got <first 200 bytes>)" when
                        there was no SSE event, else "stream ended before <end>
                        after <n> token events"
        aborted         `failed`: settle's error of a failing finish class
        empty_output    no token event: `empty` is the error text
        ok              otherwise
        """
        if self._error is not None:
            sample.outcome, sample.error = Outcome.PROTOCOL_ERROR.value, self._error
        elif not complete:
            sample.outcome = Outcome.PROTOCOL_ERROR.value
            sample.error = (
                f"no SSE event in body (got {short(self._head)})"
                if self._n_sse == 0
                else f"stream ended before {end} after {self._n_events} token events"
            )
        elif failed is not None:
            sample.outcome, sample.error = Outcome.ABORTED.value, failed
        elif self._n_events == 0:
            sample.outcome, sample.error = Outcome.EMPTY_OUTPUT.value, empty
        else:
            sample.outcome = Outcome.OK.value

    def _whole(self) -> bytes:
        """A whole body's bytes (released here)."""
        body = b"".join(self._body)
        self._body = []
        return body
