"""OpenHands software-agent-sdk conversation directories: `base_state.json`
+ `events/event-NNNNN-<id>.json` is one unit and one trajectory, found inside a parent
directory like a harbor trial directory; `benchmaker convert DIR` and `swebench-replay
--logs DIR` take it. Fixture: tests/data/written/openhands-sdk-conversations/ (layout
sources in tests/data/written/SOURCES.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmaker.recipes.cli import main
from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.convert import (
    ConvertProgress,
    convert_paths,
    detect_format,
    iter_trajectories,
    read_trajectories,
)
from benchmaker.trajectories.converters import detect_dir
from benchmaker.trajectories.converters.openhands_sdk import event_files
from benchmaker.trajectories.errors import ConvertError, UnknownFormatError
from tests.replay.replay_turns import replay_turns

PARENT = Path(__file__).resolve().parents[1] / "data" / "written" / "openhands-sdk-conversations"
CONV_A = PARENT / "4c1d9e7a8d2e4b6a9c1f5e7d3a2b1c0d"  # 12 events, 3 model calls
CONV_B = PARENT / "9b2e6f103c4d4e5f8a9b0c1d2e3f4a5b"  # 5 events, 2 model calls
SYSTEM = "You are OpenHands agent, a helpful AI assistant that can interact with a computer to solve tasks."


def _event(conv: Path, idx: int) -> Path:
    (path,) = (conv / "events").glob(f"event-{idx:05d}-*.json")
    return path


def _shape(messages: list[dict]) -> list[tuple]:
    """(role, content, tool-call names, tool_call_id) of each request message."""
    return [
        (m["role"], m.get("content"), [c["function"]["name"] for c in m.get("tool_calls") or []], m.get("tool_call_id"))
        for m in messages
    ]


def test_a_conversation_directory_is_detected_by_its_layout() -> None:
    assert detect_format(CONV_A) == detect_dir(CONV_B) == "openhands-conversation"
    assert detect_dir(PARENT) is None and detect_dir(PARENT.parent) is None
    with pytest.raises(UnknownFormatError) as exc:
        detect_format(PARENT)
    assert str(exc.value) == (
        f"{PARENT}: a directory that is neither a harbor trial directory (result.json + agent/)"
        " nor an OpenHands conversation (base_state.json + events/)"
    )
    files, unread, others = event_files(CONV_A)
    assert [f.name[:11] for f in files] == [f"event-{i:05d}" for i in range(12)]  # index order; dot files left out
    assert unread == others == []


def test_a_parent_directory_gives_one_trajectory_per_conversation(tmp_path: Path) -> None:
    out = tmp_path / "trajectories.jsonl"
    report = convert_paths([PARENT], out)
    assert [(f.path, f.format, f.trajectories, f.turns, f.error) for f in report.files] == [
        (str(CONV_A), "openhands-conversation", 1, 3, None),
        (str(CONV_B), "openhands-conversation", 1, 2, None),
    ]
    assert (report.trajectories, report.turns) == (2, 5)
    assert report.skipped == {"event:ConversationStateUpdateEvent": 2, "observation_text_from_content": 5}
    a, b = read_trajectories(out)
    # the model of base_state.json agent.llm; the SDK's events name none and it keeps no task id
    assert (a.model, b.model) == ("litellm_proxy/claude-sonnet-4-5-20250929", "openai/gpt-5-mini")
    assert all(t.model is None for t in [*a.turns, *b.turns])  # served under the trajectory's model
    assert (a.task_id, a.outcome.exit_status, a.source.format, a.source.path) == (
        None,
        "finished",
        "openhands-conversation",
        str(CONV_A),
    )
    assert [t.response.finish_reason for t in a.turns] == ["tool_calls"] * 3
    assert [t.response.finish_reason for t in b.turns] == ["tool_calls", "stop"]
    # the two calls of one llm_response_id are one turn; events in file index order
    assert _shape(request_messages(a, 2)) == [
        ("system", SYSTEM, [], None),
        ("user", "Fix the failing test in calc.py", [], None),
        ("assistant", "Let me run the tests and look at calc.py.", ["terminal", "file_editor"], None),
        ("tool", "F.\n1 failed, 1 passed in 0.02s", [], "toolu_01"),
        ("tool", "     1\tdef add(a, b):\n     2\t    return a - b\n", [], "toolu_02"),
        ("assistant", "add() subtracts; fixing it.", ["file_editor"], None),
        ("tool", "The file /workspace/calc.py has been edited.", [], "toolu_03"),
    ]
    assert a.turns[2].response.tool_calls[0].arguments == {"message": "Fixed add() in calc.py; the tests pass."}
    assert b.turns[1].response.content == "There are 2 Python files in /workspace."
    # one conversation dir named directly is the same unit
    (only,) = iter_trajectories(CONV_B, fmt="openhands-conversation")
    assert only.model_dump(exclude={"source"}) == b.model_dump(exclude={"source"})
    assert only.source.sha256 == b.source.sha256


def test_formats_that_do_not_fit_a_conversation_dir_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnknownFormatError) as exc:
        list(iter_trajectories(CONV_A, fmt="pi-session"))
    assert str(exc.value) == (
        f"{CONV_A}: format: a directory of format openhands-conversation cannot be read as"
        ' another format (got "pi-session")'
    )
    with pytest.raises(UnknownFormatError) as exc:
        list(iter_trajectories(_event(CONV_A, 1), fmt="openhands-conversation"))
    assert str(exc.value) == f"{_event(CONV_A, 1)}: format: openhands-conversation needs a directory, not a file"


def test_every_turn_replays_with_no_miss(tmp_path: Path) -> None:
    store = tmp_path / "trajectories.jsonl"
    convert_paths([PARENT], store)
    for traj in read_trajectories(store):
        got = replay_turns(store, traj)
        assert got.stats["misses"]["total"] == 0
        assert [r["model"] for r in got.responses] == [traj.model] * len(traj.turns)
        assert [r["choices"][0]["message"].get("content") for r in got.responses] == [
            t.response.content for t in traj.turns
        ]


@pytest.fixture
def conv(tmp_path: Path) -> Path:
    """A copy of CONV_A to damage."""
    return Path(shutil.copytree(CONV_A, tmp_path / "logs" / CONV_A.name))


def test_a_damaged_event_file_is_named_in_one_line_or_skipped_and_counted(conv: Path, tmp_path: Path, capsys) -> None:
    bad = _event(conv, 5)  # the terminal tool's observation
    bad.write_bytes(b'{"id": "a3f00005-8d2e-4b6a-9c1f-5e7d3a2b1c0d", "kind": "Observation')
    out = tmp_path / "out.jsonl"
    assert main(["convert", str(tmp_path / "logs"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"benchmaker: error: {bad}:1: invalid JSON: Unterminated string starting at\n"
    assert not out.exists()
    report = convert_paths([tmp_path / "logs"], out, lenient=True)
    assert (report.trajectories, report.turns, report.skipped["bad_event_file"]) == (1, 3, 1)
    (t,) = read_trajectories(out)
    assert [o.tool_call_id for o in t.turns[0].observations] == ["toolu_02"]  # toolu_01's result was in the bad file
    # an event object without a `kind`
    bad.write_bytes(b'{"id": "a3f00005-8d2e-4b6a-9c1f-5e7d3a2b1c0d"}')
    with pytest.raises(ConvertError) as exc:
        convert_paths([conv], out)
    assert str(exc.value) == (f"{bad}: kind: expected an OpenHands SDK event object with a string `kind` (got None)")


def test_a_missing_event_index_and_stray_files(conv: Path, tmp_path: Path) -> None:
    gone = _event(conv, 9)
    gone.unlink()
    (conv / "events" / "notes.txt").write_text("not an event")
    with pytest.raises(ConvertError) as exc:
        convert_paths([conv], None)
    assert str(exc.value) == (
        f"{conv / 'events'}: 2 event file(s) after index 8 would not be read: an index is"
        f" missing or doubled (first: {_event(conv, 10).name})"
    )
    report = convert_paths([conv], None, lenient=True)
    # events 0-8 as the SDK's EventLog loads them: the finish call's turn is gone
    assert (report.trajectories, report.turns) == (1, 2)
    assert (report.skipped["event_file_after_gap"], report.skipped["not_an_event_file"]) == (2, 1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("{", ":1: truncated JSON document"), ("[1]", ": expected a ConversationState object (got [1])")],
    ids=["not-json", "not-an-object"],
)
def test_a_bad_base_state_is_named(conv: Path, text: str, problem: str) -> None:
    (conv / "base_state.json").write_text(text)
    with pytest.raises(ConvertError) as exc:
        convert_paths([conv], None)
    assert str(exc.value) == f"{conv / 'base_state.json'}{problem}"


def test_conversion_progress_counts_a_conversation_dir_as_one_unit(tmp_path: Path) -> None:
    events: list[ConvertProgress] = []
    ticks = iter(range(100))
    convert_paths([PARENT], tmp_path / "t.jsonl", progress=events.append, clock=lambda: float(next(ticks)))
    size = {d: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in (CONV_A, CONV_B)}
    assert [(e.files_done, e.files_total, e.bytes_done, e.trajectories, e.turns, e.finished) for e in events] == [
        (0, 2, 0, 0, 0, False),
        (1, 2, size[CONV_A], 1, 3, False),
        (2, 2, size[CONV_A] + size[CONV_B], 2, 5, False),
        (2, 2, size[CONV_A] + size[CONV_B], 2, 5, True),
    ]
    assert {e.bytes_total for e in events} == {size[CONV_A] + size[CONV_B]}


def test_swebench_replay_takes_a_directory_of_conversations(capsys) -> None:
    assert main(["swebench-replay", "--logs", str(PARENT), "--concurrency", "1", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("plan: 1 sweep point(s) x 2 trajectory(ies)")


def _branched(tmp_path: Path, leaf: str | None) -> Path:
    """CONV_B as a newer SDK writes it (every event has `parent_id`), then navigated back
    to the user's prompt (event 1) and continued on a second branch (events 5-7)."""
    conv = Path(shutil.copytree(CONV_B, tmp_path / "branched"))
    files = [_event(conv, i) for i in range(5)]
    events = [json.loads(f.read_text()) for f in files]
    for i, (f, ev) in enumerate(zip(files, events, strict=True)):
        if i:
            f.write_text(json.dumps({**ev, "parent_id": events[i - 1]["id"]}))
    new = [
        {
            **events[2],
            "id": "b7c20005-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
            "parent_id": events[1]["id"],
            "llm_response_id": "chatcmpl-b3",
            "tool_call_id": "call_b3",
            "tool_call": {
                **events[2]["tool_call"],
                "id": "call_b3",
                "arguments": json.dumps({"command": "find /workspace -name '*.py'"}),
            },
        },
        {
            **events[3],
            "id": "b7c20006-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
            "parent_id": "b7c20005-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
            "tool_call_id": "call_b3",
            "action_id": "b7c20005-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
            "observation": {
                **events[3]["observation"],
                "content": [{"type": "text", "text": "/workspace/a.py\n/workspace/b.py"}],
            },
        },
        {
            **events[4],
            "id": "b7c20007-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
            "parent_id": "b7c20006-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
            "llm_message": {**events[4]["llm_message"], "content": [{"type": "text", "text": "a.py and b.py."}]},
        },
    ]
    for k, ev in enumerate(new, start=5):
        (conv / "events" / f"event-{k:05d}-{ev['id']}.json").write_text(json.dumps(ev))
    state = json.loads((conv / "base_state.json").read_text())
    (conv / "base_state.json").write_text(json.dumps({**state, "leaf_event_id": leaf} if leaf else state))
    return conv


