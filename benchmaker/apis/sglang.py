"""SGLang's native generation wire API (`POST /generate`): the one place that knows its
response, streamed or whole, and how to read it into token events (SGLangParser). The
engine's workload (benchmaker.workloads.sglang) builds the requests.

    parser = SGLangParser(stream=True, incremental=False, max_tokens=256)
    parser.feed(read_bytes, t_ns, sample)     # once per transport read
    parser.finish(sample)                     # at end of body (status < 400)

Stream format (sgl-project/sglang `python/sglang/srt/entrypoints/http_server.py`,
`generate_request`): each event is `data: <JSON>\\n\\n` holding `{"text": str,
"meta_info": {...}}`, an error is `data: {"error": {"message": ...}}`, the stream ends
with `data: [DONE]`. By default `text` is CUMULATIVE: each event carries the whole text
so far, so the new text of an event is `text[len(previous text):]`. (A server started
with `--incremental-streaming-output` sends deltas instead: pass `incremental=True`.)
`meta_info` (tokenizer_manager) carries `prompt_tokens`, `completion_tokens` (so far),
`cached_tokens`, newer servers `reasoning_tokens`, and `finish_reason`: null until the
last event, then an object `{"type": "stop"|"length"|"abort", ...}`.

Token events: an event whose new text is non-empty is one token event at its read's
stamp (TTFT = the first; SGLang text is content, so `first_content_ns` = `first_token_ns`).
`token_event_tokens[i]` = completion_tokens at event i minus completion_tokens at the
previous token event (0 before the first), which makes token-weighted ITL exact; None
when either count is missing or decreases. Tokens that produced no visible text (a
partial UTF-8 sequence) are counted in the next token event; tokens after the last
token event (e.g. the stop token) are in `output_tokens` only.

Usage: from the last `meta_info` seen: completion_tokens → output_tokens (sets
usage_present), prompt_tokens, cached_tokens, reasoning_tokens. Missing → None.
finish_reason: the `type` of the last non-null `finish_reason` (a plain string is kept);
finish_class: its class by the one rule of benchmaker/apis/generated.py (SGLang sends `stop`,
`length`, `abort`), as for OpenAI chat.

Generated output is the same rule as for OpenAI chat (benchmaker/apis/generated.py) over the
fields /generate carries: non-empty new `text`, or, from a server started with
`--skip-tokenizer-init` (events with `output_ids` and no `text`; SGLang versions differ on
whether the ids are cumulative), new token ids: an event is a token event when its
`completion_tokens` grew (or, without it, when its id list is non-empty); output_chars
stays 0 there. Outcome set by finish() (streaming), first
match wins:
    protocol_error  bad JSON or not an object, an `error` object, cumulative text that
                    does not extend the previous event's text, or no `data: [DONE]` at
                    the end
    aborted         a finish reason of a failing class (`abort`, with its message, and
                    error, cancelled), even after text; a reason the product does not
                    know completes the response (class `unknown`; apis/generated.py)
    empty_output    a complete stream without new text
    ok              otherwise
Non-streaming: the body is one JSON object `{"text", "meta_info"}`; no token timeline
(first_token_ns stays None). Bad JSON or an `error` object → protocol_error; a failing
finish class → aborted; empty text → empty_output; else ok.
"""

from __future__ import annotations

from typing import Any

from benchmaker.apis.generated import (
    BodyReader,
    close_whole,
    error_text,
    finish_reason_sent,
    settle,
    short,
    token_count,
    whole_object,
)
from benchmaker.engine.records import Sample

__all__ = ["SGLangParser"]


