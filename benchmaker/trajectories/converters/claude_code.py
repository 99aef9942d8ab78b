"""Claude Code session files (`~/.claude/projects/<dir>/<session>.jsonl`, and the
`agent-<id>.jsonl` files of its subagents), one or more trajectories per file.

Format read from real 2.x session files and the public parsers of them (e.g.
marot/spotter `test/fixtures/transcripts`). Claude Code writes one line per content
block of a response, each with the response's usage so far: one turn per API call
(`requestId`), each thread (the main session, each subagent) one trajectory. What each
record becomes: docs/log-formats.md#claude-code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmaker.apis.anthropic_messages import STOP_CLASSES
from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.content_parts import result_content, text_of
from benchmaker.trajectories.converters.json_reading import iter_jsonl, non_negative_int
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.timestamps import ms_from_iso
from benchmaker.trajectories.converters.tool_calls import synthesized_call
from benchmaker.trajectories.trajectory import (
    ContextEdit,
    MessageRef,
    Observation,
    Response,
    Timing,
    ToolCall,
    Trajectory,
    Usage,
    flatten_content,
)

FORMAT = "claude-code"

RECORD_TYPES = frozenset(
    {
        "user",
        "assistant",
        "system",
        "progress",
        "summary",
        "file-history-snapshot",
        "queue-operation",
        "attachment",
        "last-prompt",
        "api-request",
        "api-request-shape",
        "api-request-blob",
        "tools-used",
        "cost-state",
        "atis-latch",
    }
)
"""Values of `type` seen in Claude Code session files (2.1.38 and 2.1.332); other
types are read as records without a message too."""


def is_claude_code(records: list[Any]) -> bool:
    """True when the first records of a JSONL file are Claude Code session lines: every
    record an object with a string `type`, one carries `sessionId`, and a `user` or
    `assistant` record holds a `message` object beside `parentUuid` and `isSidechain`
    (the fields of Claude Code's conversation lines), or the records' types are all
    known ones of this format with a `progress` among them."""
    dicts = [r for r in records if isinstance(r, dict)]
    if not dicts or len(dicts) != len(records) or not all(type(r.get("type")) is str for r in dicts):
        return False
    if not any("sessionId" in r for r in dicts):
        return False
    if any(
        r["type"] in ("user", "assistant")
        and isinstance(r.get("message"), dict)
        and "parentUuid" in r
        and "isSidechain" in r
        for r in dicts
    ):
        return True
    return all(r["type"] in RECORD_TYPES for r in dicts) and any(r["type"] == "progress" for r in dicts)


@dataclass
class _Entry:
    """One conversation line of a thread: its line number, kind (user, assistant,
    compact), the message, and the fields conversion reads."""

    line: int
    kind: str
    message: dict[str, Any]
    timestamp: str | None
    request_id: str | None = None
    request_ref: str | None = None
    compact_summary: bool = False
    pre_tokens: int | None = None


def _thread_key(rec: dict[str, Any]) -> str:
    if rec.get("isSidechain") is True:
        return "sidechain:" + str(rec.get("agentId") or rec.get("sessionId") or "")
    return "main"


@dataclass
class _Requests:
    """What 2.1.332 logs of the requests themselves: each `api-request` record by id
    ({"timestamp", "base", "tail"}) and each `api-request-blob` message by hash."""

    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    blobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def sent_at(self, request_id: str | None) -> str | None:
        rec = self.by_id.get(request_id or "")
        stamp = rec.get("timestamp") if rec else None
        return stamp if isinstance(stamp, str) else None

    def opening_users(self, request_id: str | None) -> list[str] | None:
        """The flattened user messages before the first assistant message of a request
        logged whole (no `base`: the first of a session) with every `tail` blob present,
        else None."""
        rec = self.by_id.get(request_id or "")
        if not rec or rec.get("base") is not None or not isinstance(rec.get("tail"), list):
            return None
        users: list[str] = []
        for h in rec["tail"]:
            msg = self.blobs.get(h) if isinstance(h, str) else None
            if msg is None:
                return None
            if msg.get("role") == "assistant":
                break
            if msg.get("role") == "user":
                users.append(text_of(msg.get("content")))
        return users or None


def _read_threads(ctx: FileContext, skipped: dict[str, int], requests: _Requests) -> dict[str, list[_Entry]]:
    """The conversation lines of the file by thread (docs/log-formats.md#claude-code); `requests` gets the
    `api-request` records and `api-request-blob` messages."""
    threads: dict[str, list[_Entry]] = {}

    def add(key: str, entry: _Entry) -> None:
        threads.setdefault(key, []).append(entry)

    for line, rec in iter_jsonl(ctx):
        if not isinstance(rec, dict):
            raise ctx.error(line, None, "expected a JSON object", rec)
        kind = rec.get("type")
        if kind in ("user", "assistant") and isinstance(rec.get("message"), dict):
            ref = rec.get("requestRef")
            add(
                _thread_key(rec),
                _Entry(
                    line,
                    kind,
                    rec["message"],
                    rec.get("timestamp"),
                    rec.get("requestId"),
                    ref if isinstance(ref, str) else None,
                    rec.get("isCompactSummary") is True,
                ),
            )
        elif kind == "system" and rec.get("subtype") == "compact_boundary":
            meta = rec.get("compactMetadata")
            if not isinstance(meta, dict):
                meta = {}
            pre = meta.get("preTokens")
            add(
                _thread_key(rec),
                _Entry(line, "compact", {}, rec.get("timestamp"), pre_tokens=non_negative_int(pre)),
            )
        elif kind == "progress" and isinstance(rec.get("data"), dict) and rec["data"].get("type") == "agent_progress":
            data = rec["data"]
            inner = data.get("message")
            if (
                isinstance(inner, dict)
                and inner.get("type") in ("user", "assistant")
                and isinstance(inner.get("message"), dict)
            ):
                add(
                    "agent:" + str(data.get("agentId") or rec.get("parentToolUseID") or ""),
                    _Entry(line, inner["type"], inner["message"], inner.get("timestamp"), inner.get("requestId")),
                )
        else:
            if kind == "api-request" and isinstance(rec.get("id"), str):
                requests.by_id[rec["id"]] = rec
            elif (
                kind == "api-request-blob" and isinstance(rec.get("hash"), str) and isinstance(rec.get("message"), dict)
            ):
                requests.blobs[rec["hash"]] = rec["message"]
            name = f"record:{kind}" if kind != "progress" else f"record:progress:{(rec.get('data') or {}).get('type')}"
            skipped[name] = skipped.get(name, 0) + 1
    return threads


def _usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    uncached, read, creation = (
        non_negative_int(usage.get(k))
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    prompt = None if uncached is None else uncached + (read or 0) + (creation or 0)
    out = Usage(
        prompt_tokens=prompt,
        completion_tokens=non_negative_int(usage.get("output_tokens")),
        cached_tokens=read,
        cache_creation_tokens=creation,
    )
    return None if out == Usage() else out


def _call_key(entry: _Entry) -> str:
    """The model call of an assistant line: its `requestId` (2.1.38), else its
    `requestRef` (2.1.332: the id of the call's `api-request` record), else its message id."""
    return entry.request_id or entry.request_ref or "msg:" + str(entry.message.get("id") or entry.line)


class _Converter:
    """Builds one thread's trajectory (rules: docs/log-formats.md#claude-code)."""

    def __init__(self, ctx: FileContext, entries: list[_Entry], requests: _Requests) -> None:
        self.ctx = ctx
        self.entries = entries
        self.requests = requests
        self.first_request: str | None = None  # requestRef of the thread's first call
        self.builder = TrajectoryBuilder(ctx, FORMAT)

    def run(self) -> TrajectoryBuilder:
        entries = self.entries
        calls: dict[str, list[_Entry]] = {}
        for e in entries:
            if e.kind == "assistant":
                calls.setdefault(_call_key(e), []).append(e)
        done: set[str] = set()
        pending_user: list[str | list[dict[str, Any]]] = []
        compact: _Entry | None = None
        summary: str | None = None
        previous_ts: str | None = None
        for e in entries:
            if e.kind == "compact":
                self._flush_user(pending_user)
                compact, summary = e, None
            elif e.kind == "user":
                if compact is not None and e.compact_summary and summary is None:
                    summary = text_of(e.message.get("content"), self.builder)
                else:
                    self._user(e, pending_user)
            elif e.kind == "assistant":
                key = _call_key(e)
                if key in done:
                    previous_ts = e.timestamp
                    continue
                done.add(key)
                if e.message.get("model") == "<synthetic>":
                    self.builder.skip("synthetic_message")
                    previous_ts = e.timestamp
                    continue
                if compact is not None:
                    self._compaction(compact, summary, pending_user)
                    compact = summary = None
                self._flush_user(pending_user)
                self._turn(calls[key], previous_ts)
            previous_ts = e.timestamp or previous_ts
        self._flush_user(pending_user)
        return self.builder

    def _user(self, e: _Entry, pending: list[str | list[dict[str, Any]]]) -> None:
        content = e.message.get("content")
        if isinstance(content, str):
            pending.append(content)
            return
        rest: list[Any] = []
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                self._flush_user(pending)  # a text before a result stays before it
                text, parts = result_content(block.get("content"), self.builder)
                self.builder.observation(
                    Observation(
                        tool_call_id=block.get("tool_use_id") if isinstance(block.get("tool_use_id"), str) else None,
                        content=text,
                        is_error=block.get("is_error") is True,
                        parts=parts,
                    )
                )
            else:
                rest.append(block)
        if rest:
            text, parts = result_content(rest, self.builder)
            pending.append(text if parts is None else parts)

    def _flush_user(self, pending: list[str | list[dict[str, Any]]]) -> None:
        """The pending user lines as one user message: their texts joined with "\\n";
        when a line held an image, the message's content parts (every line's, in order),
        its text then the parts' text (`flatten_content`, as the replay server reads it)."""
        if not pending:
            return
        texts = [item for item in pending if isinstance(item, str)]
        if len(texts) == len(pending):
            self.builder.user("\n".join(texts))
        else:
            parts: list[dict[str, Any]] = []
            for item in pending:
                if isinstance(item, str):
                    parts.append({"type": "text", "text": item})
                else:
                    parts.extend(item)
            self.builder.user(flatten_content(parts), parts)
        pending.clear()

    def _compaction(self, compact: _Entry, summary: str | None, pending: list[str | list[dict[str, Any]]]) -> None:
        """The ContextEdit of a compaction before the next turn: the summary, then the
        user text that followed it (still pending, so kept from its ref on)."""
        b = self.builder
        if summary is None:
            b.skip("compact_boundary_without_summary")
            return
        if not b.turns:  # nothing before it to drop: the summary opens the conversation
            b.user(summary)
            return
        keep_from: MessageRef = b.next_ref("user") if pending else b.next_ref("assistant")
        b.edit(ContextEdit(kind="compaction", summary=[summary], keep_from=keep_from, tokens_before=compact.pre_tokens))

    def _turn(self, lines: list[_Entry], previous_ts: str | None) -> None:
        b = self.builder
        thinking: list[str] = []
        texts: list[str] = []
        calls: list[ToolCall] = []
        stop = None
        for e in lines:
            if e.message.get("stop_reason") is not None:
                stop = e.message["stop_reason"]
            for block in e.message.get("content") or ():
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if kind == "text" and isinstance(block.get("text"), str):
                    texts.append(block["text"])
                elif kind == "thinking" and isinstance(block.get("thinking"), str):
                    thinking.append(block["thinking"])
                elif kind == "redacted_thinking":
                    b.skip("redacted_thinking")
                elif kind == "tool_use":
                    call_id, name = str(block.get("id") or f"toolu_{len(calls)}"), str(block.get("name") or "")
                    calls.append(synthesized_call(call_id, name, block.get("input", {}), b))
                else:
                    b.skip(f"part:{kind}")
        finish = STOP_CLASSES.get(stop) if isinstance(stop, str) else None
        response = Response(
            content="".join(texts) if texts else None,
            reasoning="".join(thinking) if thinking else None,
            tool_calls=calls,
            finish_reason=finish or ("tool_calls" if calls else "stop"),
        )
        last = lines[-1]
        if self.requests.sent_at(lines[0].request_ref) is not None:  # 2.1.332 logs when it went out
            previous_ts = self.requests.sent_at(lines[0].request_ref)
        if not b.turns:
            self.first_request = lines[0].request_ref
        start_ms, end_ms = ms_from_iso(previous_ts), ms_from_iso(last.timestamp)
        timing = None
        if end_ms is not None:
            duration = end_ms - start_ms if start_ms is not None and end_ms >= start_ms else None
            timing = Timing(duration_ms=duration, started_at=previous_ts if duration is not None else None)
        model = lines[0].message.get("model")
        b.turn(
            response,
            usage=_usage(last.message.get("usage")),
            timing=timing,
            model=model if isinstance(model, str) else None,
        )


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the trajectories of a Claude Code session file: the main thread, then each
    subagent thread (docs/log-formats.md#claude-code). A thread with no assistant call is skipped (counted on
    the first trajectory as `thread_without_calls`). Raises ConvertError."""
    file_skips: dict[str, int] = {}
    requests = _Requests()
    threads = _read_threads(ctx, file_skips, requests)
    built: list[TrajectoryBuilder] = []
    empty = 0
    for key in sorted(threads, key=lambda k: (k != "main", threads[k][0].line)):
        converter = _Converter(ctx, threads[key], requests)
        builder = converter.run()
        opening = requests.opening_users(converter.first_request)
        if (
            opening is not None
            and builder.first_user is not None
            and not builder.user_before_turns
            and opening[-1].endswith(builder.first_user)
        ):
            # the opening user message as it was sent (2.1.332 logs it: reminders included)
            builder.first_user, builder.user_before_turns = opening[0], opening[1:]
            builder.skip("opening_message_from_request_log")
        if builder.turns and builder.first_user is not None:
            built.append(builder)
        else:
            empty += 1
    if not built:
        raise ctx.error(None, None, "no Claude Code thread with a user message and a model call")
    for name, n in file_skips.items():
        built[0].skip(name, n)
    if empty:
        built[0].skip("thread_without_calls", empty)
    for index, builder in enumerate(built):
        yield builder.build(index)
