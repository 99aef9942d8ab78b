"""OpenHands software-agent-sdk (V1) event lists. Source: OpenHands/software-agent-sdk
openhands-sdk/openhands/sdk/event/ (llm_convertible/{system,message,action,
observation}.py, condenser.py) and openhands-sdk/openhands/sdk/context/view.py.

Each LLM-convertible event becomes what the SDK's `to_llm_message` sends; consecutive
actions of one `llm_response_id` are one turn; a `Condensation` is a ContextEdit on the
next turn, by `View.from_events`. A conversation directory (`convert_conversation_dir`)
is one trajectory, read along its active branch. Conversation directories, source:
OpenHands/software-agent-sdk openhands-sdk/openhands/sdk/conversation/persistence_const.py @
167ee0af4328ae40c60a27ccd6c4fb18cde3b7e3 (`BASE_STATE`, `EVENTS_DIR`, `EVENT_NAME_RE`,
`EVENT_FILE_PATTERN`), conversation/event_store.py @
01fa30d55b0c4fce1268db50ea985faaa6b28319 (`EventLog`: events in index order, the index
read up to the first gap), conversation/state.py @
003b55278197c34064bab8ee26a771c439266277 (`ConversationState._save_base_state`),
conversation/base.py @ 0455c2a8a5e28038f2cb15cffdeffec31456c5dc (`get_persistence_dir`)
and llm/llm.py @ 0101623fde32da370fe649d7cde7ff6d3d100248 (`LLM.model`). Branches,
source: event_store.py above (`_effective_parent_id`, `path_to_root`) and the SDK's
state.py `_resolve_active_leaf` / `append_event` (as in yqwd-dimleap/suricate-sdk, a
fork, at openhands-sdk/openhands/sdk/conversation/state.py).

What each record becomes: docs/log-formats.md#openhands-sdk-events-and-conversation-directories.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from benchmaker.trajectories.context import HistoryIndex
from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.content_parts import text_of
from benchmaker.trajectories.converters.json_reading import dict_or_empty, read_json_document
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.tool_calls import chat_shape_tools, parse_arguments
from benchmaker.trajectories.errors import ConvertError
from benchmaker.trajectories.trajectory import Observation, RecordedOutcome, Response, ToolCall, Trajectory

FORMAT_CONVERSATION = "openhands-conversation"
"""Directory format: an SDK conversation's base_state.json + events/ (docs/log-formats.md#openhands-sdk-events-and-conversation-directories)."""

BASE_STATE = "base_state.json"
EVENTS_DIR = "events"
EVENT_NAME_RE = re.compile(r"^event-(?P<idx>\d{5,})(?:-(?P<event_id>[0-9a-fA-F\-]{8,}))?\.json$")
"""An event file's name: openhands-sdk conversation/persistence_const.py `EVENT_NAME_RE`
(`event-00003-<event id>.json`, 5 or more digits) or the first SDK releases'
`event-00003.json` (All-Hands-AI/agent-sdk @ 56e372db1fbe2339e438188bfe948d5bf284062c,
openhands/sdk/conversation/persistence_const.py)."""

LLM_CONVERTIBLE = frozenset(
    {
        "SystemPromptEvent",
        "MessageEvent",
        "ActionEvent",
        "ObservationEvent",
        "AgentErrorEvent",
        "UserRejectObservation",
        "CondensationSummaryEvent",
    }
)
"""Kinds that take a place in the SDK's View (`LLMConvertibleEvent` subclasses)."""

KINDS = LLM_CONVERTIBLE | {"Condensation", "CondensationRequest", "ConversationStateUpdateEvent", "PauseEvent"}
"""Kinds that identify an SDK event list (format detection)."""

ERROR_MESSAGE_HEADER = "[An error occurred during execution.]\n"
"""openhands-sdk tool/schema.py `Observation.ERROR_MESSAGE_HEADER`."""


