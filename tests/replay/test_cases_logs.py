"""The agent-log cases of ../shared/cases/logs (copied to tests/data/cases/logs/): each
gives the value its README states. The pi compaction case is replayed through the real
replay server on 127.0.0.1 with the request bodies checked turn by turn."""

from __future__ import annotations

import json
from pathlib import Path

from benchmaker.trajectories.convert import convert_paths, detect_format, iter_trajectories
from benchmaker.trajectories.converters.pi_session import compaction_text
from tests.replay.replay_turns import replay_turns

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "logs"


def _one(name: str):
    trajs = list(iter_trajectories(CASES / name))
    assert len(trajs) == 1
    return trajs[0]


def test_mini_swe_agent_v2_exit_role_is_read_not_rejected():
    t = _one("mini-swe-agent-v2-exit.traj.json")
    assert detect_format(CASES / "mini-swe-agent-v2-exit.traj.json") == "mini-swe-agent"
    assert len(t.turns) == 1
    assert t.outcome.exit_status == "Submitted"
    assert t.outcome.patch == "diff --git a/x.py b/x.py\n"
    assert t.turns[0].usage.prompt_tokens == 50 and t.turns[0].usage.completion_tokens == 20  # extra.response.usage
    assert t.skipped == {}  # the exit message is read, not skipped


def test_exit_role_alone_supplies_the_outcome(tmp_path):
    doc = json.loads((CASES / "mini-swe-agent-v2-exit.traj.json").read_text())
    doc["info"] = {"mini_version": "2.0.0"}  # no exit_status / submission in info
    doc["messages"].insert(2, {"role": "narrator", "content": "an unknown role"})
    src = tmp_path / "x.traj.json"
    src.write_text(json.dumps(doc))
    t = next(iter_trajectories(src))
    assert (t.outcome.exit_status, t.outcome.patch) == ("Submitted", "diff --git a/x.py b/x.py\n")
    assert t.skipped == {"role:narrator": 1}


def test_openhands_eval_output_one_trajectory_per_line_auto_detected(tmp_path):
    src = CASES / "openhands-eval-output.jsonl"
    assert detect_format(src) == "openhands"
    t = _one("openhands-eval-output.jsonl")
    assert t.task_id == "django__django-11099"
    assert t.outcome.patch == "diff --git a/x.py b/x.py\n"
    assert [len(x.response.tool_calls) for x in t.turns] == [1, 1]
    assert t.turns[0].observations[0].content == "x.py" and t.turns[0].observations[0].exit_code == 0
    assert [x.model for x in t.turns] == ["claude", "claude"]
    # two lines: two trajectories, each with its own task id, line and patch
    line = src.read_text().strip()
    two = tmp_path / "output.jsonl"
    two.write_text(line + "\n" + line.replace("django__django-11099", "astropy__astropy-1") + "\n")
    both = list(iter_trajectories(two))
    assert [(x.task_id, x.source.line) for x in both] == [("django__django-11099", 1), ("astropy__astropy-1", 2)]


def test_swe_agent_history_only_with_python_literal_tool_calls():
    src = CASES / "swe-agent-history-only.traj"
    assert detect_format(src) == "swe-agent"
    t = _one("swe-agent-history-only.traj")
    assert len(t.turns) == 4
    calls = [(c.name, c.id, c.arguments) for x in t.turns for c in x.response.tool_calls]
    assert calls == [
        ("find_file", "call_a1", {"file_name": "greet.py"}),
        ("open", "call_a2", {"path": "greet.py"}),
        ("edit", "call_a3", {"start_line": 2, "end_line": 2, "replacement_text": "    print('hello')"}),
        ("submit", "call_a4", {}),
    ]
    # the raw argument string is the one inside the literal, byte for byte
    assert t.turns[0].response.tool_calls[0].arguments_raw == '{"file_name":"greet.py"}'
    assert [x.observations[0].tool_call_id for x in t.turns] == ["call_a1", "call_a2", "call_a3", "call_a4"]
    assert t.outcome.patch is None and t.system == "You are an autonomous programmer working in a shell."


