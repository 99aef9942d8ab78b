"""Strict JSON and JSONL readers for the log converters that point at the bad line:
`read_json_document`, `iter_jsonl`, `iter_rows`, the orjson/json choice (`orjson_safe`),
the first records parsed once for format detection (`keeping_first_records`,
`first_jsonl_objects`), `dict_or_empty` for an optional object field and
`non_negative_int` for an optional count."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import orjson

from benchmaker.trajectories.converters.source_file import FileContext, FirstRecords
from benchmaker.trajectories.errors import ConvertError
from benchmaker.trajectories.trajectory import (
    Trajectory,
)

_DIGIT_CLASS = bytes(48 if 48 <= b <= 57 else b for b in range(256))  # every digit -> b"0"
_LONG_RUN = b"0" * 19
_JSON_SPACE = b" \t\r\n"


_DIGITS = frozenset(b"0123456789")
_SAFE_CHUNK = 1 << 20
"""orjson_safe translates this many bytes at a time: its memory is one chunk, not a copy
of the file."""


def orjson_safe(data: bytes) -> bool:
    """True when `orjson.loads` gives the same value as `json.loads` for any JSON in
    `data` that orjson accepts: false when a number token may have 19 or more digits
    (orjson turns an integer beyond 64 bits into a float, json keeps it an int). A digit
    run counts as a number when it follows `:`, `,`, `[` (JSON spaces and a `-` between)
    or starts `data` or a line (a JSONL record that is a bare number); one inside a
    string that looks so only costs the slow path.
    Everything orjson refuses (NaN, Infinity, lone surrogates, a UTF-8 BOM, bad bytes or
    syntax) is re-parsed with `json`, whose value or error message stands. Cost: a
    `bytes.translate` of each _SAFE_CHUNK (and 18 bytes more, so a run that starts in the
    chunk is seen whole) and a substring search (~1 ms per MB)."""
    n, pos = len(data), 0
    while pos < n:
        stop = min(pos + _SAFE_CHUNK, n)
        window = data[pos : stop + len(_LONG_RUN) - 1].translate(_DIGIT_CLASS)
        next_pos = stop
        at = window.find(_LONG_RUN)
        while 0 <= at < stop - pos:  # a run of 19 digits or more starts in this chunk
            run = pos + at
            if _number_at(data, run):
                return False
            end = run + len(_LONG_RUN)
            while end < n and data[end] in _DIGITS:  # past this run
                end += 1
            if end >= stop:  # the next chunk starts after it
                next_pos = end
                break
            at = window.find(_LONG_RUN, end - pos)
        pos = next_pos
    return True


def _number_at(data: bytes, run: int) -> bool:
    """Whether the digit run at `run` of `data` is a number token (orjson_safe)."""
    i = run
    while i > 0 and data[i - 1] in _DIGITS:  # the start of the digit run
        i -= 1
    if i > 0 and data[i - 1] == 45:  # "-"
        i -= 1
    start = i
    while i > 0 and data[i - 1] in _JSON_SPACE:
        i -= 1
    return i == 0 or data[i - 1] in b":,[" or 10 in data[i:start]  # 10: a newline, a JSONL record starts


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
    except RecursionError:
        raise ctx.error(None, None, "JSON nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()):
            raise ctx.error(exc.lineno, None, "truncated JSON document") from exc
        raise ctx.error(exc.lineno, None, f"invalid JSON: {exc.msg}") from exc


def iter_jsonl(ctx: FileContext) -> Iterator[tuple[int, Any]]:
    """Yield `(line_number, object)` for each non-blank line.

    Raises ConvertError on a line that is not UTF-8, not JSON, or (last line without a
    newline that does not parse) truncated. With `ctx.lenient` such lines are skipped
    and counted in `ctx.skipped` (`invalid_utf8_line`, `invalid_json_line`,
    `truncated_last_line`) instead. Lines parse with orjson when the file is
    `orjson_safe` (a streamed file: when the line is); a line orjson refuses takes the
    `json` path, whose value or error stands. Lines in `ctx.first_records` are not
    parsed again, nor copied, nor the bytes checked again when it knows (the first call
    only). A streamed context (`FileContext.streamed`) is read from its source one line
    at a time: memory is one line and its value, not the file.
    """
    detected, ctx.first_records = ctx.first_records, None  # taken once: a second pass parses its own
    first = detected.records if detected is not None else None
    fast: bool | None = None  # None: each line checked on its own
    if ctx.streamed:
        lines = _file_lines(ctx)
    else:
        fast = detected.safe if detected is not None and detected.safe is not None else orjson_safe(ctx.data)
        lines = _byte_lines(ctx.data, first)
    loads = orjson.loads
    for idx, raw, last in lines:
        if first and idx in first:  # parsed by orjson for format detection: the value either parse gives
            yield idx, first.pop(idx)
            continue
        if not raw or raw.isspace():  # blank (isspace: no copy of the line, as strip makes)
            continue
        if fast or (fast is None and orjson_safe(raw)):
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
        except RecursionError:
            if ctx.lenient:
                ctx.skipped["invalid_json_line"] += 1
                continue
            raise ctx.error(idx, None, "JSON nested too deeply to read") from None
        except json.JSONDecodeError as exc:
            reason = "truncated_last_line" if last else "invalid_json_line"
            if ctx.lenient:
                ctx.skipped[reason] += 1
                continue
            if last:
                raise ctx.error(idx, None, "truncated JSONL: the last line is incomplete") from exc
            raise ctx.error(idx, None, f"invalid JSON: {exc.msg}") from exc


def _byte_lines(data: bytes, skip: dict[int, Any] | None) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without its newline, last line without a newline) of `data`,
    line by line with find (memchr), not split; a line in `skip` is not copied (b"")."""
    end, idx, at = len(data), 0, 0
    while at < end:
        stop = data.find(b"\n", at)
        last = stop < 0
        stop = end if last else stop
        idx += 1
        yield idx, (b"" if skip and idx in skip else data[at:stop]), last
        at = stop + 1


