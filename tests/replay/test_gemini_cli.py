"""Gemini CLI chat recordings: converted (.json and .jsonl), detected by content (never as
an OpenAI message list), and replayed with 0 misses; per-call LLM logs are refused by
name, not turned into bogus trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import orjson
import pytest

from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.convert import convert_paths, detect_format, iter_trajectories
from benchmaker.trajectories.converters import detect_bytes
from benchmaker.trajectories.errors import ConvertError, UnknownFormatError
from tests.replay.replay_turns import replay_turns
from tests.replay.test_server_fixtures import running_server

# ../shared/data/real-agents beside the repository (a worktree's checkout: /work/shared)
_REAL_DIRS = [
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real-agents",
    Path("/work/shared/data/real-agents"),
]
REAL_CHAT = (
    next((d for d in _REAL_DIRS if d.is_dir()), _REAL_DIRS[0])
    / "gemini-cli-session-2026-01-16T11-01-file-ops-37b7abef.json"
)

META = {
    "sessionId": "s-1",
    "projectHash": "ab12",
    "startTime": "2026-01-16T11:00:00.000Z",
    "lastUpdated": "2026-01-16T11:00:20.000Z",
}
USER_1 = {"id": "u1", "timestamp": "2026-01-16T11:00:00.000Z", "type": "user", "content": "list the files"}
CALL_1 = {
    "id": "g1",
    "timestamp": "2026-01-16T11:00:04.000Z",
    "type": "gemini",
    "content": "",
    "toolCalls": [
        {
            "id": "run_shell_command-1768561202500-ab12",
            "name": "run_shell_command",
            "args": {"command": "ls"},
            "status": "success",
            "timestamp": "2026-01-16T11:00:03.000Z",
            "result": [
                {
                    "functionResponse": {
                        "id": "run_shell_command-1768561202500-ab12",
                        "name": "run_shell_command",
                        "response": {"output": "a.txt\nb.txt"},
                    }
                }
            ],
        }
    ],
    "thoughts": [{"subject": "Listing", "description": "I will run ls.", "timestamp": "2026-01-16T11:00:01.000Z"}],
    "tokens": {"input": 900, "output": 10, "cached": 0, "thoughts": 30, "tool": 0, "total": 940},
    "model": "gemini-2.5-pro",
}
INFO = {"id": "i1", "timestamp": "2026-01-16T11:00:05.000Z", "type": "info", "content": "Switched model"}
ANSWER_1 = {
    "id": "g2",
    "timestamp": "2026-01-16T11:00:06.500Z",
    "type": "gemini",
    "content": "Two files.",
    "thoughts": [],
    "tokens": {"input": 960, "output": 3, "cached": 512, "thoughts": 0, "tool": 0, "total": 963},
    "model": "gemini-2.5-pro",
}
USER_2 = {"id": "u2", "timestamp": "2026-01-16T11:00:10.000Z", "type": "user", "content": [{"text": "delete b.txt"}]}
CALL_2 = {
    "id": "g3",
    "timestamp": "2026-01-16T11:00:12.000Z",
    "type": "gemini",
    "content": "",
    "toolCalls": [
        {
            "id": "run_shell_command-1768561211000-cd",
            "name": "run_shell_command",
            "args": {"command": "rm b.txt"},
            "status": "error",
            "timestamp": "2026-01-16T11:00:11.500Z",
            "result": [
                {
                    "functionResponse": {
                        "id": "run_shell_command-1768561211000-cd",
                        "name": "run_shell_command",
                        "response": {"error": "permission denied"},
                    }
                }
            ],
        }
    ],
    "thoughts": [],
    "model": "gemini-2.5-pro",
}
ANSWER_2 = {
    "id": "g4",
    "timestamp": "2026-01-16T11:00:14.000Z",
    "type": "gemini",
    "content": "I could not.",
    "thoughts": [],
    "model": "gemini-2.5-pro",
}
MESSAGES = [USER_1, CALL_1, INFO, ANSWER_1, USER_2, CALL_2, ANSWER_2]


def _write_json(path: Path, messages: list[dict]) -> Path:
    path.write_text(json.dumps({**META, "messages": messages}, indent=2), encoding="utf-8")
    return path


def test_json_recording_converts_one_turn_per_model_message(tmp_path):
    path = _write_json(tmp_path / "session-2026-01-16T11-00-s1.json", MESSAGES)
    assert detect_format(path) == "gemini-cli"
    (traj,) = iter_trajectories(path)
    assert traj.first_user == "list the files" and traj.system is None and traj.model == "gemini-2.5-pro"
    assert len(traj.turns) == 4
    t0, t1, t2, t3 = traj.turns
    assert t0.response.reasoning == "**Listing**\n\nI will run ls."
    assert t0.response.content is None and t0.response.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments_raw) for c in t0.response.tool_calls] == [
        ("run_shell_command-1768561202500-ab12", "run_shell_command", '{"command":"ls"}')
    ]
    assert [(o.tool_call_id, o.content, o.is_error) for o in t0.observations] == [
        ("run_shell_command-1768561202500-ab12", "a.txt\nb.txt", False)
    ]
    # tokens: output 10 + thoughts 30 = 40 completion tokens, 30 of them reasoning
    assert t0.usage.model_dump() == {
        "prompt_tokens": 900,
        "completion_tokens": 40,
        "cached_tokens": 0,
        "reasoning_tokens": 30,
        "total_tokens": 940,
        "cache_creation_tokens": None,
    }
    # sent at the user message (11:00:00.000), the call stamped 1768561202500 ms = 11:00:02.500
    assert t0.timing.started_at == "2026-01-16T11:00:00.000Z" and t0.timing.duration_ms == 2500.0
    assert t1.response.content == "Two files." and t1.response.finish_reason == "stop"
    # sent after the info line (11:00:05.000), answered 11:00:06.500
    assert t1.timing.duration_ms == 1500.0
    assert t1.user_after == ["delete b.txt"]
    assert [(o.content, o.is_error) for o in t2.observations] == [("permission denied", True)]
    assert t3.usage is None
    assert traj.skipped == {"arguments_raw_synthesized": 2, "info_message": 1}


def test_jsonl_recording_applies_updates_and_rewinds(tmp_path):
    updated = {**ANSWER_2, "content": "I could not delete it."}  # Gemini CLI rewrites a message by id
    lines = [
        META,
        USER_1,
        CALL_1,
        ANSWER_1,
        {"$set": {"summary": "files"}},
        USER_2,
        {**USER_2, "id": "u3", "content": "oops"},
        {"$rewindTo": "u3"},
        CALL_2,
        ANSWER_2,
        updated,
    ]
    path = tmp_path / "session-s1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    assert detect_format(path) == "gemini-cli"
    (traj,) = iter_trajectories(path)
    assert [t.response.content for t in traj.turns] == [None, "Two files.", None, "I could not delete it."]
    assert traj.turns[1].user_after == ["delete b.txt"]


def test_gemini_chat_is_never_an_openai_message_list(tmp_path):
    data = json.dumps({**META, "messages": MESSAGES}).encode()
    assert detect_bytes(data) == "gemini-cli"
    # with `role` on its messages it is a message list, not a Gemini chat
    with_roles = [{**m, "role": "user"} for m in MESSAGES]
    assert detect_bytes(json.dumps({**META, "messages": with_roles}).encode()) == "openai-messages"


LLM_CALL = {
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}],
    "response": {"id": "r", "choices": [{"message": {"role": "assistant", "content": "ok"}}]},
    "args": [],
    "kwargs": {"temperature": 0},
    "timestamp": 1768561200.5,
    "cost": 0.01,
}
LITELLM_PAYLOAD = {
    "id": "x",
    "call_type": "acompletion",
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": "t"}],
    "response": {"choices": []},
    "startTime": 1.0,
    "endTime": 2.0,
}


def test_llm_call_logs_in_a_walk_are_skipped_by_name(tmp_path):
    logs = tmp_path / "logs"
    (logs / "llm_completions").mkdir(parents=True)
    (logs / "llm_completions" / "a-1.json").write_text(json.dumps(LLM_CALL))
    (logs / "llm_completions" / "a-2.json").write_text(json.dumps(LITELLM_PAYLOAD))
    (logs / "rows.jsonl").write_text(json.dumps(LITELLM_PAYLOAD) + "\n" + json.dumps(LITELLM_PAYLOAD) + "\n")
    _write_json(logs / "session.json", MESSAGES)
    report = convert_paths([logs], tmp_path / "out.jsonl")
    assert report.trajectories == 1 and report.turns == 4
    assert report.skipped["llm_call_log"] == 3
    skipped = {Path(f.path).name: f.error for f in report.files if f.error}
    assert skipped == {
        name: "skipped: llm call log, not an agent log" for name in ("a-1.json", "a-2.json", "rows.jsonl")
    }


def test_llm_call_log_given_alone_is_refused_naming_the_formats(tmp_path):
    path = tmp_path / "call.json"
    path.write_text(json.dumps(LLM_CALL))
    with pytest.raises(UnknownFormatError) as exc:
        list(iter_trajectories(path))
    assert "a per-call LLM log" in str(exc.value) and "gemini-cli" in str(exc.value)
    unknown = tmp_path / "other.json"
    unknown.write_text(json.dumps({"hello": 1}))
    with pytest.raises(UnknownFormatError) as exc:
        list(iter_trajectories(unknown))
    assert str(exc.value).endswith(
        "unknown log format (expected one of aider-llm-history, atif, claude-code, codex-rollout, gemini-cli, "
        "harbor-jsonl, harbor-trial, "
        "mini-swe-agent, openai-messages, opencode, openhands, openhands-conversation, pi-events, "
        "pi-session, swe-agent; pass --format to force one)"
    )


def test_malformed_tool_call_names_the_field(tmp_path):
    bad = {**CALL_1, "toolCalls": [{"id": "x", "args": {}}]}
    path = _write_json(tmp_path / "bad.json", [USER_1, bad])
    with pytest.raises(ConvertError) as exc:
        list(iter_trajectories(path))
    assert "messages[1].toolCalls[0]: expected an object with a string name" in str(exc.value)


def _to_gemini(messages: list[dict]) -> dict:
    """A chat request as Gemini CLI would send it: user text, model parts, function
    responses with the call ids."""
    contents: list[dict] = []
    system = None
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    for m in messages:
        if m["role"] == "system":
            system = {"parts": [{"text": m["content"]}]}
        elif m["role"] == "user":
            contents.append({"role": "user", "parts": [{"text": m["content"]}]})
        elif m["role"] == "assistant":
            parts = [{"text": m["content"]}] if m.get("content") else []
            parts += [
                {
                    "functionCall": {
                        "id": c["id"],
                        "name": c["function"]["name"],
                        "args": orjson.loads(c["function"]["arguments"]),
                    }
                }
                for c in m.get("tool_calls") or []
            ]
            contents.append({"role": "model", "parts": parts})
        else:
            key = "error" if m.get("is_error") else "output"
            contents.append(
                {
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "id": m["tool_call_id"],
                                "name": names[m["tool_call_id"]],
                                "response": {key: m["content"]},
                            }
                        }
                    ],
                }
            )
    return {"contents": contents, **({"systemInstruction": system} if system else {})}


def _replay_both_apis(traj, store: Path) -> None:
    replayed = replay_turns(store, traj, divergence="content")
    assert replayed.stats["misses"]["total"] == 0
    assert replayed.stats["served"] == len(traj.turns)
    with running_server(store, divergence="content") as url, httpx.Client() as client:
        for k in range(len(traj.turns)):
            r = client.post(
                f"{url}/v1beta/models/{traj.model}:streamGenerateContent?alt=sse",
                json=_to_gemini(request_messages(traj, k)),
            )
            assert r.status_code == 200, r.text
            assert r.headers["x-replay-turn"] == str(k)
        stats = client.get(url + "/stats").json()
    assert stats["misses"]["total"] == 0 and stats["served_stream"] == len(traj.turns)


def test_fixture_recording_replays_with_0_misses_on_chat_and_gemini(tmp_path):
    path = _write_json(tmp_path / "session.json", MESSAGES)
    store = tmp_path / "trajectories.jsonl"
    convert_paths([path], store)
    (traj,) = iter_trajectories(path)
    _replay_both_apis(traj, store)


@pytest.mark.skipif(not REAL_CHAT.exists(), reason="real Gemini CLI recording not present (../shared/data/real-agents)")
def test_real_gemini_cli_recording_converts_and_replays(tmp_path):
    store = tmp_path / "trajectories.jsonl"
    report = convert_paths([REAL_CHAT], store)
    assert report.files[0].format == "gemini-cli"
    (traj,) = iter_trajectories(REAL_CHAT)
    assert len(traj.turns) == 9  # SOURCES.md: 9 model calls
    assert sum(len(t.response.tool_calls) for t in traj.turns) == 14
    assert sum(len(t.observations) for t in traj.turns) == 14
    assert traj.turns[0].usage.total_tokens == 5281  # the first gemini message's tokens.total
    assert all(t.timing is not None and t.timing.duration_ms is not None for t in traj.turns)
    _replay_both_apis(traj, store)


def test_gemini_cli_0_6x_jsonl_layout(tmp_path):
    # the layout Gemini CLI 0.61 writes: the environment message in a `$set` checkpoint, a
    # model message rewritten by id once its tool call ran (ids prefixed "<tool>__"), and
    # the function responses it sent logged as a user message
    call = {
        "id": "write_file__call_w1",
        "name": "write_file",
        "args": {"file_path": "hello.md", "content": "Hello\n"},
        "status": "success",
        "timestamp": "2026-12-03T17:42:56.354Z",
        "result": [
            {
                "functionResponse": {
                    "id": "write_file__call_w1",
                    "name": "write_file",
                    "response": {"output": "Successfully created hello.md."},
                }
            }
        ],
    }
    model_1 = {
        "id": "m1",
        "timestamp": "2026-12-03T17:42:56.212Z",
        "type": "gemini",
        "content": "",
        "thoughts": [
            {"subject": "", "description": "I will", "timestamp": "2026-12-03T17:42:56.211Z"},
            {"subject": "Writing", "description": "the file.", "timestamp": "2026-12-03T17:42:56.211Z"},
        ],
        "tokens": {"input": 1000, "output": 20, "cached": 0, "thoughts": 10, "tool": 0, "total": 1030},
        "model": "gemini-3.1-pro-preview",
    }
    lines = [
        {**META, "kind": "main"},
        {
            "$set": {
                "messages": [
                    {
                        "id": "env",
                        "timestamp": "2026-12-03T17:42:55.035Z",
                        "type": "user",
                        "content": [{"text": "<session_context>\nThis is the Gemini CLI.\n</session_context>"}],
                    }
                ],
                "lastUpdated": "2026-12-03T17:42:55.035Z",
            }
        },
        {
            "id": "u1",
            "timestamp": "2026-12-03T17:42:55.522Z",
            "type": "user",
            "content": [{"text": "task_id: hello-1\nCreate hello.md."}],
        },
        {"$set": {"lastUpdated": "2026-12-03T17:42:55.522Z"}},
        model_1,
        {**model_1, "toolCalls": [call]},
        {
            "id": "u2",
            "timestamp": "2026-12-03T17:42:56.358Z",
            "type": "user",
            "content": [{"functionResponse": call["result"][0]["functionResponse"]}],
        },
        {
            "id": "m2",
            "timestamp": "2026-12-03T17:42:56.536Z",
            "type": "gemini",
            "content": "Created hello.md.",
            "thoughts": [],
            "tokens": {"input": 1100, "output": 5, "cached": 0, "thoughts": 0, "tool": 0, "total": 1105},
            "model": "gemini-3.1-pro-preview",
        },
    ]
    path = tmp_path / "session-2026-12-03T17-42-c166.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    (traj,) = iter_trajectories(path)
    assert traj.first_user.startswith("<session_context>") and traj.user_before_turns == [
        "task_id: hello-1\nCreate hello.md."
    ]
    assert traj.match_key == "task:hello-1"
    t0, t1 = traj.turns
    assert t0.response.reasoning == "I will\n\n**Writing**\n\nthe file."
    assert [(c.id, c.name) for c in t0.response.tool_calls] == [("call_w1", "write_file")]  # the server's id
    assert [(o.tool_call_id, o.content) for o in t0.observations] == [("call_w1", "Successfully created hello.md.")]
    assert t0.user_after == []  # the function-response message is no user prompt
    assert t0.timing.duration_ms == 690.0  # 17:42:55.522 to the message at 17:42:56.212
    assert t1.response.content == "Created hello.md."
    store = tmp_path / "trajectories.jsonl"
    convert_paths([path], store)
    _replay_both_apis(traj, store)
