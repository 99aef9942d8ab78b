"""Claude Code session files (benchmaker.trajectories.converters.claude_code): detection
by content, one turn per requestId, subagent threads as their own trajectories,
compaction as a context edit, usage with cache tokens, timings; the real session files
of ../shared/data/real-agents (skipped when absent) and a small written one convert and
replay with 0 misses through the replay server and our harness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.agent.harness import run_episode
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories import convert
from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.converters import detect_bytes
from benchmaker.trajectories.trajectory import Trajectory

ROOT = Path(__file__).resolve().parents[2]


def _shared(name: str) -> Path:
    """../shared/data/<name> of the repository or of a folder above it (a worktree)."""
    for base in (ROOT, *ROOT.parents):
        candidate = base / "shared" / "data" / name
        if candidate.is_dir():
            return candidate
    return ROOT / ".." / "shared" / "data" / name


REAL_AGENTS = _shared("real-agents")
REAL = _shared("real")

# file: model calls per thread as the log shows them (SOURCES.md gives the main thread's:
# distinct requestIds; the subagent's are the distinct requestIds of its agent_progress lines)
SESSIONS = {
    "claude-code-2.1.38-tool-heavy.jsonl": [4],
    "claude-code-2.1.38-subagent-task.jsonl": [12, 5],
}


def _real(name: str) -> list[Trajectory]:
    path = REAL_AGENTS / name
    if not path.exists():
        pytest.skip(f"real session {path} not present")
    return list(convert.iter_trajectories(path))


def _write(trajs: list[Trajectory], path: Path) -> Path:
    path.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
    return path


async def _replays_with_zero_misses(trajs: list[Trajectory], tmp_path: Path) -> None:
    with start_replay_server(_write(trajs, tmp_path / "t.jsonl"), divergence="content") as server:
        for traj in trajs:
            for stream in (True, False):
                res = await run_episode(traj, server.url, mode="recorded", stream=stream)
                ep = res.episode
                assert (ep.outcome, ep.n_turns) == ("ok", len(traj.turns)), traj.trajectory_id
                assert (ep.misses_unknown_key, ep.misses_beyond_turns, ep.misses_diverged) == (0, 0, 0)
                assert all(t.byte_equal for t in res.turns)
        stats = server.stats()
    assert stats["misses"]["total"] == 0 and stats["divergences"]["total"] == 0


@pytest.mark.parametrize("name", sorted(SESSIONS))
async def test_real_session_converts_one_turn_per_call_and_replays(name, tmp_path):
    trajs = _real(name)
    assert [len(t.turns) for t in trajs] == SESSIONS[name]
    assert all(t.source.format == "claude-code" for t in trajs)
    assert all(t.turns[i].timing.duration_ms > 0 for t in trajs for i in range(len(t.turns)))
    await _replays_with_zero_misses(trajs, tmp_path)


def test_real_tool_heavy_calls_keep_blocks_usage_and_model():
    (main,) = _real("claude-code-2.1.38-tool-heavy.jsonl")
    first = main.turns[0]
    # line 5: input 3 + cache creation 7883 + cache read 17915; output 27
    assert (
        first.usage.prompt_tokens,
        first.usage.cached_tokens,
        first.usage.cache_creation_tokens,
        first.usage.completion_tokens,
    ) == (25801, 17915, 7883, 27)
    assert first.model == "claude-opus-4-6"
    assert [(c.id, c.name, c.arguments) for c in first.response.tool_calls] == [
        (
            "toolu_018GZVh9ymkrdx1TnR8reg5Y",
            "Bash",
            {
                "command": "mix phx.server",
                "description": "Start Phoenix server in background",
                "run_in_background": True,
            },
        )
    ]
    assert first.observations[0].tool_call_id == "toolu_018GZVh9ymkrdx1TnR8reg5Y"
    # 2026-02-10T22:57:54.684Z (the prompt) to 22:57:57.941Z (the call's last line)
    assert (first.timing.started_at, first.timing.duration_ms) == ("2026-02-10T22:57:54.684Z", 3257.0)
    # call 3: a text block "\n\n", a thinking block and two tool_use blocks, one requestId
    third = main.turns[2]
    assert third.response.content == "\n\n"
    assert third.response.reasoning.startswith("The user wants me to research why scrolling in xterm.js")
    assert [c.name for c in third.response.tool_calls] == ["WebSearch", "Glob"]
    # call 4's second block was written after the first block's tool result: still one call
    assert [c.name for c in main.turns[3].response.tool_calls] == ["Read", "WebFetch"]
    assert len(main.turns[3].observations) == 2


def test_real_subagent_thread_is_its_own_trajectory():
    main, sub = _real("claude-code-2.1.38-subagent-task.jsonl")
    assert sub.model == "claude-haiku-4-5-20251001" and main.model == "claude-opus-4-6"
    assert sub.first_user.startswith("Draft bead content for setting up Credo, Dialyxir, and mix_audit")
    task_call = main.turns[5].response.tool_calls[0]
    assert task_call.name == "Task"
    assert main.turns[5].observations[0].tool_call_id == task_call.id
    assert sub.match_key != main.match_key


def test_detection_never_confuses_formats():
    files = [
        p
        for folder in (REAL_AGENTS, REAL)
        if folder.is_dir()
        for p in sorted(folder.iterdir())
        if p.suffix in (".jsonl", ".json", ".traj")
    ]
    if not files:
        pytest.skip("no real logs present")
    for path in files:
        found = detect_bytes(path.read_bytes())
        assert (found == "claude-code") == path.name.startswith("claude-code-"), (path.name, found)


def _line(kind: str, uuid: str, parent: str | None, ts: str, **fields) -> dict:
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": "s1",
        "timestamp": ts,
        **fields,
    }


def _assistant(uuid, parent, ts, request, blocks, usage, model="claude-sonnet-4-5"):
    return _line(
        "assistant",
        uuid,
        parent,
        ts,
        requestId=request,
        message={
            "model": model,
            "id": "msg_" + request,
            "type": "message",
            "role": "assistant",
            "content": blocks,
            "stop_reason": None,
            "usage": usage,
        },
    )


def _compaction_session() -> list[dict]:
    u1 = {"input_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 90, "output_tokens": 20}
    return [
        {"type": "summary", "summary": "Fix calc", "leafUuid": "x"},
        _line(
            "user",
            "u1",
            None,
            "2026-01-01T00:00:00.000Z",
            message={"role": "user", "content": "task_id: calc-7\nFix calc.py"},
        ),
        _assistant(
            "a1",
            "u1",
            "2026-01-01T00:00:01.500Z",
            "r1",
            [{"type": "thinking", "thinking": "Read it.", "signature": "s"}],
            u1,
        ),
        _assistant(
            "a2",
            "a1",
            "2026-01-01T00:00:02.000Z",
            "r1",
            [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "calc.py"}}],
            u1,
        ),
        _line(
            "user",
            "u2",
            "a2",
            "2026-01-01T00:00:02.100Z",
            message={
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "def add(a, b): return a - b"}
                ],
            },
        ),
        _assistant("a3", "u2", "2026-01-01T00:00:03.000Z", "r2", [{"type": "text", "text": "It subtracts."}], u1),
        _line(
            "system",
            "c1",
            None,
            "2026-01-01T00:00:04.000Z",
            subtype="compact_boundary",
            compactMetadata={"trigger": "manual", "preTokens": 1234},
        ),
        _line(
            "user",
            "u3",
            "c1",
            "2026-01-01T00:00:04.100Z",
            isCompactSummary=True,
            message={"role": "user", "content": "This session is being continued: calc.py subtracts."},
        ),
        _line("user", "u4", "u3", "2026-01-01T00:00:05.000Z", message={"role": "user", "content": "Now fix it."}),
        _assistant(
            "a4",
            "u4",
            "2026-01-01T00:00:06.000Z",
            "r3",
            [{"type": "tool_use", "id": "toolu_2", "name": "Edit", "input": {"old": "a - b", "new": "a + b"}}],
            {"input_tokens": 5, "cache_read_input_tokens": 300, "output_tokens": 9},
        ),
        _line(
            "user",
            "u5",
            "a4",
            "2026-01-01T00:00:06.200Z",
            message={
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "ok"}],
                        "is_error": False,
                    }
                ],
            },
        ),
        _assistant(
            "a5",
            "u5",
            "2026-01-01T00:00:07.000Z",
            "r4",
            [{"type": "text", "text": "Fixed."}],
            {"input_tokens": 5, "cache_read_input_tokens": 320, "output_tokens": 3},
        ),
        _assistant(
            "a6",
            "a5",
            "2026-01-01T00:00:07.100Z",
            "r5",
            [{"type": "text", "text": "API Error"}],
            {"input_tokens": 0, "output_tokens": 0},
            model="<synthetic>",
        ),
    ]


async def test_compaction_is_a_context_edit_and_replays(tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _compaction_session()))
    assert detect_bytes(path.read_bytes()) == "claude-code"
    (traj,) = convert.iter_trajectories(path)
    assert traj.task_id is None and traj.match_key == "task:calc-7"
    assert [t.response.finish_reason for t in traj.turns] == ["tool_calls", "stop", "tool_calls", "stop"]
    assert traj.skipped["synthetic_message"] == 1 and traj.skipped["record:summary"] == 1
    edit = traj.turns[2].context_edit
    assert (edit.kind, edit.summary, edit.tokens_before) == (
        "compaction",
        ["This session is being continued: calc.py subtracts."],
        1234,
    )
    # after the compaction the request is the summary, then the prompt that followed it
    assert request_messages(traj, 2) == [
        {"role": "user", "content": "This session is being continued: calc.py subtracts."},
        {"role": "user", "content": "Now fix it."},
    ]
    assert request_messages(traj, 3)[:2] == request_messages(traj, 2)
    assert traj.turns[0].response.reasoning == "Read it."
    assert (traj.turns[0].timing.started_at, traj.turns[0].timing.duration_ms) == ("2026-01-01T00:00:00.000Z", 2000.0)
    assert (traj.turns[2].usage.prompt_tokens, traj.turns[2].usage.cached_tokens) == (305, 300)
    await _replays_with_zero_misses([traj], tmp_path)


def _v2_session() -> list[dict]:
    """A session in the layout Claude Code 2.1.332 writes (written from one such file of a
    scripted run): assistant lines carry `requestRef` (the id of the call's `api-request`
    record, which logs when the request went out) instead of `requestId`; new record
    types without a message (attachment, api-request, api-request-blob, cost-state, ...)."""
    usage = {
        "input_tokens": 1000,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4000,
        "output_tokens": 30,
        "output_tokens_details": {"thinking_tokens": 0},
    }

    def line(kind, uuid, parent, ts, **fields):
        return {
            "type": kind,
            "uuid": uuid,
            "parentUuid": parent,
            "isSidechain": False,
            "sessionId": "s2",
            "timestamp": ts,
            "version": "2.1.332",
            **fields,
        }

    def block(uuid, parent, ts, ref, index, content, stop, use):
        return line(
            "assistant",
            uuid,
            parent,
            ts,
            requestRef=ref,
            apiBlockIndex=index,
            message={
                "model": "claude-opus-5-5",
                "id": "msg_" + ref,
                "type": "message",
                "role": "assistant",
                "content": [content],
                "stop_reason": stop,
                "usage": use,
            },
        )

    return [
        {"type": "queue-operation", "operation": "enqueue", "sessionId": "s2", "timestamp": "2026-12-03T17:48:19.000Z"},
        line(
            "user",
            "u1",
            None,
            "2026-12-03T17:48:19.100Z",
            message={"role": "user", "content": "task_id: demo-2\nWrite hello to out.txt"},
        ),
        line("attachment", "t1", "u1", "2026-12-03T17:48:19.200Z", attachment={"type": "todo"}),
        {
            "type": "api-request",
            "sessionId": "s2",
            "id": "req-a",
            "timestamp": "2026-12-03T17:48:20.750Z",
            "params": {"model": "claude-opus-5-5"},
            "keep": 0,
            "tail": ["h1", "h2"],
        },
        {
            "type": "api-request-blob",
            "sessionId": "s2",
            "hash": "h1",
            "message": {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>\nAttribution.\n</system-reminder>\n"},
                    {"type": "text", "text": "task_id: demo-2\nWrite hello to out.txt"},
                ],
            },
        },
        {
            "type": "api-request-blob",
            "sessionId": "s2",
            "hash": "h2",
            "message": {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
        },
        block(
            "a1",
            "t1",
            "2026-12-03T17:48:20.824Z",
            "req-a",
            0,
            {"type": "thinking", "thinking": "Use Bash.", "signature": "sig"},
            "tool_use",
            usage,
        ),
        block(
            "a2",
            "a1",
            "2026-12-03T17:48:20.871Z",
            "req-a",
            1,
            {"type": "text", "text": "I'll write the file."},
            "tool_use",
            usage,
        ),
        block(
            "a3",
            "a2",
            "2026-12-03T17:48:20.919Z",
            "req-a",
            2,
            {
                "type": "tool_use",
                "id": "toolu_01ABC",
                "name": "Bash",
                "input": {"command": "echo hello > out.txt", "description": "Write hello"},
            },
            "tool_use",
            usage,
        ),
        line(
            "user",
            "u2",
            "a3",
            "2026-12-03T17:48:22.800Z",
            message={
                "role": "user",
                "content": [
                    {
                        "tool_use_id": "toolu_01ABC",
                        "type": "tool_result",
                        "content": "(Bash completed with no output)",
                        "is_error": False,
                    }
                ],
            },
        ),
        {
            "type": "api-request",
            "sessionId": "s2",
            "id": "req-b",
            "timestamp": "2026-12-03T17:48:22.892Z",
            "base": "req-a",
            "keep": 2,
            "tail": ["h3", "h4"],
        },
        block(
            "a4",
            "u2",
            "2026-12-03T17:48:22.931Z",
            "req-b",
            0,
            {"type": "text", "text": "Done."},
            "end_turn",
            {"input_tokens": 100, "cache_read_input_tokens": 5000, "output_tokens": 8},
        ),
        {"type": "cost-state", "sessionId": "s2", "totalCostUSD": 0.0},
    ]


async def test_claude_code_2_1_332_layout_converts_per_request_ref_and_replays(tmp_path):
    path = tmp_path / "v2.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _v2_session()))
    assert detect_bytes(path.read_bytes()) == "claude-code"
    (traj,) = convert.iter_trajectories(path)
    assert traj.match_key == "task:demo-2" and traj.model == "claude-opus-5-5"
    # the opening message as the first request sent it (its blob), reminder included
    assert traj.first_user == (
        "<system-reminder>\nAttribution.\n</system-reminder>\n\ntask_id: demo-2\nWrite hello to out.txt"
    )
    assert traj.skipped["opening_message_from_request_log"] == 1
    first, second = traj.turns
    assert (first.response.reasoning, first.response.content, first.response.finish_reason) == (
        "Use Bash.",
        "I'll write the file.",
        "tool_calls",
    )
    assert [c.id for c in first.response.tool_calls] == ["toolu_01ABC"]
    assert (first.usage.prompt_tokens, first.usage.cached_tokens, first.usage.completion_tokens) == (5000, 4000, 30)
    # the api-request record's stamp (17:48:20.750) to the call's last block (20.919): 169 ms
    assert (first.timing.started_at, first.timing.duration_ms) == ("2026-12-03T17:48:20.750Z", 169.0)
    assert (second.response.content, second.timing.duration_ms) == ("Done.", 39.0)
    assert traj.skipped["record:attachment"] == 1 and traj.skipped["record:api-request"] == 2
    assert traj.skipped["record:api-request-blob"] == 2
    await _replays_with_zero_misses([traj], tmp_path)
