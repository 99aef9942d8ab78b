"""What a replaying agent sends for each recorded turn: the request messages, with the
log's own context edits applied (docs/replay-an-agent.md: replayed context follows the log's own
context edits).

    msgs = request_messages(traj, 4)                       # recorded responses/observations
    msgs = request_messages(traj, 4, responses_so_far=[call.message() for call in calls])

The history of a trajectory is the conversation as the agent built it without edits:
`first_user`, each of `user_before_turns`, then per turn t the block
`[assistant(t), *observation messages of t, *user_after(t) as user messages]`
(`history_messages`). Observation messages have the shape the replay server pairs for
its divergence check: `{"role": "tool", "tool_call_id", "content", "is_error"}` for an
observation with a tool_call_id (`is_error` left out with `send_status_fields=False`),
else `{"role": "user", "content"}`; `content` is the observation's content parts when it
has some (`Observation.parts`: a result with an image), else its text. The first user
message is sent as its content parts when it held an image (`first_user_parts`).

The request of turn k is the system prompt (when recorded), then:
  - no context edit on turns 0..k: the whole history before assistant(k);
  - else, for the latest edit E on turns 0..k (`Turn.context_edit`): the history
    messages of the `E.head` spans, E.summary as user messages, the messages of the
    `E.keep` spans, then the history from `E.keep_from` up to assistant(k). A pi
    compaction (summary + the entries from `firstKeptEntryIndex` on), a pi branch (the
    path of the session tree: spans of the history, abandoned branches left out) and an
    OpenHands condensation (head events, summary, the events not forgotten) are such
    edits.

Pure functions over the trajectory: the agent harness calls `request_messages` before
each model call (passing the responses it received and, in execute mode, the
observation messages it built), and the replay store calls it with the recorded ones to
learn which request each turn answers.

The converters of agents that edit their context (pi compaction and branches, OpenHands
condensation) describe each edit by history positions (`HistoryIndex`): a converter
that feeds a `TrajectoryBuilder` records the MessageRef of every history message as it
is added (`position` = its index in history order); an edit is then the positions the
agent's next request holds:

    index = HistoryIndex(builder)
    pos = index.add(lambda: builder.user("..."))       # position, None when nothing was added
    edit = index.edit("branch", [0, 1, 2, 5])          # for the next turn; builder.edit(edit)

`edit` turns the positions into the `ContextEdit` spans: runs of consecutive positions
become `MessageSpan`s; a last run that reaches the end of the history so far becomes the
open tail `keep_from` (so later turns grow it), else the tail starts at the end of the
history so far and holds only what is added after the edit (a prompt that follows it,
then the next turns).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from benchmaker.apis.openai_chat import assistant_message
from benchmaker.trajectories.trajectory import ContextEdit, MessageRef, MessageSpan, Observation, Trajectory

if TYPE_CHECKING:  # a converter's builder; importing it here would load every converter
    from benchmaker.trajectories.converters.builder import TrajectoryBuilder

__all__ = [
    "HistoryIndex",
    "assistant_message",
    "current_edit",
    "history_messages",
    "message_cursor",
    "observation_message",
    "previous_turn",
    "recorded_requests",
    "request_messages",
]

Message = dict[str, Any]


def observation_message(obs: Observation, *, send_status_fields: bool = True) -> Message:
    """The request message carrying one recorded observation (module doc)."""
    content = obs.content if obs.parts is None else obs.parts
    if obs.tool_call_id is None:
        return {"role": "user", "content": content}
    msg: Message = {"role": "tool", "tool_call_id": obs.tool_call_id, "content": content}
    if send_status_fields:
        msg["is_error"] = obs.is_error
    return msg


def history_messages(
    traj: Trajectory,
    upto_turn: int,
    responses_so_far: Sequence[Message] | None = None,
    observations_so_far: Sequence[Sequence[Message]] | None = None,
    *,
    send_status_fields: bool = True,
) -> tuple[list[Message], list[MessageRef]]:
    """The un-edited history before assistant(`upto_turn`) (module doc), without the
    system prompt, and the MessageRef of each message. `responses_so_far[t]` replaces
    the recorded assistant message of turn t and `observations_so_far[t]` its
    observation messages, when given (shorter sequences: recorded for the rest).
    Raises IndexError when `upto_turn` is not in 0..len(turns)."""
    if not 0 <= upto_turn <= len(traj.turns):
        raise IndexError(f"turn {upto_turn}: trajectory {traj.trajectory_id} has {len(traj.turns)} turns")
    first = traj.first_user if traj.first_user_parts is None else traj.first_user_parts
    msgs: list[Message] = [{"role": "user", "content": first}]
    refs: list[MessageRef] = [MessageRef(turn=None, item=0)]
    for i, text in enumerate(traj.user_before_turns, start=1):
        msgs.append({"role": "user", "content": text})
        refs.append(MessageRef(turn=None, item=i))
    for t in range(upto_turn):
        turn = traj.turns[t]
        block: list[Message] = []
        if responses_so_far is not None and t < len(responses_so_far):
            block.append(responses_so_far[t])
        else:
            block.append(assistant_message(turn.response))
        if observations_so_far is not None and t < len(observations_so_far):
            block.extend(observations_so_far[t])
        else:
            block.extend(observation_message(o, send_status_fields=send_status_fields) for o in turn.observations)
        block.extend({"role": "user", "content": u} for u in turn.user_after)
        msgs.extend(block)
        refs.extend(MessageRef(turn=t, item=j) for j in range(len(block)))
    return msgs, refs


def current_edit(traj: Trajectory, turn_index: int) -> ContextEdit | None:
    """The context edit in force for turn `turn_index`: the latest `context_edit` on
    turns 0..turn_index, None when there is none."""
    for t in range(turn_index, -1, -1):
        edit = traj.turns[t].context_edit
        if edit is not None:
            return edit
    return None


def _ref_key(ref: MessageRef) -> tuple[int, int]:
    return (-1 if ref.turn is None else ref.turn, ref.item)


def request_messages(
    traj: Trajectory,
    turn_index: int,
    responses_so_far: Sequence[Message] | None = None,
    observations_so_far: Sequence[Sequence[Message]] | None = None,
    *,
    send_status_fields: bool = True,
) -> list[Message]:
    """The request messages of turn `turn_index` (0-based) with the log's context edits
    applied (module doc); `responses_so_far` / `observations_so_far` as in
    `history_messages`. Raises IndexError when `turn_index` is not a turn."""
    if not 0 <= turn_index < len(traj.turns):
        raise IndexError(f"turn {turn_index}: trajectory {traj.trajectory_id} has {len(traj.turns)} turns")
    history, refs = history_messages(
        traj, turn_index, responses_so_far, observations_so_far, send_status_fields=send_status_fields
    )
    edit = current_edit(traj, turn_index)
    return _request(traj, edit, history, None if edit is None else [_ref_key(r) for r in refs], len(history))


def recorded_requests(
    traj: Trajectory, first: int = 0, *, send_status_fields: bool = True
) -> Iterator[tuple[int, list[Message]]]:
    """(k, request_messages(traj, k)) for each turn k from `first` on, with the recorded
    responses and observations: the same lists, built from one history (its message
    dicts made once and shared by every list, which are not to be changed), so a whole
    trajectory costs its history's messages once plus a list of references per turn,
    where calling request_messages per turn remakes the history's dicts each time
    (quadratic in Python objects over a long session)."""
    history, refs = history_messages(traj, len(traj.turns), send_status_fields=send_status_fields)
    keys = [_ref_key(r) for r in refs]
    edit: ContextEdit | None = None if first == 0 else current_edit(traj, first - 1)
    for k in range(first, len(traj.turns)):
        if traj.turns[k].context_edit is not None:
            edit = traj.turns[k].context_edit
        yield k, _request(traj, edit, history, keys, bisect_left(keys, (k, 0)))


def _request(
    traj: Trajectory, edit: ContextEdit | None, history: list[Message], keys: list[tuple[int, int]] | None, n: int
) -> list[Message]:
    """The request of a turn whose un-edited history is `history[:n]` (`keys`: the ref
    keys of `history`, needed with an edit) under `edit` (module doc)."""
    out: list[Message] = [] if traj.system is None else [{"role": "system", "content": traj.system}]
    if edit is None:
        out.extend(history[:n] if n < len(history) else history)
        return out
    assert keys is not None

    def position(ref: MessageRef) -> int:  # the first history message at or after ref, within history[:n]
        p = bisect_left(keys, _ref_key(ref))
        return p if p < n else n

    def spans(items: list[MessageSpan]) -> list[Message]:
        return [m for sp in items for m in history[position(sp.start) : position(sp.end)]]

    out.extend(spans(edit.head))
    out.extend({"role": "user", "content": s} for s in edit.summary)
    out.extend(spans(edit.keep))
    out.extend(history[position(edit.keep_from) : n])
    return out


def _last_turn_between(start: tuple[int, int], end: tuple[int, int]) -> int | None:
    """The last turn whose assistant message (turn, 0) is in [start, end) (ref keys)."""
    t = end[0] if end[1] > 0 else end[0] - 1
    return t if t >= 0 and (t, 0) >= start else None


def previous_turn(traj: Trajectory, turn_index: int) -> int | None:
    """The turn whose assistant message is the last one in the request of turn
    `turn_index` (`request_messages`), None when the request has none: `turn_index - 1`
    without context edits; after an edit, the last turn its tail, `keep` or `head`
    spans hold (a pi branch or retry goes back to an earlier turn). The replay server
    checks a request's observations against that turn's. Raises IndexError as
    `request_messages`."""
    if not 0 <= turn_index < len(traj.turns):
        raise IndexError(f"turn {turn_index}: trajectory {traj.trajectory_id} has {len(traj.turns)} turns")
    edit = current_edit(traj, turn_index)
    if edit is None:
        return turn_index - 1 if turn_index > 0 else None
    found = _last_turn_between(_ref_key(edit.keep_from), (turn_index, 0))
    for sp in [*reversed(edit.keep), *reversed(edit.head)]:
        if found is not None:
            break
        found = _last_turn_between(_ref_key(sp.start), _ref_key(sp.end))
    return found


# -- describing an edit (converters) ---------------------------------------------------


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
