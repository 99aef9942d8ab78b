"""A recorded answer as every wire API writes it back (the replay server's responses):
the shape of a recorded turn the apis modules read, the rendered stream they return,
and the renderer each API module is.

    out = openai_chat.render_stream(turn, completion_id="chatcmpl-x", model="m",
                                    created=0, splitter=regex_split)
    out.head, out.events, out.tail, out.tail_usage   # bytes, [bytes], bytes, bytes | None

benchmaker.trajectories.trajectory.Turn (with its Response, ToolCall and Usage) has
the shape of `RecordedAnswer`; the apis modules sit below the trajectories, so they
read it through these protocols and never import it. Each of openai_chat,
openai_responses, anthropic_messages and gemini is a `Renderer` (its `render_body`
and `render_stream`); the replay store keeps them in one registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["RecordedAnswer", "RenderedStream", "Renderer", "ResponseLike", "ToolCallLike", "UsageLike"]


class ToolCallLike(Protocol):
    """A recorded tool call: `id`, `name`, the exact argument string `arguments_raw`, its
    parse `arguments` (None when not a JSON object), `type` ("custom" for a free-form
    tool call, else None)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def arguments_raw(self) -> str: ...
    @property
    def arguments(self) -> dict[str, object] | None: ...
    @property
    def type(self) -> str | None: ...


class ResponseLike(Protocol):
    """A recorded response: texts as recorded (None when absent), the calls, the
    chat-style finish reason. Read-only members, so that a Response's narrower types
    (list[ToolCall], a Literal finish_reason) match."""

    @property
    def content(self) -> str | None: ...
    @property
    def reasoning(self) -> str | None: ...
    @property
    def tool_calls(self) -> Sequence[ToolCallLike]: ...
    @property
    def finish_reason(self) -> str: ...


class UsageLike(Protocol):
    """Recorded usage in tokens (None: not logged); `prompt_tokens` the whole input,
    cached included (OpenAI's meaning)."""

    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...
    @property
    def total_tokens(self) -> int | None: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def reasoning_tokens(self) -> int | None: ...
    @property
    def cache_creation_tokens(self) -> int | None: ...


class RecordedAnswer(Protocol):
    """One recorded model turn: its `response`, its `usage` (None: not recorded), its
    `error` (the message of a failed turn, else None)."""

    @property
    def response(self) -> ResponseLike: ...
    @property
    def usage(self) -> UsageLike | None: ...
    @property
    def error(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class RenderedStream:
    """The SSE bytes of one streamed answer. head: the events before the first token
    event (sent with it; b"" when none); events: one entry per token event, each with
    the non-token events that must precede it; tail: the events after the last token
    event; tail_usage: the tail when the request asked for a usage event (None: the
    same as `tail`)."""

    head: bytes
    events: list[bytes]
    tail: bytes
    tail_usage: bytes | None = None


class Renderer(Protocol):
    """A wire API module that writes a recorded answer back. `completion_id` is the
    turn's chat completion id (`chatcmpl-...`), from which each API derives its own id;
    `model` the response's model name; `created` unix s; `splitter(text)` the token
    pieces of a text (their concatenation is the text), one token event each."""

    def render_body(self, answer: RecordedAnswer, *, completion_id: str, model: str, created: int) -> bytes: ...

    def render_stream(
        self,
        answer: RecordedAnswer,
        *,
        completion_id: str,
        model: str,
        created: int,
        splitter: Callable[[str], list[str]],
    ) -> RenderedStream: ...
