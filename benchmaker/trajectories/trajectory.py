"""The trajectory schema: one recorded agent run per JSONL line (docs/replay-an-agent.md).

A trajectory keeps every assistant response exactly as recorded (text, reasoning, tool
calls with the raw argument string and the parsed arguments, finish reason), the
recorded usage (None when the log has none), timings when the log has them, and the
tool observations that followed each response.

Shape of one line (`Trajectory.model_dump_json()`):

    {"schema_version": 1, "trajectory_id": "...", "source": {"format": "pi-session",
     "path": "...", "sha256": "...", "line": null}, "task_id": "...", "match_key": "...",
     "model": "...", "system": "...", "first_user": "...", "user_before_turns": [],
     "terminated_by": "stop",
     "outcome": {"patch": null, "resolved": null, "reward": null, "exit_status": null},
     "turns": [{"index": 0, "model": "...", "response": {...}, "usage": {...},
                "timing": {...}, "observations": [...], "user_after": [...],
                "context_edit": null, "error": null}]}

`schema_version` is SCHEMA_VERSION (5); lines of versions 1 to 4 still validate (the
fields added since default to None or empty).

Match key: over all user messages before the first assistant message (`first_user`,
then `user_before_turns`): an explicit `task_id: <id>` line in one of them, else the
sha256 of their flattened texts (`match_key_for_messages`); the replay server computes
the same key from an incoming request. With a single user message this is
`match_key_for(first_user)`.

Canned exchanges (aider's own example conversation and "Ok." replies; what they are and
how a request is read without them: docs/replay-an-agent.md, "Agents that write
exchanges of their own"; source: aider/coders/base_coder.py `format_chat_chunks`,
`move_back_cur_messages`, the texts in aider/coders/*_prompts.py): a trajectory lists
their assistant texts in `canned_replies`, and `without_canned` drops each assistant
message (without tool calls) whose text is one, with the user message right before it.
A recording in which the model itself produced such a text lists it as no canned reply.
Empty for every other agent.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 5

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error", "aborted"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Model):
    """One tool call as the model emitted it. `arguments_raw` is the exact string sent
    on the wire (OpenAI `function.arguments`); `arguments` its parse, None when the raw
    string is not a JSON object. `type`: "custom" for an OpenAI custom (free-form) tool
    call, whose `arguments_raw` is its `input` (Responses `custom_tool_call`, e.g. Codex
    CLI's apply_patch); None for a function call."""

    id: str
    name: str
    arguments_raw: str
    arguments: dict[str, Any] | None = None
    type: str | None = None


class Response(_Model):
    """An assistant response, byte-exact: `content` and `reasoning` are the texts as
    recorded (None when absent, "" when present but empty)."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: FinishReason = "stop"


MAX_TOKENS = 2**63 - 1
"""The largest token count a trajectory holds: what orjson writes (64-bit) and DuckDB's
BIGINT stores. A logged count beyond it (10**30) is no count a model reported: unknown."""


class Usage(_Model):
    """Recorded token usage of one model call, in tokens; None fields were not logged.
    `prompt_tokens` is the whole input (cached included, OpenAI's meaning);
    `cached_tokens` the part read from the prompt cache; `cache_creation_tokens` the part
    written to it (Anthropic `cache_creation_input_tokens`). A count above MAX_TOKENS
    becomes None (unknown), in a converter and in a reader alike, so no trajectory
    written holds a number the replay server or the warehouse cannot take."""

    @field_validator("*", mode="before")
    @classmethod
    def _beyond_max_is_unknown(cls, value: Any) -> Any:
        return None if type(value) is int and value > MAX_TOKENS else value

    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)
    reasoning_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)
    cache_creation_tokens: int | None = Field(default=None, ge=0)


class Timing(_Model):
    """Recorded timings of one model call in ms, when the log has them."""

    ttft_ms: float | None = Field(default=None, ge=0)
    duration_ms: float | None = Field(default=None, ge=0)
    started_at: str | None = None


class Observation(_Model):
    """A tool result that followed a response: `tool_call_id` ties it to a ToolCall
    (None for text-action agents); `exit_code` when the tool reported one. `content`
    is the result's text (text parts joined with "\\n"); `parts`, when the result held
    an image, is the whole result as chat content parts (`content_parts`), which a
    replaying harness sends instead of `content`; None for a text-only result."""

    tool_call_id: str | None = None
    name: str | None = None
    content: str
    is_error: bool = False
    exit_code: int | None = None
    parts: list[dict[str, Any]] | None = None


class MessageRef(_Model):
    """A message of the conversation as the agent built it without context edits (see
    `benchmaker.trajectories.context.history_messages`): `turn` None names the opening user messages
    (`item` 0 = `first_user`, i = `user_before_turns[i-1]`); turn t names that turn's
    block `[assistant, *observations, *user_after]` at position `item`."""

    turn: int | None = Field(default=None, ge=0)
    item: int = Field(default=0, ge=0)


class MessageSpan(_Model):
    """A run of consecutive history messages: from `start` up to, not including, `end`
    (MessageRefs, `benchmaker.trajectories.context.history_messages` order)."""

    start: MessageRef
    end: MessageRef


class ContextEdit(_Model):
    """The agent replaced its history before this turn: from this turn on (until the next
    edit) a request is the system prompt, then the `head` spans of the history, then
    `summary` (user messages, in order), then the `keep` spans, then the history from
    `keep_from` up to the turn. `keep_from` = `{"turn": <this turn>, "item": 0}` keeps
    nothing of the history before the edit beyond the spans. `kind` names the edit:
    "compaction" (pi `compaction`: summary, then the entries from `firstKeptEntryIndex`
    / `firstKeptEntryId` on), "branch" (pi `/tree`, `/fork` or a retry: the request is
    the path of the session tree to the turn, with the abandoned branch left out; spans
    name the path's messages), "condensation" (OpenHands condenser: the forgotten
    events dropped, the summary at its offset after the `head` events).
    `tokens_before`: the context size the agent reported before the edit, when logged."""

    kind: str
    head: list[MessageSpan] = Field(default_factory=list)
    summary: list[str] = Field(default_factory=list)
    keep: list[MessageSpan] = Field(default_factory=list)
    keep_from: MessageRef
    tokens_before: int | None = Field(default=None, ge=0)


class Turn(_Model):
    """One model call: the response, its usage and timing, and what the tools returned.
    `user_after` holds user messages that arrived after the observations (follow-up
    prompts), in order, so a replaying agent can send them. `model`: the model name the
    call was answered by (None: the trajectory's). `context_edit`: set on the first turn
    sent after the agent edited its context (module doc). `error`: the recorded error
    message when the call failed in the original run (finish_reason aborted/error)."""

    index: int = Field(ge=0)
    model: str | None = None
    response: Response
    usage: Usage | None = None
    timing: Timing | None = None
    observations: list[Observation] = Field(default_factory=list)
    user_after: list[str] = Field(default_factory=list)
    context_edit: ContextEdit | None = None
    error: str | None = None


class Source(_Model):
    """Where the trajectory came from: converter format name, file path, the file's
    sha256, and the line within the file for multi-record files."""

    format: str
    path: str
    sha256: str
    line: int | None = None
    converter_version: int = 1


class RecordedOutcome(_Model):
    """What the recorded run achieved, when known: the submitted patch, whether the
    verifier resolved the task, the reward, and the agent's own exit status."""

    patch: str | None = None
    resolved: bool | None = None
    reward: float | None = None
    exit_status: str | None = None


class Trajectory(_Model):
    """One recorded agent run (see module docstring for the JSONL shape)."""

    schema_version: int = SCHEMA_VERSION
    trajectory_id: str
    source: Source
    task_id: str | None = None
    match_key: str
    model: str | None = None
    system: str | None = None
    first_user: str
    first_user_parts: list[dict[str, Any]] | None = None
    """The first user message as chat content parts when it held an image
    (`content_parts`; its text parts joined are `first_user`), which a replaying harness
    sends instead of `first_user`; None for a text-only prompt."""
    user_before_turns: list[str] = Field(default_factory=list)
    """User messages after `first_user` and before the first assistant turn, in order
    (e.g. SWE-agent sends a demonstration first and the task prompt second); a
    replaying agent sends them right after `first_user`. Part of the match key."""
    terminated_by: str | None = None
    outcome: RecordedOutcome = Field(default_factory=RecordedOutcome)
    tools: list[dict[str, Any]] | None = None
    """The tool definitions the agent sent with its model calls (the request's `tools`
    array), in OpenAI chat completions shape: `{"type": "function", "function": {"name",
    "description", "parameters"}}` (a custom tool: `{"type": "custom", "custom": {...}}`),
    as benchmaker.apis' `chat_tools` read them from any wire API; None when the log has
    none. A replaying harness sends them with every request."""
    turns: list[Turn]
    skipped: dict[str, int] = Field(default_factory=dict)
    canned_replies: list[str] = Field(default_factory=list)
    """The assistant texts of the canned exchanges the agent writes into its own requests
    (module docstring), in the order first seen; empty when it writes none."""


_TASK_ID_LINE = re.compile(r"^\s*task_id:\s*(\S+)\s*$", re.MULTILINE)


def flatten_content(content: Any) -> str:
    """Flatten an OpenAI message `content` (str, or list of parts) to text: text parts
    joined with "\\n", non-text parts skipped; None gives ""."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return str(content)


def without_canned(messages: list[dict[str, Any]], canned: frozenset[str]) -> list[dict[str, Any]]:
    """`messages` (chat shape) without their canned exchanges (module docstring): every
    message of role "assistant" without `tool_calls` whose flattened content is one of
    `canned` (both compared without surrounding whitespace: a log that keeps text by
    lines, as aider's LLM history, loses a final line break) is left out, and so is the
    message right before it when that one has role "user" (and was not left out
    already). The same list when `canned` is empty or nothing is left out; else a new
    list of the same message objects."""
    if not canned:
        return messages
    texts = {t.strip() for t in canned}
    drop: set[int] = set()
    for i, msg in enumerate(messages):
        if (
            msg.get("role") == "assistant"
            and not msg.get("tool_calls")
            and flatten_content(msg.get("content")).strip() in texts
        ):
            drop.add(i)
            if i and messages[i - 1].get("role") == "user" and i - 1 not in drop:
                drop.add(i - 1)
    if not drop:
        return messages
    return [m for i, m in enumerate(messages) if i not in drop]


_TEXT_PART_TYPES = ("text", "input_text", "output_text")


def _image_url(part: dict[str, Any]) -> str | None:
    """The URL (a `data:` URL for inline bytes) of an image content part of any API, or
    None when `part` is not one (module docstring of `content_parts`)."""
    kind = part.get("type")
    if kind == "image_url":  # OpenAI chat: {"image_url": {"url"}} (or the bare string)
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return url if isinstance(url, str) else None
    if kind == "input_image":  # OpenAI Responses: {"image_url": "..."}
        url = part.get("image_url")
        return url if isinstance(url, str) else None
    if kind == "image":
        source = part.get("source")
        if isinstance(source, dict):  # Anthropic: {"source": {"type": "base64" | "url", ...}}
            if source.get("type") == "url" and isinstance(source.get("url"), str):
                return source["url"]
            media, data = source.get("media_type"), source.get("data")
        else:  # pi: {"data", "mimeType"}
            media, data = part.get("mimeType"), part.get("data")
        if isinstance(media, str) and isinstance(data, str):
            return f"data:{media};base64,{data}"
        return None
    inline = part.get("inlineData")  # Gemini: {"inlineData": {"mimeType", "data"}}
    if isinstance(inline, dict) and isinstance(inline.get("mimeType"), str) and isinstance(inline.get("data"), str):
        return f"data:{inline['mimeType']};base64,{inline['data']}"
    return None


def content_parts(content: Any) -> list[dict[str, Any]] | None:
    """A message or tool result `content` that holds an image, as OpenAI chat content
    parts in order: text parts (`text`, `input_text`, `output_text`, or a bare string)
    `{"type": "text", "text"}`, image parts of any API `{"type": "image_url",
    "image_url": {"url"}}` (OpenAI chat `image_url`, Responses `input_image`, Anthropic
    `image` with a base64 or url `source`, pi `image` {data, mimeType}, Gemini
    `inlineData`: inline bytes become a `data:<mime>;base64,<data>` URL); other parts
    are left out. None when `content` is not a list or holds no image (its text is then
    all there is: `flatten_content`). The text parts joined with "\\n" are
    `flatten_content(content)`. Sources: openai-python `ChatCompletionContentPartParam`,
    anthropic-sdk-python `ImageBlockParam`, pi-ai `ImageContent`, Gemini API `Blob`."""
    if not isinstance(content, list):
        return None
    parts: list[dict[str, Any]] = []
    images = 0
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str) and part.get("type", "text") in _TEXT_PART_TYPES:
                parts.append({"type": "text", "text": part["text"]})
            elif (url := _image_url(part)) is not None:
                parts.append({"type": "image_url", "image_url": {"url": url}})
                images += 1
    return parts if images else None


_KEY_SEPARATOR = "\n\x1e\n"
"""Joins the user texts hashed by `match_key_for_messages` (\\x1e: ASCII record separator)."""


def match_key_for_messages(user_texts: list[str]) -> str:
    """Task key of a conversation from the flattened texts of all its user messages
    before the first assistant message, in order: `task:<id>` for the first line
    `task_id: <id>` found (texts searched in order), else `sha256:<hex>` of the texts
    joined with "\\n\\x1e\\n" (UTF-8). A one-element list gives `match_key_for(text)`.
    Raises ValueError on an empty list."""
    if not user_texts:
        raise ValueError("user_texts: expected at least one user message text (got [])")
    for text in user_texts:
        # the MULTILINE search tries every position (~4.6 us per KB: 210 us on a 46 KB
        # SWE-bench issue, per request); the substring test first costs ~0.1 us per KB
        m = _TASK_ID_LINE.search(text) if "task_id:" in text else None
        if m:
            return f"task:{m.group(1)}"
    joined = _KEY_SEPARATOR.join(user_texts)  # one text: the text itself
    return "sha256:" + hashlib.sha256(joined.encode("utf-8")).hexdigest()


def match_key_for(first_user_text: str) -> str:
    """Task key of a conversation with a single user message before the first
    assistant message: `task:<id>` when it holds a line `task_id: <id>`, else
    `sha256:<hex>` of the text; equal to `match_key_for_messages([first_user_text])`."""
    return match_key_for_messages([first_user_text])


_COERCED: dict[Any, tuple[type, bool]] = {
    int: (int, False),
    int | None: (int, True),
    float: (float, False),
    float | None: (float, True),
    bool: (bool, False),
    bool | None: (bool, True),
}
"""Field annotations whose values pydantic's serializer coerces (a bool in an int field
writes 1, an int in a float field 1.0) and orjson would not: (the one type a value there
may have for trajectory_json to write it itself, whether None may be there too)."""


def _fields_getter(models: tuple[type[BaseModel], ...]) -> Any:
    """orjson's `default` for trajectory_json, generated from the models' fields: a model of one of `models` (exact
    class) gives its `__dict__` (its fields in field order) when each int/float/bool
    field holds a value of exactly that type (or None where allowed); anything else
    raises TypeError, so that orjson refuses the whole and the caller falls back."""
    ns: dict[str, Any] = {}
    lines = ["def fields_of(obj):", "    cls = type(obj)"]
    for k, model in enumerate(models):
        ns[f"_m{k}"] = model
        tests = []
        for name, info in model.model_fields.items():
            if info.annotation in _COERCED:
                typ, optional = _COERCED[info.annotation]
                ns[f"_{typ.__name__}"] = typ
                test = f"type(d[{name!r}]) is _{typ.__name__}"
                tests.append(f"(d[{name!r}] is None or {test})" if optional else test)
        lines.append(f"    {'if' if k == 0 else 'elif'} cls is _m{k}:")
        if tests:
            lines += ["        d = obj.__dict__", f"        if {' and '.join(tests)}:", "            return d"]
        else:
            lines.append("        return obj.__dict__")
    lines.append("    raise TypeError(cls.__name__)")
    exec("\n".join(lines) + "\n", ns)  # code generated from the models' own field names
    return ns["fields_of"]


_model_fields = _fields_getter(
    (
        ToolCall,
        Turn,
        Response,
        Timing,
        Usage,
        Observation,
        MessageRef,
        MessageSpan,
        ContextEdit,
        Source,
        RecordedOutcome,
        Trajectory,
    )
)  # the most frequent first
_JSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
_pydantic_json = Trajectory.__pydantic_serializer__.to_json


def trajectory_json(traj: Trajectory) -> bytes:
    """`traj.model_dump_json().encode()`: the bytes of pydantic's serializer, written by
    orjson from the models' fields (faster on converted pi sessions: one `default` call
    per model, no schema walk). The two agree on every value the schema's fields hold
    (str, int within 64 bits, float incl. NaN/inf as null, bool, None, lists, dicts with
    str keys; tests/replay/test_trajectory_json.py); anything else (an int beyond 64
    bits, a surrogate, a subclass of str/int/dict/list, a set, a datetime or dataclass
    in `arguments`, a model of another class, a bool in an int field or an int in a
    float field, nesting beyond orjson's depth) makes orjson raise, and pydantic's
    serializer writes (or refuses) it as before."""
    try:
        return orjson.dumps(traj, default=_model_fields, option=_JSON_OPTIONS)
    except orjson.JSONEncodeError:
        return _pydantic_json(traj)
