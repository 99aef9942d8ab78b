"""OpenAI legacy completions (`POST /v1/completions`): request building and parser.

    wl = OpenAICompletionsWorkload("http://127.0.0.1:8000/v1/completions", "m", dataset)

A chunk is a token event when any choice carries a non-empty `text` (`choices[i].text`);
text is content, so TTFC equals TTFT here. Framing, `[DONE]`, usage, outcomes and the
non-streaming case follow `benchmaker.workloads.openai_chat` (documented there); the non-streamed
body's text is `choices[0].text`.
"""

from __future__ import annotations

from typing import Any

from benchmaker.apis.openai_chat import OpenAIStreamParser
from benchmaker.engine.records import RequestSpec
from benchmaker.workloads.openai_chat import OpenAIChatWorkload

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
                self._finished(reason, choice.get("index", 0))
        return token

    def _whole_body(self, choices: list[Any]) -> bool:
        return self._chunk([c for c in choices if isinstance(c, dict)])


class OpenAICompletionsWorkload(OpenAIChatWorkload):
    """Completions requests over a dataset; implements `benchmaker.engine.types.Workload`.

        OpenAICompletionsWorkload(url, "m", ds, max_tokens=128)

    Body (orjson): `{"model", "prompt", "stream"}` with the prompt from
    `dataset.item(seq).as_prompt()`, `stream_options.include_usage` when streaming,
    `max_tokens`, `temperature` when given, `extra_body` merged last.
    """

    name = "openai-completions"

    def _input(self, item: Any) -> tuple[str, Any]:
        """The body's input field of an item: ("prompt", its prompt text)."""
        return "prompt", item.as_prompt()

    def parser(self, spec: RequestSpec) -> OpenAICompletionsParser:
        """A fresh parser for the response to `spec`."""
        return OpenAICompletionsParser(stream=spec.stream, max_tokens=self.request_max_tokens(spec))
