"""Client-side prompt token estimates: whitespace words, or a HuggingFace `tokenizer.json`.

    count = TokenCounter()                          # words: len(text.split())
    count = TokenCounter("tokenizer.json")          # exact ids of that tokenizer (optional
                                                    # `tokenizers` package)
    count("the quick brown fox")  -> 4
    count.method                  -> "words" | "tokenizer:tokenizer.json"

These are estimates made by the client, reported under their own names
(`prompt_tokens_est`, `expected_cached_tokens`), never in place of the server's usage
(docs/metrics.md). The tokenizer path counts the ids of the raw text with no special tokens
and no chat template, so it is exact for the text and a lower bound for a chat prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmaker.engine.errors import ConfigError

__all__ = ["TokenCounter", "messages_text"]


class TokenCounter:
    """Counts tokens of a text: words (default) or a tokenizer.json's ids.

    Raises ConfigError when `tokenizer` is given but the `tokenizers` package is not
    installed or the file cannot be loaded (message names the path).
    """

    def __init__(self, tokenizer: str | Path | None = None) -> None:
        self._tok: Any = None
        self.method = "words"
        if tokenizer is not None:
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise ConfigError(
                    f"{tokenizer}: counting with a tokenizer.json needs the `tokenizers` package "
                    "(pip install tokenizers)"
                ) from None
            try:
                self._tok = Tokenizer.from_file(str(tokenizer))
            except Exception as exc:  # the library raises its own Exception type
                raise ConfigError(f"{tokenizer}: cannot load tokenizer ({exc})") from exc
            self.method = f"tokenizer:{Path(tokenizer).name}"

    def __call__(self, text: str) -> int:
        """Tokens in `text` (>= 0)."""
        if self._tok is None:
            return len(text.split())
        return len(self._tok.encode(text, add_special_tokens=False).ids)


def messages_text(messages: list[dict[str, Any]]) -> str:
    """The text a chat prompt carries, for counting: each message's role, its string
    content (or text parts), and its tool calls' names and argument strings, joined by
    newlines. Deterministic for equal messages; a prefix of the messages gives a prefix
    of the text."""
    parts: list[str] = []
    for msg in messages:
        parts.append(str(msg.get("role", "")))
        content = msg.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                parts.extend(str(fn.get(k, "")) for k in ("name", "arguments"))
    return "\n".join(parts)