def _file_lines(ctx: FileContext) -> Iterator[tuple[int, bytes, bool]]:
    """The lines of a streamed context's source as _byte_lines gives them, read one at a
    time (a binary file splits at b"\\n" only, as find does). Raises ConvertError when
    the file cannot be read."""
    assert ctx.source is not None
    try:
        with open(ctx.source, "rb") as fh:
            for idx, raw in enumerate(fh, start=1):
                if raw.endswith(b"\n"):
                    yield idx, raw[:-1], False
                else:
                    yield idx, raw, True
    except OSError as exc:
        raise ctx.error(None, None, f"cannot read: {exc.strerror or exc}") from exc


_STRIP = b" \t\n\r\x0b\x0c"  # what bytes.strip() removes


def content_span(data: bytes) -> tuple[int, int]:
    """`(start, end)` of `data` without its leading and trailing whitespace (as
    `bytes.strip` sees it), without copying the bytes; (n, n) when all is whitespace."""
    n = len(data)
    start = 0
    while start < n and data[start] in _STRIP:
        start += 1
    end = n
    while end > start and data[end - 1] in _STRIP:
        end -= 1
    return start, end


def first_byte(data: bytes) -> int | None:
    """The first byte of `data` that is not whitespace, None when there is none."""
    start, end = content_span(data)
    return data[start] if start < end else None


def _parses(data: bytes) -> bool:
    try:
        orjson.loads(data)
        return True
    except orjson.JSONDecodeError:
        pass
    try:
        json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return False
    return True


def is_one_document(data: bytes) -> bool:
    """True when the whole of `data` parses as one JSON document. When its first line
    holds a JSON value by itself and more follows, `data` is JSON lines (a value then
    more text is no document) and the whole is never parsed: the answer costs one line,
    not a parse of the file (the failed parse of a 12 MB JSONL file held ~150 MB)."""
    start, end = content_span(data)
    newline = data.find(b"\n", start, end)
    if newline >= 0 and _parses(data[start:newline]):
        return False
    return _parses(data)


def is_one_multiline_document(data: bytes) -> bool:
    """True when `data`, whitespace around it aside, spans several lines and is one JSON
    document (a pretty-printed document, not JSON lines nor one JSON line)."""
    start, end = content_span(data)
    return data.find(b"\n", start, end) >= 0 and is_one_document(data)


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


DETECT_RECORDS = 50
"""Format detection reads this many records of a JSONL file (first_jsonl_objects)."""


def first_jsonl_objects(data: bytes, limit: int = DETECT_RECORDS) -> list[Any]:
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
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            continue
    return out


def dict_or_empty(value: Any) -> dict[str, Any]:
    """`value` when it is a dict (a JSON object), else a new empty dict: an optional
    object field read leniently."""
    return value if isinstance(value, dict) else {}


def non_negative_int(value: Any) -> int | None:
    """`value` when it is an int >= 0 (not a bool), else None: a token count or an epoch
    ms stamp read leniently."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
