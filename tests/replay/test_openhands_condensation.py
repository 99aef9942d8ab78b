"""OpenHands condensation and the software-agent-sdk event format: after a
condensation the replay sends the context OpenHands would have sent: the forgotten
events dropped, the summary as a user message at its offset.

The reference below is written from OpenHands' own rule, independently of the
converter: View.from_events (OpenHands openhands/memory/view.py; SDK
openhands-sdk/openhands/sdk/context/view.py): forgotten ids of every condensation so far
plus the condensation events themselves leave the view, a model response with any
forgotten action leaves whole (SDK batch atomicity) with its tool results (unmatched tool
calls are filtered), the latest summary goes in at `summary_offset` of the kept list
(every event in OpenHands, the LLM-convertible ones in the SDK). Fixtures are written in
the layouts of those repositories (tests/data/written/SOURCES.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.convert import convert_paths, detect_format, iter_trajectories, read_trajectories
from tests.replay.replay_turns import harness_bodies, replay_turns

WRITTEN = Path(__file__).resolve().parents[1] / "data" / "written"
LEGACY = WRITTEN / "openhands-condensation.json"
SDK = WRITTEN / "openhands-sdk-condensation.json"
SDK_CONVERTIBLE = {
    "SystemPromptEvent",
    "MessageEvent",
    "ActionEvent",
    "ObservationEvent",
    "AgentErrorEvent",
    "UserRejectObservation",
    "CondensationSummaryEvent",
}


@dataclass
class Ev:
    """An event reduced to what the view rule needs."""

    id: object
    kind: str  # system | user | assistant | tool | condensation | other
    text: str | None = None
    response: object = None  # assistant: the model response id
    call: str | None = None  # assistant: its tool call id; tool: the call it answers
    in_view: bool = True
    forgets: list = field(default_factory=list)
    summary: str | None = None
    offset: int | None = None


def _texts(parts) -> str:
    return "\n".join(p["text"] for p in parts if p.get("type") == "text")


def legacy_events(path: Path) -> list[Ev]:
    out = []
    for e in json.loads(path.read_text()):
        tcm = e.get("tool_call_metadata") or {}
        if e.get("action") == "condensation":
            a = e["args"]
            ids = a["forgotten_event_ids"] or list(
                range(a["forgotten_events_start_id"], a["forgotten_events_end_id"] + 1)
            )
            out.append(Ev(e["id"], "condensation", forgets=ids, summary=a["summary"], offset=a["summary_offset"]))
        elif e.get("action") == "system":
            out.append(Ev(e["id"], "system", e["args"]["content"]))
        elif e.get("action") == "message" and e["source"] == "user":
            out.append(Ev(e["id"], "user", e["args"]["content"]))
        elif "action" in e and "model_response" in tcm:
            mr = tcm["model_response"]
            out.append(Ev(e["id"], "assistant", mr["choices"][0]["message"]["content"], mr["id"], tcm["tool_call_id"]))
        elif "observation" in e and tcm:
            out.append(Ev(e["id"], "tool", e["content"], call=tcm["tool_call_id"]))
        else:
            out.append(Ev(e["id"], "other"))
    return out


def sdk_events(path: Path) -> list[Ev]:
    out = []
    for e in json.loads(path.read_text()):
        k, conv = e["kind"], e["kind"] in SDK_CONVERTIBLE
        if k == "Condensation":
            out.append(
                Ev(
                    e["id"],
                    "condensation",
                    forgets=e["forgotten_event_ids"],
                    summary=e["summary"],
                    offset=e["summary_offset"],
                    in_view=False,
                )
            )
        elif k == "SystemPromptEvent":
            out.append(Ev(e["id"], "system", e["system_prompt"]["text"]))
        elif k == "MessageEvent":
            role = "user" if e["source"] == "user" else "assistant"
            out.append(Ev(e["id"], role, _texts(e["llm_message"]["content"]), e.get("llm_response_id")))
        elif k == "ActionEvent":
            out.append(Ev(e["id"], "assistant", _texts(e["thought"]) or None, e["llm_response_id"], e["tool_call_id"]))
        elif k == "ObservationEvent":
            out.append(Ev(e["id"], "tool", _texts(e["observation"]["content"]), call=e["tool_call_id"]))
        else:
            out.append(Ev(e["id"], "other", in_view=conv))
    return out


def reference_requests(events: list[Ev]) -> list[list[tuple[str, str | None]]]:
    """The messages (after the system prompt) of each model call, by the view rule."""
    out = []
    seen_responses: set = set()
    for i, ev in enumerate(events):
        if ev.kind != "assistant" or ev.response in seen_responses:
            continue
        seen_responses.add(ev.response)
        before = events[:i]
        conds = [e for e in before if e.kind == "condensation"]
        forgotten = {x for c in conds for x in c.forgets} | {c.id for c in conds}
        gone = {e.response for e in before if e.kind == "assistant" and e.id in forgotten}
        gone_calls = {e.call for e in before if e.kind == "assistant" and e.response in gone}
        gone_calls |= {e.call for e in before if e.kind == "tool" and e.id in forgotten}
        gone |= {e.response for e in before if e.kind == "assistant" and e.call in gone_calls}
        kept = [
            e
            for e in before
            if e.kind != "condensation"
            and e.in_view
            and e.id not in forgotten
            and not (e.kind == "assistant" and e.response in gone)
            and not (
                e.kind == "tool"
                and (e.call in gone_calls or any(a.call == e.call and a.response in gone for a in before))
            )
        ]
        summary = next(((c.summary, c.offset) for c in reversed(conds) if c.summary is not None), None)
        items: list = list(kept)
        if summary is not None:
            items.insert(summary[1], ("summary", summary[0]))
        msgs, rendered = [], set()
        for e in items:
            if isinstance(e, tuple):
                msgs.append(("user", e[1]))
            elif e.kind == "assistant" and e.response not in rendered:
                rendered.add(e.response)
                msgs.append(("assistant", e.text))
            elif e.kind in ("user", "tool"):
                msgs.append((e.kind, e.text))
        out.append(msgs)
    return out


def _sent(t, k: int) -> list[tuple[str, str | None]]:
    return [(m["role"], m["content"]) for m in request_messages(t, k) if m["role"] != "system"]


@pytest.mark.parametrize(("path", "events"), [(LEGACY, legacy_events), (SDK, sdk_events)], ids=["openhands", "sdk"])
def test_requests_after_condensation_are_what_openhands_sends(path: Path, events) -> None:
    assert detect_format(path) == "openhands"
    (t,) = iter_trajectories(path)
    ref = reference_requests(events(path))
    assert len(ref) == len(t.turns)
    assert [_sent(t, k) for k in range(len(t.turns))] == ref
    assert t.system.startswith("You are OpenHands agent")
    assert all(m["role"] == "system" for m in request_messages(t, len(t.turns) - 1)[:1])


def test_legacy_condensation_edit_and_summary_offset() -> None:
    (t,) = iter_trajectories(LEGACY)
    kinds = [None if x.context_edit is None else x.context_edit.kind for x in t.turns]
    assert kinds == [None, None, None, "condensation", "condensation"]
    summary = "Ran the tests: test_add failed; calc.py add() subtracted, now fixed."
    # summary_offset 2: after the system action and the task message; the forgotten
    # events 4..7 (the first two model calls and their results, 4 KB of calc.py) are gone
    assert _sent(t, 3) == [
        ("user", "task_id: oh-cond-1\nFix the failing test in calc.py"),
        ("user", summary),
        ("assistant", "add() subtracts; fixing it."),
        ("tool", "The file /workspace/calc.py has been edited."),
    ]
    # the second condensation (ids 8, 9, no summary) keeps the first one's summary in force
    assert _sent(t, 4) == [
        ("user", "task_id: oh-cond-1\nFix the failing test in calc.py"),
        ("user", summary),
        ("assistant", "Running the tests again."),
        ("tool", "..\n2 passed in 0.02s"),
    ]
    assert t.turns[3].usage.prompt_tokens == 1500 and t.model == "claude-3-7-sonnet-20250219"


def test_sdk_events_read_and_batch_dropped_whole() -> None:
    (t,) = iter_trajectories(SDK)
    assert t.match_key == "task:sdk-cond-1"
    assert [[c.name for c in x.response.tool_calls] for x in t.turns] == [
        ["terminal", "file_editor"],
        ["file_editor"],
        ["terminal"],
        [],
    ]
    assert t.turns[0].response.tool_calls[1].arguments == {
        "command": "view",
        "path": "/workspace/calc.py",
        "security_risk": "LOW",
    }
    assert [x.response.finish_reason for x in t.turns] == ["tool_calls", "tool_calls", "tool_calls", "stop"]
    assert t.turns[2].context_edit is not None and t.turns[2].context_edit.kind == "condensation"
    # forgetting one action and one result of the two-call batch drops the batch and both results
    assert all(m.get("tool_call_id") not in ("call_1", "call_2") for m in request_messages(t, 2))
    assert t.skipped == {"event:ConversationStateUpdateEvent": 1, "observation_text_from_content": 4}


def test_sdk_events_one_per_line_and_in_an_eval_record(tmp_path: Path) -> None:
    events = json.loads(SDK.read_text())
    lines = tmp_path / "events.jsonl"
    lines.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert detect_format(lines) == "openhands"
    (a,) = iter_trajectories(lines)
    (b,) = iter_trajectories(SDK)
    assert a.turns == b.turns
    record = {
        "instance_id": "calc__calc-1",
        "test_result": {"git_patch": "diff --git a/calc.py b/calc.py\n"},
        "instruction": "Fix the failing test in calc.py",
        "history": events,
        "metadata": {"llm": {"model": "litellm_proxy/claude-sonnet-4-5-20250929"}, "max_iterations": 100},
        "metrics": None,
        "error": None,
    }
    out = tmp_path / "output.jsonl"
    out.write_text(json.dumps(record) + "\n")
    assert detect_format(out) == "openhands"
    (c,) = iter_trajectories(out)
    assert (c.task_id, c.model, c.outcome.patch) == (
        "calc__calc-1",
        "litellm_proxy/claude-sonnet-4-5-20250929",
        "diff --git a/calc.py b/calc.py\n",
    )
    assert c.turns == b.turns


@pytest.mark.parametrize("path", [LEGACY, SDK], ids=["openhands", "sdk"])
def test_condensed_logs_replay_with_no_miss(tmp_path: Path, path: Path) -> None:
    out = tmp_path / "trajectories.jsonl"
    convert_paths([path], out)
    (t,) = iter_trajectories(path)
    run = replay_turns(out, t)
    assert run.stats["misses"]["total"] == 0 and run.stats["served"] == len(t.turns)
    sizes = run.sizes
    at = next(k for k, x in enumerate(t.turns) if x.context_edit is not None)
    assert sizes[at] < sizes[at - 1] / 2  # the forgotten file listing is no longer sent


@pytest.mark.parametrize(("path", "events"), [(LEGACY, legacy_events), (SDK, sdk_events)], ids=["openhands", "sdk"])
async def test_harness_sends_the_condensed_view(tmp_path: Path, path: Path, events) -> None:
    # the engine harness rebuilds the request at the condensation (head, summary, kept
    # events) and grows it after: the bodies it sends are OpenHands' view turn by turn
    out = tmp_path / "trajectories.jsonl"
    convert_paths([path], out)
    (traj,) = read_trajectories(out)
    res, bodies = await harness_bodies(out, traj)
    assert res.episode.n_turns == len(traj.turns) and res.episode.misses_unknown_key == 0
    assert [[(m["role"], m["content"]) for m in b if m["role"] != "system"] for b in bodies] == reference_requests(
        events(path)
    )


def test_condensed_and_plain_runs_of_one_task_are_told_apart_by_system(tmp_path: Path) -> None:
    # two runs of task oh-cond-1 in one store: the condensed one (its turn 1 and turn 3
    # share a request key) and a plain one with another system prompt: each request is
    # served from the run whose system prompt it carries
    events = json.loads(LEGACY.read_text())
    plain = [e for e in events if e.get("action") != "condensation"]
    plain[0] = dict(plain[0], args=dict(plain[0]["args"], content="You are a careful coding agent."))
    other = tmp_path / "plain.json"
    other.write_text(json.dumps(plain))
    out = tmp_path / "trajectories.jsonl"
    convert_paths([LEGACY, other], out)
    (a,), (b,) = iter_trajectories(LEGACY), iter_trajectories(other)
    assert a.match_key == b.match_key and a.system != b.system
    for traj in (a, b):
        run = replay_turns(out, traj)
        assert run.stats["misses"]["total"] == 0
        assert {h["x-replay-trajectory"] for h in run.headers} == {traj.trajectory_id}


def test_stored_summary_events_are_user_messages(tmp_path: Path) -> None:
    # an AgentCondensationObservation stored as an event (OpenHands `observation:
    # "condense"`) and a stored SDK CondensationSummaryEvent: user messages with the text
    legacy = json.loads(LEGACY.read_text())
    legacy.insert(
        2,
        {
            "id": 90,
            "timestamp": "2025-03-10T10:00:01.500000",
            "source": "agent",
            "message": "Summary",
            "observation": "condense",
            "content": "Earlier: nothing tried yet.",
            "extras": {},
        },
    )
    sdk = json.loads(SDK.read_text())
    sdk.insert(
        2,
        {
            "id": "summary-1",
            "timestamp": "2025-11-05T09:30:01.500000",
            "source": "environment",
            "kind": "CondensationSummaryEvent",
            "summary": "Earlier: nothing tried yet.",
        },
    )
    for name, events in (("legacy.json", legacy), ("sdk.json", sdk)):
        path = tmp_path / name
        path.write_text(json.dumps(events))
        (t,) = iter_trajectories(path)
        assert _sent(t, 0)[1] == ("user", "Earlier: nothing tried yet."), name


def test_unknown_sdk_shapes_are_counted_not_rejected(tmp_path: Path) -> None:
    events = json.loads(SDK.read_text())
    del events[7]["tool_call"]  # an ActionEvent with nothing to send as a call
    events[9] = dict(events[9], forgotten_event_ids=None)  # a Condensation without ids
    events.append(
        {"id": "x-1", "timestamp": "2025-11-05T09:30:13.000000", "source": "environment", "kind": "PauseEvent"}
    )
    path = tmp_path / "sdk.json"
    path.write_text(json.dumps(events))
    (t,) = iter_trajectories(path)
    assert len(t.turns) == 3
    assert {
        k: t.skipped[k]
        for k in ("action_event_without_tool_call", "condensation_without_forgotten_events", "event:PauseEvent")
    } == {"action_event_without_tool_call": 1, "condensation_without_forgotten_events": 1, "event:PauseEvent": 1}


def test_condensation_that_keeps_only_the_head_then_a_new_prompt(tmp_path: Path) -> None:
    # everything after the head forgotten; the user then writes again: the request is
    # the task, the summary, the new prompt (once: the head span ends where the history
    # ended at the condensation)
    events = json.loads(SDK.read_text())
    keep = [
        e
        for e in events
        if e["kind"] in ("SystemPromptEvent", "MessageEvent")
        and e["source"] == "user"
        or e["kind"] == "SystemPromptEvent"
    ]
    first_batch = [e for e in events[3:7]]  # the two-call batch and its results
    condensation = dict(events[9], forgotten_event_ids=[e["id"] for e in first_batch])
    prompt = dict(
        events[1],
        id="again-1",
        llm_message=dict(events[1]["llm_message"], content=[{"type": "text", "text": "Continue, please."}]),
    )
    path = tmp_path / "sdk.json"
    path.write_text(json.dumps([*keep, *first_batch, condensation, prompt, *events[10:]]))
    (t,) = iter_trajectories(path)
    assert _sent(t, 1) == [
        ("user", "task_id: sdk-cond-1\nFix the failing test in calc.py"),
        ("user", condensation["summary"]),
        ("user", "Continue, please."),
    ]
    assert reference_requests(sdk_events(path)) == [_sent(t, k) for k in range(len(t.turns))]
