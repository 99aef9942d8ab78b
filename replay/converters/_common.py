"""Shared pieces of the log converters: the per-file context, strict JSON/JSONL
readers that point at the bad line, and `TrajectoryBuilder`, which turns a stream of
user prompts, assistant responses and tool results into a `Trajectory`.

Skip reasons: every converter counts what it did not carry into the trajectory in
`Trajectory.skipped` under a short key (e.g. `thinking_level_change`,
`arguments_raw_synthesized`); file-level skips (lenient mode) go to
`FileContext.skipped`.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from replay.errors import ConvertError
from replay.trajectory import (
    ContextEdit,
    MessageRef,
    Observation,
    RecordedOutcome,
    Response,
    Source,
    Timing,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    flatten_content,
    match_key_for_messages,
)

CONVERTER_VERSION = 4
"""Bump when any converter's output changes for the same input (part of cache keys).
2: user messages between the first user message and the first assistant turn are kept
in `user_before_turns` (and enter the match key) instead of being skipped.
3: per-turn `model`, `context_edit` (pi compaction) and `error`; unknown roles and part
types are skipped and counted instead of rejected; typed content parts read.
4: pi session trees: every assistant entry is a turn (abandoned branches and retries
included) with "branch" context edits (`head`/`keep` spans, trajectory schema 3)."""

ARGS_SYNTH = "arguments_raw_synthesized"
"""Skip key: the log kept only parsed tool arguments, so `arguments_raw` is
`json.dumps(arguments)` rather than the bytes the model emitted."""


@dataclass
class FileContext:
    """One input unit being converted: `path` as given, its bytes' sha256, the bytes,
    whether bad records are skipped (`lenient`) and the file-level skip counter."""

    path: str
    sha256: str
    data: bytes
    lenient: bool = False
    skipped: Counter[str] = field(default_factory=Counter)

    def error(self, line: int | None, fld: str | None, problem: str, *got: Any) -> ConvertError:
        """A ConvertError naming this file (`got` optional: the offending value)."""
        return ConvertError(self.path, line, fld, problem, *got)

    def text(self) -> str:
        """The file decoded as UTF-8. Raises ConvertError naming the line of the first
        invalid byte."""
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = self.data.count(b"\n", 0, exc.start) + 1
            raise self.error(line, None, f"invalid UTF-8 at byte offset {exc.start}") from exc


def read_json_document(ctx: FileContext) -> Any:
    """Parse the whole file as one JSON document. Raises ConvertError with the line of
    the parse error (a document cut short says `truncated JSON`)."""
    text = ctx.text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()):
            raise ctx.error(exc.lineno, None, "truncated JSON document") from exc
        raise ctx.error(exc.lineno, None, f"invalid JSON: {exc.msg}") from exc


def iter_jsonl(ctx: FileContext, *, start_line: int = 1) -> Iterator[tuple[int, Any]]:
    """Yield `(line_number, object)` for each non-blank line from `start_line` on.

    Raises ConvertError on a line that is not UTF-8, not JSON, or (last line without a
    newline that does not parse) truncated. With `ctx.lenient` such lines are skipped
    and counted in `ctx.skipped` (`invalid_utf8_line`, `invalid_json_line`,
    `truncated_last_line`) instead.
    """
    raw_lines = ctx.data.split(b"\n")
    ends_with_newline = ctx.data.endswith(b"\n")
    for idx, raw in enumerate(raw_lines, start=1):
        if idx < start_line or not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if ctx.lenient:
                ctx.skipped["invalid_utf8_line"] += 1
                continue
            raise ctx.error(idx, None, f"invalid UTF-8 at byte {exc.start} of the line") from exc
        try:
            yield idx, json.loads(text)
        except json.JSONDecodeError as exc:
            last = idx == len(raw_lines) and not ends_with_newline
            reason = "truncated_last_line" if last else "invalid_json_line"
            if ctx.lenient:
                ctx.skipped[reason] += 1
                continue
            if last:
                raise ctx.error(idx, None, "truncated JSONL: the last line is incomplete") from exc
            raise ctx.error(idx, None, f"invalid JSON: {exc.msg}") from exc


def is_one_document(data: bytes) -> bool:
    """True when the whole of `data` parses as one JSON document."""
    try:
        json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return True


def iter_rows(ctx: FileContext, make: Callable[[Any, int, int], Trajectory]) -> Iterator[Trajectory]:
    """One Trajectory per JSONL line: `make(row, line, index)` (index = position among
    the trajectories yielded). Raises the ConvertError of a bad line; with
    `ctx.lenient` the line is skipped and counted as `bad_row`."""
    index = 0
    for line, row in iter_jsonl(ctx):
        try:
            traj = make(row, line, index)
        except ConvertError:
            if not ctx.lenient:
                raise
            ctx.skipped["bad_row"] += 1
            continue
        index += 1
        yield traj


def first_jsonl_objects(data: bytes, limit: int = 50) -> list[Any]:
    """Up to `limit` parsed objects from the first lines (bad lines ignored); used for
    format detection only."""
    out: list[Any] = []
    for raw in data.split(b"\n"):
        if len(out) >= limit:
            break
        if not raw.strip():
            continue
        try:
            out.append(json.loads(raw))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
    return out


def synth_arguments_raw(arguments: Any) -> str:
    """`arguments_raw` for logs that kept only parsed arguments: `json.dumps(arguments)`
    (Python defaults). Callers count `ARGS_SYNTH` in the trajectory's skipped."""
    return json.dumps(arguments)


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """`ToolCall.arguments`: the parse of `raw` when it is a JSON object, else None."""
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


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
    result = Usage(
        prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
        cached_tokens=cached,
        reasoning_tokens=_int_or_none(ctd.get("reasoning_tokens")) if isinstance(ctd, dict) else None,
        total_tokens=_int_or_none(usage.get("total_tokens")),
    )
    return None if result == Usage() else result


