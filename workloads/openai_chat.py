"""OpenAI chat completions requests over a dataset: the workload that builds
`POST /v1/chat/completions` bodies. The stream it reads is parsed by the wire API's
module, benchmaker.apis.openai_chat (what counts as a token event, usage, outcomes).

    wl = OpenAIChatWorkload("http://127.0.0.1:8000/v1/chat/completions", "m", dataset,
                            max_tokens=256)          # streaming, usage requested
    spec = wl.request(seq)                           # before the timed span
    parser = wl.parser(spec)                         # fresh per request
"""

from __future__ import annotations

from typing import Any

import orjson

from benchmaker.apis.openai_chat import OpenAIChatParser, OpenAIStreamParser, openai_headers
from benchmaker.engine.records import RequestSpec
from benchmaker.workloads.datasets import Dataset

__all__ = ["OpenAIChatWorkload", "request_meta"]


def request_meta(item: Any) -> dict[str, Any]:
    """A request's meta: the item's meta plus `reference` when the item has one (for
    graders, workloads/graders.py; meta is never sent)."""
    meta = dict(item.meta)
    if item.reference is not None:
        meta["reference"] = item.reference
    return meta


class OpenAIChatWorkload:
    """Chat-completions requests over a dataset; implements `benchmaker.engine.types.Workload`.

        OpenAIChatWorkload(url, "m", ds)                   # stream, usage requested
        OpenAIChatWorkload(url, "m", ds, stream=False, max_tokens=64, temperature=0.0)
        OpenAIChatWorkload(url, "m", ds, extra_body={"top_p": 0.9}, api_key=key)
        OpenAIChatWorkload(url, "m", ds, max_tokens=32, ignore_eos=True)  # exactly 32 tokens

    Body (orjson): `{"model", "messages", "stream"}`, plus `"stream_options":
    {"include_usage": true}` when streaming and include_usage, `max_tokens` and
    `temperature` when given, `"ignore_eos": true` when ignore_eos (a top-level body
    field of vLLM's and SGLang's OpenAI-compatible servers: generation runs on past the
    end-of-sequence token up to max_tokens; other servers may reject or ignore it), then
    `extra_body` merged last (its keys win). Messages
    come from `dataset.item(seq).as_messages()`. The spec's meta is the item's meta plus
    `reference` when the item has one (for graders).
    `api_key` is sent as a Bearer token and never put in meta.
    """

    name = "openai-chat"
    _make_headers = staticmethod(openai_headers)

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
        ignore_eos: bool = False,
    ) -> None:
        self.url = url
        self.model = model
        self.dataset = dataset
        self.stream = stream
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.include_usage = include_usage
        self.ignore_eos = ignore_eos
        self._headers = self._make_headers(api_key, stream, headers)
        caps = [
            v
            for v in (self.extra_body.get("max_tokens", max_tokens), self.extra_body.get("max_completion_tokens"))
            if type(v) is int
        ]
        self._max_tokens_sent = min(caps) if caps else None

    def request_max_tokens(self, spec: RequestSpec) -> int | None:
        """The cap on generated tokens the request `spec` sent (`max_tokens`, or
        `max_completion_tokens` from extra_body, the smaller when both), in tokens; None
        when it sent none. Its parser flags a usage count above it."""
        return self._max_tokens_sent

    def body(self, seq: int) -> dict[str, Any]:
        """The JSON body (as a dict) of request `seq`."""
        body = self._head(self.dataset.item(seq))
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.ignore_eos:
            body["ignore_eos"] = True
        body.update(self.extra_body)
        return body

    def _head(self, item: Any) -> dict[str, Any]:
        """The body's fields of this API before temperature, ignore_eos and extra_body."""
        field, value = self._input(item)
        head: dict[str, Any] = {"model": self.model, field: value, "stream": self.stream}
        if self.stream and self.include_usage:
            head["stream_options"] = {"include_usage": True}
        if self.max_tokens is not None:
            head["max_tokens"] = self.max_tokens
        return head

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
            meta=request_meta(self.dataset.item(seq)),
        )

    def parser(self, spec: RequestSpec) -> OpenAIStreamParser:
        """A fresh parser for the response to `spec`."""
        return OpenAIChatParser(stream=spec.stream, max_tokens=self.request_max_tokens(spec))