@pytest.mark.parametrize(
    ("leaf", "calls", "last"),
    [
        (None, ["find /workspace -name '*.py'"], "a.py and b.py."),  # no leaf_event_id: the last event's branch
        (
            "b7c20004-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
            ["ls /workspace/*.py | wc -l"],
            "There are 2 Python files in /workspace.",
        ),
    ],
    ids=["last-branch", "navigated-back"],
)
def test_a_branched_conversation_is_read_along_its_active_branch(tmp_path: Path, leaf, calls, last) -> None:
    conv = _branched(tmp_path, leaf)
    out = tmp_path / "t.jsonl"
    report = convert_paths([conv], out)
    assert (report.turns, report.skipped["event_off_active_branch"]) == (2, 3)
    (t,) = read_trajectories(out)
    assert [json.loads(c.arguments_raw)["command"] for c in t.turns[0].response.tool_calls] == calls
    assert t.turns[1].response.content == last
    assert [m["role"] for m in request_messages(t, 1)] == ["system", "user", "assistant", "tool"]
    assert replay_turns(out, t).stats["misses"]["total"] == 0


def test_a_cycle_of_parents_is_named(tmp_path: Path) -> None:
    conv = _branched(tmp_path, None)
    first = _event(conv, 1)
    first.write_text(json.dumps({**json.loads(first.read_text()), "parent_id": "b7c20004-8d2e-4b6a-9c1f-5e7d3a2b1c0d"}))
    with pytest.raises(ConvertError) as exc:
        convert_paths([conv], None)
    assert str(exc.value) == (
        f"{conv}: events[1].parent_id: the parents of event b7c20001-8d2e-4b6a-9c1f-5e7d3a2b1c0d form a cycle"
    )


