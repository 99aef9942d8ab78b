"""Codex CLI rollouts (benchmaker.trajectories.converters.codex_rollout) and
mini-swe-agent 2.x Responses-API runs: converted by content, one turn per model call,
replayed with zero misses through a real replay server on 127.0.0.1, over chat
completions (the harness) and over /v1/responses.

The real rollout is read from $BENCHMAKER_SHARED/data/real-agents (default
../shared beside the repository); the test skips when it is absent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from benchmaker.agent.harness import run_episode
from benchmaker.agent.verifier import task_id_of
from benchmaker.apis.openai_responses import input_items
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.convert import detect_format, iter_trajectories
from benchmaker.trajectories.trajectory import Trajectory
from tests.replay.test_server_fixtures import running_server, write_store

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("BENCHMAKER_SHARED", ROOT / ".." / "shared"))
ROLLOUT = SHARED / "data" / "real-agents" / "codex-0.125-rollout-019e1625.jsonl"
CASES = ROOT / "tests" / "data" / "cases" / "logs"


def _line(kind: str, payload: dict, ts: str = "2026-05-11T08:27:17.000Z") -> str:
    return json.dumps({"timestamp": ts, "type": kind, "payload": payload})


def _usage(i: int, o: int, cached: int = 0, reasoning: int = 0) -> dict:
    last = {
        "input_tokens": i,
        "cached_input_tokens": cached,
        "output_tokens": o,
        "reasoning_output_tokens": reasoning,
        "total_tokens": i + o,
    }
    return {"type": "token_count", "info": {"total_token_usage": last, "last_token_usage": last}}


def small_rollout() -> str:
    """A rollout written by hand in the 0.125 layout: developer note, AGENTS.md and task
    prompts, a reasoning + function call turn, a parallel pair of calls, a custom
    apply_patch call, a rate-limit token_count (info null), a follow-up prompt, the
    summarization call and its compaction, a final answer."""

    def msg(role: str, text: str) -> dict:
        return {
            "type": "message",
            "role": role,
            "content": [{"type": "input_text" if role != "assistant" else "output_text", "text": text}],
        }

    lines = [
        _line(
            "session_meta",
            {
                "id": "sess-1",
                "cli_version": "0.125.0",
                "originator": "codex_exec",
                "base_instructions": {"text": "You are Codex."},
            },
        ),
        _line("response_item", msg("developer", "<permissions instructions>")),
        _line("response_item", msg("user", "# AGENTS.md instructions")),
        _line("turn_context", {"model": "gpt-5.5", "cwd": "/w"}),
        _line("response_item", msg("user", "fix calc.py")),
        _line("event_msg", {"type": "user_message", "message": "fix calc.py"}),
        _line(
            "response_item",
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "look"}], "encrypted_content": "gAAA"},
        ),
        _line(
            "response_item",
            {"type": "function_call", "name": "exec_command", "call_id": "c1", "arguments": '{"cmd": "cat calc.py"}'},
        ),
        _line("event_msg", _usage(100, 20, 0, 8)),
        _line(
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": "Process exited with code 0\nOutput:\nreturn a-b\n",
            },
        ),
        _line("event_msg", {"type": "token_count", "info": None, "rate_limits": {}}),
        _line(
            "response_item",
            {"type": "function_call", "name": "exec_command", "call_id": "c2", "arguments": '{"cmd":"ls"}'},
        ),
        _line(
            "response_item",
            {"type": "function_call", "name": "exec_command", "call_id": "c3", "arguments": '{"cmd":"pwd"}'},
        ),
        _line("event_msg", _usage(130, 30, 100)),
        _line("response_item", {"type": "function_call_output", "call_id": "c2", "output": "calc.py"}),
        _line("response_item", {"type": "function_call_output", "call_id": "c3", "output": "/w"}),
        _line(
            "response_item",
            {
                "type": "custom_tool_call",
                "name": "apply_patch",
                "call_id": "c4",
                "input": "*** Begin Patch\n*** End Patch\n",
            },
        ),
        _line("event_msg", _usage(160, 40, 128)),
        _line("response_item", {"type": "custom_tool_call_output", "call_id": "c4", "output": "Success."}),
        _line("response_item", msg("user", "now run the tests")),
        _line("response_item", msg("assistant", "Summary: calc.py fixed, tests next.")),  # the summarization call
        _line("event_msg", _usage(170, 12)),
        _line("compacted", {"message": "Summary: calc.py fixed, tests next."}),
        _line("response_item", msg("assistant", "Done.")),
        _line("event_msg", _usage(60, 5, 0)),
    ]
    return "\n".join(lines) + "\n"


def test_small_rollout_gives_one_turn_per_token_count(tmp_path: Path):
    src = tmp_path / "rollout-2026-05-11T08-27-17-sess-1.jsonl"
    src.write_text(small_rollout())
    assert detect_format(src) == "codex-rollout"
    (t,) = list(iter_trajectories(src))
    assert (t.system, t.first_user, t.user_before_turns, t.model, t.task_id) == (
        "You are Codex.",
        "# AGENTS.md instructions",
        ["fix calc.py"],
        "gpt-5.5",
        None,  # the session id names no task
    )
    assert len(t.turns) == 5
    assert t.skipped == {"developer_message": 1}
    assert t.turns[0].response.reasoning == "look"
    assert [[c.id for c in x.response.tool_calls] for x in t.turns] == [["c1"], ["c2", "c3"], ["c4"], [], []]
    custom = t.turns[2].response.tool_calls[0]
    assert (custom.type, custom.arguments_raw, custom.arguments) == ("custom", "*** Begin Patch\n*** End Patch\n", None)
    assert [(o.tool_call_id, o.name) for o in t.turns[1].observations] == [
        ("c2", "exec_command"),
        ("c3", "exec_command"),
    ]
    u = t.turns[1].usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.reasoning_tokens, u.total_tokens) == (
        130,
        30,
        100,
        0,
        160,
    )
    assert t.turns[0].usage.reasoning_tokens == 8
    assert t.turns[2].user_after == ["now run the tests"]
    assert t.turns[4].response.content == "Done." and t.turns[4].context_edit.kind == "compaction"
    # after the compaction Codex sends its opening messages, the later prompts, the summary
    assert request_messages(t, 4) == [
        {"role": "system", "content": "You are Codex."},
        {"role": "user", "content": "# AGENTS.md instructions"},
        {"role": "user", "content": "fix calc.py"},
        {"role": "user", "content": "now run the tests"},
        {"role": "user", "content": "Summary: calc.py fixed, tests next."},
    ]
    assert all(x.timing is None for x in t.turns)  # the log has no per-call timings


def _replay_responses(store: Path, traj: Trajectory) -> dict:
    """Send every turn of `traj` to /v1/responses as input items (the chat request of
    the turn, with the responses received so far); returns /stats."""
    with running_server(store, divergence="content") as url, httpx.Client() as client:
        received: list[dict] = []
        for k in range(len(traj.turns)):
            messages = request_messages(traj, k, responses_so_far=received)
            system = [m["content"] for m in messages if m["role"] == "system"]
            body = {"model": "m", "input": input_items([m for m in messages if m["role"] != "system"])}
            if system:
                body["instructions"] = system[0]
            r = client.post(url + "/v1/responses", json=body)
            assert r.status_code == 200, (k, r.text)
            assert r.headers["x-replay-turn"] == str(k)
            # what the chat rendering of the turn would have been, for the next request
            resp = traj.turns[k].response
            msg: dict = {"role": "assistant", "content": resp.content}
            if resp.reasoning is not None:
                msg["reasoning_content"] = resp.reasoning
            if resp.tool_calls:
                msg["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_raw}}
                    for c in resp.tool_calls
                ]
            received.append(msg)
        return client.get(url + "/stats").json()


async def test_small_rollout_replays_with_zero_misses(tmp_path: Path):
    src = tmp_path / "r.jsonl"
    src.write_text(small_rollout())
    (t,) = list(iter_trajectories(src))
    store = write_store(tmp_path / "t.jsonl", [t])
    with start_replay_server(store, divergence="content") as server:
        ep = (await run_episode(t, server.url, mode="recorded")).episode
        assert (ep.outcome, ep.n_turns, ep.misses_unknown_key, ep.misses_beyond_turns, ep.misses_diverged) == (
            "ok",
            5,
            0,
            0,
            0,
        )
    stats = _replay_responses(store, t)
    assert stats["misses"]["total"] == 0 and stats["served"] == 5


@pytest.mark.skipif(not ROLLOUT.exists(), reason=f"real Codex rollout absent ({ROLLOUT})")
async def test_real_codex_rollout_converts_66_calls_and_replays_with_zero_misses(tmp_path: Path):
    assert detect_format(ROLLOUT) == "codex-rollout"
    (t,) = list(iter_trajectories(ROLLOUT))
    # SOURCES.md: 66 model calls (one token_count per response)
    assert len(t.turns) == 66
    assert t.skipped == {"developer_message": 1, "web_search_call": 3}
    assert t.model == "gpt-5.5" and t.system.startswith("You are Codex, a coding agent")
    assert t.user_before_turns == ["show tools"]
    calls = [c for x in t.turns for c in x.response.tool_calls]
    assert (len(calls), sum(c.type == "custom" for c in calls)) == (102, 3)  # 99 function + 3 apply_patch
    assert sum(len(x.observations) for x in t.turns) == 102
    u = t.turns[0].usage  # the first token_count's last_token_usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.reasoning_tokens, u.total_tokens) == (
        18703,
        167,
        0,
        62,
        18870,
    )
    store = write_store(tmp_path / "t.jsonl", [t])
    with start_replay_server(store, divergence="content") as server:
        ep = (await run_episode(t, server.url, mode="recorded")).episode
        assert (ep.outcome, ep.n_turns, ep.misses_unknown_key, ep.misses_beyond_turns, ep.misses_diverged) == (
            "ok",
            66,
            0,
            0,
            0,
        )
    stats = _replay_responses(store, t)
    assert stats["misses"]["total"] == 0 and stats["served"] == 66


async def test_mini_swe_agent_v2_responses_api_case(tmp_path: Path):
    src = CASES / "mini-swe-agent-v2-responses-api.traj.json"
    assert detect_format(src) == "mini-swe-agent"
    (t,) = list(iter_trajectories(src))
    # cases README: 2 model turns with their bash calls, call ids and usage; the
    # observation tied to call_01; exit status and patch kept
    assert [[(c.id, c.name, c.arguments) for c in x.response.tool_calls] for x in t.turns] == [
        [("call_01", "bash", {"command": "cat calc.py"})],
        [
            (
                "call_02",
                "bash",
                {
                    "command": "sed -i 's/a - b/a + b/' calc.py && echo "
                    "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"
                },
            )
        ],
    ]
    assert [
        (u.prompt_tokens, u.completion_tokens, u.reasoning_tokens, u.cached_tokens, u.total_tokens)
        for u in (x.usage for x in t.turns)
    ] == [(120, 30, 10, 0, 150), (180, 40, 25, 120, 220)]
    assert [o.tool_call_id for o in t.turns[0].observations] == ["call_01"]
    assert t.turns[0].response.content == "Let me look at calc.py first."
    assert (t.outcome.exit_status, t.task_id, t.model) == ("Submitted", "demo__calc-1", "gpt-5-mini-2025-08-07")
    assert t.outcome.patch.startswith("diff --git a/calc.py b/calc.py\n")
    assert t.skipped == {}
    store = write_store(tmp_path / "t.jsonl", [t])
    with start_replay_server(store, divergence="content") as server:
        ep = (await run_episode(t, server.url, mode="recorded")).episode
        assert (ep.outcome, ep.n_turns, ep.misses_unknown_key, ep.misses_beyond_turns, ep.misses_diverged) == (
            "ok",
            2,
            0,
            0,
            0,
        )
    assert _replay_responses(store, t)["misses"]["total"] == 0


WRITTEN = ROOT / "tests" / "data" / "written" / "codex-0.171-exec-rollout.jsonl"


async def test_codex_0171_rollout_usage_records_after_outputs(tmp_path: Path):
    """0.171 writes `token_usage_record` right after a call's outputs and `token_count`
    after the call output: one turn per call, usage counted once."""
    assert detect_format(WRITTEN) == "codex-rollout"
    (t,) = list(iter_trajectories(WRITTEN))
    assert (t.match_key, t.model, t.task_id) == ("task:codex-demo", "gpt-5.5", None)
    assert task_id_of(t) == "codex-demo"  # the task a replay's --task-dirs gives it
    assert t.user_before_turns == ["task_id: codex-demo\nWrite hello into out.txt"]
    assert t.skipped == {"developer_message": 1}
    assert [(c.id, c.name, c.arguments) for c in t.turns[0].response.tool_calls] == [
        ("call_1", "exec_command", {"cmd": "echo hello > out.txt"})
    ]
    assert (t.turns[0].response.reasoning, t.turns[1].response.content) == (
        "I will write the file.",
        "Done: out.txt holds hello.",
    )
    assert [o.tool_call_id for o in t.turns[0].observations] == ["call_1"]
    assert [
        (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.reasoning_tokens, u.total_tokens)
        for u in (x.usage for x in t.turns)
    ] == [(1000, 20, 0, 5, 1020), (1100, 8, 1000, 0, 1108)]
    store = write_store(tmp_path / "t.jsonl", [t])
    assert _replay_responses(store, t)["misses"]["total"] == 0