class SGLangParser(BodyReader):
    """Parser of one `/generate` response (streamed or not); see the module docstring.

    `text` is the generated text so far. `incremental=True` reads each event's `text` as
    a delta instead of the whole text so far.
    """

    __slots__ = (
        "incremental",
        "_text",
        "_done",
        "_meta",
        "_finish",
        "_last_ct",
        "_ids",
        "_max_tokens",
    )

    def __init__(self, stream: bool = True, incremental: bool = False, max_tokens: int | None = None) -> None:
        super().__init__(stream)
        self.incremental = incremental
        self._max_tokens = max_tokens  # the request's max_new_tokens: a count above it is flagged
        self._text = ""
        self._done = False
        self._meta: dict[str, Any] | None = None  # last meta_info
        self._finish: Any = None  # last non-null finish_reason
        self._last_ct: int | None = 0  # completion_tokens at the previous token event
        self._ids = False  # token-id output seen (no text)

    @property
    def text(self) -> str:
        """Generated text so far."""
        return self._text

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """Parse one transport read that arrived at `t_ns` (ns from run t0)."""
        for _event, payload in self._read(data):
            if self._done:
                continue
            if payload == b"[DONE]":
                self._done = True
                continue
            obj = self._object(payload)
            if obj is None:
                continue
            if obj.get("error") is not None:
                self._fail(f"error in stream: {error_text(obj['error'])}")
                continue
            meta = obj.get("meta_info")
            if isinstance(meta, dict):
                self._meta = meta
                if meta.get("finish_reason") is not None:
                    self._finish = meta["finish_reason"]
            text = obj.get("text")
            ct = token_count(meta.get("completion_tokens")) if isinstance(meta, dict) else None
            if type(text) is not str:
                # token-id output (server with --skip-tokenizer-init): no text, only
                # `output_ids` (cumulative or new ids by version), so new tokens are read
                # from completion_tokens, else from a non-empty id list
                ids = obj.get("output_ids")
                if type(ids) is list and ids and (ct is None or self._last_ct is None or ct > self._last_ct):
                    self._ids = True
                    self._token_event(ct, t_ns, sample)
                continue
            if self.incremental:
                delta = text
            elif text.startswith(self._text):
                delta = text[len(self._text) :]
            else:
                self._fail(
                    f"cumulative text does not extend the previous event's text after {self._n_events} "
                    f"token events (got {short(text)}); incremental streaming output?"
                )
                continue
            if not delta:
                continue
            self._text += delta
            self._token_event(ct, t_ns, sample)

    def _token_event(self, ct: int | None, t_ns: int, sample: Sample) -> None:
        """One token event at `t_ns`; `ct` is completion_tokens so far (None: unknown)."""
        last = self._last_ct
        k = ct - last if ct is not None and last is not None and ct >= last else None
        self._last_ct = ct
        if self._n_events == 0:
            sample.first_token_ns = t_ns
            sample.first_content_ns = t_ns
            sample.token_event_ns = [t_ns]
            sample.token_event_tokens = [k]
        elif sample.token_event_ns is not None and sample.token_event_tokens is not None:  # set by the first
            sample.token_event_ns.append(t_ns)
            sample.token_event_tokens.append(k)
        self._n_events += 1
        sample.n_token_events += 1

    def _apply_meta(self, sample: Sample) -> str | None:
        """Set usage, finish_reason, finish_class and output_chars on the sample; return
        the `error` of a failing finish class, else None."""
        meta = self._meta
        if meta is not None:
            sample.prompt_tokens = token_count(meta.get("prompt_tokens"))
            sample.output_tokens = token_count(meta.get("completion_tokens"))
            sample.usage_present = sample.output_tokens is not None
            sample.cached_tokens = token_count(meta.get("cached_tokens"))
            sample.reasoning_tokens = token_count(meta.get("reasoning_tokens"))
        reason = self._finish
        kind: Any = reason.get("type") if isinstance(reason, dict) else reason
        if not isinstance(kind, str):
            kind = reason
        sample.output_chars = len(self._text)
        # /generate's `text` carries the reasoning as generated: nothing is hidden
        error = settle(sample, finish_reason_sent(kind), reasoning_seen=True, max_tokens=self._max_tokens)
        if error is None:
            return None
        msg = reason.get("message") if isinstance(reason, dict) else None
        return f"{error}: {msg}" if isinstance(msg, str) and msg else error

    def _finish_stream(self, sample: Sample) -> None:
        self._done = self._close_sse(self._done, done=True)
        self._close(
            sample,
            complete=self._done,
            failed=self._apply_meta(sample),
            end="data: [DONE]",
            empty="complete stream without generated text",
        )

    def _finish_whole(self, sample: Sample) -> None:
        obj = whole_object(self._whole(), sample)
        if obj is None:
            return
        meta = obj.get("meta_info")
        if isinstance(meta, dict):
            self._meta = meta
            self._finish = meta.get("finish_reason")
        text = obj.get("text")
        self._text = text if isinstance(text, str) else ""
        ids = obj.get("output_ids")
        self._ids = text is None and isinstance(ids, list) and bool(ids)
        close_whole(sample, self._apply_meta(sample), bool(self._text or self._ids))