def test_a_branched_event_list_in_one_file_is_read_along_its_last_branch(tmp_path: Path) -> None:
    conv = _branched(tmp_path, None)
    files, _, _ = event_files(conv)
    path = tmp_path / "events.json"
    path.write_text(json.dumps([json.loads(f.read_text()) for f in files]))
    (t,) = iter_trajectories(path)
    assert (t.source.format, len(t.turns), t.skipped["event_off_active_branch"]) == ("openhands", 2, 3)
    assert t.turns[1].response.content == "a.py and b.py."


def test_event_files_named_as_the_first_sdk_releases_did(tmp_path: Path) -> None:
    conv = Path(shutil.copytree(CONV_A, tmp_path / CONV_A.name))
    for i in range(12):
        _event(conv, i).rename(conv / "events" / f"event-{i:05d}.json")  # no event id in the name
    (t,) = iter_trajectories(conv)
    (ref,) = iter_trajectories(CONV_A)
    assert t.model_dump(exclude={"source", "trajectory_id"}) == ref.model_dump(exclude={"source", "trajectory_id"})


def test_benchmaker_convert_takes_one_conversation_dir_and_a_parent(tmp_path: Path, capsys) -> None:
    assert main(["convert", str(CONV_A), "-o", str(tmp_path / "a.jsonl")]) == 0
    assert main(["convert", str(PARENT), "-o", str(tmp_path / "all.jsonl")]) == 0
    assert [len(t.turns) for t in read_trajectories(tmp_path / "a.jsonl")] == [3]
    assert [len(t.turns) for t in read_trajectories(tmp_path / "all.jsonl")] == [3, 2]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("damage", ["base_state", "event"])
