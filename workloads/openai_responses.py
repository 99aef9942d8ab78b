"""OpenAI Responses requests over a dataset: the workload that builds `POST /v1/responses`
bodies. The stream it reads is parsed by the wire API's module,
benchmaker.apis.openai_responses (what counts as a token event, usage, outcomes).

    wl = OpenAIResponsesWorkload("http://127.0.0.1:8000/v1/responses", "m", dataset,
                                 max_tokens=256)     # streaming; sent as max_output_tokens
    spec = wl.request(seq)                           # before the timed span
    parser = wl.parser(spec)                         # fresh per request
"""

from __future__ import annotations

from typing import Any

from benchmaker.apis.openai_responses import OpenAIResponsesParser, input_items
from benchmaker.engine.records import RequestSpec
from benchmaker.workloads.openai_chat import OpenAIChatWorkload

__all__ = ["OpenAIResponsesWorkload"]


class OpenAIResponsesWorkload(OpenAIChatWorkload):
    """Responses requests over a dataset; implements `benchmaker.engine.types.Workload`.

        OpenAIResponsesWorkload(url, "m", ds, max_tokens=128)   # the same prompts as chat

    Body (orjson): `{"model", "input", "stream"}` with the input items of
    `dataset.item(seq).as_messages()` (benchmaker.apis.openai_responses.input_items),
    `max_output_tokens` (the `max_tokens` semantics: a cap on generated tokens,
    reasoning included) and `temperature` when given, `"ignore_eos": true` when
    ignore_eos (not an OpenAI field: vLLM's ResponsesRequest reads it into its
    sampling parameters, as its chat requests do), `extra_body` merged last (its keys
    win). A Responses stream always ends with its usage (`response.completed`), so
    `include_usage` sends nothing.
    """

    name = "openai-responses"

    def _head(self, item: Any) -> dict[str, Any]:
        head: dict[str, Any] = {"model": self.model, "input": input_items(item.as_messages()), "stream": self.stream}
        if self.max_tokens is not None:
            head["max_output_tokens"] = self.max_tokens
        return head

    def parser(self, spec: RequestSpec) -> OpenAIResponsesParser:  # type: ignore[override]
        """A fresh parser for the response to `spec`."""
        return OpenAIResponsesParser(stream=spec.stream)
