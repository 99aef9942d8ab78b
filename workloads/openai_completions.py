"""OpenAI legacy completions (`POST /v1/completions`): request building and parser.

    wl = OpenAICompletionsWorkload("http://127.0.0.1:8000/v1/completions", "m", dataset)

A chunk is a token event when any choice carries a non-empty `text` (`choices[i].text`);
text is content, so TTFC equals TTFT here. Framing, `[DONE]`, usage, outcomes and the
non-streaming case follow `workloads.openai_chat` (documented there); the non-streamed
body's text is `choices[0].text`.
"""

from __future__ import annotations

from typing import Any

import orjson

from benchmaker.records import RequestSpec
from workloads.datasets import Dataset
from workloads.openai_chat import OpenAIStreamParser, openai_headers

__all__ = ["OpenAICompletionsParser", "OpenAICompletionsWorkload"]


class OpenAICompletionsParser(OpenAIStreamParser):
    """Parser of one `/v1/completions` response (streamed or not).

    `text` and output_chars cover `choices[0].text` (output_chars counts every choice).
    """

    __slots__ = ()

    def _chunk(self, choices: Any) -> bool:
        token = False
        for choice in choices:
            text = choice.get("text")
            if text and type(text) is str:
                token = True
                self._chars += len(text)
                if choice.get("index", 0) == 0:
                    self._parts.append(text)
            reason = choice.get("finish_reason")
            if reason is not None:
                self._finish_reason = reason
        return token

    def _whole_body(self, choices: list[Any]) -> bool:
        return self._chunk([c for c in choices if isinstance(c, dict)])


class OpenAICompletionsWorkload:
    """Completions requests over a dataset; implements `benchmaker.types.Workload`.

        OpenAICompletionsWorkload(url, "m", ds, max_tokens=128)

    Body (orjson): `{"model", "prompt", "stream"}` with the prompt from
    `dataset.item(seq).as_prompt()`, `stream_options.include_usage` when streaming,
    `max_tokens`, `temperature` when given, `extra_body` merged last.
    """

    name = "openai-completions"

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
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": self.dataset.item(seq).as_prompt(),
            "stream": self.stream,
        }
        if self.stream and self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body

    def request(self, seq: int) -> RequestSpec:
        """The seq-th request (items cycle): POST url with the body of `body(seq)`."""
        return RequestSpec(
            method="POST",
            url=self.url,
            headers=dict(self._headers),
            body=orjson.dumps(self.body(seq)),
            stream=self.stream,
            meta=dict(self.dataset.item(seq).meta),
        )

    def parser(self, spec: RequestSpec) -> OpenAICompletionsParser:
        """A fresh parser for the response to `spec`."""
        return OpenAICompletionsParser(stream=spec.stream)
