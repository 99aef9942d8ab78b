"""Shared pieces of the log converters: the per-file context, strict JSON/JSONL
readers that point at the bad line, and `TrajectoryBuilder`, which turns a stream of
user prompts, assistant responses and tool results into a `Trajectory`.

Skip reasons: every converter counts what it did not carry into the trajectory in
`Trajectory.skipped` under a short key (e.g. `thinking_level_change`,
`arguments_raw_synthesized`); file-level skips (lenient mode) go to
`FileContext.skipped`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from replay.errors import ConvertError
from replay.trajectory import (
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

CONVERTER_VERSION = 2
"""Bump when any converter's output changes for the same input (part of cache keys).
2: user messages between the first user message and the first assistant turn are kept
in `user_before_turns` (and enter the match key) instead of being skipped."""

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
    ) -> Turn:
        turn = Turn(index=len(self.turns), response=response, usage=usage, timing=timing)
        self.turns.append(turn)
        if model:
            self.model = model
        return turn

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


def text_of(content: Any, builder: TrajectoryBuilder | None = None) -> str:
    """`flatten_content` plus a count of non-text parts dropped (`non_text_part`)."""
    if builder is not None and isinstance(content, list):
        dropped = sum(
            1 for p in content if not isinstance(p, str) and not (isinstance(p, dict) and isinstance(p.get("text"), str))
        )
        if dropped:
            builder.skip("non_text_part", dropped)
    return flatten_content(content)


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