def test_swe_agent_model_from_replay_config(tmp_path):
    doc = json.loads((CASES / "swe-agent-history-only.traj").read_text())
    doc["replay_config"] = json.dumps({"agent": {"model": {"name": "claude-3-7-sonnet"}}})
    src = tmp_path / "django-1.traj"
    src.write_text(json.dumps(doc))
    t = next(iter_trajectories(src))
    assert (t.model, t.task_id) == ("claude-3-7-sonnet", "django-1")


def test_pi_compaction_turns_and_edit():
    t = _one("pi-compaction-small.jsonl")
    assert len(t.turns) == 6
    edit = t.turns[4].context_edit
    assert edit is not None and edit.kind == "compaction" and edit.tokens_before == 2400
    # firstKeptEntryIndex 7 = file line 8, "Now add a test for it": turn 2's user_after[0]
    # (turn 2 = "Added greet()", block [assistant, user_after[0]])
    assert (edit.keep_from.turn, edit.keep_from.item) == (2, 1)
    assert [x.context_edit is None for x in t.turns] == [True, True, True, True, False, True]


def test_pi_compaction_replays_as_the_agent_sent_it(tmp_path):
    out = tmp_path / "trajectories.jsonl"
    convert_paths([CASES / "pi-compaction-small.jsonl"], out)
    t = next(iter_trajectories(CASES / "pi-compaction-small.jsonl"))
    summary = compaction_text("The user asked for greet() in app.py; it was added. The user now wants a test.")
    run = replay_turns(out, t)
    for k, messages in enumerate(run.requests):
        assert run.responses[k]["model"] == "acme-coder-1"
        if k >= 4:  # after the compaction: the summary, then the entries from line 8 on
            assert messages[0] == {"role": "user", "content": summary}
            assert "x = 1\nx = 1" not in json.dumps(messages)  # not the 4 KB tool result
            assert [m["role"] for m in messages[1:4]] == ["user", "assistant", "user"]
            assert [m["content"] for m in messages[1:4]] == [
                "Now add a test for it",
                "Which test framework?",
                "pytest, please",
            ]
        else:
            assert messages[0] == {"role": "user", "content": "Add a greet() function to app.py"}
    assert run.stats["misses"]["total"] == 0 and run.stats["served"] == 6
    sizes = run.sizes
    # the request shrinks at the compaction as the recorded prompt does (2380 -> 160
    # tokens) and grows after it (160 -> 200): no jump back to the whole history
    prompts = [x.usage.prompt_tokens for x in t.turns]
    assert prompts == [900, 2300, 2350, 2380, 160, 200]
    assert sizes[4] < sizes[0] * 10 < sizes[3] and sizes[4] < sizes[5] < sizes[1] / 4
    assert sizes[1] > 4000  # the 4 KB tool result is in turns 1-3


def test_pi_string_content_and_model_object_are_read(tmp_path):
    lines = (CASES / "pi-compaction-small.jsonl").read_text().splitlines()[:3]
    turn = json.loads(lines[2])
    turn["message"]["content"] = "Just text."  # a plain string, not a list of parts
    del turn["message"]["model"]
    lines[2] = json.dumps(turn)
    lines.insert(
        2,
        json.dumps(
            {
                "type": "model_change",
                "timestamp": "2026-01-05T10:00:02.000Z",
                "model": {"id": "acme-coder-2", "name": "Acme Coder 2"},
            }
        ),
    )
    src = tmp_path / "s.jsonl"
    src.write_text("\n".join(lines) + "\n")
    t = next(iter_trajectories(src))
    assert t.turns[0].response.content == "Just text."
    assert t.turns[0].model == "acme-coder-2"  # the model_change's model.id, not the header's


def test_atif_step_of_unknown_source_is_counted_not_rejected(tmp_path):
    doc = {
        "schema_version": "ATIF-v1.5",
        "agent": {"name": "terminus-2", "model_name": "m"},
        "steps": [
            {"source": "user", "message": "task"},
            {"source": "narrator", "message": "?"},
            {"source": "agent", "message": "done"},
        ],
    }
    src = tmp_path / "trajectory.json"
    src.write_text(json.dumps(doc))
    t = next(iter_trajectories(src))
    assert len(t.turns) == 1 and t.skipped == {"step_source:narrator": 1}
