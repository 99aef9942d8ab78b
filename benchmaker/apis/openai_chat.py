"""The OpenAI chat completions wire API (`POST /v1/chat/completions`): request headers,
usage, the stream parser that turns `chat.completion.chunk` events into token events, and
the response written back (a `chat.completion` body or its chunk stream, `render_body` /
`render_stream`). The one place that knows this API's stream; the workload
(benchmaker.workloads.openai_chat), the replay model client, the recorder and the replay
server use it.

    wl = OpenAIChatWorkload("http://127.0.0.1:8000/v1/chat/completions", "m", dataset,
                            max_tokens=256)          # streaming, usage requested
    spec = wl.request(seq)                           # before the timed span
    parser = wl.parser(spec)                         # fresh per request
    parser.feed(read_bytes, t_ns, sample)            # once per transport read
    parser.finish(sample)                            # at end of body (status < 400)

What counts (docs/metrics.md): a chunk is a token event when any choice's delta carries
generated output by the one rule of benchmaker/apis/generated.py: non-empty `content` (a string
or typed text parts), reasoning in any spelling (`reasoning_content`, `reasoning`,
`reasoning_text`, `thinking`, `reasoning_details`), `refusal`, a tool call's name or arguments (also
the legacy `function_call`), an audio transcript. A role-only delta, an empty string,
`null`, and a usage-only chunk (`choices: []`) are never tokens. TTFT is the stamp of the
first token event (a refusal delta counts: a refusal is generated output); TTFC
(`first_content_ns`) of the first non-empty `content`. Each token-bearing chunk is one
event; chunks that arrive in the same read share that read's stamp. The protocol states
no per-event token count, so `token_event_tokens` stays None, unless the server sends a
running `usage` on the chunks themselves (vLLM's `stream_options.continuous_usage_stats`):
then an event's count is its `completion_tokens` minus the previous chunk's (the first
token event's: its whole count, so a bundled first chunk is counted as sent), None where
the previous running count is unknown (e.g. usage on the last content chunk only). `refusal` is set
on the sample when any refusal text arrived.

Text split inside a character is joined, not rejected: UTF-8 bytes split across reads stay
in the SSE buffer until their event is complete (benchmaker/engine/sse.py), and a UTF-16
surrogate pair written as JSON escapes split across two events (`"\\ud83d"` then
`"\\ude00"`, as JavaScript servers can emit) is decoded with a fallback decoder (orjson
rejects lone surrogates) and joined in the decoded chunks themselves, before any rule or
subclass reads them: the high half is held back from its event and the character arrives
with the event that completes it (as a partial UTF-8 sequence would), so an event that
held only the half carries no token; a half never paired is dropped, a lone low half
becomes U+FFFD. Every string a parser hands out is valid Unicode.

Usage: the last non-null `usage` object seen wins: a usage-only final chunk
(`choices: []`, OpenAI with `stream_options.include_usage`), usage on the finish chunk
(DeepSeek), or `usage: null` on other chunks. `completion_tokens` → output_tokens (sets
usage_present), `prompt_tokens`, `prompt_tokens_details.cached_tokens` (else DeepSeek's
`prompt_cache_hit_tokens`) → cached_tokens, `completion_tokens_details.reasoning_tokens`.
No usage → all None and usage_present False (never 0).

Model: `sample.model` is the response's `model` field as sent: of the first chunk that
names one (streaming), of the body (non-streaming); None when no object named one.

Finish: `finish_reason` is the last value sent (`null` and `""` mean not finished yet);
`finish_class` its class. The end-of-response rules of benchmaker/apis/generated.py
(`settle`) decide the outcome from that last reason, set `hidden_reasoning_tokens`
(usage reasoning tokens when no reasoning delta arrived) and `usage_invalid_reason`
(counts that cannot be true: above the request's `max_tokens`, prompt + completion !=
total_tokens, summed cumulatively).

Outcome set by finish() (streaming), first match wins:
    protocol_error  a data line that is not a JSON object, an `error` object or an
                    `event: error` in the stream, or the body ended before `data: [DONE]`
                    (a cut stream is a failure even when it carried tokens)
    aborted         a last finish reason of a failing class (abort, error, cancelled);
                    `error` names it. Not a success: out of successful latency and
                    throughput, even when tokens arrived before it. A reason the product
                    does not know completes the response (class `unknown`, outcome ok)
    empty_output    a complete stream without any token event (only [DONE], only usage)
    ok              otherwise (a refusal is ok, flagged `refusal`)
Non-streaming (`stream=False`): the whole JSON body is parsed at finish(). There is no
token timeline: first_token_ns, first_content_ns and token_event_ns stay None (the first
byte of a non-streamed body is not a first token; E2E is the measure). Outcome: bad JSON
or an `error` object → protocol_error; a failing finish class → aborted; no generated
output in any `choices[i].message` → empty_output; else ok.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from orjson import JSONDecodeError, loads

from benchmaker.apis.generated import (
    BodyReader,
    close_whole,
    error_text,
    finish_outcome,
    finish_reason_sent,
    scan_output,
    settle,
    short,
    token_count,
    whole_object,
)
from benchmaker.apis.recorded import RecordedAnswer, RenderedStream, ResponseLike, UsageLike
from benchmaker.engine.records import Sample

__all__ = [
    "OpenAIChatAssembler",
    "OpenAIChatParser",
    "OpenAIStreamParser",
    "apply_usage",
    "assistant_message",
    "chat_assistant",
    "chat_tools",
    "join_surrogates",
    "loads_json",
    "openai_headers",
    "render_body",
    "render_stream",
    "ToolCallDelta",
    "tool_items",
    "usage_object",
]


# A JSON escape of a UTF-16 surrogate (\uD800-\uDFFF): the only input the fallback
# decoder is tried on.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_ANY_SURROGATE = re.compile("[\ud800-\udfff]")


def loads_json(payload: bytes) -> tuple[Any, bool]:
    """Decode one JSON document: `(value, has_surrogates)`.

    orjson first; when it rejects a document that holds JSON-escaped UTF-16 surrogates
    (a lone `\\ud83d` whose pair comes in the next event), the stdlib decoder, which
    keeps lone surrogates as code points (has_surrogates True; join them with
    `join_surrogates`). Raises orjson.JSONDecodeError (orjson's message) when both fail.
    """
    try:
        return orjson.loads(payload), False
    except orjson.JSONDecodeError as exc:
        if _SURROGATE_ESCAPE.search(payload) is not None:
            try:
                return json.loads(payload), True
            except (ValueError, RecursionError):
                pass
        raise exc


def _loads_joined(payload: bytes) -> Any:
    """`loads_json` of a whole body, its surrogate pairs joined (unpaired halves
    become U+FFFD)."""
    obj, surrogates = loads_json(payload)
    if surrogates and (type(obj) is dict or type(obj) is list):
        _join_split_pairs(obj, (), None)
    return obj


def join_surrogates(text: str) -> str:
    """`text` with UTF-16 surrogate pairs joined into their code point and any unpaired
    surrogate replaced by U+FFFD. Text without surrogates is returned as is."""
    if _ANY_SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _join_split_pairs(node: Any, path: tuple[Any, ...], held: dict[tuple[Any, ...], str] | None) -> None:
    """Make every string under `node` (a dict or list, changed in place) surrogate-free.

    With `held` (streaming): a string that ends with a high surrogate gives it up to
    `held[path]`, and the string at the same path in the next event starts with it, so a
    pair split across two events is joined in the event that completes the character.
    Without (`None`, a whole body): unpaired halves become U+FFFD."""
    items = node.items() if type(node) is dict else enumerate(node)
    for key, value in items:
        if type(value) is str:
            at = (*path, key)
            first = held.pop(at, "") if held else ""
            if first or _ANY_SURROGATE.search(value) is not None:
                value = first + value
                if held is not None and value and "\ud800" <= value[-1] <= "\udbff":
                    held[at] = value[-1]
                    value = value[:-1]
                node[key] = join_surrogates(value)
        elif type(value) is dict or type(value) is list:
            _join_split_pairs(value, (*path, key), held)


def openai_headers(api_key: str | None, stream: bool, extra: dict[str, str] | None) -> dict[str, str]:
    """Request headers: JSON content type, `Accept: text/event-stream` when streaming,
    `Authorization: Bearer KEY` when api_key is set, then `extra` (wins on conflicts)."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if stream else "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if extra:
        headers.update(extra)
    return headers


def apply_usage(usage: Any, sample: Sample) -> None:
    """Copy an OpenAI `usage` object onto the sample (see module docstring). Fields that
    are absent or not non-negative ints stay None; usage_present is True only when
    `completion_tokens` is such an int."""
    if not isinstance(usage, dict):
        return
    sample.prompt_tokens = token_count(usage.get("prompt_tokens"))
    sample.output_tokens = token_count(usage.get("completion_tokens"))
    sample.usage_present = sample.output_tokens is not None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")  # DeepSeek
    sample.cached_tokens = token_count(cached)
    cdetails = usage.get("completion_tokens_details")
    sample.reasoning_tokens = token_count(cdetails.get("reasoning_tokens")) if isinstance(cdetails, dict) else None


class OpenAIStreamParser(BodyReader):
    """Shared machinery of OpenAI-style parsers: SSE framing, `[DONE]`, bad JSON (with the
    split-surrogate fallback) and `error` objects, usage, finish_reason and its class,
    refusal and the outcome. Subclasses implement `_chunk(choices) -> bool` (a token
    event?) and `_whole_body(choices) -> bool` (generated output?), and report each
    choice's finish reason with `_finished(reason)` and any reasoning delta with
    `_reasoning_seen = True`.

    `max_tokens` is the request's cap on generated tokens (None: none sent): a usage
    count above it is flagged (`usage_invalid_reason`). `text` is the generated
    `content` (choice index 0) so far.
    """

    __slots__ = (
        "_parts",
        "_done",
        "_usage",
        "_finish_reason",
        "_reasoning_seen",
        "_last_by_choice",
        "_running_ct",
        "_event_tokens",
        "_max_tokens",
        "_refusal",
        "_held",
        "_events",
    )

    def __init__(self, stream: bool = True, max_tokens: int | None = None) -> None:
        super().__init__(stream)
        self._max_tokens = max_tokens
        self._parts: list[str] = []
        self._done = False  # saw data: [DONE]
        self._usage: Any = None
        self._finish_reason: str | None = None
        self._reasoning_seen = False  # a reasoning delta arrived
        self._last_by_choice: dict[Any, str] = {}  # choice index -> its last stated reason
        self._running_ct: int | None = None  # completion_tokens of the last chunk-level usage
        self._event_tokens: list[int | None] | None = None  # sample.token_event_tokens, once stated
        self._refusal = False  # refusal text seen
        self._held: dict[tuple[Any, ...], str] = {}  # high surrogates awaiting their pair, by path
        self._events: list[int] = []  # sample.token_event_ns from the first token event

    @property
    def text(self) -> str:
        """Generated `content` text so far (reasoning and tool calls excluded)."""
        return "".join(self._parts)

    @property
    def ended(self) -> bool:
        """True once `data: [DONE]` arrived (the stream is complete)."""
        return self._done

    @property
    def usage(self) -> dict[str, Any] | None:
        """The server's usage object: the last non-null `usage` of a stream, or the
        `usage` of a whole body; None when it sent none."""
        usage = self._usage
        return usage if isinstance(usage, dict) else None

    # -- streaming ------------------------------------------------------------------

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """Parse one transport read that arrived at `t_ns` (ns from run t0)."""
        for event, payload in self._read(data):
            if self._done:
                continue  # events after [DONE] carry nothing we measure
            if payload == b"[DONE]":
                self._done = True
                continue
            if event == "error":
                self._fail(f"error event in stream: {short(payload)}")
                continue
            try:
                obj = loads(payload)
                surrogates = False
            except JSONDecodeError:
                try:
                    obj, surrogates = loads_json(payload)
                except JSONDecodeError as exc:
                    self._fail(f"bad JSON in data line: {exc} (got {short(payload)})")
                    continue
            if type(obj) is not dict:
                self._fail(f"data line is not a JSON object (got {short(payload)})")
                continue
            if sample.model is None:
                model = obj.get("model")
                if type(model) is str:
                    sample.model = model
            if surrogates or self._held:
                choices = obj.get("choices")
                if type(choices) is list:  # join pairs split across events, by choice index
                    for pos, choice in enumerate(choices):
                        if type(choice) is dict:
                            _join_split_pairs(choice, (choice.get("index", pos),), self._held)
            err = obj.get("error")
            if err is not None:
                self._fail(f"error in stream: {error_text(err)}")
                for choice in obj.get("choices") or ():  # OpenRouter: finish_reason "error" beside it
                    if type(choice) is dict:
                        self._finished(choice.get("finish_reason"), choice.get("index", 0))
                continue
            usage = obj.get("usage")
            ct = None
            if usage is not None:
                self._usage = usage
                if type(usage) is dict:
                    ct = usage.get("completion_tokens")
                    if type(ct) is not int or ct < 0:
                        ct = None
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
                    self._events.append(t_ns)
                self._n_events += 1
                sample.n_token_events += 1
                if sample.first_content_ns is None and self._parts:
                    sample.first_content_ns = t_ns
                if ct is not None or self._event_tokens is not None:
                    self._count_event(ct, sample)
            elif ct is not None and choices:
                self._running_ct = ct  # a chunk without tokens (the role chunk): its running count

    def _count_event(self, ct: int | None, sample: Sample) -> None:
        """Record the token count of the token event just appended, from its chunk's
        running `completion_tokens` (module docstring)."""
        tokens = self._event_tokens
        if tokens is None:
            tokens = self._event_tokens = sample.token_event_tokens = [None] * (self._n_events - 1)
        last = self._running_ct
        if last is None and self._n_events == 1:
            last = 0
        tokens.append(ct - last if ct is not None and last is not None and ct >= last else None)
        if ct is not None:
            self._running_ct = ct

    def _chunk(self, choices: Any) -> bool:
        """Handle one chunk's `choices`; return True when it carries generated text.
        Updates text, chars and finish_reason. Subclasses define the delta shape."""
        raise NotImplementedError

    def _finished(self, reason: Any, index: Any = 0) -> None:
        """Record the finish reason choice `index` stated; `null` and `""` (not finished
        yet) are ignored. The last stated reason is `finish_reason`; each choice's last
        reason decides its outcome (benchmaker/apis/generated.py), and the response fails
        when one choice's does."""
        reason = finish_reason_sent(reason)
        if reason is not None:
            self._finish_reason = reason
            self._last_by_choice[index] = reason

    def _ending(self, sample: Sample) -> str | None:
        """Set finish_reason, finish_class, refusal, output_chars, hidden reasoning and
        the usage check on the sample (usage applied first); return the `error` of a
        failing finish class, else None."""
        sample.refusal = self._refusal
        sample.output_chars = self._chars
        usage = self._usage
        total = usage.get("total_tokens") if isinstance(usage, dict) else None
        decisive = self._finish_reason
        for reason in self._last_by_choice.values():  # n > 1: the first choice that failed decides
            if finish_outcome(reason)[1] is not None:
                decisive = reason
                break
        error = settle(
            sample, decisive, reasoning_seen=self._reasoning_seen, total_tokens=total, max_tokens=self._max_tokens
        )
        sample.finish_reason = self._finish_reason
        return error

    # -- end of body -------------------------------------------------------------------

    def _finish_stream(self, sample: Sample) -> None:
        self._done = self._close_sse(self._done, done=True)  # a last [DONE] without its blank line: complete
        apply_usage(self._usage, sample)
        self._close(
            sample,
            complete=self._done,
            failed=self._ending(sample),
            end="data: [DONE]",
            empty="complete stream without a generated token" + (" (usage only)" if self._usage is not None else ""),
        )

    def _finish_whole(self, sample: Sample) -> None:
        obj = whole_object(self._whole(), sample, loads=_loads_joined)
        if obj is None:
            return
        self._usage = obj.get("usage")  # kept, as a stream's (benchmaker.agent.model_client reads it)
        apply_usage(self._usage, sample)
        choices = obj.get("choices")
        generated = self._whole_body(choices) if isinstance(choices, list) else False
        close_whole(sample, self._ending(sample), generated)

    def _whole_body(self, choices: list[Any]) -> bool:
        """Handle a non-streamed body's `choices`; return True when there is generated text."""
        raise NotImplementedError


class OpenAIChatParser(OpenAIStreamParser):
    """Parser of one `/v1/chat/completions` response (streamed or not); see module doc.

    output_chars counts every generated character (benchmaker/apis/generated.py: content,
    reasoning, refusal, tool-call names and arguments) of every choice. `text` is the
    content of choice 0.
    """

    __slots__ = ()

    def _chunk(self, choices: Any) -> bool:
        return self._choices(choices, "delta")

    def _whole_body(self, choices: list[Any]) -> bool:
        return self._choices(choices, "message")

    def _choices(self, choices: Any, key: str) -> bool:
        """Take the generated output of each choice's `key` (`delta` or `message`) and
        its finish reason; True when any choice generated something."""
        generated = False
        for choice in choices:
            if type(choice) is not dict:
                continue
            msg = choice.get(key)
            if msg and type(msg) is dict:
                content = msg.get("content")
                if len(msg) == 1 and type(content) is str:  # the common delta: text only
                    chars, refusal = len(content), False
                else:
                    content, chars, refusal, reasoning = scan_output(msg)
                    if reasoning:
                        self._reasoning_seen = True
                if chars:
                    generated = True
                    self._chars += chars
                    if content and choice.get("index", 0) == 0:
                        self._parts.append(content)
                    if refusal:
                        self._refusal = True
            reason = choice.get("finish_reason")
            if reason is not None:
                self._finished(reason, choice.get("index", 0))
        return generated


@dataclass(slots=True)
class ToolCallDelta:
    """A tool call reassembled from stream deltas (by `index`); `arguments` is the
    concatenation of every argument fragment, byte-exact."""

    index: int
    id: str | None = None
    type: str = "function"
    name: str = ""
    arguments: str = ""


class OpenAIChatAssembler(OpenAIChatParser):
    """The OpenAI chat parser (token events, usage, finish_reason, outcome) that also
    keeps the assistant message of choice 0:
    `content`/`reasoning` (None when no delta carried the field, "" when deltas carried
    it empty) and `tool_calls` (reassembled by index, in the order first seen).
    Text parts are kept in lists and joined once (a turn streams one chunk per token)."""

    __slots__ = ("_content", "_reasoning", "tool_calls", "_by_index")

    def __init__(self, stream: bool = True, max_tokens: int | None = None) -> None:
        super().__init__(stream, max_tokens)
        self._content: list[str] | None = None
        self._reasoning: list[str] | None = None
        self.tool_calls: list[ToolCallDelta] = []
        self._by_index: dict[Any, ToolCallDelta] = {}

    @property
    def content(self) -> str | None:
        return None if self._content is None else "".join(self._content)

    @property
    def reasoning(self) -> str | None:
        return None if self._reasoning is None else "".join(self._reasoning)

    def raw_usage(self) -> dict[str, Any] | None:
        """The server's usage object as sent (`usage`); the one name every assembler of
        an assistant message answers to (benchmaker.agent.wire_calls has the others)."""
        return self.usage

    def _chunk(self, choices: Any) -> bool:
        token = super()._chunk(choices)
        for choice in choices:
            if type(choice) is dict and choice.get("index", 0) == 0:
                delta = choice.get("delta")
                if delta and type(delta) is dict:
                    self._delta(delta)
        return token

    def _delta(self, delta: dict[str, Any]) -> None:
        c = delta.get("content")
        if type(c) is str:
            if self._content is None:
                self._content = [c]
            else:
                self._content.append(c)
            if len(delta) == 1:  # the common delta: text only
                return
        for key in ("reasoning_content", "reasoning"):
            rc = delta.get(key)
            if type(rc) is str:
                if self._reasoning is None:
                    self._reasoning = [rc]
                else:
                    self._reasoning.append(rc)
        tcds = delta.get("tool_calls")
        if not tcds:
            return
        for tcd in tcds:
            if not isinstance(tcd, dict):
                continue
            idx = tcd.get("index", len(self.tool_calls))
            tc = self._by_index.get(idx)
            if tc is None:
                tc = self._by_index[idx] = ToolCallDelta(index=idx)
                self.tool_calls.append(tc)
            if tcd.get("id"):
                tc.id = tcd["id"]
            if tcd.get("type"):
                tc.type = tcd["type"]
            fn = tcd.get("function")
            if fn and type(fn) is dict:
                name, args = fn.get("name"), fn.get("arguments")
                if type(name) is str:
                    tc.name += name
                if type(args) is str:
                    tc.arguments += args

    def _whole_body(self, choices: list[Any]) -> bool:
        generated = super()._whole_body(choices)
        for ch in choices:
            if type(ch) is dict and ch.get("index", 0) == 0:
                msg = ch.get("message")
                if type(msg) is dict:
                    self._message(msg)
                break
        return generated

    def _message(self, msg: dict[str, Any]) -> None:
        """Keep a whole body's assistant message: content, the first reasoning string of
        `reasoning_content` / `reasoning`, and each tool call (by its position)."""
        content = msg.get("content")
        if type(content) is str:
            self._content = [content]
        text = msg.get("reasoning_content")
        if type(text) is not str:
            text = msg.get("reasoning")
        if type(text) is str:
            self._reasoning = [text]
        for i, tc in enumerate(msg.get("tool_calls") or ()):
            if not isinstance(tc, dict):
                continue
            fn = tc.get("function") or {}
            name, args = fn.get("name") or "", fn.get("arguments") or ""
            self.tool_calls.append(ToolCallDelta(i, tc.get("id"), tc.get("type", "function"), name, args))


def chat_tools(req: Any) -> list[dict[str, Any]] | None:
    """The tool definitions of a chat completions request body (`req`, parsed JSON): its
    `tools` array as sent (`{"type": "function", "function": {"name", "description",
    "parameters"}}` or `{"type": "custom", "custom": {...}}`, openai-python
    `ChatCompletionToolUnionParam`), the items that are objects; None when the request
    has no non-empty `tools` list."""
    return tool_items(req) or None


def tool_items(req: Any) -> list[dict[str, Any]]:
    """The objects of a request body's `tools` list, in order, any API ([] when `req` is
    not an object or has no `tools` list); each API's `chat_tools` reads them."""
    tools = req.get("tools") if isinstance(req, dict) else None
    return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []


# -- the response written back ---------------------------------------------------------
#
# Shapes (reasoning as vLLM/DeepSeek `reasoning_content`):
# - non-streamed: {"id", "object": "chat.completion", "created", "model", "choices":
#   [{"index": 0, "message": assistant_message, "logprobs": null, "finish_reason"}],
#   "usage" (only when recorded)}.
# - streamed: `data: <chat.completion.chunk>` events: the role delta {"role":
#   "assistant", "content": "" (null when the recorded content is null)}; one event per
#   token piece (reasoning_content pieces, content pieces, per tool call a head delta
#   {"index", "id", "type": "function", "function": {"name", "arguments": ""}} then
#   {"index", "function": {"arguments": piece}} pieces); a finish event (delta {},
#   finish_reason); with include_usage and recorded usage, {"choices": [], "usage"};
#   then `data: [DONE]`.


def usage_object(usage: UsageLike | None) -> dict[str, Any] | None:
    """The chat completions `usage` object of recorded usage: the fields that are not None
    among prompt_tokens, completion_tokens, total_tokens,
    prompt_tokens_details.cached_tokens, completion_tokens_details.reasoning_tokens;
    None when nothing was recorded."""
    if usage is None:
        return None
    out: dict[str, Any] = {}
    for name, value in (
        ("prompt_tokens", usage.prompt_tokens),
        ("completion_tokens", usage.completion_tokens),
        ("total_tokens", usage.total_tokens),
    ):
        if value is not None:
            out[name] = value
    if usage.cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
    if usage.reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return out or None


def chat_assistant(content: str | None, reasoning: str | None, calls: list[tuple[Any, Any, str]]) -> dict[str, Any]:
    """A chat completions assistant message: {"role": "assistant", "content": str|null,
    "reasoning_content" (only when `reasoning` is not None), "tool_calls" (only when
    any): [{"id", "type": "function", "function": {"name", "arguments"}}]}, one per
    (id, name, arguments JSON text) of `calls`."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in calls
        ]
    return message


def assistant_message(resp: ResponseLike) -> dict[str, Any]:
    """The assistant message (`chat_assistant`) of a recorded response, each call's
    arguments as recorded (`arguments_raw`)."""
    return chat_assistant(resp.content, resp.reasoning, [(tc.id, tc.name, tc.arguments_raw) for tc in resp.tool_calls])


def render_body(answer: RecordedAnswer, *, completion_id: str, model: str, created: int) -> bytes:
    """The non-streamed `chat.completion` body of a recorded answer (shapes above), with
    the recorded finish_reason as is; `created` in unix s."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": assistant_message(answer.response),
                "logprobs": None,
                "finish_reason": answer.response.finish_reason,
            }
        ],
    }
    usage = usage_object(answer.usage)
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