def iso_from_ms(ms: Any) -> str | None:
    """ISO-8601 UTC text of an epoch time in ms, None when `ms` is not a number."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def ms_from_iso(text: Any) -> float | None:
    """Epoch ms of an ISO-8601 timestamp (a trailing `Z` allowed), None when unparsable."""
    if not isinstance(text, str):
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp() * 1000


class TrajectoryBuilder:
    """Accumulates one conversation in order and builds the `Trajectory`.

    `user(text)` before the first turn sets `first_user`, later ones before the first
    turn go to `user_before_turns`; after a turn it is appended to that turn's
    `user_after`. `observation()` attaches to the last turn
    (`orphan_observation` when there is none). `skip(reason)` counts what was dropped.
    `edit(ContextEdit)` attaches a context edit to the next turn; `next_ref(role)` is
    the MessageRef the next message of that role will get (`replay.context`).
    """

    def __init__(self, ctx: FileContext, fmt: str):
        self.ctx = ctx
        self.fmt = fmt
        self.system: str | None = None
        self.first_user: str | None = None
        self.user_before_turns: list[str] = []
        self.model: str | None = None
        self.turns: list[Turn] = []
        self.skipped: Counter[str] = Counter()
        self.pending_edit: ContextEdit | None = None
        self.exit_status: str | None = None  # from a mini-swe-agent 2.x `exit` message
        self.submission: str | None = None

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] += n

    def set_system(self, text: str) -> None:
        if self.system is None and self.first_user is None and not self.turns:
            self.system = text
        else:
            self.skip("later_system_message")

    def user(self, text: str) -> None:
        if self.turns:
            self.turns[-1].user_after.append(text)
        elif self.first_user is None:
            self.first_user = text
        else:
            self.user_before_turns.append(text)

    def turn(
        self,
        response: Response,
        usage: Usage | None = None,
        timing: Timing | None = None,
        model: str | None = None,
        error: str | None = None,
    ) -> Turn:
        """Append a turn (model: the name that answered it; error: the recorded error
        message of a failed call) carrying the pending context edit, if any."""
        turn = Turn(index=len(self.turns), response=response, usage=usage, timing=timing,
                    model=model or None, error=error, context_edit=self.pending_edit)
        self.pending_edit = None
        self.turns.append(turn)
        if model:
            self.model = model
        return turn

    def edit(self, edit: ContextEdit) -> None:
        """Attach `edit` to the next turn (a later edit before that turn replaces it)."""
        self.pending_edit = edit

    def next_ref(self, role: str) -> MessageRef:
        """The MessageRef the next message of `role` ("assistant" or another) gets."""
        if role == "assistant":
            return MessageRef(turn=len(self.turns), item=0)
        if not self.turns:
            return MessageRef(turn=None, item=0 if self.first_user is None else 1 + len(self.user_before_turns))
        last = self.turns[-1]
        return MessageRef(turn=last.index, item=1 + len(last.observations) + len(last.user_after))

    def observation(self, obs: Observation) -> None:
        if not self.turns:
            self.skip("orphan_observation")
            return
        self.turns[-1].observations.append(obs)

    def has_observation(self, tool_call_id: str) -> bool:
        return bool(self.turns) and any(o.tool_call_id == tool_call_id for o in self.turns[-1].observations)

    def build(
        self,
        index: int,
        *,
        line: int | None = None,
        task_id: str | None = None,
        outcome: RecordedOutcome | None = None,
        terminated_by: str | None = None,
        source_path: str | None = None,
        source_sha256: str | None = None,
        source_format: str | None = None,
    ) -> Trajectory:
        """The Trajectory (index = position of this trajectory within its file).
        Raises ConvertError when there is no user message or no assistant turn."""
        where = line
        if self.first_user is None:
            raise self.ctx.error(where, None, "no user message before the first assistant turn")
        if not self.turns:
            raise self.ctx.error(where, None, "no assistant turn")
        sha = source_sha256 or self.ctx.sha256
        if terminated_by is None:
            terminated_by = self.turns[-1].response.finish_reason
        return Trajectory(
            trajectory_id=f"{sha[:16]}-{index}",
            source=Source(
                format=source_format or self.fmt,
                path=source_path or self.ctx.path,
                sha256=sha,
                line=line,
                converter_version=CONVERTER_VERSION,
            ),
            task_id=task_id,
            match_key=match_key_for_messages([self.first_user, *self.user_before_turns]),
            model=self.model,
            system=self.system,
            first_user=self.first_user,
            user_before_turns=self.user_before_turns,
            terminated_by=terminated_by,
            outcome=outcome or RecordedOutcome(),
            turns=self.turns,
            skipped=dict(sorted(self.skipped.items())),
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


def text_of(content: Any, builder: TrajectoryBuilder | None = None) -> str:
    """`flatten_content` (text parts joined with "\\n"), counting each part without text
    via `count_part` (images as `image_part`, other types as `part:<type>`)."""
    if builder is not None and isinstance(content, list):
        for p in content:
            if not isinstance(p, str) and not (isinstance(p, dict) and isinstance(p.get("text"), str)):
                count_part(_part_kind(p), builder)
    return flatten_content(content)


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
            args = part.get("input", {})
            builder.skip(ARGS_SYNTH)
            out.tool_calls.append(ToolCall(id=part["id"], name=part["name"], arguments_raw=synth_arguments_raw(args),
                                           arguments=args if isinstance(args, dict) else None))
        elif kind == "tool_result" and isinstance(part.get("tool_use_id"), str):
            out.tool_results.append(Observation(tool_call_id=part["tool_use_id"], content=text_of(part.get("content"), builder),
                                                is_error=part.get("is_error") is True))
        else:
            count_part(kind, builder)
    return out


def loads_lenient(text: str) -> Any:
    """Parse a JSON string, else a Python literal (SWE-agent writes `tool_calls` as
    `str(list_of_dicts)`: single quotes, True/None) with `ast.literal_eval` (literals
    only: never `eval`). Raises ValueError when it is neither."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"neither JSON nor a Python literal: {exc}") from None


def tool_call_from_openai(tc: Any, builder: TrajectoryBuilder, where: str, ctx: FileContext, line: int | None) -> ToolCall:
    """A ToolCall from an OpenAI `tool_calls[i]` object; `function.arguments` kept raw when
    a string, synthesised (and counted) when the log holds an object."""
    if not isinstance(tc, dict):
        raise ctx.error(line, where, "expected a tool call object", tc)
    fn = tc.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ctx.error(line, f"{where}.function.name", "missing tool name", fn)
    call_id = tc.get("id")
    if not isinstance(call_id, str):
        raise ctx.error(line, f"{where}.id", "missing tool call id", call_id)
    args = fn.get("arguments")
    if isinstance(args, str):
        return ToolCall(id=call_id, name=fn["name"], arguments_raw=args, arguments=parse_arguments(args))
    if args is None:
        args = {}
    builder.skip(ARGS_SYNTH)
    return ToolCall(
        id=call_id,
        name=fn["name"],
        arguments_raw=synth_arguments_raw(args),
        arguments=args if isinstance(args, dict) else None,
    )
