"""Context edits from history positions, shared by converters of agents that edit their
context (pi compaction and branches, OpenHands condensation).

A converter that feeds a `TrajectoryBuilder` records, in `HistoryIndex`, the MessageRef
of every history message as it is added (`position` = its index in history order); an
edit is then described by the positions the agent's next request holds:

    index = HistoryIndex(builder)
    pos = index.add(lambda: builder.user("..."))       # position, None when nothing was added
    edit = index.edit("branch", keep=[0, 1, 2, 5], turn=len(builder.turns))

`edit` turns the positions into the `ContextEdit` spans (`replay.context`): runs of
consecutive positions become `MessageSpan`s; a last run that reaches the end of the
history so far becomes the open tail `keep_from` (so later turns grow it), else the
tail starts at the new turn and holds only what comes after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from replay.converters._common import TrajectoryBuilder
from replay.trajectory import ContextEdit, MessageRef, MessageSpan


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
    """The MessageRef of each history message of one builder, in history order."""

    def __init__(self, builder: TrajectoryBuilder):
        self.builder = builder
        self.order: list[MessageRef] = []

    def add(self, feed: Callable[[], object]) -> int | None:
        """Run `feed` (which adds at most one message to the builder) and return the
        position of the message it added, None when it added none."""
        b = self.builder
        n_turns, before = len(b.turns), message_cursor(b)
        feed()
        if len(b.turns) > n_turns:
            ref = MessageRef(turn=n_turns, item=0)
        elif message_cursor(b) != before:
            ref = MessageRef(turn=before[0], item=before[1])
        else:
            return None
        self.order.append(ref)
        return len(self.order) - 1

    def spans(self, positions: Iterable[int]) -> list[MessageSpan]:
        """The spans of history covering `positions` (ascending), as closed spans."""
        out = []
        for a, b in _runs(positions):
            end = self.order[b] if b < len(self.order) else self.builder.next_ref("assistant")
            out.append(MessageSpan(start=self.order[a], end=end))
        return out

    def edit(self, kind: str, keep: Iterable[int], *, head: Iterable[int] = (), summary: list[str] | None = None,
             tokens_before: int | None = None) -> ContextEdit:
        """The ContextEdit whose request, at the next turn, is the messages at `head`,
        then `summary`, then the messages at `keep` (positions ascending), then what
        follows (module doc)."""
        runs = _runs(keep)
        keep_from = self.builder.next_ref("assistant")
        if runs and runs[-1][1] == len(self.order):  # the last run reaches the next turn: the open tail
            keep_from = self.order[runs.pop()[0]]
        return ContextEdit(kind=kind, head=self.spans(head), summary=summary or [],
                           keep=self.spans(p for a, b in runs for p in range(a, b)),
                           keep_from=keep_from, tokens_before=tokens_before)