def test_damaged_conversation_dirs_convert_or_are_input_errors(damage: str, tmp_path: Path) -> None:
    from hypothesis import given

    from tests.replay.test_converters_fuzz import PROFILE, _convert_or_input_error, damaged

    conv = _branched(tmp_path, "b7c20007-8d2e-4b6a-9c1f-5e7d3a2b1c0d")  # with parent_ids: the tree code runs
    target = conv / "base_state.json" if damage == "base_state" else _event(conv, 5)
    data = target.read_bytes()

    @PROFILE
    @given(damaged(data))
    def check(mutated: bytes) -> None:
        target.write_bytes(mutated)
        _convert_or_input_error(conv)

    check()


@pytest.mark.parametrize(
    ("event", "changes", "error"),
    [
        (5, {"parent_id": ["x"]}, "events[5].parent_id: expected an event id (got ['x'])"),
        (5, {"parent_id": 7}, "events[5].parent_id: expected an event id (got 7)"),
        (6, {"parent_id": None}, None),  # the legacy chain: the event before
        # the user prompt's id unusable: the branch's parent names no event, so it is a root
        (1, {"id": {"a": 1}}, "no user message before the first assistant turn"),
    ],
    ids=["parent-a-list", "parent-a-number", "parent-missing", "id-an-object"],
)
def test_hostile_tree_fields_convert_or_are_named(event: int, changes: dict, error: str | None, tmp_path: Path) -> None:
    conv = _branched(tmp_path, None)
    f = _event(conv, event)
    f.write_text(json.dumps({**json.loads(f.read_text()), **changes}))
    if error is None:
        (t,) = iter_trajectories(conv)
        assert [len(t.turns), t.turns[1].response.content] == [2, "a.py and b.py."]
    else:
        with pytest.raises(ConvertError) as exc:
            list(iter_trajectories(conv))
        assert str(exc.value) == f"{conv}: {error}"


