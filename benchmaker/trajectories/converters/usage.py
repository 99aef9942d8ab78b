"""Token usage read from the logs: `openai_usage` (OpenAI and litellm `usage` objects,
Anthropic-style cache fields)."""

from __future__ import annotations

from typing import Any

from benchmaker.trajectories.converters.builder import fast_usage
from benchmaker.trajectories.trajectory import (
    Usage,
)

_NO_USAGE = Usage()


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def openai_usage(usage: Any) -> Usage | None:
    """Usage from an OpenAI/litellm `usage` object: prompt, completion, total tokens,
    `prompt_tokens_details.cached_tokens` (else Anthropic-style
    `cache_read_input_tokens`) and `completion_tokens_details.reasoning_tokens`.
    None when `usage` is not an object or holds none of these."""
    if not isinstance(usage, dict):
        return None
    ptd = usage.get("prompt_tokens_details") or {}
    ctd = usage.get("completion_tokens_details") or {}
    cached = _int_or_none(ptd.get("cached_tokens")) if isinstance(ptd, dict) else None
    if cached is None:
        cached = _int_or_none(usage.get("cache_read_input_tokens"))
    result = fast_usage(
        prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
        cached_tokens=cached,
        reasoning_tokens=_int_or_none(ctd.get("reasoning_tokens")) if isinstance(ctd, dict) else None,
        total_tokens=_int_or_none(usage.get("total_tokens")),
    )
    return None if result == _NO_USAGE else result
