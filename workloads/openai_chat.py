"""OpenAI chat completions (`POST /v1/chat/completions`): request building and the
stream parser that turns `chat.completion.chunk` events into token events.

    wl = OpenAIChatWorkload("http://127.0.0.1:8000/v1/chat/completions", "m", dataset,
                            max_tokens=256)          # streaming, usage requested
    spec = wl.request(seq)                           # before the timed span
    parser = wl.parser(spec)                         # fresh per request
    parser.feed(read_bytes, t_ns, sample)            # once per transport read
    parser.finish(sample)                            # at end of body (status < 400)

What counts (DESIGN §4): a chunk is a token event when any choice's delta carries
generated text of any kind: non-empty `content`, `reasoning_content` (DeepSeek, vLLM),
`reasoning` (OpenRouter, newer vLLM), or a tool call's `function.name` /
`function.arguments` (also the legacy `function_call`). A role-only delta, an empty
string, `null`, and a usage-only chunk (`choices: []`) are never tokens. TTFT is the
stamp of the first token event; TTFC (`first_content_ns`) of the first non-empty
`content`. Each token-bearing chunk is one event; chunks that arrive in the same read
share that read's stamp. The per-event token count is not stated by this protocol, so
`token_event_tokens` stays None.

Usage: the last non-null `usage` object seen wins: a usage-only final chunk
(`choices: []`, OpenAI with `stream_options.include_usage`), usage on the finish chunk
(DeepSeek), or `usage: null` on other chunks. `completion_tokens` → output_tokens (sets
usage_present), `prompt_tokens`, `prompt_tokens_details.cached_tokens` (else DeepSeek's
`prompt_cache_hit_tokens`) → cached_tokens, `completion_tokens_details.reasoning_tokens`.
No usage → all None and usage_present False (never 0).

Outcome set by finish() (streaming), first match wins:
    protocol_error  a data line that is not a JSON object, an `error` object or an
                    `event: error` in the stream, or the body ended before `data: [DONE]`
                    (a cut stream is a failure even when it carried tokens)
    empty_output    a complete stream without any token event (only [DONE], only usage)
    ok              otherwise
Non-streaming (`stream=False`): the whole JSON body is parsed at finish(). There is no
token timeline: first_token_ns, first_content_ns and token_event_ns stay None (the first
byte of a non-streamed body is not a first token; E2E is the measure). Outcome: bad JSON
or an `error` object → protocol_error; no generated text in `choices[0].message` →
empty_output; else ok.
"""

from __future__ import annotations

from typing import Any

import orjson

from benchmaker.records import Outcome, RequestSpec, Sample
from benchmaker.sse import SSEParser
from workloads.datasets import Dataset

__all__ = ["OpenAIChatParser", "OpenAIChatWorkload", "OpenAIStreamParser", "apply_usage", "openai_headers"]

_OK = Outcome.OK.value
_PROTOCOL_ERROR = Outcome.PROTOCOL_ERROR.value
_EMPTY = Outcome.EMPTY_OUTPUT.value