def is_sdk_events(value: Any) -> bool:
    """True for a non-empty list of objects with a string `kind`, some of them SDK
    event kinds (`KINDS`)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(e, dict) and isinstance(e.get("kind"), str) for e in value)
        and any(e["kind"] in KINDS for e in value)
    )


def switched_model(ev: dict[str, Any]) -> str | None:
    """The model of the agent's LLM a `ConversationStateUpdateEvent` sets, or None: key
    "agent" (the state's agent replaced, as the SDK's `/model` switch does; value = the
    agent's dump) or "full_state" (value = the state's dump). Source: openhands-sdk
    event/conversation_state.py @ 5379c7418e65c628304f79d3ebe2d56e2488c64d,
    conversation/switch_model_handler.py @ 014360afc6d3c941fbacda8a0c7cb0ff4e0449a3."""
    value = ev.get("value")
    if ev.get("key") == "full_state" and isinstance(value, dict):
        value = value.get("agent")
    elif ev.get("key") != "agent":
        return None
    llm = value.get("llm") if isinstance(value, dict) else None
    model = llm.get("model") if isinstance(llm, dict) else None
    return model if isinstance(model, str) and model else None


def _observation(ev: dict[str, Any], kind: str, builder: TrajectoryBuilder) -> Observation:
    if kind == "AgentErrorEvent":
        content, is_error = str(ev.get("error", "")), True
    elif kind == "UserRejectObservation":
        content, is_error = f"Action rejected: {ev.get('rejection_reason', 'User rejected the action')}", False
    else:
        obs = dict_or_empty(ev.get("observation"))
        is_error = obs.get("is_error") is True
        content = (ERROR_MESSAGE_HEADER if is_error else "") + text_of(obs.get("content", []), builder)
        extra = ev.get("extended_content")
        if isinstance(extra, list) and extra:
            content += "\n" + text_of(extra, builder)
        builder.skip("observation_text_from_content")
    return Observation(
        tool_call_id=str(ev.get("tool_call_id")), name=ev.get("tool_name"), content=content, is_error=is_error
    )


def feed_sdk_events(
    events: list[Any],
    builder: TrajectoryBuilder,
    ctx: FileContext,
    line: int | None,
    prefix: str = "",
    state: dict[str, Any] | None = None,
) -> None:
    """Feed an SDK event list into `builder` (docs/log-formats.md#openhands-sdk-events-and-conversation-directories): the active branch when
    the events form a tree (`active_branch`, HEAD from `state`, the conversation's
    base_state, when given); an ActionEvent without a `tool_call` is counted
    (`action_event_without_tool_call`). Raises ConvertError naming `prefix[i]` for an
    event that is not an object, `prefix[i].parent_id` for a parent id that is not a
    string or a cycle of parents."""
    if all(isinstance(e, dict) for e in events):
        try:
            branch = active_branch(events, state or {})
        except ValueError as exc:
            where, problem = exc.args
            raise ctx.error(line, f"{prefix}{where}", problem) from exc
        if len(branch) < len(events):
            builder.skip("event_off_active_branch", len(events) - len(branch))
        events = branch
    view = CondensedView(builder)
    response_id: object = None
    response_event: object = None
    model: str | None = None  # the agent's LLM after the latest model switch seen
    for i, ev in enumerate(events):
        where = f"{prefix}[{i}]"
        if not isinstance(ev, dict):
            raise ctx.error(line, where, "expected an event object", ev)
        kind = ev.get("kind")
        if kind == "ConversationStateUpdateEvent":
            model = switched_model(ev) or model
        event_id = ev.get("id")
        if not isinstance(event_id, str | int) or isinstance(event_id, bool):
            event_id = ("index", i)  # no usable id: nothing can name this event
        in_view = kind in LLM_CONVERTIBLE
        if kind != "ActionEvent":
            response_id = None
        if kind == "SystemPromptEvent":
            parts = [p for p in (ev.get("system_prompt"), ev.get("dynamic_context")) if isinstance(p, dict)]
            builder.set_system(text_of(parts, builder))
            builder.tools = builder.tools or chat_shape_tools(ev.get("tools"))
            view.add(event_id, in_view)
        elif kind == "MessageEvent":
            msg = dict_or_empty(ev.get("llm_message"))
            parts = msg.get("content", [])
            extra = ev.get("extended_content")
            if isinstance(parts, list) and isinstance(extra, list):
                parts = [*parts, *extra]
            text = text_of(parts, builder)
            if ev.get("source") == "agent" or msg.get("role") == "assistant":
                reasoning = msg.get("reasoning_content") if isinstance(msg.get("reasoning_content"), str) else None
                view.add(
                    event_id,
                    in_view,
                    lambda text=text, reasoning=reasoning, model=model: builder.turn(
                        Response(content=text, reasoning=reasoning, finish_reason="stop"), model=model
                    ),
                )
            else:
                view.add(event_id, in_view, lambda text=text: builder.user(text))
        elif kind == "ActionEvent":
            tc = ev.get("tool_call")
            if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
                builder.skip("action_event_without_tool_call")  # nothing to send as a call
                view.add(event_id, in_view)
                continue
            raw = args if isinstance(args := tc.get("arguments"), str) else "{}"
            call = ToolCall(
                id=str(tc.get("id", ev.get("tool_call_id"))),
                name=tc["name"],
                arguments_raw=raw,
                arguments=parse_arguments(raw),
            )
            rid = ev.get("llm_response_id")
            if rid is not None and rid == response_id and builder.turns:
                builder.turns[-1].response.tool_calls.append(call)
                view.add(event_id, in_view, same_as=response_event)
            else:
                thought = text_of(ev.get("thought", []), builder)
                reasoning = ev.get("reasoning_content") if isinstance(ev.get("reasoning_content"), str) else None
                view.add(
                    event_id,
                    in_view,
                    lambda thought=thought, reasoning=reasoning, call=call, model=model: builder.turn(
                        Response(
                            content=thought or None, reasoning=reasoning, tool_calls=[call], finish_reason="tool_calls"
                        ),
                        model=model,
                    ),
                )
                response_id, response_event = rid, event_id
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            obs = _observation(ev, kind, builder)
            view.add(event_id, in_view, lambda obs=obs: builder.observation(obs))
        elif kind == "CondensationSummaryEvent" and isinstance(ev.get("summary"), str):
            view.add(event_id, in_view, lambda ev=ev: builder.user(ev["summary"]))
        elif kind == "Condensation":
            ids = ev.get("forgotten_event_ids")
            if not isinstance(ids, list):
                builder.skip("condensation_without_forgotten_events")
                ids = []
            view.forget(
                [*(x for x in ids if isinstance(x, str | int) and not isinstance(x, bool)), event_id],
                ev.get("summary"),
                ev.get("summary_offset"),
            )
        elif kind == "CondensationRequest":
            view.forgotten.add(event_id)
            builder.skip("event:CondensationRequest")
        else:
            builder.skip(f"event:{kind}")
            view.add(event_id, in_view)


def is_conversation_dir(path: Path) -> bool:
    """An SDK conversation directory: `base_state.json` beside an `events/` directory;
    or such a directory's `events/` itself (named by a user: it stands for the whole)."""
    if path.name == EVENTS_DIR and (path.parent / BASE_STATE).is_file():
        return True
    return (path / BASE_STATE).is_file() and (path / EVENTS_DIR).is_dir()


def event_files(conv: Path) -> tuple[list[Path], list[str], list[str]]:
    """The events/ directory of conversation `conv`: the event files in index order from
    0 up to the first missing index (what the SDK's `EventLog` loads), the names of event
    files it leaves unread (after a gap, or a second file of one index), and the other
    names (not `event-NNNNN-<id>.json`, which the SDK ignores). Dot files, the log's own
    bookkeeping, are in none of the three."""
    by_idx: dict[int, Path] = {}
    extra: list[str] = []
    others: list[str] = []
    for f in sorted((conv / EVENTS_DIR).iterdir()):
        if f.name.startswith("."):
            continue
        m = EVENT_NAME_RE.match(f.name)
        if m is None or not f.is_file():
            others.append(f.name)
        elif int(m["idx"]) in by_idx:
            extra.append(f.name)
        else:
            by_idx[int(m["idx"])] = f
    n = 0
    while n in by_idx:
        n += 1
    extra.extend(f.name for i, f in sorted(by_idx.items()) if i > n)
    return [by_idx[i] for i in range(n)], sorted(extra), others


_NOT_TREE_NODES = frozenset({"ConversationStateUpdateEvent", "ConversationErrorEvent"})
"""Kinds the SDK appends without moving the HEAD (state.py `append_event`)."""


def active_branch(events: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a conversation that its agent's context came from (docs/log-formats.md,
    Branches): all of them when none carries a `parent_id` (a linear log), else the active
    branch root first, with the non-tree events kept in index order. Raises
    ValueError(`[i].parent_id`, problem) for a parent id that is not a string or a cycle
    of parents."""
    if not any(ev.get("parent_id") is not None for ev in events):
        return events
    at = {ev["id"]: i for i, ev in reversed(list(enumerate(events))) if isinstance(ev.get("id"), str)}
    leaf = state.get("leaf_event_id")
    if not isinstance(leaf, str) or leaf not in at:
        if state.get("head_is_empty") is True:
            leaf = None
        else:
            leaf = next((ev.get("id") for ev in reversed(events) if ev.get("kind") not in _NOT_TREE_NODES), None)
    on_path: set[int] = set()
    i = at.get(leaf) if isinstance(leaf, str) else None
    while i is not None:
        if i in on_path:
            raise ValueError(f"[{i}].parent_id", f"the parents of event {events[i].get('id')} form a cycle")
        on_path.add(i)
        parent = events[i].get("parent_id")
        if parent is not None and not isinstance(parent, str):
            raise ValueError(f"[{i}].parent_id", f"expected an event id (got {parent!r:.40})")
        i = (i - 1 if i > 0 else None) if parent is None else at.get(parent)
    return [ev for i, ev in enumerate(events) if i in on_path or ev.get("kind") in _NOT_TREE_NODES]


def _read_event(path: Path, data: bytes) -> dict[str, Any]:
    ctx = FileContext(str(path), "", data)
    ev = read_json_document(ctx)
    if not isinstance(ev, dict) or not isinstance(ev.get("kind"), str):
        raise ctx.error(
            None,
            "kind" if isinstance(ev, dict) else None,
            "expected an OpenHands SDK event object with a string `kind`",
            ev.get("kind") if isinstance(ev, dict) else ev,
        )
    return ev


def convert_conversation_dir(conv: Path, *, lenient: bool = False) -> Iterator[Trajectory]:
    """Yield the one Trajectory of SDK conversation directory `conv` (docs/log-formats.md#openhands-sdk-events-and-conversation-directories).
    Raises ConvertError naming the file: a bad base_state.json (`conv/base_state.json:
    ...`), an event file that is not JSON or not an event object (`conv/events/event-
    00003-<id>.json:1: invalid JSON: ...`), a gap or a doubled index among the event
    files (`conv/events: 2 event file(s) after index 3 would not be read: ...`), no readable event, no
    user message or no assistant turn. With `lenient` a bad event file is skipped and
    counted as `bad_event_file` and the event files after a gap as
    `event_file_after_gap`; other names in events/ are counted as `not_an_event_file`
    either way (the SDK ignores them too). `conv` may name the events/ directory."""
    if conv.name == EVENTS_DIR and not (conv / EVENTS_DIR).is_dir():
        conv = conv.parent
    digest = hashlib.sha256()
    base_path = conv / BASE_STATE
    base_data = base_path.read_bytes()
    digest.update(BASE_STATE.encode() + b"\0" + base_data)
    state = read_json_document(FileContext(str(base_path), "", base_data, lenient))
    if not isinstance(state, dict):
        raise ConvertError(base_path, None, None, "expected a ConversationState object", state)
    files, unread, others = event_files(conv)
    if unread and not lenient:
        raise ConvertError(
            conv / EVENTS_DIR,
            None,
            None,
            f"{len(unread)} event file(s) after index {len(files) - 1}"
            f" would not be read: an index is missing or doubled (first: {unread[0]})",
        )
    events: list[dict[str, Any]] = []
    bad = 0
    for f in files:
        data = f.read_bytes()
        try:
            ev = _read_event(f, data)
        except ConvertError:
            if not lenient:
                raise
            bad += 1
            continue
        digest.update(f.name.encode() + b"\0" + data)
        events.append(ev)
    if not events:
        raise ConvertError(conv / EVENTS_DIR, None, None, "no readable event files (event-NNNNN-<id>.json)")
    ctx = FileContext(str(conv), digest.hexdigest(), b"", lenient)
    builder = TrajectoryBuilder(ctx, FORMAT_CONVERSATION)
    if bad:
        builder.skip("bad_event_file", bad)
    if unread:
        builder.skip("event_file_after_gap", len(unread))
    if others:
        builder.skip("not_an_event_file", len(others))
    feed_sdk_events(events, builder, ctx, None, EVENTS_DIR, state)
    agent = dict_or_empty(state.get("agent"))
    llm = dict_or_empty(agent.get("llm"))
    if builder.model is None and isinstance(llm.get("model"), str) and llm["model"]:
        builder.model = llm["model"]
    status = state.get("execution_status")
    yield builder.build(0, outcome=RecordedOutcome(exit_status=status if isinstance(status, str) and status else None))


class CondensedView:
    """The LLM view of an OpenHands event list under condensation (OpenHands
    openhands/memory/view.py and the SDK's context/view.py `View.from_events`): every
    event in order with the history positions of its message, the forgotten ids so far
    and the summary in force. An event's `in_view` says whether it takes a place in the
    view's list (what `summary_offset` counts): every event in OpenHands' own event
    lists, the LLM-convertible ones in the SDK's."""

    def __init__(self, builder: TrajectoryBuilder):
        self.index = HistoryIndex(builder)
        self.events: list[tuple[object, bool]] = []  # (event id, takes a place in the view)
        self.positions: dict[object, int] = {}  # event id -> history position of its message
        self.forgotten: set[object] = set()
        self.summary: tuple[str, int] | None = None

    def add(
        self, event_id: object, in_view: bool, feed: Callable[..., object] | None = None, same_as: object = None
    ) -> None:
        """Record an event: `feed()` adds its message (if any) to the builder; `same_as`
        names an earlier event whose message it shares (actions of one model response)."""
        pos = self.index.add(feed) if feed is not None else None
        if pos is None and same_as is not None:
            pos = self.positions.get(same_as)
        if pos is not None:
            self.positions[event_id] = pos
        self.events.append((event_id, in_view))

    def forget(self, event_ids: Iterable[object], summary: Any, offset: Any) -> None:
        """Apply one condensation: the view of the next turn drops `event_ids`; a summary
        with an offset replaces the one in force. Attaches the ContextEdit to the next turn."""
        self.forgotten.update(event_ids)
        if isinstance(summary, str) and isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0:
            self.summary = (summary, offset)
        dropped = {self.positions[e] for e in self.forgotten if e in self.positions}
        dropped |= self._unmatched(dropped)
        view = [e for e, in_view in self.events if in_view and e not in self.forgotten]
        cut = self.summary[1] if self.summary is not None else 0
        head = sorted({self.positions[e] for e in view[:cut] if e in self.positions} - dropped)
        rest = {self.positions[e] for e, _ in self.events if e not in self.forgotten and e in self.positions}
        keep = sorted(rest - dropped - set(head))
        self.index.builder.edit(
            self.index.edit(
                "condensation", keep, head=head, summary=[self.summary[0]] if self.summary is not None else []
            )
        )

    def _unmatched(self, dropped: set[int]) -> set[int]:
        """Positions of tool calls and tool results left without their pair by `dropped`:
        a model response whose assistant message or any of whose tool results is
        dropped goes whole, with its tool results (the SDK's View
        `filter_unmatched_tool_calls` and batch atomicity; OpenHands' ConversationMemory
        filters unmatched tool calls alike)."""
        at = {c: p for p, c in enumerate(self.index.cursors)}
        out: set[int] = set()
        for turn in self.index.builder.turns:
            head = at.get((turn.index, 0))
            results = [
                at.get((turn.index, 1 + j)) for j, o in enumerate(turn.observations) if o.tool_call_id is not None
            ]
            group = {p for p in (head, *results) if p is not None}
            if group & dropped:
                out |= group
        return out