def render_stream(
    answer: RecordedAnswer,
    *,
    completion_id: str,
    model: str,
    created: int,
    splitter: Callable[[str], list[str]],
) -> RenderedStream:
    """The `chat.completion.chunk` stream of a recorded answer (shapes above): head the
    role event; one event per piece of `splitter`; tail the finish event and
    `data: [DONE]`; tail_usage the same with the usage chunk between them (the tail
    when no usage was recorded)."""
    resp = answer.response
    usage = usage_object(answer.usage)
    # Every chunk is head + delta JSON + (finish_reason) + end: rendered by hand around
    # orjson-encoded deltas, identical to orjson.dumps of the whole chunk object.
    head = (
        b'data: {"id":'
        + orjson.dumps(completion_id)
        + b',"object":"chat.completion.chunk","created":'
        + str(created).encode()
        + b',"model":'
        + orjson.dumps(model)
        + b',"choices":[{"index":0,"delta":'
    )
    end = b',"logprobs":null,"finish_reason":null}]}\n\n'

    def chunk(delta: dict[str, Any]) -> bytes:
        return head + orjson.dumps(delta) + end

    events = [chunk({"reasoning_content": piece}) for piece in splitter(resp.reasoning or "")]
    events += [chunk({"content": piece}) for piece in splitter(resp.content or "")]
    for i, tc in enumerate(resp.tool_calls):
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": i, "id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": ""}}
                    ]
                }
            )
        )
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            for piece in splitter(tc.arguments_raw)
        ]
    role = chunk({"role": "assistant", "content": "" if resp.content is not None else None})
    finish = head + b'{},"logprobs":null,"finish_reason":' + orjson.dumps(resp.finish_reason) + b"}]}\n\n"
    done = b"data: [DONE]\n\n"
    tail_usage = None
    if usage is not None:
        usage_chunk = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }
        tail_usage = finish + b"data: " + orjson.dumps(usage_chunk) + b"\n\n" + done
    return RenderedStream(head=role, events=events, tail=finish + done, tail_usage=tail_usage)