def openai_headers(api_key: str | None, stream: bool, extra: dict[str, str] | None) -> dict[str, str]:
    """Request headers: JSON content type, `Accept: text/event-stream` when streaming,
    `Authorization: Bearer KEY` when api_key is set, then `extra` (wins on conflicts)."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if stream else "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if extra:
        headers.update(extra)
    return headers


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def apply_usage(usage: Any, sample: Sample) -> None:
    """Copy an OpenAI `usage` object onto the sample (see module docstring). Fields that
    are absent or not non-negative ints stay None; usage_present is True only when
    `completion_tokens` is such an int."""
    if not isinstance(usage, dict):
        return
    sample.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
    sample.output_tokens = _int_or_none(usage.get("completion_tokens"))
    sample.usage_present = sample.output_tokens is not None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")  # DeepSeek
    sample.cached_tokens = _int_or_none(cached)
    cdetails = usage.get("completion_tokens_details")
    sample.reasoning_tokens = _int_or_none(cdetails.get("reasoning_tokens")) if isinstance(cdetails, dict) else None


def _short(data: bytes | str, limit: int = 200) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else text[:limit] + "..."


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        msg = err.get("message")
        if isinstance(msg, str):
            return msg
    return _short(orjson.dumps(err))


class OpenAIStreamParser:
    """Shared machinery of OpenAI-style parsers: SSE framing, `[DONE]`, bad JSON and
    `error` objects, usage, finish_reason and the outcome. Subclasses implement
    `_choices(choices) -> (token_kind, ...)` via `_chunk`, and `_whole_body`.

    `text` is the generated `content` (choice index 0) so far.
    """

    __slots__ = (
        "stream",
        "_parts",
        "_sse",
        "_done",
        "_error",
        "_usage",
        "_finish_reason",
        "_chars",
        "_body",
        "_n_events",
        "_events",
        "_n_sse",
        "_head",
    )

    def __init__(self, stream: bool = True) -> None:
        self.stream = stream
        self._parts: list[str] = []
        self._sse = SSEParser()
        self._done = False  # saw data: [DONE]
        self._error: str | None = None  # first protocol error
        self._usage: Any = None
        self._finish_reason: str | None = None
        self._chars = 0
        self._body: list[bytes] = []
        self._n_events = 0  # token events
        self._events: list[int] | None = None  # sample.token_event_ns
        self._n_sse = 0  # SSE events seen
        self._head = b""  # first bytes of the body, for error messages

    @property
    def text(self) -> str:
        """Generated `content` text so far (reasoning and tool calls excluded)."""
        return "".join(self._parts)

    # -- streaming ------------------------------------------------------------------

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """Parse one transport read that arrived at `t_ns` (ns from run t0)."""
        if not self.stream:
            self._body.append(data)
            return
        if not self._head:
            self._head = data[:200]
        for event, payload in self._sse.feed(data):
            self._n_sse += 1
            if self._done:
                continue  # events after [DONE] carry nothing we measure
            if payload == b"[DONE]":
                self._done = True
                continue
            if event == "error":
                self._fail(f"error event in stream: {_short(payload)}")
                continue
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError as exc:
                self._fail(f"bad JSON in data line: {exc} (got {_short(payload)})")
                continue
            if type(obj) is not dict:
                self._fail(f"data line is not a JSON object (got {_short(payload)})")
                continue
            err = obj.get("error")
            if err is not None:
                self._fail(f"error in stream: {_error_text(err)}")
                continue
            usage = obj.get("usage")
            if usage is not None:
                self._usage = usage
            choices = obj.get("choices")
            if choices and self._chunk(choices):
                # a token event at this read's stamp
                if self._n_events == 0:
                    sample.first_token_ns = t_ns
                    events = sample.token_event_ns
                    if events is None:
                        events = sample.token_event_ns = []
                    self._events = events
                    events.append(t_ns)
                else:
                    self._events.append(t_ns)  # type: ignore[union-attr]
                self._n_events += 1
                sample.n_token_events += 1
                if sample.first_content_ns is None and self._parts:
                    sample.first_content_ns = t_ns

    def _chunk(self, choices: Any) -> bool:
        """Handle one chunk's `choices`; return True when it carries generated text.
        Updates text, chars and finish_reason. Subclasses define the delta shape."""
        raise NotImplementedError

    def _fail(self, message: str) -> None:
        if self._error is None:
            self._error = message

    # -- end of body -------------------------------------------------------------------

    def finish(self, sample: Sample) -> None:
        """Body ended (status < 400): set usage, finish_reason, output_chars, outcome."""
        if not self.stream:
            self._finish_whole(sample)
            return
        cut = self._sse.close()
        if cut is not None and not self._done:
            if cut == b"[DONE]":
                self._done = True  # final blank line missing: complete enough
            else:
                self._fail(f"stream ended inside an event (got {_short(cut)})")
        apply_usage(self._usage, sample)
        sample.finish_reason = self._finish_reason
        sample.output_chars = self._chars
        if self._error is not None:
            sample.outcome, sample.error = _PROTOCOL_ERROR, self._error
        elif not self._done:
            if self._n_sse == 0:
                sample.outcome = _PROTOCOL_ERROR
                sample.error = f"no SSE event in body (got {_short(self._head)})"
            else:
                sample.outcome = _PROTOCOL_ERROR
                sample.error = f"stream ended before data: [DONE] after {self._n_events} token events"
        elif self._n_events == 0:
            sample.outcome = _EMPTY
            sample.error = "complete stream without a generated token" + (
                " (usage only)" if self._usage is not None else ""
            )
        else:
            sample.outcome = _OK

    def _finish_whole(self, sample: Sample) -> None:
        body = b"".join(self._body)
        self._body = []
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            sample.outcome, sample.error = _PROTOCOL_ERROR, f"bad JSON body: {exc} (got {_short(body)})"
            return
        if type(obj) is not dict:
            sample.outcome, sample.error = _PROTOCOL_ERROR, f"body is not a JSON object (got {_short(body)})"
            return
        if obj.get("error") is not None:
            sample.outcome, sample.error = _PROTOCOL_ERROR, f"error in body: {_error_text(obj['error'])}"
            return
        apply_usage(obj.get("usage"), sample)
        choices = obj.get("choices")
        generated = self._whole_body(choices) if isinstance(choices, list) else False
        sample.finish_reason = self._finish_reason
        sample.output_chars = self._chars
        if generated:
            sample.outcome = _OK
        else:
            sample.outcome, sample.error = _EMPTY, "response without generated text"

    def _whole_body(self, choices: list[Any]) -> bool:
        """Handle a non-streamed body's `choices`; return True when there is generated text."""
        raise NotImplementedError


