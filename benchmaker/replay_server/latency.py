"""Latency models of the replay server and the token split they pace over.

A latency model turns the number of token events of a response into send offsets in
ms from the response start (the moment the server starts handling the request):

    parse_latency("instant")          # every event at 0 ms
    parse_latency("fixed:200:20")     # event i at 200 + 20 * i ms (TTFT 200 ms, ITL 20 ms)
    parse_latency("recorded")         # from Turn.timing (see LatencyModel.offsets_ms)

A token event is one streamed piece: a token of the reasoning or of the content, the
head of a tool call (id/name), or a token of a tool call's `arguments_raw`. The split
is the regex tokenizer `regex_split` by default, or a Hugging Face `tokenizer.json`
through the optional `tokenizers` package (`load_splitter(path)`). Either way the
pieces concatenate to the original string exactly (tested with emoji, CRLF, U+2028).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmaker.trajectories.trajectory import Timing

__all__ = [
    "LatencyModel",
    "LatencySpecError",
    "Splitter",
    "TokenizerUnavailable",
    "load_splitter",
    "parse_latency",
    "regex_split",
]

Splitter = Callable[[str], list[str]]
"""Splits a string into token pieces whose concatenation is the string."""


class LatencySpecError(ValueError):
    """A latency spec string does not parse; the message lists the valid forms."""


class TokenizerUnavailable(RuntimeError):
    """A tokenizer.json was asked for but the optional `tokenizers` package is missing,
    or the file cannot be loaded."""


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """How long the replay server waits before each token event of a response.

    kind: "instant" (no waiting), "fixed" (TTFT then one event per ITL), "recorded"
    (the turn's recorded timing). ttft_ms / itl_ms are used by "fixed" only.
    """

    kind: Literal["instant", "fixed", "recorded"]
    ttft_ms: float = 0.0
    itl_ms: float = 0.0

    def offsets_ms(self, n_events: int, timing: Timing | None = None) -> list[float]:
        """Send offset in ms (from the response start) of each of `n_events` token events.

        A response with no token events still has one event (the role/finish chunk), so
        `n_events` < 1 is treated as 1. Rules:
        - instant: all 0.
        - fixed: event i at ttft_ms + i * itl_ms.
        - recorded: with timing.ttft_ms and timing.duration_ms, event 0 at ttft and the
          last at max(duration, ttft), the rest evenly spaced between; with ttft only,
          all events at ttft; with duration only, event i at duration * (i + 1) / n (no
          recorded TTFT, so the events are spread evenly over the whole duration);
          with neither (or timing None), instant.
        """
        n = max(1, n_events)
        if self.kind == "fixed":
            return [self.ttft_ms + i * self.itl_ms for i in range(n)]
        if self.kind == "recorded" and timing is not None:
            ttft, duration = timing.ttft_ms, timing.duration_ms
            if ttft is not None and duration is not None:
                last = max(duration, ttft)
                if n == 1:
                    return [ttft]
                step = (last - ttft) / (n - 1)
                return [ttft + i * step for i in range(n)]
            if ttft is not None:
                return [ttft] * n
            if duration is not None:
                return [duration * (i + 1) / n for i in range(n)]
        return [0.0] * n

    def describe(self) -> str:
        """The spec string this model parses from (e.g. "fixed:200:20")."""
        if self.kind == "fixed":
            return f"fixed:{self.ttft_ms:g}:{self.itl_ms:g}"
        return self.kind


_FORMS = "instant, fixed:TTFT_MS:ITL_MS, recorded"


def parse_latency(spec: str) -> LatencyModel:
    """Parse a latency spec: "instant", "fixed:TTFT_MS:ITL_MS" (ms, finite, >= 0) or
    "recorded". Raises LatencySpecError naming the spec and the valid forms."""
    text = spec.strip()
    if text in ("instant", "recorded"):
        return LatencyModel(kind="instant" if text == "instant" else "recorded")
    if text.startswith("fixed:"):
        parts = text.split(":")
        if len(parts) != 3:
            raise LatencySpecError(f"latency: expected fixed:TTFT_MS:ITL_MS (got {spec!r})")
        values = []
        for name, raw in zip(("TTFT_MS", "ITL_MS"), parts[1:], strict=True):
            try:
                value = float(raw)
            except ValueError:
                raise LatencySpecError(f"latency: {name} is not a number (got {raw!r} in {spec!r})") from None
            if not (value >= 0 and value != float("inf")):
                raise LatencySpecError(f"latency: {name} must be finite and >= 0 (got {raw!r})")
            values.append(value)
        return LatencyModel(kind="fixed", ttft_ms=values[0], itl_ms=values[1])
    raise LatencySpecError(f"latency: unknown latency model {spec!r} (expected {_FORMS})")


# GPT-2-like pre-tokenizer without \p classes (Python `re` lacks them): a word of up to 12
# letters, 1-3 digits, or up to 4 punctuation chars, each with an optional leading space;
# whitespace runs (leaving the last space to the next word); and any single char as the
# fallback, so every position is matched and the pieces are contiguous.
# Source of the shape: GPT-2 encoder.py `pat` (openai/gpt-2), length caps added so long
# identifiers and base64 blobs split into several tokens as BPE would.
_TOKEN_RE = re.compile(
    r"""\s?[^\W\d_]{1,12}|\s?\d{1,3}|\s?[^\w\s]{1,4}|\s?_{1,4}|\s+(?!\S)|\s+|.""",
    re.DOTALL,
)


def regex_split(text: str) -> list[str]:
    """Split `text` into token-like pieces (see `_TOKEN_RE`); "".join(pieces) == text.
    "" gives []."""
    return _TOKEN_RE.findall(text)


def load_splitter(tokenizer_path: Path | str | None) -> Splitter:
    """The token splitter: `regex_split` when `tokenizer_path` is None, else one that cuts
    the text at the start offsets of a Hugging Face tokenizer's tokens (characters that
    no token covers stay with the piece before them, so pieces concatenate exactly).

    Raises TokenizerUnavailable when the `tokenizers` package is not installed
    (`pip install 'benchmaker[tokenizers]'`) or the file does not load.
    """
    if tokenizer_path is None:
        return regex_split
    try:
        from tokenizers import Tokenizer  # optional extra
    except ImportError as exc:
        raise TokenizerUnavailable(
            f"tokenizer {tokenizer_path}: the optional 'tokenizers' package is not installed "
            "(pip install 'benchmaker[tokenizers]'), or drop --tokenizer to use the regex split"
        ) from exc
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad files
        raise TokenizerUnavailable(f"tokenizer {tokenizer_path}: cannot load ({exc})") from exc

    def hf_split(text: str) -> list[str]:
        if not text:
            return []
        encoding = tokenizer.encode(text, add_special_tokens=False)
        cuts = sorted({start for start, _end in encoding.offsets if 0 < start < len(text)})
        bounds = [0, *cuts, len(text)]
        return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]

    return hf_split