@pytest.mark.parametrize(
    "state",
    [{"leaf_event_id": ["x"]}, {"agent": "x"}, {"agent": {"llm": 5}}, {"execution_status": 3}],
    ids=["leaf-a-list", "agent", "llm", "status"],
)
def test_hostile_base_state_fields_convert(state: dict, tmp_path: Path) -> None:
    conv = _branched(tmp_path, None)
    base = conv / "base_state.json"
    base.write_text(json.dumps({**json.loads(base.read_text()), **state}))
    (t,) = iter_trajectories(conv)
    assert len(t.turns) == 2


def test_a_model_switch_logged_as_a_state_update_names_the_later_turns(tmp_path: Path) -> None:
    events = [json.loads(f.read_text()) for f in event_files(CONV_A)[0]]
    switch = {
        "id": "a3f000ff-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
        "timestamp": "2025-11-12T14:02:08.500000",
        "source": "environment",
        "kind": "ConversationStateUpdateEvent",
        "key": "agent",
        "value": {"kind": "Agent", "llm": {"model": "openai/gpt-5", "usage_id": "gpt5"}, "tools": []},
    }
    events.insert(9, switch)  # after the second model call's tool result, before the finish call
    first = {
        **switch,
        "id": "a3f000fe-8d2e-4b6a-9c1f-5e7d3a2b1c0d",
        "key": "full_state",
        "value": {"agent": {"kind": "Agent", "llm": {"model": "litellm_proxy/claude-sonnet-4-5-20250929"}}},
    }
    events.insert(2, first)  # a snapshot of the whole state before the first call
    conv = tmp_path / CONV_A.name
    (conv / "events").mkdir(parents=True)
    state = json.loads((CONV_A / "base_state.json").read_text())
    state["agent"]["llm"]["model"] = "openai/gpt-5"  # base_state holds the agent after the switch
    (conv / "base_state.json").write_text(json.dumps(state))
    for i, ev in enumerate(events):
        (conv / "events" / f"event-{i:05d}-{ev['id']}.json").write_text(json.dumps(ev))
    out = tmp_path / "t.jsonl"
    convert_paths([conv], out)
    (t,) = read_trajectories(out)
    claude = "litellm_proxy/claude-sonnet-4-5-20250929"
    assert (t.model, [turn.model for turn in t.turns]) == ("openai/gpt-5", [claude, claude, "openai/gpt-5"])
    got = replay_turns(out, t)
    assert [r["model"] for r in got.responses] == [claude, claude, "openai/gpt-5"]
    assert got.stats["misses"]["total"] == 0


def test_the_events_dir_named_alone_stands_for_its_conversation(tmp_path: Path) -> None:
    assert detect_format(CONV_B / "events") == "openhands-conversation"
    report = convert_paths([CONV_B / "events"], tmp_path / "t.jsonl")
    assert [(f.path, f.trajectories, f.turns) for f in report.files] == [(str(CONV_B / "events"), 1, 2)]
    (t,) = read_trajectories(tmp_path / "t.jsonl")
    (ref,) = iter_trajectories(CONV_B)
    assert t == ref