def _tool_chars(calls: Any) -> int:
    """Characters of generated tool-call text (function name + arguments) in a list of
    tool-call deltas or messages; 0 when none."""
    n = 0
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                name, args = fn.get("name"), fn.get("arguments")
                if isinstance(name, str):
                    n += len(name)
                if isinstance(args, str):
                    n += len(args)
    return n


def _fn_chars(fn: Any) -> int:
    return _tool_chars([{"function": fn}]) if isinstance(fn, dict) else 0


class OpenAIChatParser(OpenAIStreamParser):
    """Parser of one `/v1/chat/completions` response (streamed or not); see module doc.

    output_chars counts every generated character: content, reasoning (either spelling)
    and tool-call names and arguments. `text` is the content of choice 0.
    """

    __slots__ = ()

    def _chunk(self, choices: Any) -> bool:
        token = False
        for choice in choices:
            delta = choice.get("delta")
            if delta:
                content = delta.get("content")
                if content and type(content) is str:
                    token = True
                    self._chars += len(content)
                    if choice.get("index", 0) == 0:
                        self._parts.append(content)
                for key in ("reasoning_content", "reasoning"):
                    text = delta.get(key)
                    if text and type(text) is str:
                        token = True
                        self._chars += len(text)
                calls = delta.get("tool_calls")
                if calls:
                    n = _tool_chars(calls)
                    if n:
                        token = True
                        self._chars += n
                fn = delta.get("function_call")
                if fn:
                    n = _fn_chars(fn)
                    if n:
                        token = True
                        self._chars += n
            reason = choice.get("finish_reason")
            if reason is not None:
                self._finish_reason = reason
        return token

    def _whole_body(self, choices: list[Any]) -> bool:
        generated = False
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            msg = choice.get("message")
            if isinstance(msg, dict):
                content = msg.get("content")
                if content and isinstance(content, str):
                    generated = True
                    self._chars += len(content)
                    if choice.get("index", 0) == 0:
                        self._parts.append(content)
                for key in ("reasoning_content", "reasoning"):
                    text = msg.get(key)
                    if text and isinstance(text, str):
                        generated = True
                        self._chars += len(text)
                n = _tool_chars(msg.get("tool_calls")) + _fn_chars(msg.get("function_call"))
                if n:
                    generated = True
                    self._chars += n
            reason = choice.get("finish_reason")
            if reason is not None:
                self._finish_reason = reason
        return generated


def _request_meta(item: Any) -> dict[str, Any]:
    """A request's meta: the item's meta plus `reference` when the item has one (for
    graders, workloads/graders.py; meta is never sent)."""
    meta = dict(item.meta)
    if item.reference is not None:
        meta["reference"] = item.reference
    return meta


class OpenAIChatWorkload:
    """Chat-completions requests over a dataset; implements `benchmaker.types.Workload`.

        OpenAIChatWorkload(url, "m", ds)                   # stream, usage requested
        OpenAIChatWorkload(url, "m", ds, stream=False, max_tokens=64, temperature=0.0)
        OpenAIChatWorkload(url, "m", ds, extra_body={"top_p": 0.9}, api_key=key)

    Body (orjson): `{"model", "messages", "stream"}`, plus `"stream_options":
    {"include_usage": true}` when streaming and include_usage, `max_tokens` and
    `temperature` when given, then `extra_body` merged last (its keys win). Messages
    come from `dataset.item(seq).as_messages()`. The spec's meta is the item's meta plus
    `reference` when the item has one (for graders).
    `api_key` is sent as a Bearer token and never put in meta.
    """

    name = "openai-chat"

    def __init__(
        self,
        url: str,
        model: str,
        dataset: Dataset,
        *,
        stream: bool = True,
        max_tokens: int | None = None,
        temperature: float | None = None,
        extra_body: dict[str, Any] | None = None,
        api_key: str | None = None,
        include_usage: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.model = model
        self.dataset = dataset
        self.stream = stream
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.include_usage = include_usage
        self._headers = openai_headers(api_key, stream, headers)

    def body(self, seq: int) -> dict[str, Any]:
        """The JSON body (as a dict) of request `seq`."""
        field, value = self._input(self.dataset.item(seq))
        body: dict[str, Any] = {"model": self.model, field: value, "stream": self.stream}
        if self.stream and self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body

    def _input(self, item: Any) -> tuple[str, Any]:
        """The body's input field of an item: ("messages", chat messages)."""
        return "messages", item.as_messages()

    def request(self, seq: int) -> RequestSpec:
        """The seq-th request (items cycle): POST url with the body of `body(seq)`."""
        return RequestSpec(
            method="POST",
            url=self.url,
            headers=dict(self._headers),
            body=orjson.dumps(self.body(seq)),
            stream=self.stream,
            meta=_request_meta(self.dataset.item(seq)),
        )

    def parser(self, spec: RequestSpec) -> OpenAIChatParser:
        """A fresh parser for the response to `spec`."""
        return OpenAIChatParser(stream=spec.stream)
