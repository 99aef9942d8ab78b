"""Log converters, one module per format, and content-based format detection.

Each converter is `convert(ctx: FileContext) -> Iterator[Trajectory]`; `CONVERTERS`
maps the format name to it. Directory formats (`DIR_FORMATS`, `detect_dir`): a harbor
trial directory (`harbor.convert_trial_dir`) and an OpenHands SDK conversation directory
(base_state.json + events/, `openhands_sdk.convert_conversation_dir`) are each one input
unit (see `benchmaker.trajectories.convert`).

Detection (`detect_bytes`) looks at the content only, never the file name, by the rules
of docs/log-formats.md ("How a format is detected"), in its order; each format module
tells its own records (e.g. `gemini_cli.is_conversation_record`, `claude_code.is_claude_code`).
Anything else is unknown (None).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from benchmaker.trajectories.converters import (
    aider_history,
    atif,
    claude_code,
    codex_rollout,
    gemini_cli,
    harbor,
    mini_swe_agent,
    openai_messages,
    opencode,
    openhands,
    openhands_sdk,
    pi_events,
    pi_session,
    swe_agent,
)
from benchmaker.trajectories.converters.builder import CONVERTER_VERSION
from benchmaker.trajectories.converters.json_reading import DETECT_RECORDS, first_jsonl_objects
from benchmaker.trajectories.converters.openhands_sdk import is_sdk_events
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.trajectory import Trajectory

CONVERTERS: dict[str, Callable[[FileContext], Iterator[Trajectory]]] = {
    pi_session.FORMAT: pi_session.convert,
    pi_events.FORMAT: pi_events.convert,
    harbor.FORMAT_JSONL: harbor.convert_jsonl,
    swe_agent.FORMAT: swe_agent.convert,
    mini_swe_agent.FORMAT: mini_swe_agent.convert,
    openhands.FORMAT: openhands.convert,
    openai_messages.FORMAT: openai_messages.convert,
    atif.FORMAT: atif.convert,
    codex_rollout.FORMAT: codex_rollout.convert,
    claude_code.FORMAT: claude_code.convert,
    gemini_cli.FORMAT: gemini_cli.convert,
    opencode.FORMAT: opencode.convert,
    aider_history.FORMAT: aider_history.convert,
}
"""File formats by name (directory formats are in `DIR_FORMATS`)."""


class DirFormat(NamedTuple):
    """A directory format: `matches(path)` tells one, `convert(path, lenient=...)`
    yields its trajectories."""

    matches: Callable[[Path], bool]
    convert: Callable[..., Iterator[Trajectory]]


DIR_FORMATS: dict[str, DirFormat] = {
    harbor.FORMAT_TRIAL: DirFormat(
        harbor.is_trial_dir,
        lambda trial, lenient=False: harbor.convert_trial_dir(
            trial, detect=detect_bytes, converters=CONVERTERS, lenient=lenient
        ),
    ),
    openhands_sdk.FORMAT_CONVERSATION: DirFormat(
        openhands_sdk.is_conversation_dir, openhands_sdk.convert_conversation_dir
    ),
}
"""Formats whose unit is a directory, by name, in detection order."""

FORMATS: tuple[str, ...] = tuple(sorted([*CONVERTERS, *DIR_FORMATS]))

__all__ = [
    "CONVERTERS",
    "CONVERTER_VERSION",
    "DIR_FORMATS",
    "DirFormat",
    "FORMATS",
    "FileContext",
    "companion_kind",
    "detect_bytes",
    "detect_head",
    "detect_dir",
    "is_llm_call_log",
]


def detect_dir(path: Path) -> str | None:
    """The directory format of `path` (a harbor trial: result.json + agent/ or
    verifier/; an OpenHands SDK conversation: base_state.json + events/), or None."""
    for name, fmt in DIR_FORMATS.items():
        if fmt.matches(path):
            return name
    return None


_PI_SESSION_TYPES = {
    "message",
    "model_change",
    "thinking_level_change",
    "compaction",
    "branch_summary",
    "custom_message",
}


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def _looks_mini(messages: list[dict[str, Any]]) -> bool:
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str):
            continue
        if m.get("role") == "user" and content.lstrip().startswith("<returncode>"):
            return True
        if m.get("role") == "assistant" and ("```mswea_bash_command" in content or "```bash" in content):
            return True
    return False


def is_llm_call_log(doc: Any) -> bool:
    """True for a per-call LLM log (one model call: its request `messages` and its
    `response`), as LiteLLM's logging callbacks (StandardLoggingPayload: `call_type`,
    `messages`, `response`) and OpenHands' `llm_completions/` logs (`messages`,
    `response` with `choices`, `kwargs`, `timestamp`) write them. Such a file holds one
    call, not an agent run: the run's calls are a directory of them, each repeating the
    history, so none is converted (companion_kind "llm_call_log")."""
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        return False
    response = doc.get("response")
    return "call_type" in doc or (isinstance(response, dict) and ("choices" in response or "kwargs" in doc))


def _detect_document(doc: Any) -> str | None:
    if isinstance(doc, dict):
        if gemini_cli.is_conversation_record(doc):  # before `messages`: never an OpenAI message list
            return gemini_cli.FORMAT
        if is_llm_call_log(doc):
            return None
        if opencode.is_export(doc):  # before `messages` + `info`: never a mini-swe-agent run
            return opencode.FORMAT
        if openhands.is_eval_record(doc):
            return openhands.FORMAT
        if _is_message_list(doc.get("history")) and "messages" not in doc:
            return swe_agent.FORMAT
        if str(doc.get("schema_version", "")).startswith("ATIF") and isinstance(doc.get("steps"), list):
            return atif.FORMAT
        if "messages" in doc:
            if str(doc.get("trajectory_format", "")).startswith("mini-swe-agent") or isinstance(doc.get("info"), dict):
                return mini_swe_agent.FORMAT
            return openai_messages.FORMAT
        return None
    if isinstance(doc, list) and doc and all(isinstance(e, dict) for e in doc):
        if all(("action" in e or "observation" in e) and "source" in e for e in doc) or is_sdk_events(doc):
            return openhands.FORMAT
        if _is_message_list(doc):
            return mini_swe_agent.FORMAT if _looks_mini(doc) else openai_messages.FORMAT
    return None


_NOT_SPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
"""A byte `bytes.strip()` keeps (it strips ASCII whitespace: these six)."""


def _jsonl_with_more_lines(data: bytes) -> bool:
    """True when `json.loads(data.strip())` must fail without being tried: the first line
    of the stripped bytes is a whole JSON document (orjson, which accepts only strict
    JSON, parses it; json's scanner ends the same value at the same byte) and a non-space
    byte follows it, so json stops with "Extra data" (or, decoding the whole file first,
    on a bad byte). Saves stripping (a copy), decoding and scanning a whole JSONL log
    (~2 ms per MB) to learn that."""
    first = _NOT_SPACE.search(data)
    if first is None:
        return False
    nl = data.find(b"\n", first.start())
    if nl < 0 or _NOT_SPACE.search(data, nl) is None:  # no newline inside the stripped bytes
        return False
    try:
        orjson.loads(data[first.start() : nl])
    except orjson.JSONDecodeError:
        return False
    return True


def detect_bytes(data: bytes) -> str | None:
    """The format name of a file's content, or None when no converter recognises it
    (see module docstring for the rules)."""
    if aider_history.is_llm_history(data):  # text, never JSON
        return aider_history.FORMAT
    fmt = None
    if not _jsonl_with_more_lines(data):  # a JSON document, or one line: stripped and tried whole
        stripped = data.strip()
        if not stripped:
            return None
        try:
            fmt = _detect_document(json.loads(stripped))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # nested too deeply: no log format
            fmt = None
    if fmt is not None:
        return fmt
    return _detect_records(first_jsonl_objects(data))


def detect_head(head: bytes) -> tuple[bool, str | None]:
    """`(decided, format)` for the first lines `head` of a file (whole lines): decided when
    `detect_bytes` gives `format` for every file that begins with `head`, whatever
    follows, so a caller need not read the rest to detect it (a JSONL file streamed from
    disk). That holds when `head`'s first line is a whole JSON value and more follows (no
    one document: JSON lines) and `head` holds the DETECT_RECORDS records detection
    reads; else (False, None): read more, or the whole file."""
    if not _jsonl_with_more_lines(head):
        return False, None
    records = first_jsonl_objects(head)
    if len(records) < DETECT_RECORDS:
        return False, None
    return True, _detect_records(records)


def _detect_records(records: list[Any]) -> str | None:
    """The format of JSON lines whose first records (first_jsonl_objects) are `records`."""
    if not records:
        return None
    first = records[0]
    if gemini_cli.is_jsonl_records(records):
        return gemini_cli.FORMAT
    if all(is_llm_call_log(r) for r in records):
        return None
    if harbor.is_meta_record(first):
        return harbor.FORMAT_JSONL
    if all(openhands.is_eval_record(r) for r in records) or is_sdk_events(records):
        return openhands.FORMAT
    if codex_rollout.is_rollout_records(records):
        return codex_rollout.FORMAT
    if claude_code.is_claude_code(records):
        return claude_code.FORMAT
    types = {r.get("type") for r in records if isinstance(r, dict)}
    if types & pi_events.EVENT_TYPES:
        return pi_events.FORMAT
    if (isinstance(first, dict) and first.get("type") == "session") or types & _PI_SESSION_TYPES:
        return pi_session.FORMAT
    if all(isinstance(r, dict) and "messages" in r for r in records):
        return openai_messages.FORMAT
    return None


def _is_prediction(obj: Any) -> bool:
    return isinstance(obj, dict) and "model_patch" in obj and "instance_id" in obj


def companion_kind(data: bytes) -> str | None:
    """The kind of a file agents write beside their logs that holds no conversation, or
    None: `predictions` (SWE-agent / mini-swe-agent `preds.json` {instance_id: {...,
    "model_patch"}}, `all_preds.jsonl` / OpenHands-style rows with `instance_id` and
    `model_patch`), `eval_metadata` (OpenHands `metadata.json`: `agent_class` +
    `llm_config`), `eval_report` (SWE-bench reports: {instance_id: {"resolved": bool}}
    or an object with `resolved_ids` / `resolved_instances`), `llm_call_log` (a per-call
    LLM log, `is_llm_call_log`, or JSONL rows of them). Only asked for a file
    `detect_bytes` does not recognise."""
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        rows = first_jsonl_objects(data)
        if rows and all(is_llm_call_log(r) for r in rows):
            return "llm_call_log"
        return "predictions" if rows and all(_is_prediction(r) for r in rows) else None
    if is_llm_call_log(doc):
        return "llm_call_log"
    if isinstance(doc, list):
        return "predictions" if doc and all(_is_prediction(r) for r in doc) else None
    if not isinstance(doc, dict) or not doc:
        return None
    if _is_prediction(doc) or all(isinstance(v, dict) and "model_patch" in v for v in doc.values()):
        return "predictions"
    if "agent_class" in doc and "llm_config" in doc:
        return "eval_metadata"
    if (
        "resolved_ids" in doc
        or "resolved_instances" in doc
        or all(isinstance(v, dict) and isinstance(v.get("resolved"), bool) for v in doc.values())
    ):
        return "eval_report"
    return None
