"""Compaction inside pi `--mode json` event streams: `compaction_end` (pi >= 0.45)
or `auto_compaction_end` (older) with a `CompactionResult` is replayed as the session
converter replays a `compaction` entry: the summary, then the messages from the first
kept one, found by pi's `findCutPoint` rule (the stream names no entry ids).

The stream is written in the layout of pi-mono packages/coding-agent/docs/json.md and
agent-session.ts `_runAutoCompaction` (events `compaction_start {reason}`,
`compaction_end {reason, result: {summary, firstKeptEntryId, tokensBefore, details},
aborted, willRetry}`); the big tool result is generated here so the file stays small."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.convert import convert_paths, detect_format, iter_trajectories
from benchmaker.trajectories.converters.pi_events import PI_KEEP_RECENT_TOKENS, first_kept, pi_estimate_tokens
from benchmaker.trajectories.converters.pi_session import compaction_text
from benchmaker.trajectories.trajectory import MessageRef
from tests.replay.replay_turns import replay_turns

BIG = "x = 1\n" * 15_000  # 90,000 chars: 22,500 tokens by pi's estimate, over keepRecentTokens
SUMMARY = "The user asked to clean up big.py; it was read and edited."


def _usage(inp: int, out: int) -> dict:
    return {
        "input": inp,
        "output": out,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": inp + out,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def _assistant(content: list, stop: str, inp: int, t: int) -> dict:
    return {
        "role": "assistant",
        "content": content,
        "api": "openai-completions",
        "provider": "acme",
        "model": "acme-coder-1",
        "usage": _usage(inp, 10),
        "stopReason": stop,
        "timestamp": 1770000000000 + t,
    }


def _call(cid: str, name: str, args: dict) -> dict:
    return {"type": "toolCall", "id": cid, "name": name, "arguments": args}


def _result(cid: str, name: str, text: str, t: int) -> dict:
    return {
        "role": "toolResult",
        "toolCallId": cid,
        "toolName": name,
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": 1770000000000 + t,
    }


def _user(text: str, t: int) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1770000000000 + t}


def stream(end_type: str = "compaction_end", result: bool = True, retry: bool = False) -> list[dict]:
    """Two prompts of `pi --mode json`, a threshold compaction between them; with
    `retry`, the last call of the first prompt fails (overloaded) and pi retries it."""
    a0 = _assistant([_call("c1", "read", {"path": "big.py"})], "toolUse", 200, 1)
    a1 = _assistant(
        [_call("c2", "edit", {"path": "big.py", "oldText": "x = 1\nx = 1\n", "newText": "x = 1\n"})],
        "toolUse",
        22_800,
        3,
    )
    a2 = _assistant([{"type": "text", "text": "Cleaned up."}], "stop", 22_850, 5)
    a3 = _assistant([{"type": "text", "text": "Added a docstring."}], "stop", 400, 9)
    failed = dict(_assistant([], "error", 0, 5), errorMessage="529 overloaded_error: Overloaded")
    start = end_type.replace("_end", "_start")
    end: dict = {
        "type": end_type,
        "reason": "threshold",
        "aborted": False,
        "willRetry": False,
        "result": {
            "summary": SUMMARY,
            "firstKeptEntryId": "9f2c41aa",
            "tokensBefore": 22_860,
            "details": {"readFiles": ["big.py"], "modifiedFiles": ["big.py"]},
        }
        if result
        else None,
    }
    return [
        {
            "type": "session",
            "version": 3,
            "id": "0b6c2f7e-0000-4000-8000-00000000e013",
            "timestamp": "2026-02-02T10:00:00.000Z",
            "cwd": "/work/demo",
        },
        {"type": "agent_start"},
        {"type": "turn_start"},
        {"type": "message_start", "message": _user("task_id: ev-1\nClean up big.py", 0)},
        {"type": "message_end", "message": _user("task_id: ev-1\nClean up big.py", 0)},
        {"type": "message_end", "message": a0},
        {"type": "tool_execution_start", "toolCallId": "c1", "toolName": "read", "args": {"path": "big.py"}},
        {
            "type": "tool_execution_end",
            "toolCallId": "c1",
            "toolName": "read",
            "result": {"content": [{"type": "text", "text": BIG}]},
            "isError": False,
        },
        {"type": "message_end", "message": _result("c1", "read", BIG, 2)},
        {"type": "turn_end", "message": a0, "toolResults": [_result("c1", "read", BIG, 2)]},
        {"type": "turn_start"},
        {"type": "message_end", "message": a1},
        {"type": "message_end", "message": _result("c2", "edit", "Replaced 1 occurrence", 4)},
        {"type": "turn_end", "message": a1, "toolResults": [_result("c2", "edit", "Replaced 1 occurrence", 4)]},
        *(
            [
                {"type": "turn_start"},
                {"type": "message_end", "message": failed},
                {"type": "turn_end", "message": failed, "toolResults": []},
                {
                    "type": "auto_retry_start",
                    "attempt": 1,
                    "maxAttempts": 3,
                    "delayMs": 2000,
                    "errorMessage": "529 overloaded_error",
                },
            ]
            if retry
            else []
        ),
        {"type": "turn_start"},
        {"type": "message_end", "message": a2},
        {"type": "turn_end", "message": a2, "toolResults": []},
        *([{"type": "auto_retry_end", "success": True, "attempt": 1}] if retry else []),
        {"type": "agent_end", "messages": []},
        {"type": start, "reason": "threshold"},
        end,
        {"type": "agent_start"},
        {"type": "turn_start"},
        {"type": "message_end", "message": _user("Now add a docstring", 8)},
        {"type": "message_end", "message": a3},
        {"type": "turn_end", "message": a3, "toolResults": []},
        {"type": "agent_end", "messages": []},
    ]


def _has_big(messages: list[dict]) -> bool:
    return any(m.get("content") == BIG for m in messages)


def _write(tmp_path: Path, events: list[dict]) -> Path:
    path = tmp_path / "pi-json.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.mark.parametrize("end_type", ["compaction_end", "auto_compaction_end"])
def test_compaction_event_keeps_what_pi_keeps(tmp_path: Path, end_type: str) -> None:
    path = _write(tmp_path, stream(end_type))
    assert detect_format(path) == "pi-events"
    (t,) = iter_trajectories(path)
    assert [x.response.content for x in t.turns] == [None, None, "Cleaned up.", "Added a docstring."]
    edit = t.turns[3].context_edit
    assert edit is not None and edit.kind == "compaction" and edit.tokens_before == 22_860
    assert edit.summary == [compaction_text(SUMMARY)]
    # walking back: "Cleaned up." 3, the edit result 6, the edit call 9, the read result
    # 22,500 tokens: over 20,000 at the read result, a tool result, so the cut is the
    # next message that is not one: the edit call (turn 1)
    assert (edit.keep_from.turn, edit.keep_from.item) == (1, 0)
    assert t.skipped["compaction_cut_by_pi_rule"] == 1
    msgs = request_messages(t, 3)
    assert [(m["role"], m["content"]) for m in msgs] == [
        ("user", compaction_text(SUMMARY)),
        ("assistant", None),
        ("tool", "Replaced 1 occurrence"),
        ("assistant", "Cleaned up."),
        ("user", "Now add a docstring"),
    ]
    assert msgs[1]["tool_calls"][0]["function"]["name"] == "edit"
    # before the compaction every request carries the 90,000-char read result
    assert all(_has_big(request_messages(t, k)) for k in (1, 2))


def test_retried_call_is_left_out_of_later_requests(tmp_path: Path) -> None:
    src = _write(tmp_path, stream(retry=True))
    (t,) = iter_trajectories(src)
    assert [x.response.finish_reason for x in t.turns] == ["tool_calls", "tool_calls", "error", "stop", "stop"]
    assert t.skipped["retried_call_left_out"] == 1
    sent = [[(m["role"], m["content"]) for m in request_messages(t, k)] for k in range(5)]
    assert sent[3] == sent[2]  # the retry resends the failed call's request
    assert t.turns[3].context_edit.kind == "branch"
    # after the compaction the kept messages leave the failed call out too
    assert sent[4] == [
        ("user", compaction_text(SUMMARY)),
        ("assistant", None),
        ("tool", "Replaced 1 occurrence"),
        ("assistant", "Cleaned up."),
        ("user", "Now add a docstring"),
    ]
    out = tmp_path / "trajectories.jsonl"
    convert_paths([src], out)
    run = replay_turns(out, t)
    assert run.stats["misses"]["total"] == 0 and run.stats["served"] == 5
    assert run.headers[2].get("x-replay-recorded-error") == "error"


def test_compaction_without_result_changes_nothing(tmp_path: Path) -> None:
    (t,) = iter_trajectories(_write(tmp_path, stream(result=False)))
    assert all(x.context_edit is None for x in t.turns)
    assert t.skipped["compaction_without_result"] == 1
    assert _has_big(request_messages(t, 3))


def test_compacted_stream_replays_turn_by_turn_with_no_miss(tmp_path: Path) -> None:
    src = _write(tmp_path, stream())
    out = tmp_path / "trajectories.jsonl"
    convert_paths([src], out)
    (t,) = iter_trajectories(src)
    run = replay_turns(out, t)
    assert run.stats["misses"]["total"] == 0 and run.stats["served"] == 4
    sizes = run.sizes
    # the request shrinks at the compaction as pi's context did: no jump back up
    assert sizes[1] > 90_000 and sizes[2] > sizes[1] and sizes[3] < 2_000


def test_pi_size_estimate_and_cut_rule() -> None:
    # compaction.ts estimateTokens: ceil(chars / 4); tool call = name + compact JSON
    assert pi_estimate_tokens(_user("abcde", 0)) == 2
    assert pi_estimate_tokens(_assistant([_call("c", "ab", {"k": 1})], "toolUse", 0, 0)) == 3  # 2 + 7 chars
    assert pi_estimate_tokens({"role": "toolResult", "content": [{"type": "image"}]}) == 1200
    assert pi_estimate_tokens({"role": "bashExecution", "command": "ls", "output": "a.py\n"}) == 2
    refs = [MessageRef(turn=None, item=0), MessageRef(turn=0, item=0), MessageRef(turn=0, item=1)]
    small = [(refs[0], _user("hi", 0)), (refs[1], _assistant([], "stop", 0, 0)), (refs[2], _result("c", "r", "ok", 0))]
    assert first_kept(small, PI_KEEP_RECENT_TOKENS) == refs[0]  # under the budget: keep all
    assert first_kept([], PI_KEEP_RECENT_TOKENS) is None


def test_overflow_compaction_retries_without_the_failed_call(tmp_path: Path) -> None:
    # the last call of the first prompt overflows the context: pi compacts (willRetry)
    # and calls again without the failed message; the retry is the turn after
    events = stream()
    at = next(i for i, e in enumerate(events) if e["type"] == "compaction_start")
    overflow = dict(_assistant([], "error", 0, 6), errorMessage="prompt is too long: 210000 tokens > 200000 maximum")
    events[at:at] = [
        {"type": "turn_start"},
        {"type": "message_end", "message": overflow},
        {"type": "turn_end", "message": overflow, "toolResults": []},
    ]
    end = next(e for e in events if e["type"] == "compaction_end")
    end.update(reason="overflow", willRetry=True)
    (t,) = iter_trajectories(_write(tmp_path, events))
    assert [x.response.finish_reason for x in t.turns] == ["tool_calls", "tool_calls", "stop", "error", "stop"]
    assert t.skipped["retried_call_left_out"] == 1
    sent = [(m["role"], m["content"]) for m in request_messages(t, 4)]
    assert sent == [
        ("user", compaction_text(SUMMARY)),
        ("assistant", None),
        ("tool", "Replaced 1 occurrence"),
        ("assistant", "Cleaned up."),
        ("user", "Now add a docstring"),
    ]
