"""Converters: conformance on ../shared/data/real and small fixtures written for these
tests (tests/replay/fixtures/). Expected numbers come from the files themselves (counted
with a plain json scan) or from ../shared/data/real/SOURCES.md where it states them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from benchmaker.trajectories.convert import detect_format, iter_trajectories
from benchmaker.trajectories.converters.pi_session import COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX
from benchmaker.trajectories.trajectory import match_key_for, match_key_for_messages

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"


def _real(name: str) -> Path:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"real recording {name} not present under ../shared/data/real")
    return path


def _one(path: Path, fmt: str | None = None):
    trajs = list(iter_trajectories(path, fmt))
    assert len(trajs) == 1
    return trajs[0]


# ---- real recordings -------------------------------------------------------------


def test_real_pi_session_v1_turns_and_finish_reasons():
    path = _real("pi-session-v1-large.jsonl")
    assert detect_format(path) == "pi-session"
    t = _one(path)
    # SOURCES.md: 453 assistant turns (366 toolUse, 65 stop, 21 aborted, 1 error), 88 prompts
    assert len(t.turns) == 453
    assert Counter(x.response.finish_reason for x in t.turns) == {
        "tool_calls": 366,
        "stop": 65,
        "aborted": 21,
        "error": 1,
    }
    assert 1 + sum(len(x.user_after) for x in t.turns) == 88  # first_user + later prompts
    assert [x.index for x in t.turns] == list(range(453))
    # 391 toolCall parts and 373 toolResult messages in the file (json scan)
    assert sum(len(x.response.tool_calls) for x in t.turns) == 391
    assert sum(len(x.observations) for x in t.turns) == 373
    assert t.first_user == "/mode"  # line 2 of the file: the first user message
    assert t.match_key == match_key_for("/mode")
    assert t.model == "claude-sonnet-4-5"
    # each turn keeps its own model: one answer came from gpt-5.1-codex (json scan)
    assert Counter(x.model for x in t.turns) == {"claude-sonnet-4-5": 452, "gpt-5.1-codex": 1}
    # 21 aborted + 1 error carry errorMessage: 20 "Request was aborted.", 1 without the
    # period, 1 "terminated" (json scan); kept on the turn, no longer only counted
    assert Counter(x.error for x in t.turns if x.error) == {
        "Request was aborted.": 20,
        "Request was aborted": 1,
        "terminated": 1,
    }
    assert all(x.response.finish_reason in ("aborted", "error") for x in t.turns if x.error)
    assert t.skipped == {
        "arguments_raw_synthesized": 391,
        "thinking_level_change": 103,
        "usage_zero_on_failed_turn": 14,  # aborted turns whose usage is all 0
    }


def test_real_pi_session_first_tool_turn_is_exact():
    t = _one(_real("pi-session-v1-large.jsonl"))
    turn = t.turns[1]  # line 6 of the file
    assert turn.response.content == (
        "I'll read the theme documentation, theme.ts, and the selector files to understand the "
        "patterns, then help port over user-message-selector.ts."
    )
    assert [c.id for c in turn.response.tool_calls] == [
        "toolu_017qEkVzzPb7b7o4FkgJLF23",
        "toolu_01FnVNKzWWm2s2SFJmJttiWh",
        "toolu_016aKHTkjrTJcMds3wsEou2R",
    ]
    assert turn.response.tool_calls[0].arguments_raw == '{"path": "packages/coding-agent/docs/theme.md"}'
    # usage line 6: input 3 + cacheRead 0 + cacheWrite 1684 = 1687 prompt, 191 output
    assert turn.usage is not None
    assert (turn.usage.prompt_tokens, turn.usage.completion_tokens, turn.usage.cached_tokens) == (1687, 191, 0)
    assert turn.usage.total_tokens == 1878
    # message.timestamp 1763681630793 → entry timestamp 23:33:54.572Z = 3779 ms
    assert turn.timing is not None and turn.timing.duration_ms == 3779.0
    assert [o.tool_call_id for o in turn.observations][0] == "toolu_017qEkVzzPb7b7o4FkgJLF23"


def test_real_pi_session_error_turn_keeps_its_calls_and_usage():
    t = _one(_real("pi-session-v1-large.jsonl"))
    (err,) = [x for x in t.turns if x.response.finish_reason == "error"]
    assert len(err.response.tool_calls) == 16  # line 33: 16 toolCall parts, no results
    assert err.observations == []
    assert err.usage is not None and err.usage.prompt_tokens == 6 + 37652 + 94


def test_real_swe_agent_patch_is_the_recorded_submission():
    path = _real("swe-agent-pydicom-1458.traj")
    assert detect_format(path) == "swe-agent"
    t = _one(path)
    doc = json.loads(path.read_text())
    assert len(t.turns) == 12  # info.model_stats.api_calls == 12; 12 assistant messages in history
    assert Counter(x.response.finish_reason for x in t.turns) == {"stop": 12}
    assert sum(len(x.observations) for x in t.turns) == 11  # the final `submit` has none
    assert t.outcome.patch == doc["info"]["submission"]
    preds = json.loads(_real("swe-agent-pydicom-1458.all_preds.jsonl").read_text())
    assert t.outcome.patch == preds["model_patch"]  # byte-equal to the prediction record
    # The .patch file upstream lost the trailing space of one blank context line (" \n" →
    # "\n"); apart from that it is the same patch.
    patch_file = _real("swe-agent-pydicom-1458.patch").read_text()
    assert len(t.outcome.patch) == len(patch_file) + 1
    assert t.outcome.patch.replace("\n \n", "\n\n") == patch_file
    assert t.outcome.exit_status == "submitted"
    assert t.task_id == "swe-agent-pydicom-1458"
    assert t.first_user.startswith("Here is a demonstration")  # the demo is sent first
    assert t.skipped == {}


def test_real_swe_agent_task_prompt_after_the_demo_is_kept_and_keyed():
    path = _real("swe-agent-pydicom-1458.traj")
    t = _one(path)
    history = json.loads(path.read_text())["history"]
    # history[0] system, [1] the demonstration (is_demo), [2] the task prompt, [3] the
    # first assistant message.
    assert [m["role"] for m in history[:4]] == ["system", "user", "user", "assistant"]
    assert t.first_user == history[1]["content"]
    assert t.user_before_turns == [history[2]["content"]]
    assert t.user_before_turns[0].startswith("We're currently solving the following issue")
    assert "Pixel Representation attribute should be optional" in t.user_before_turns[0]
    # The key covers demo + task prompt, so it is not the demo-only key every task
    # sharing this demonstration would get.
    assert t.match_key == match_key_for_messages([history[1]["content"], history[2]["content"]])
    assert t.match_key != match_key_for(t.first_user)
    assert t.match_key.startswith("sha256:")  # neither message has a task_id line


def test_real_mini_swe_agent_actions_and_returncodes():
    path = _real("mini-swe-agent-github-issue.traj.json")
    assert detect_format(path) == "mini-swe-agent"
    t = _one(path)
    assert len(t.turns) == 10  # 10 assistant messages out of 22
    assert t.system is not None and t.system.startswith("You are a helpful assistant")
    codes = [o.exit_code for x in t.turns for o in x.observations]
    assert codes == [1, 0, 0, 0, 0, 0, 0, 1, 0, None]  # <returncode> tags; the last is the submission
    assert t.outcome.exit_status == "Submitted"
    assert t.outcome.patch is not None and t.outcome.patch.startswith("diff --git a/tests/missing_colon.py")
    assert t.turns[0].response.content.endswith(
        "```mswea_bash_command\ncat /Users/fuchur/Documents/24/git_sync/swe-agent-test-repo/tests/./missing_colon.py\n```"
    )


def test_real_openhands_usage_and_tool_calls():
    path = _real("openhands-basic.traj.json")
    assert detect_format(path) == "openhands"
    t = _one(path)
    assert len(t.turns) == 2  # two distinct model_response ids (events 1-2 share one)
    u0, u1 = t.turns[0].usage, t.turns[1].usage
    # model_response.usage of events 1 and 3
    assert (u0.prompt_tokens, u0.completion_tokens, u0.total_tokens, u0.cached_tokens) == (3486, 1135, 4621, 0)
    assert (u1.prompt_tokens, u1.completion_tokens, u1.total_tokens, u1.cached_tokens) == (4646, 177, 4823, 3482)
    assert [c.id for c in t.turns[0].response.tool_calls] == ["toolu_017nBp7UfiGqyrA7j77HgtFP"]
    assert [(c.id, c.name, c.arguments_raw) for c in t.turns[1].response.tool_calls] == [
        ("toolu_01BUKu3B7nY574atNECkBiFk", "finish", "{}")
    ]
    assert t.turns[0].observations[0].tool_call_id == "toolu_017nBp7UfiGqyrA7j77HgtFP"
    assert t.model == "claude-3-5-sonnet-20241022"
    assert t.first_user == (
        "Please create a simple 2048 game. No need to run it. Please finish the interaction after your finish coding."
    )
    assert t.skipped == {}


@pytest.mark.parametrize(
    "name",
    [
        "openai-gpt4o-toolcall.chunks.jsonl",
        "deepseek-v4-flash-toolcall.chunks.jsonl",
        "swe-agent-pydicom-1458.all_preds.jsonl",
    ],
)
def test_real_non_trajectory_files_are_unknown_format(name):
    from benchmaker.trajectories.errors import UnknownFormatError

    with pytest.raises(UnknownFormatError, match="unknown log format"):
        detect_format(_real(name))


# ---- fixtures ---------------------------------------------------------------------


def test_pi_v3_replays_every_branch_in_file_order():
    t = _one(FIXTURES / "pi_v3_tree.jsonl")
    # e5 is an abandoned branch (a sibling of e6 under e4): a request pi sent, so a turn
    assert [x.response.finish_reason for x in t.turns] == ["tool_calls", "stop", "stop", "aborted"]
    assert t.turns[1].response.content == "ABANDONED BRANCH"
    assert t.match_key == "task:demo-1"
    assert t.turns[2].response.reasoning == "check a.py"
    assert t.turns[2].user_after == ["Ran `pytest -q`\n```\n1 passed\n```", "thanks, now stop"]
    assert t.turns[3].usage is None  # aborted with all-zero usage
    # e7 usage: input 20 + cacheRead 110 + cacheWrite 3 = 133; ms 6000 → 8250
    assert t.turns[2].usage.prompt_tokens == 133 and t.turns[2].timing.duration_ms == 2250.0
    # e7 is sent with the path e2, e3, e4 (not e5): a branch edit keeping history up to turn 1
    branch = t.turns[2].context_edit
    assert branch is not None and branch.kind == "branch" and branch.summary == []
    assert [(sp.start.turn, sp.start.item, sp.end.turn, sp.end.item) for sp in branch.keep] == [(None, 0, 1, 0)]
    assert (branch.keep_from.turn, branch.keep_from.item) == (1, 1)  # after e5's block: nothing of it
    # e10 compaction (firstKeptEntryId e9, the user message "thanks, now stop") applies
    # from turn 3 on: summary, then turn 2's block [e7, e8 (bashExecution), e9] from item 2
    edit = t.turns[3].context_edit
    assert edit is not None and edit.kind == "compaction" and edit.tokens_before == 500
    assert edit.summary == [COMPACTION_SUMMARY_PREFIX + "fixed test" + COMPACTION_SUMMARY_SUFFIX]
    assert (edit.keep_from.turn, edit.keep_from.item) == (2, 2) and edit.keep == []
    assert [x.model for x in t.turns] == ["m1", "m1", "m1", "m1"]  # e1 model_change: m1
    assert t.skipped == {
        "arguments_raw_synthesized": 1,
        "thinking_level_change": 1,
        "usage_zero_on_failed_turn": 1,
    }


def test_pi_events_full_stream():
    t = _one(FIXTURES / "pi_events.jsonl")
    assert [x.response.finish_reason for x in t.turns] == ["tool_calls", "stop"]
    assert t.turns[0].observations[0].content == "a.py\nb.py\n"
    assert t.turns[1].response.content == "Two files: a.py and b.py."
    assert t.turns[1].usage.total_tokens == 119  # totalTokens as logged
    assert "observation_from_tool_execution_end" not in t.skipped
    assert t.skipped["event:message_update"] == 2


def test_pi_events_without_message_events_still_convert(tmp_path):
    # Drop every message_update and message_start, the toolResult message_end and the
    # second assistant message_end: turn_end and tool_execution_end must fill in.
    lines = (FIXTURES / "pi_events.jsonl").read_text().splitlines()
    kept = []
    for ln in lines:
        ev = json.loads(ln)
        if ev["type"] in ("message_update", "message_start"):
            continue
        if ev["type"] == "message_end" and ev["message"]["role"] == "toolResult":
            continue
        if ev["type"] == "message_end" and ev["message"].get("stopReason") == "stop":
            continue
        kept.append(ln)
    path = tmp_path / "folded.jsonl"
    path.write_text("\n".join(kept) + "\n")
    full = _one(FIXTURES / "pi_events.jsonl")
    t = _one(path)
    assert [x.response for x in t.turns] == [x.response for x in full.turns]
    assert [x.observations for x in t.turns] == [x.observations for x in full.turns]
    assert t.skipped["assistant_from_turn_end"] == 1


def test_swe_agent_function_calling_keeps_raw_arguments_and_ids():
    t = _one(FIXTURES / "swe_agent_fc.traj")
    assert [(c.id, c.arguments_raw) for x in t.turns for c in x.response.tool_calls] == [
        ("call_1", '{"command":"ls"}'),
        ("call_2", "{}"),
    ]
    assert [o.tool_call_id for x in t.turns for o in x.observations] == ["call_1", "call_2"]
    assert t.outcome.patch == "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1 \n+x = 2\n"
    assert t.first_user == "<issue>Fix add()</issue>"


def test_swesmith_rows_list_and_json_string_messages():
    a, b = list(iter_trajectories(FIXTURES / "swesmith_rows.jsonl"))
    assert (a.source.line, b.source.line) == (1, 2)
    assert (a.task_id, b.task_id) == ("repo__a-1", "repo__b-2")
    assert (a.outcome.resolved, b.outcome.resolved) == (True, False)
    assert a.turns[0].response.tool_calls[0].arguments_raw == '{"cmd": "pytest"}'
    assert b.first_user == "task two" and b.turns[0].response.reasoning == "think"
    assert a.trajectory_id == a.source.sha256[:16] + "-0" and b.trajectory_id.endswith("-1")


def test_harbor_trial_dirs_add_reward_resolved_and_prefer_native_logs():
    t1 = _one(FIXTURES / "harbor_job" / "hb-1__abc")
    assert t1.source.format == "harbor-trial/atif"
    assert (t1.task_id, t1.outcome.reward, t1.outcome.resolved) == ("hb-1", 1.0, True)  # reward.txt wins
    assert t1.turns[0].usage.cached_tokens == 10
    t2 = _one(FIXTURES / "harbor_job" / "hb-2__def")
    assert t2.source.format == "harbor-trial/openai-messages"  # native log beats trajectory.json
    assert (t2.outcome.reward, t2.outcome.resolved, t2.outcome.exit_status) == (0.0, None, "AgentTimeoutError")


def test_harbor_cleaned_jsonl_meta_line():
    t = _one(FIXTURES / "harbor_trial.jsonl")
    assert detect_format(FIXTURES / "harbor_trial.jsonl") == "harbor-jsonl"
    assert (t.task_id, t.model, t.outcome.patch, t.outcome.reward) == ("hb-3", "m5", "PATCH3", 1.0)
    assert [x.response.finish_reason for x in t.turns] == ["tool_calls", "stop"]
