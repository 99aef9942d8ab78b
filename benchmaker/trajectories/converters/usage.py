"""Token usage read from the logs: `openai_usage` (OpenAI and litellm `usage` objects,
Anthropic-style cache fields)."""

from __future__ import annotations

from typing import Any

from benchmaker.trajectories.converters.json_reading import non_negative_int
from benchmaker.trajectories.trajectory import (
    Usage,
)

_NO_USAGE = Usage()


def openai_usage(usage: Any) -> Usage | None:
    """Usage from an OpenAI/litellm `usage` object: prompt, completion, total tokens,
    `prompt_tokens_details.cached_tokens` (else Anthropic-style
    `cache_read_input_tokens`) and `completion_tokens_details.reasoning_tokens`.
    None when `usage` is not an object or holds none of these."""
    if not isinstance(usage, dict):
        return None
    ptd = usage.get("prompt_tokens_details") or {}
    ctd = usage.get("completion_tokens_details") or {}
    cached = non_negative_int(ptd.get("cached_tokens")) if isinstance(ptd, dict) else None
    if cached is None:
        cached = non_negative_int(usage.get("cache_read_input_tokens"))
    result = Usage(
        prompt_tokens=non_negative_int(usage.get("prompt_tokens")),
        completion_tokens=non_negative_int(usage.get("completion_tokens")),
        cached_tokens=cached,
        reasoning_tokens=non_negative_int(ctd.get("reasoning_tokens")) if isinstance(ctd, dict) else None,
        total_tokens=non_negative_int(usage.get("total_tokens")),
    )
    return None if result == _NO_USAGE else result
