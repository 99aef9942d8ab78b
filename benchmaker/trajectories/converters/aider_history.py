"""aider's LLM history (`aider --llm-history-file PATH`, a text file aider appends to), one
trajectory per aider session in it. Source: Aider-AI/aider 0.86 aider/io.py
`log_llm_history`, aider/utils.py `format_messages` / `format_content`, aider/coders/
base_coder.py `send` (a "TO LLM" entry before each model call, an "LLM RESPONSE" entry
after it, also when it failed).

Each model call is one turn; aider's own exchanges are found as `benchmaker record
--canned-replies` finds them and listed in `canned_replies`. Texts lose their final line
breaks (aider logs `str.splitlines()`), and the log has no usage, finish reasons or
sub-second timings. What each record becomes: docs/log-formats.md#aider-llm-history.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.trajectory import (
    Observation,
    Response,
    Timing,
    Trajectory,
    flatten_content,
    without_canned,
)

FORMAT = "aider-llm-history"

_HEADER = re.compile(r"^(TO LLM|LLM RESPONSE) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)$")
_HEADER_BYTES = re.compile(rb"\A(?:TO LLM|LLM RESPONSE) \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\r?\n")
_SEPARATOR = "-------"
_ROLES = {"SYSTEM": "system", "USER": "user", "ASSISTANT": "assistant"}


def is_llm_history(data: bytes) -> bool:
    """True when `data` opens with an aider LLM history header line (docs/log-formats.md#aider-llm-history)."""
    return _HEADER_BYTES.match(data) is not None


def _entries(ctx: FileContext) -> Iterator[tuple[int, str, str, list[str]]]:
    """(line number of the header, "TO LLM" or "LLM RESPONSE", its time, its lines)."""
    kind: str | None = None
    when, start = "", 0
    lines: list[str] = []
    for n, line in enumerate(ctx.text().splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            if kind is not None:
                yield start, kind, when, lines
            kind, when, start, lines = m.group(1), m.group(2), n, []
        elif kind is None:
            raise ctx.error(n, None, "expected a `TO LLM <time>` header line", line[:80])
        else:
            lines.append(line)
    if kind is not None:
        yield start, kind, when, lines


def _messages(ctx: FileContext, start: int, lines: list[str], skipped: dict[str, int]) -> list[dict[str, Any]]:
    """The chat messages of a "TO LLM" entry whose header is line `start`."""
    messages: list[dict[str, Any]] = []
    texts: list[list[str]] = []
    for k, line in enumerate(lines, start + 1):
        if line == _SEPARATOR:
            messages.append({"role": None})
            texts.append([])
            continue
        role, _, text = line.partition(" ")
        if not messages or role not in _ROLES:
            raise ctx.error(k, "role", "expected `-------` or a line `SYSTEM|USER|ASSISTANT text`", line[:80])
        msg = messages[-1]
        if msg["role"] is None:
            msg["role"] = _ROLES[role]
        if text.startswith(("Image_url URL: ", "type: image_url")):
            skipped["image_part"] = skipped.get("image_part", 0) + 1
            continue
        texts[-1].append(text)
    for msg, parts in zip(messages, texts, strict=True):
        msg["content"] = "\n".join(parts)
    return [m for m in messages if m["role"] is not None]


class Call(NamedTuple):
    """One model call of the history: the header line of its "TO LLM" entry, that
    entry's time, the request's chat messages ({"role", "content"}: texts rebuilt from
    their lines) and the response text (None when the file has no response entry)."""

    line: int
    time: str
    messages: list[dict[str, Any]]
    answer: str | None


def read_calls(ctx: FileContext, skipped: dict[str, int] | None = None) -> list[Call]:
    """The model calls of an aider LLM history, in file order (docs/log-formats.md#aider-llm-history); image
    parts counted into `skipped` under `image_part`. Raises ConvertError naming the line
    of a malformed entry."""
    calls: list[Call] = []
    skipped = {} if skipped is None else skipped
    for start, kind, when, lines in _entries(ctx):
        if kind == "TO LLM":
            calls.append(Call(start, when, _messages(ctx, start, lines, skipped), None))
        elif calls and calls[-1].answer is None:
            calls[-1] = calls[-1]._replace(answer="\n".join(line.partition(" ")[2] for line in lines))
        else:
            raise ctx.error(start, None, "an `LLM RESPONSE` entry without a `TO LLM` entry before it")
    return calls


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the trajectories of an aider LLM history (docs/log-formats.md#aider-llm-history). Raises
    ConvertError naming the line of a malformed entry."""
    skipped: dict[str, int] = {}
    calls = read_calls(ctx, skipped)
    for n_traj, (builder, first_line, canned) in enumerate(_sessions(ctx, calls, skipped)):
        traj = builder.build(n_traj, line=first_line)
        traj.canned_replies = canned
        yield traj


def _sessions(
    ctx: FileContext, calls: list[Call], skipped: dict[str, int]
) -> Iterator[tuple[TrajectoryBuilder, int, list[str]]]:
    """(builder, header line of its first call, its canned replies) per session."""
    builder: TrajectoryBuilder | None = None
    canned: list[str] = []
    answered: set[str] = set()
    first_line = 0
    for line, when, raw, answer in calls:
        if answer is None:
            if builder is not None:
                builder.skip("unanswered_call")
            continue
        found = [
            t
            for t in (flatten_content(m.get("content")) for m in raw if m["role"] == "assistant")
            if t.strip() not in answered
        ]
        messages = without_canned(raw, frozenset(found))
        roles = [m["role"] for m in messages]
        n = roles.count("assistant")
        if builder is not None and n == 0 and builder.turns:
            yield builder, first_line, canned
            builder = None
        if builder is None:
            if n:
                skipped["unseen_turns"] = skipped.get("unseen_turns", 0) + 1
                continue
            builder, canned, answered, first_line = TrajectoryBuilder(ctx, FORMAT), [], set(), line
            for kind, count in skipped.items():
                builder.skip(kind, count)
            skipped.clear()
            _opening(builder, messages)
        if n > len(builder.turns):
            builder.skip("unseen_turns")
            continue
        if n < len(builder.turns):
            builder.skip("superseded_turns", len(builder.turns) - n)
            del builder.turns[n:]
        if n:
            _observe(builder, messages[len(roles) - roles[::-1].index("assistant") :])
        canned.extend(t for t in dict.fromkeys(found) if t not in canned)
        builder.turn(Response(content=answer), timing=Timing(started_at=when))
        answered.add(answer.strip())
    if builder is not None and builder.turns:
        yield builder, first_line, canned


def _opening(builder: TrajectoryBuilder, messages: list[dict[str, Any]]) -> None:
    """The system prompt and the user messages before the first assistant message."""
    for m in messages:
        if m["role"] == "assistant":
            break
        if m["role"] == "system":
            builder.set_system(m["content"])
        elif m["role"] == "user":
            builder.user(m["content"])


def _observe(builder: TrajectoryBuilder, after: list[dict[str, Any]]) -> None:
    """The previous turn's observation (the first user message after it) and follow-ups."""
    last = builder.turns[-1]
    last.observations = []
    last.user_after = []
    for m in after:
        if m["role"] != "user":
            continue
        if not last.observations:
            last.observations.append(Observation(content=m["content"]))
        else:
            last.user_after.append(m["content"])
