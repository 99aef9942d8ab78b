"""Anthropic Messages requests over a dataset: the workload that builds `POST /v1/messages`
bodies (vLLM, SGLang and Anthropic serve it). The stream it reads is parsed by the wire
API's module, benchmaker.apis.anthropic_messages (token events, usage, outcomes).

    wl = AnthropicMessagesWorkload("http://127.0.0.1:8000/v1/messages", "m", dataset,
                                   max_tokens=256)   # streaming; max_tokens is required
    spec = wl.request(seq)                           # before the timed span
    parser = wl.parser(spec)                         # fresh per request
"""

from __future__ import annotations

from typing import Any

from benchmaker.apis.anthropic_messages import AnthropicMessagesParser, anthropic_headers
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import RequestSpec
from benchmaker.workloads.datasets import Dataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload

__all__ = ["AnthropicMessagesWorkload"]


class AnthropicMessagesWorkload(OpenAIChatWorkload):
    """Messages requests over a dataset; implements `benchmaker.engine.types.Workload`.

        AnthropicMessagesWorkload(url, "m", ds, max_tokens=64)          # stream
        AnthropicMessagesWorkload(url, "m", ds, max_tokens=64, stream=False, api_key=key)

    Body (orjson): `{"model", "messages", "max_tokens", "stream"}`, `"system"` when the
    item's chat messages hold system messages (their texts joined with "\\n\\n", taken
    out of `messages`), `temperature` when given, `"ignore_eos": true` when ignore_eos
    (not an Anthropic field; SGLang-style servers may read it, vLLM 0.32.0 does not: its
    AnthropicMessagesRequest has no such field and drops unknown keys, so its answers
    can still end at the end-of-sequence token), then `extra_body` merged last (its keys win). The same prompts as the chat workload: `dataset.item(seq).as_messages()`.
    Headers: `x-api-key` (when api_key is set) and `anthropic-version`
    (benchmaker.apis.anthropic_messages.anthropic_headers). `include_usage` is accepted
    for symmetry and ignored (Messages streams always carry usage). Raises ConfigError
    when max_tokens is None (the API requires it).
    """

    name = "anthropic-messages"
    _make_headers = staticmethod(anthropic_headers)

    def __init__(self, url: str, model: str, dataset: Dataset, **kwargs: Any) -> None:
        if kwargs.get("max_tokens") is None:
            raise ConfigError("max_tokens: required by the Messages API (give --max-tokens or max_tokens:)")
        super().__init__(url, model, dataset, **kwargs)

    def _head(self, item: Any) -> dict[str, Any]:
        system: list[str] = []
        messages: list[dict[str, Any]] = []
        for msg in item.as_messages():
            if msg.get("role") == "system":
                content = msg.get("content")
                system.append(
                    content
                    if isinstance(content, str)
                    else "".join(p.get("text", "") for p in content or () if isinstance(p, dict))
                )
            else:
                messages.append(msg)
        head: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "stream": self.stream,
        }
        if system:
            head["system"] = "\n\n".join(system)
        return head

    def parser(self, spec: RequestSpec) -> AnthropicMessagesParser:  # type: ignore[override]
        """A fresh parser for the response to `spec`."""
        return AnthropicMessagesParser(stream=spec.stream)
