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
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from benchmaker.apis.anthropic_messages import chat_tools as messages_chat_tools
from benchmaker.apis.openai_responses import chat_tools as responses_chat_tools
from benchmaker.trajectories.errors import ConvertError
from benchmaker.trajectories.trajectory import (
    ContextEdit,
    FinishReason,
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
    content_parts,
    flatten_content,
    match_key_for_messages,
)

CONVERTER_VERSION = 10
"""Bump when any converter's output changes for the same input (part of cache keys).
2: user messages between the first user message and the first assistant turn are kept
in `user_before_turns` (and enter the match key) instead of being skipped.
3: per-turn `model`, `context_edit` (pi compaction) and `error`; unknown roles and part
types are skipped and counted instead of rejected; typed content parts read.
4: pi session trees: every assistant entry is a turn (abandoned branches and retries
included) with "branch" context edits (`head`/`keep` spans, trajectory schema 3).
5: pi `--mode json` compaction events and OpenHands condensations become context edits;
OpenHands software-agent-sdk event lists are read.
6: pi context-overflow retries and `auto_retry_start` leave the failed call out; forked pi
files count copied turns; stored OpenHands summary events are user messages; an edit's
empty tail starts at the end of the history (a prompt after the edit is kept).
7: OpenHands SDK events that form a tree (`parent_id`) are read along the active branch,
a model switch logged as a state update names the later turns; SDK conversation
directories (base_state.json + events/) are read.
8: Gemini CLI chat recordings are read (no longer taken for OpenAI message lists);
per-call LLM logs (LiteLLM, OpenHands llm_completions) are skipped as `llm_call_log`
instead of becoming one-call trajectories.
9: Claude Code sessions and Codex CLI rollouts are read; a tool call keeps its `type`
("custom" for a Responses custom tool call) and usage its cache creation tokens.
10: tool definitions a log carries become `Trajectory.tools`; a tool result or first
user message holding an image keeps it as content parts (`Observation.parts`,
`Trajectory.first_user_parts`) instead of counting `image_part`.
Converters build every model with pydantic's validating constructors."""

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
    first_records: FirstRecords | None = None
    """What format detection parsed of `data` (keeping_first_records), for iter_jsonl to
    use instead of parsing those lines (and checking the bytes) again; taken by its first pass."""

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


_DIGIT_CLASS = bytes(48 if 48 <= b <= 57 else b for b in range(256))  # every digit -> b"0"
_LONG_RUN = b"0" * 19
_JSON_SPACE = b" \t\r\n"


def orjson_safe(data: bytes) -> bool:
    """True when `orjson.loads` gives the same value as `json.loads` for any JSON in
    `data` that orjson accepts: false when a number token may have 19 or more digits
    (orjson turns an integer beyond 64 bits into a float, json keeps it an int). A digit
    run counts as a number when it follows `:`, `,`, `[` (JSON spaces and a `-` between)
    or starts `data` or a line (a JSONL record that is a bare number); one inside a
    string that looks so only costs the slow path.
    Everything orjson refuses (NaN, Infinity, lone surrogates, a UTF-8 BOM, bad bytes or
    syntax) is re-parsed with `json`, whose value or error message stands. Cost: one
    `bytes.translate` and a substring search (~1 ms per MB)."""
    digits = data.translate(_DIGIT_CLASS)
    at = digits.find(_LONG_RUN)
    while at >= 0:
        i = at
        while i > 0 and digits[i - 1] == 48:  # the start of the digit run
            i -= 1
        if i > 0 and data[i - 1] == 45:  # "-"
            i -= 1
        start = i
        while i > 0 and data[i - 1] in _JSON_SPACE:
            i -= 1
        if i == 0 or data[i - 1] in b":,[" or 10 in data[i:start]:  # 10: a newline, a JSONL record starts
            return False
        end = at + len(_LONG_RUN)
        while end < len(digits) and digits[end] == 48:  # past this run
            end += 1
        at = digits.find(_LONG_RUN, end)
    return True


