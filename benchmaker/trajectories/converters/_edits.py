"""Context edits from history positions, shared by converters of agents that edit their
context (pi compaction and branches, OpenHands condensation).

A converter that feeds a `TrajectoryBuilder` records, in `HistoryIndex`, the MessageRef
of every history message as it is added (`position` = its index in history order); an
edit is then described by the positions the agent's next request holds:

    index = HistoryIndex(builder)
    pos = index.add(lambda: builder.user("..."))       # position, None when nothing was added
    edit = index.edit("branch", [0, 1, 2, 5])          # for the next turn; builder.edit(edit)

`edit` turns the positions into the `ContextEdit` spans (`benchmaker.trajectories.context`): runs of
consecutive positions become `MessageSpan`s; a last run that reaches the end of the
history so far becomes the open tail `keep_from` (so later turns grow it), else the
tail starts at the end of the history so far and holds only what is added after the
edit (a prompt that follows it, then the next turns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.trajectory import ContextEdit, MessageRef, MessageSpan


def message_cursor(b: TrajectoryBuilder) -> tuple[int | None, int]:
    """(turn, item) of the next non-assistant message of `b`, as `b.next_ref("user")`
    without building a MessageRef."""
    if not b.turns:
        return (None, 0 if b.first_user is None else 1 + len(b.user_before_turns))
    last = b.turns[-1]
    return (last.index, 1 + len(last.observations) + len(last.user_after))


def _runs(positions: Iterable[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for p in positions:
        if runs and runs[-1][1] == p:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    return runs


class HistoryIndex:
    """The MessageRef of each history message of one builder, in history order. Kept as
    (turn, item) pairs (`cursors`); the MessageRefs are made only for the edits that
    name them (a file without edits makes none) and for `order`."""

    def __init__(self, builder: TrajectoryBuilder):
        self.builder = builder
        self.cursors: list[tuple[int | None, int]] = []
        self._refs: list[MessageRef] = []

    @property
    def order(self) -> list[MessageRef]:
        """The MessageRef of each history message so far, in history order (the same
        objects from one call to the next)."""
        refs = self._refs
        if len(refs) < len(self.cursors):
            refs.extend(MessageRef(turn=t, item=i) for t, i in self.cursors[len(refs) :])
        return refs

    def _ref(self, position: int) -> MessageRef:
        """The MessageRef of the history message at `position`."""
        if position < len(self._refs):
            return self._refs[position]
        turn, item = self.cursors[position]  # ints >= 0 (lengths): a valid ref by construction
        return MessageRef(turn=turn, item=item)

    def add(self, feed: Callable[..., object]) -> int | None:
        """Run `feed()` (which adds at most one message to the builder) and return the
        position of the message it added, None when it added none."""
        b = self.builder
        n_turns, before = len(b.turns), message_cursor(b)
        feed()
        if len(b.turns) > n_turns:  # ints >= 0 (lengths): valid refs by construction
            return self.push(n_turns, 0)
        if message_cursor(b) != before:
            return self.push(*before)
        return None

    def push(self, turn: int | None, item: int) -> int:
        """Record that the message just added to the builder is at (`turn`, `item`), for a
        caller that knows it (`add` without its before/after comparison); its position."""
        self.cursors.append((turn, item))
        return len(self.cursors) - 1

    def spans(self, positions: Iterable[int]) -> list[MessageSpan]:
        """The spans of history covering `positions` (ascending), as closed spans (one
        reaching the end of the history so far ends there: what is added later is not in it)."""
        out = []
        for a, b in _runs(positions):
            end = self._ref(b) if b < len(self.cursors) else self.builder.next_ref("user")
            out.append(MessageSpan(start=self._ref(a), end=end))
        return out

    def edit(
        self,
        kind: str,
        keep: Iterable[int],
        *,
        head: Iterable[int] = (),
        summary: list[str] | None = None,
        tokens_before: int | None = None,
    ) -> ContextEdit:
        """The ContextEdit whose request, at the next turn, is the messages at `head`,
        then `summary`, then the messages at `keep` (positions ascending), then what
        follows (module doc)."""
        runs = _runs(keep)
        keep_from = self.builder.next_ref("user")  # what the history gets from now on
        if runs and runs[-1][1] == len(self.cursors):  # the last run reaches the next turn: the open tail
            keep_from = self._ref(runs.pop()[0])
        return ContextEdit(
            kind=kind,
            head=self.spans(head),
            summary=summary or [],
            keep=self.spans(p for a, b in runs for p in range(a, b)),
            keep_from=keep_from,
            tokens_before=tokens_before,
        )


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
