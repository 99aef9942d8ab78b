"""benchmaker.trajectories.context: the request messages of each turn, with and without context edits."""

from __future__ import annotations

import pytest

from benchmaker.trajectories.context import current_edit, history_messages, recorded_requests, request_messages
from benchmaker.trajectories.trajectory import (
    ContextEdit,
    MessageRef,
    MessageSpan,
    Observation,
    Response,
    Source,
    ToolCall,
    Trajectory,
    Turn,
)


def _traj(edit_at: int | None = None, keep_from: MessageRef | None = None) -> Trajectory:
    turns = [
        Turn(
            index=0,
            response=Response(
                content="r0",
                tool_calls=[ToolCall(id="c0", name="bash", arguments_raw="{}")],
                finish_reason="tool_calls",
            ),
            observations=[Observation(tool_call_id="c0", content="out0", is_error=True)],
        ),
        Turn(index=1, response=Response(content="r1"), user_after=["next please"]),
        Turn(
            index=2, response=Response(content="r2", reasoning="think"), observations=[Observation(content="text-obs")]
        ),
        Turn(index=3, response=Response(content="r3")),
    ]
    if edit_at is not None:
        turns[edit_at].context_edit = ContextEdit(
            kind="compaction", summary=["SUMMARY"], keep_from=keep_from or MessageRef(turn=1, item=1)
        )
    return Trajectory(
        trajectory_id="t",
        source=Source(format="x", path="p", sha256="0"),
        match_key="k",
        system="SYS",
        first_user="task",
        user_before_turns=["more"],
        turns=turns,
    )


def test_without_edits_each_request_is_the_growing_history():
    t = _traj()
    assert request_messages(t, 0) == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "task"},
        {"role": "user", "content": "more"},
    ]
    r2 = request_messages(t, 2)
    assert r2[3:] == [
        {
            "role": "assistant",
            "content": "r0",
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "out0", "is_error": True},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "next please"},
    ]
    # turn 3: + assistant(2) with its reasoning, then the text observation as a user message
    assert request_messages(t, 3)[-2:] == [
        {"role": "assistant", "content": "r2", "reasoning_content": "think"},
        {"role": "user", "content": "text-obs"},
    ]
    assert request_messages(t, 1, send_status_fields=False)[4] == {
        "role": "tool",
        "tool_call_id": "c0",
        "content": "out0",
    }


def test_received_responses_and_observations_replace_the_recorded_ones():
    t = _traj()
    got = request_messages(
        t,
        2,
        responses_so_far=[{"role": "assistant", "content": "LIVE"}],
        observations_so_far=[[{"role": "tool", "tool_call_id": "c0", "content": "ran"}]],
    )
    assert got[3:5] == [
        {"role": "assistant", "content": "LIVE"},
        {"role": "tool", "tool_call_id": "c0", "content": "ran"},
    ]
    assert got[5] == {"role": "assistant", "content": "r1"}  # turn 1: recorded (list shorter)


def test_compaction_sends_summary_then_history_from_keep_from():
    t = _traj(edit_at=2, keep_from=MessageRef(turn=1, item=1))  # keep from "next please"
    assert current_edit(t, 1) is None and current_edit(t, 3) is t.turns[2].context_edit
    assert request_messages(t, 1) == request_messages(_traj(), 1)  # before the edit: unchanged
    assert request_messages(t, 2) == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "SUMMARY"},
        {"role": "user", "content": "next please"},
    ]
    # the edit stays in force: turn 3 adds turn 2's block
    assert request_messages(t, 3)[1:] == [
        {"role": "user", "content": "SUMMARY"},
        {"role": "user", "content": "next please"},
        {"role": "assistant", "content": "r2", "reasoning_content": "think"},
        {"role": "user", "content": "text-obs"},
    ]


def test_keep_from_this_turn_keeps_nothing_before_the_edit():
    t = _traj(edit_at=3, keep_from=MessageRef(turn=3, item=0))
    assert request_messages(t, 3) == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "SUMMARY"}]


def test_history_refs_name_each_message_and_bad_turns_raise():
    msgs, refs = history_messages(_traj(), 2)
    assert len(msgs) == len(refs) == 2 + 2 + 2  # opening 2, turn 0 block 2, turn 1 block 2
    assert [(r.turn, r.item) for r in refs] == [(None, 0), (None, 1), (0, 0), (0, 1), (1, 0), (1, 1)]
    with pytest.raises(IndexError, match="turn 4: trajectory t has 4 turns"):
        request_messages(_traj(), 4)


@pytest.mark.parametrize(
    "edit",
    [
        None,
        ContextEdit(kind="compaction", summary=["SUMMARY"], keep_from=MessageRef(turn=1, item=1)),
        # a branch: the opening messages and turn 0's block, then turn 2's block back to the tail
        ContextEdit(
            kind="branch",
            summary=[],
            head=[MessageSpan(start=MessageRef(turn=None, item=0), end=MessageRef(turn=1, item=0))],
            keep=[MessageSpan(start=MessageRef(turn=2, item=0), end=MessageRef(turn=3, item=0))],
            keep_from=MessageRef(turn=3, item=0),
        ),
    ],
)
@pytest.mark.parametrize("edit_at", [0, 2, 3])
def test_recorded_requests_are_request_messages_of_each_turn_from_one_history(
    edit: ContextEdit | None, edit_at: int
) -> None:
    t = _traj()
    t.turns[edit_at].context_edit = edit
    for first in range(5):
        assert list(recorded_requests(t, first)) == [(k, request_messages(t, k)) for k in range(first, 4)]
    reqs = dict(recorded_requests(t))
    if edit is None:  # one history: turn 3's request holds turn 2's very dicts (not remade)
        assert all(a is b for a, b in zip(reqs[2], reqs[3][: len(reqs[2])], strict=False) if a["role"] != "system")
    assert list(recorded_requests(t, 1, send_status_fields=False)) == [
        (k, request_messages(t, k, send_status_fields=False)) for k in range(1, 4)
    ]
