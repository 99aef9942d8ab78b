"""benchmaker.trajectories.context.HistoryIndex keeps (turn, item) pairs and makes MessageRefs
only for what names them: its `order`, spans and edits are those of
the MessageRefs it used to keep."""

from __future__ import annotations

from benchmaker.trajectories.context import HistoryIndex
from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.trajectory import ContextEdit, MessageRef, MessageSpan, Observation, Response


def _index() -> tuple[TrajectoryBuilder, HistoryIndex]:
    b = TrajectoryBuilder(FileContext("s.jsonl", "0" * 64, b""), "pi-session")
    index = HistoryIndex(b)
    assert index.add(lambda: b.user("task")) == 0
    assert index.add(lambda: b.turn(Response(content="a", finish_reason="tool_calls"))) == 1
    assert index.add(lambda: b.observation(Observation(content="ok", tool_call_id="c1"))) == 2
    assert index.add(lambda: None) is None  # nothing added: no position
    b.turn(Response(content="b"))
    assert index.push(1, 0) == 3  # a caller that knows where its message went
    assert index.add(lambda: b.user("more")) == 4
    return b, index


def test_positions_and_order() -> None:
    _, index = _index()
    assert index.cursors == [(None, 0), (0, 0), (0, 1), (1, 0), (1, 1)]
    order = index.order
    assert order == [
        MessageRef(turn=None, item=0),
        MessageRef(turn=0, item=0),
        MessageRef(turn=0, item=1),
        MessageRef(turn=1, item=0),
        MessageRef(turn=1, item=1),
    ]
    assert index.order is order and all(a is b for a, b in zip(order, index.order, strict=False))  # the same objects


def test_edits_name_the_positions() -> None:
    b, index = _index()
    edit = index.edit("branch", [0, 1, 3, 4], summary=["s"], head=[2], tokens_before=9)
    assert edit == ContextEdit(
        kind="branch",
        summary=["s"],
        tokens_before=9,
        head=[MessageSpan(start=MessageRef(turn=0, item=1), end=MessageRef(turn=1, item=0))],
        keep=[MessageSpan(start=MessageRef(turn=None, item=0), end=MessageRef(turn=0, item=1))],
        keep_from=MessageRef(turn=1, item=0),
    )
    tail = index.edit("compaction", [0, 1])  # the last run ends before the history does: tail after it
    assert tail.keep_from == b.next_ref("user") == MessageRef(turn=1, item=2)
    assert tail.keep == [MessageSpan(start=MessageRef(turn=None, item=0), end=MessageRef(turn=0, item=1))]
    assert index.spans([4]) == [MessageSpan(start=MessageRef(turn=1, item=1), end=MessageRef(turn=1, item=2))]
