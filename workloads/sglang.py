"""SGLang native generation (`POST /generate`): request building and the stream parser
that turns cumulative-text events into token events.

    wl = SGLangWorkload("http://127.0.0.1:30000/generate", dataset, max_new_tokens=256)
    wl = SGLangWorkload(url, input_ids=[[1, 2, 3], [4, 5]])     # token ids instead of text
    spec = wl.request(seq)                                      # before the timed span
    parser = wl.parser(spec)                                    # fresh per request
    parser.feed(read_bytes, t_ns, sample)                       # once per transport read
    parser.finish(sample)                                       # at end of body (status < 400)

Request body (orjson): `{"text": PROMPT | "input_ids": [int, ...], "sampling_params":
{...}, "stream": bool}`; sampling_params holds `max_new_tokens` and `temperature` when
given, then `sampling_params` merged over them; `extra_body` is merged last at the top
level (e.g. `{"rid": ...}`, `{"return_logprob": true}`). Text prompts are the dataset
items' `as_prompt()` (chat messages joined without a template: /generate takes raw text).

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

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from benchmaker.apis.generated import finish_reason_sent, settle
from benchmaker.apis.openai_chat import openai_headers
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import Outcome, RequestSpec, Sample
from benchmaker.engine.sse import SSEParser
from benchmaker.workloads.datasets import Dataset, DatasetError

__all__ = ["SGLangParser", "SGLangWorkload", "read_input_ids"]

_OK = Outcome.OK.value
_PROTOCOL_ERROR = Outcome.PROTOCOL_ERROR.value
_EMPTY = Outcome.EMPTY_OUTPUT.value
_ABORTED = Outcome.ABORTED.value


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _short(data: bytes | str, limit: int = 200) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else text[:limit] + "..."


def _error_text(err: Any) -> str:
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    return _short(orjson.dumps(err))


class SGLangParser:
    """Parser of one `/generate` response (streamed or not); see the module docstring.

    `text` is the generated text so far. `incremental=True` reads each event's `text` as
    a delta instead of the whole text so far.
    """

    __slots__ = (
        "stream",
        "incremental",
        "_text",
        "_sse",
        "_done",
        "_error",
        "_meta",
        "_finish",
        "_n_events",
        "_n_sse",
        "_last_ct",
        "_body",
        "_head",
        "_ids",
        "_max_tokens",
    )

    def __init__(self, stream: bool = True, incremental: bool = False, max_tokens: int | None = None) -> None:
        self.stream = stream
        self.incremental = incremental
        self._max_tokens = max_tokens  # the request's max_new_tokens: a count above it is flagged
        self._text = ""
        self._sse = SSEParser()
        self._done = False
        self._error: str | None = None
        self._meta: dict[str, Any] | None = None  # last meta_info
        self._finish: Any = None  # last non-null finish_reason
        self._n_events = 0  # token events
        self._n_sse = 0
        self._last_ct: int | None = 0  # completion_tokens at the previous token event
        self._body: list[bytes] = []
        self._head = b""
        self._ids = False  # token-id output seen (no text)

    @property
    def text(self) -> str:
        """Generated text so far."""
        return self._text

    def _fail(self, message: str) -> None:
        if self._error is None:
            self._error = message

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        """Parse one transport read that arrived at `t_ns` (ns from run t0)."""
        if not self.stream:
            self._body.append(data)
            return
        if not self._head:
            self._head = data[:200]
        for _event, payload in self._sse.feed(data):
            self._n_sse += 1
            if self._done:
                continue
            if payload == b"[DONE]":
                self._done = True
                continue
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError as exc:
                self._fail(f"bad JSON in data line: {exc} (got {_short(payload)})")
                continue
            if type(obj) is not dict:
                self._fail(f"data line is not a JSON object (got {_short(payload)})")
                continue
            if obj.get("error") is not None:
                self._fail(f"error in stream: {_error_text(obj['error'])}")
                continue
            meta = obj.get("meta_info")
            if isinstance(meta, dict):
                self._meta = meta
                if meta.get("finish_reason") is not None:
                    self._finish = meta["finish_reason"]
            text = obj.get("text")
            ct = _int_or_none(meta.get("completion_tokens")) if isinstance(meta, dict) else None
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
                    f"token events (got {_short(text)}); incremental streaming output?"
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
            sample.prompt_tokens = _int_or_none(meta.get("prompt_tokens"))
            sample.output_tokens = _int_or_none(meta.get("completion_tokens"))
            sample.usage_present = sample.output_tokens is not None
            sample.cached_tokens = _int_or_none(meta.get("cached_tokens"))
            sample.reasoning_tokens = _int_or_none(meta.get("reasoning_tokens"))
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

    def finish(self, sample: Sample) -> None:
        """Body ended (status < 400): set usage, finish_reason, output_chars, outcome."""
        if not self.stream:
            self._finish_whole(sample)
            return
        cut = self._sse.close()
        if cut is not None and not self._done:
            if cut == b"[DONE]":
                self._done = True
            else:
                self._fail(f"stream ended inside an event (got {_short(cut)})")
        failed = self._apply_meta(sample)
        if self._error is not None:
            sample.outcome, sample.error = _PROTOCOL_ERROR, self._error
        elif not self._done:
            sample.outcome = _PROTOCOL_ERROR
            sample.error = (
                f"no SSE event in body (got {_short(self._head)})"
                if self._n_sse == 0
                else f"stream ended before data: [DONE] after {self._n_events} token events"
            )
        elif failed is not None:
            sample.outcome, sample.error = _ABORTED, failed
        elif self._n_events == 0:
            sample.outcome, sample.error = _EMPTY, "complete stream without generated text"
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
        meta = obj.get("meta_info")
        if isinstance(meta, dict):
            self._meta = meta
            self._finish = meta.get("finish_reason")
        text = obj.get("text")
        self._text = text if isinstance(text, str) else ""
        ids = obj.get("output_ids")
        self._ids = text is None and isinstance(ids, list) and bool(ids)
        failed = self._apply_meta(sample)
        if self._error is not None:
            sample.outcome, sample.error = _PROTOCOL_ERROR, self._error
        elif failed is not None:
            sample.outcome, sample.error = _ABORTED, failed
        elif self._text or self._ids:
            sample.outcome = _OK
        else:
            sample.outcome, sample.error = _EMPTY, "response without generated text"


def read_input_ids(path: str | Path) -> list[list[int]]:
    """Token-id prompts from a JSONL file: each non-blank line a JSON array of ints >= 0
    or an object with such an array under `input_ids`. Raises DatasetError
    `path:line: input_ids: problem (got VALUE)` at the first bad line, or when empty."""
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot open ({exc.strerror})") from exc
    rows: list[list[int]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{lineno}: bad JSON: {exc} (got {_short(line[:80])})") from exc
        ids = obj.get("input_ids") if isinstance(obj, dict) else obj
        rows.append(_check_ids(ids, f"{path}:{lineno}: input_ids"))
    if not rows:
        raise DatasetError(f"{path}: no items (empty file)")
    return rows


def _check_ids(ids: Any, where: str) -> list[int]:
    if not isinstance(ids, list) or not ids or not all(type(i) is int and i >= 0 for i in ids):
        raise DatasetError(f"{where}: expected a non-empty list of ints >= 0 (got {_short(repr(ids)[:80])})")
    return ids


class SGLangWorkload:
    """`/generate` requests over a dataset (text) or token-id lists; implements
    `benchmaker.engine.types.Workload`.

        SGLangWorkload(url, ds)                                      # stream text prompts
        SGLangWorkload(url, ds, max_new_tokens=64, temperature=0.0)  # sampling_params
        SGLangWorkload(url, input_ids=[[1, 2, 3]], stream=False)     # token ids, one body

    Give exactly one of `dataset` and `input_ids` (ConfigError otherwise; DatasetError on
    a bad id list). Requests cycle through the items in order. The spec's meta is the
    item's meta plus `reference` when the item has one (for graders; never sent);
    input_ids items get `{"dataset": "input_ids", "row": i, "input_tokens": n}`.
    `api_key` is sent as a Bearer token and never put in meta.
    """

    name = "sglang"

    def __init__(
        self,
        url: str,
        dataset: Dataset | None = None,
        *,
        input_ids: Sequence[Sequence[int]] | None = None,
        stream: bool = True,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        sampling_params: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        incremental: bool = False,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if (dataset is None) == (input_ids is None):
            raise ConfigError("sglang: give exactly one of a dataset (text prompts) or input_ids")
        self.url = url
        self.dataset = dataset
        self.input_ids = (
            [_check_ids(list(ids), f"input_ids[{i}]") for i, ids in enumerate(input_ids)]
            if input_ids is not None
            else None
        )
        if self.input_ids is not None and not self.input_ids:
            raise DatasetError("input_ids: no items")
        self.stream = stream
        self.incremental = incremental
        self.sampling_params: dict[str, Any] = {}
        if max_new_tokens is not None:
            self.sampling_params["max_new_tokens"] = max_new_tokens
        if temperature is not None:
            self.sampling_params["temperature"] = temperature
        self.sampling_params.update(sampling_params or {})
        self.extra_body = dict(extra_body or {})
        self._headers = openai_headers(api_key, stream, headers)

    def _item(self, seq: int) -> tuple[str, Any, dict[str, Any]]:
        """(input field, value, meta) of request `seq`."""
        if self.input_ids is not None:
            i = seq % len(self.input_ids)
            ids = self.input_ids[i]
            return "input_ids", ids, {"dataset": "input_ids", "row": i, "input_tokens": len(ids)}
        dataset = self.dataset
        assert dataset is not None, "a workload without input_ids has a dataset"
        item = dataset.item(seq)
        meta = dict(item.meta)
        if item.reference is not None:
            meta["reference"] = item.reference
        return "text", item.as_prompt(), meta

    def body(self, seq: int) -> dict[str, Any]:
        """The JSON body (as a dict) of request `seq`."""
        field, value, _ = self._item(seq)
        return self._body(field, value)

    def _body(self, field: str, value: Any) -> dict[str, Any]:
        body: dict[str, Any] = {field: value, "sampling_params": dict(self.sampling_params), "stream": self.stream}
        body.update(self.extra_body)
        return body

    def request(self, seq: int) -> RequestSpec:
        """The seq-th request (items cycle): POST url with the body of `body(seq)`."""
        field, value, meta = self._item(seq)
        body = orjson.dumps(self._body(field, value))
        return RequestSpec(
            method="POST", url=self.url, headers=dict(self._headers), body=body, stream=self.stream, meta=meta
        )

    def parser(self, spec: RequestSpec) -> SGLangParser:
        """A fresh parser for the response to `spec`."""
        cap = self.sampling_params.get("max_new_tokens")
        return SGLangParser(
            stream=spec.stream, incremental=self.incremental, max_tokens=cap if type(cap) is int else None
        )

    def describe(self) -> dict[str, Any]:
        """What the manifest records about this workload (no secrets)."""
        return {
            "type": "sglang",
            "url": self.url,
            "stream": self.stream,
            "incremental": self.incremental,
            "input": "input_ids" if self.input_ids is not None else "text",
            "dataset": self.dataset.name if self.dataset is not None else "input_ids",
            "sampling_params": self.sampling_params,
        }
