"""Message content read from the logs: a content part list flattened to text
(`text_of`), split by part type (`split_parts` into `Parts`: text, reasoning, tool_use,
tool_result), parts without text counted (`count_part`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.tool_calls import synthesized_call
from benchmaker.trajectories.trajectory import (
    Observation,
    ToolCall,
    content_parts,
    flatten_content,
)

_TEXT_PARTS = ("text", "input_text", "output_text")
_REASONING_PARTS = ("thinking", "reasoning")
_IMAGE_PARTS = ("image", "image_url", "input_image")


def _part_kind(part: Any) -> str:
    if isinstance(part, str):
        return "text"
    if isinstance(part, dict):
        kind = part.get("type")
        if kind is None and isinstance(part.get("text"), str):
            return "text"
        return str(kind)
    return type(part).__name__


def count_part(kind: str, builder: TrajectoryBuilder | None) -> None:
    """Count a content part that carries no text: `image_part` (an image, kept as a
    counted placeholder) or `part:<type>` (a type the converter does not read)."""
    if builder is not None:
        builder.skip("image_part" if kind in _IMAGE_PARTS else f"part:{kind}")


def text_of(content: Any, builder: TrajectoryBuilder | None = None, *, images_kept: bool = False) -> str:
    """`flatten_content` (text parts joined with "\\n"), counting each part without text
    via `count_part` (images as `image_part`, other types as `part:<type>`); with
    `images_kept` (the caller keeps them as content parts) images are not counted."""
    if builder is not None and isinstance(content, list):
        for p in content:
            if not isinstance(p, str) and not (isinstance(p, dict) and isinstance(p.get("text"), str)):
                kind = _part_kind(p)
                if not (images_kept and kind in _IMAGE_PARTS):
                    count_part(kind, builder)
    return flatten_content(content)


def result_content(content: Any, builder: TrajectoryBuilder | None = None) -> tuple[str, list[dict[str, Any]] | None]:
    """A tool result's or user message's `content` as a trajectory keeps it: (its text,
    `text_of`; its content parts when it holds an image, `content_parts`, else None).
    Images kept as parts are not counted; other parts without text are (`count_part`)."""
    if isinstance(content, str):
        return content, None
    parts = content_parts(content)
    return text_of(content, builder, images_kept=parts is not None), parts


@dataclass
class Parts:
    """A message `content` split by part type (Anthropic/OpenAI typed parts): the text
    parts, the reasoning parts (`thinking`, `reasoning`), `tool_use` blocks as ToolCalls
    and `tool_result` blocks as Observations, in order."""

    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[Observation] = field(default_factory=list)


def split_parts(content: Any, builder: TrajectoryBuilder) -> Parts:
    """Split a list of content parts (see `Parts`); a string is one text part, None none.
    `tool_use.input` is kept parsed only, so its `arguments_raw` is synthesised
    (`arguments_raw_synthesized`); `redacted_thinking` is counted
    (`part:redacted_thinking`); images and unknown types via `count_part`."""
    out = Parts()
    if content is None:
        return out
    if isinstance(content, str):
        out.texts.append(content)
        return out
    if not isinstance(content, list):
        out.texts.append(str(content))
        return out
    for part in content:
        kind = _part_kind(part)
        if kind in _TEXT_PARTS:
            out.texts.append(part if isinstance(part, str) else str(part.get("text", "")))
        elif kind in _REASONING_PARTS:
            text = part.get("thinking", part.get("reasoning", part.get("text")))
            if isinstance(text, str):
                out.reasoning.append(text)
            else:
                count_part(kind, builder)
        elif kind == "tool_use" and isinstance(part.get("id"), str) and isinstance(part.get("name"), str):
            out.tool_calls.append(synthesized_call(part["id"], part["name"], part.get("input", {}), builder))
        elif kind == "tool_result" and isinstance(part.get("tool_use_id"), str):
            text, parts = result_content(part.get("content"), builder)
            out.tool_results.append(
                Observation(
                    tool_call_id=part["tool_use_id"], content=text, is_error=part.get("is_error") is True, parts=parts
                )
            )
        else:
            count_part(kind, builder)
    return out