def read_json_document(ctx: FileContext) -> Any:
    """Parse the whole file as one JSON document (orjson when `orjson_safe`, else or when
    orjson refuses it `json`, so values and messages are json's). Raises ConvertError
    with the line of the parse error (a document cut short says `truncated JSON`)."""
    if orjson_safe(ctx.data):
        try:
            return orjson.loads(ctx.data)
        except orjson.JSONDecodeError:
            pass
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
    `truncated_last_line`) instead. Lines parse with orjson when the file is
    `orjson_safe`; a line orjson refuses takes the `json` path, whose value or error
    stands. Lines in `ctx.first_records` are not parsed again, nor copied, nor the bytes
    checked again when it knows (the first call only).
    """
    data = ctx.data
    end = len(data)
    detected, ctx.first_records = ctx.first_records, None  # taken once: a second pass parses its own
    first = detected.records if detected is not None else None
    fast = detected.safe if detected is not None and detected.safe is not None else orjson_safe(data)
    loads = orjson.loads
    idx, at = 0, 0
    while at < end:  # line by line with find (memchr), not split: a kept line is not copied
        stop = data.find(b"\n", at)
        last = stop < 0  # the last line, without a newline
        stop = end if last else stop
        idx += 1
        if first and idx in first:  # parsed by orjson for format detection: the value either parse gives
            at = stop + 1
            if idx >= start_line:
                yield idx, first.pop(idx)
            continue
        raw, at = data[at:stop], stop + 1
        if idx < start_line or not raw or raw.isspace():  # blank (isspace: no copy of the line, as strip makes)
            continue
        if fast:
            try:
                value = loads(raw)
            except orjson.JSONDecodeError:
                pass
            else:
                yield idx, value
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
        orjson.loads(data)
        return True
    except orjson.JSONDecodeError:
        pass
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


@dataclass
class FirstRecords:
    """What first_jsonl_objects learnt of one file's bytes under keeping_first_records:
    the records it parsed with orjson by line number (1 = the first line) and
    `orjson_safe` of the whole bytes (None: not computed)."""

    records: dict[int, Any] = field(default_factory=dict)
    safe: bool | None = None


_keep_first: ContextVar[tuple[bytes, FirstRecords] | None] = ContextVar("_keep_first", default=None)


@contextmanager
def keeping_first_records(data: bytes) -> Iterator[FirstRecords]:
    """While the block runs (in this thread or task), `first_jsonl_objects(data)` for
    this very bytes object (format detection: `benchmaker.trajectories.converters.detect_bytes`) checks
    the whole bytes with `orjson_safe` once (not line by line) and keeps it and each
    record it parses with orjson in the FirstRecords yielded. Put in
    `FileContext.first_records`, they spare `iter_jsonl` a second parse of those lines
    (the first 50 records: ~1/4 of a corpus pi session's bytes) and of the check."""
    kept = FirstRecords()
    token = _keep_first.set((data, kept))
    try:
        yield kept
    finally:
        _keep_first.reset(token)


def first_jsonl_objects(data: bytes, limit: int = 50) -> list[Any]:
    """Up to `limit` parsed objects from the first lines (bad lines ignored); used for
    format detection only (see keeping_first_records)."""
    out: list[Any] = []
    keep = _keep_first.get()
    kept = keep[1] if keep is not None and keep[0] is data else None
    all_safe = False
    if kept is not None:  # every line of bytes orjson_safe as a whole is so on its own
        kept.safe = all_safe = orjson_safe(data)
    start, end = 0, len(data)
    line = 0
    while len(out) < limit and start < end:  # line by line: no copy of the lines not read
        stop = data.find(b"\n", start)
        stop = end if stop < 0 else stop
        raw, start = data[start:stop], stop + 1
        line += 1
        if not raw or raw.isspace():  # blank (isspace: no copy of the line, as strip makes)
            continue
        if all_safe or orjson_safe(raw):
            try:
                out.append(value := orjson.loads(raw))
                if kept is not None:
                    kept.records[line] = value
                continue
            except orjson.JSONDecodeError:
                pass
        try:
            out.append(json.loads(raw))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
    return out


def synth_arguments_raw(arguments: Any) -> str:
    """`arguments_raw` for logs that kept only parsed arguments: `json.dumps(arguments)`
    (Python defaults). A value json.dumps refuses raises json.dumps' own error. Callers
    count `ARGS_SYNTH` in the trajectory's skipped."""
    return json.dumps(arguments)


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """`ToolCall.arguments`: the parse of `raw` when it is a JSON object, else None."""
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def dict_or_empty(value: Any) -> dict[str, Any]:
    """`value` when it is a dict (a JSON object), else a new empty dict: an optional
    object field read leniently."""
    return value if isinstance(value, dict) else {}


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


_ISO_FAST_LIMIT_MS = 2**32 * 1000
"""iso_from_ms writes an int below this (year 2106) from its digits: there `ms / 1000` is
within 0.25 us of the true value, so datetime's microseconds are exactly `ms % 1000`
thousands (tests/replay/test_common_times.py compares the two)."""
_ISO_MINUTES: dict[int, str] = {}  # epoch minute -> "YYYY-MM-DDTHH:MM:"
_ISO_MINUTES_MAX = 4096
_ISO_SECONDS = tuple(f"{s:02d}" for s in range(60))
_ISO_MILLIS = ("Z", *(f".{m:03d}000Z" for m in range(1, 1000)))  # isoformat writes microseconds, none when 0


def iso_from_ms(ms: Any) -> str | None:
    """ISO-8601 UTC text of an epoch time in ms, None when `ms` is not a number or no
    datetime (NaN, infinite, beyond year 9999: `1e70` in a damaged log):
    `datetime.fromtimestamp(ms / 1000, UTC).isoformat()` with `Z` for `+00:00`. An int
    ms from 1970 to 2106 (a pi message's `timestamp`) is written from a cached minute and
    its own seconds and ms, the same text for a fifth of the cost."""
    if type(ms) is int and 0 <= ms < _ISO_FAST_LIMIT_MS:
        secs, milli = divmod(ms, 1000)
        minute = _ISO_MINUTES.get(secs // 60)
        if minute is None:
            if len(_ISO_MINUTES) >= _ISO_MINUTES_MAX:
                _ISO_MINUTES.clear()
            minute = _ISO_MINUTES[secs // 60] = datetime.fromtimestamp(secs // 60 * 60, tz=UTC).isoformat()[:17]
        return minute + _ISO_SECONDS[secs % 60] + _ISO_MILLIS[milli]
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return None


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


_NO_USAGE = Usage()


def fast_response(
    content: str | None = None,
    reasoning: str | None = None,
    tool_calls: list[ToolCall] | None = None,
    finish_reason: FinishReason = "stop",
) -> Response:
    """`Response(...)` with positional arguments (pydantic models take keywords only).
    Raises pydantic's ValidationError on a bad value."""
    return Response(
        content=content,
        reasoning=reasoning,
        tool_calls=[] if tool_calls is None else tool_calls,
        finish_reason=finish_reason,
    )


def fast_tool_call(id: str, name: str, arguments_raw: str, arguments: dict[str, Any] | None = None) -> ToolCall:
    """`ToolCall(...)` with positional arguments (see fast_response)."""
    return ToolCall(id=id, name=name, arguments_raw=arguments_raw, arguments=arguments)


def fast_usage(
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    cached_tokens: int | None = None,
    reasoning_tokens: int | None = None,
    total_tokens: int | None = None,
) -> Usage:
    """`Usage(...)` with positional arguments, in tokens (see fast_response)."""
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
        reasoning_tokens=reasoning_tokens,
        total_tokens=total_tokens,
    )


def fast_timing(
    ttft_ms: float | None = None, duration_ms: float | None = None, started_at: str | None = None
) -> Timing:
    """`Timing(...)` with positional arguments, in ms (see fast_response)."""
    return Timing(ttft_ms=ttft_ms, duration_ms=duration_ms, started_at=started_at)


def fast_observation(
    content: str,
    tool_call_id: str | None = None,
    name: str | None = None,
    is_error: bool = False,
    exit_code: int | None = None,
    parts: list[dict[str, Any]] | None = None,
) -> Observation:
    """`Observation(...)` with positional arguments (see fast_response)."""
    return Observation(
        tool_call_id=tool_call_id, name=name, content=content, is_error=is_error, exit_code=exit_code, parts=parts
    )


def result_content(content: Any, builder: TrajectoryBuilder | None = None) -> tuple[str, list[dict[str, Any]] | None]:
    """A tool result's or user message's `content` as a trajectory keeps it: (its text,
    `text_of`; its content parts when it holds an image, `content_parts`, else None).
    Images kept as parts are not counted; other parts without text are (`count_part`)."""
    if isinstance(content, str):
        return content, None
    parts = content_parts(content)
    return text_of(content, builder, images_kept=parts is not None), parts


def chat_shape_tools(value: Any) -> list[dict[str, Any]] | None:
    """Tool definitions as a log keeps them, in OpenAI chat completions shape (the
    shape of `Trajectory.tools`), whatever API they were written for, item by item: a
    chat tool (`{"type", "function": {...}}` or `{"type": "custom", "custom": {...}}`)
    as it is; an Anthropic tool (`input_schema`) and a flat function tool (`{"type":
    "function" | "custom", "name", ...}`: OpenAI Responses, OpenTelemetry GenAI
    `gen_ai.tool.definitions`) through the apis modules' `chat_tools`; a bare `{"name",
    "description", "parameters"}` as a function. Anything else (hosted tools, non-objects)
    is left out. None when `value` is not a list or nothing is left."""
    if not isinstance(value, list):
        return None
    out: list[dict[str, Any]] = []
    for item in value:
        if not isinstance(item, dict) or not item:
            continue
        kind = item.get("type")
        if isinstance(kind, str) and isinstance(item.get(kind), dict):
            out.append(item)
        elif "input_schema" in item:
            out.extend(messages_chat_tools({"tools": [item]}) or ())
        elif kind in ("function", "custom"):
            out.extend(responses_chat_tools({"tools": [item]}) or ())
        elif kind is None and isinstance(item.get("name"), str):
            out.append({"type": "function", "function": item})
    return out or None


class TrajectoryBuilder:
    """Accumulates one conversation in order and builds the `Trajectory`.

    `user(text)` before the first turn sets `first_user`, later ones before the first
    turn go to `user_before_turns`; after a turn it is appended to that turn's
    `user_after`. `observation()` attaches to the last turn
    (`orphan_observation` when there is none). `skip(reason)` counts what was dropped.
    `edit(ContextEdit)` attaches a context edit to the next turn; `next_ref(role)` is
    the MessageRef the next message of that role will get (`benchmaker.trajectories.context`).
    """

    def __init__(self, ctx: FileContext, fmt: str):
        self.ctx = ctx
        self.fmt = fmt
        self.system: str | None = None
        self.first_user: str | None = None
        self.first_user_parts: list[dict[str, Any]] | None = None
        self.user_before_turns: list[str] = []
        self.model: str | None = None
        self.turns: list[Turn] = []
        self.skipped: Counter[str] = Counter()
        self.pending_edit: ContextEdit | None = None
        self.exit_status: str | None = None  # from a mini-swe-agent 2.x `exit` message
        self.submission: str | None = None
        self.tools: list[dict[str, Any]] | None = None  # the log's tool definitions (chat_shape_tools)

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] += n

    def set_system(self, text: str) -> None:
        if self.system is None and self.first_user is None and not self.turns:
            self.system = text
        else:
            self.skip("later_system_message")

    def user(self, text: str, parts: list[dict[str, Any]] | None = None) -> None:
        """A user message: its text and, when it held an image, its content parts
        (`result_content`), kept for the first user message (`first_user_parts`); a later
        message's images are counted (`image_part`)."""
        if self.first_user is None and not self.turns:
            self.first_user = text
            self.first_user_parts = parts
            return
        if parts is not None:
            self.skip("image_part", sum(1 for p in parts if p["type"] == "image_url"))
        if self.turns:
            self.turns[-1].user_after.append(text)
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
        model = model or None
        edit = self.pending_edit
        if (
            type(response) is Response
            and (usage is None or type(usage) is Usage)
            and (timing is None or type(timing) is Timing)
            and (model is None or type(model) is str)
            and (error is None or type(error) is str)
            and (edit is None or type(edit) is ContextEdit)
        ):  # the shapes validation would check
            turn = Turn(
                index=len(self.turns),
                model=model,
                response=response,
                usage=usage,
                timing=timing,
                context_edit=edit,
                error=error,
            )
        else:  # raises pydantic's ValidationError, as it always did
            turn = Turn(
                index=len(self.turns),
                response=response,
                usage=usage,
                timing=timing,
                model=model,
                error=error,
                context_edit=edit,
            )
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
        if role == "assistant":  # ints >= 0 by construction: no validation needed
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
        """True when the last turn has an observation for `tool_call_id`."""
        if self.turns:
            for o in self.turns[-1].observations:  # a loop, not any(): no generator per tool result
                if o.tool_call_id == tool_call_id:
                    return True
        return False

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
        source: dict[str, Any] = dict(
            format=source_format or self.fmt,
            path=source_path or self.ctx.path,
            sha256=sha,
            line=line,
            converter_version=CONVERTER_VERSION,
        )
        fields: dict[str, Any] = dict(
            trajectory_id=f"{sha[:16]}-{index}",
            task_id=task_id,
            match_key=match_key_for_messages([self.first_user, *self.user_before_turns]),
            model=self.model,
            system=self.system,
            first_user=self.first_user,
            first_user_parts=self.first_user_parts,
            user_before_turns=list(self.user_before_turns),
            terminated_by=terminated_by,
            outcome=outcome or RecordedOutcome(),
            tools=self.tools,
            turns=list(self.turns),
            skipped=dict(sorted(self.skipped.items())),
        )
        return Trajectory(source=Source(**source), **fields)


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
            out.tool_calls.append(
                fast_tool_call(
                    id=part["id"],
                    name=part["name"],
                    arguments_raw=synth_arguments_raw(args),
                    arguments=args if isinstance(args, dict) else None,
                )
            )
        elif kind == "tool_result" and isinstance(part.get("tool_use_id"), str):
            text, parts = result_content(part.get("content"), builder)
            out.tool_results.append(
                fast_observation(
                    tool_call_id=part["tool_use_id"], content=text, is_error=part.get("is_error") is True, parts=parts
                )
            )
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


def tool_call_from_openai(
    tc: Any, builder: TrajectoryBuilder, where: str, ctx: FileContext, line: int | None
) -> ToolCall:
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
        return fast_tool_call(id=call_id, name=fn["name"], arguments_raw=args, arguments=parse_arguments(args))
    if args is None:
        args = {}
    builder.skip(ARGS_SYNTH)
    return fast_tool_call(
        id=call_id,
        name=fn["name"],
        arguments_raw=synth_arguments_raw(args),
        arguments=args if isinstance(args, dict) else None,
    )
