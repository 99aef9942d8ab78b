"""Replay fidelity: an agent's tool definitions are recorded and sent again on replay.

The agent is the official OpenAI SDK in a small loop, offering three tools, driven by
the scripted model (conformance/scripted_model.py) through the recording proxy
(`benchmaker record`, create_recorder_app); its own request bodies are kept as sent.
The recording then replays through the harness against the real replay server: each
replayed request carries the recorded `tools` array (exact names, count, schema) and
its body is within 1% of the agent's own in bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import openai
import pytest

from benchmaker.agent.harness import run_episode
from benchmaker.agent.model_client import ModelClient
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.trajectory import Trajectory
from conformance.scripted_model import ScriptedModel
from tests.replay.test_recorder_responses import recording_proxy

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the repository and return its combined stdout and stderr. "
            "Commands run in a fresh shell each time; use absolute paths or cd first.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout_s": {"type": "number", "description": "Seconds before the command is killed."},
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file of the repository, optionally a range of its lines.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 1},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a text file of the repository, replacing its content.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
]

SCRIPT = [
    {"thought": "Let me see what the repository holds.", "command": "ls -la"},
    {"thought": "The notes file should say what to fix.", "command": "cat NOTES.md"},
    {"thought": "Run the tests before changing anything.", "command": "python3 -m pytest -q"},
    {"thought": "The tests pass; nothing to fix.", "command": None},
]

OUTPUTS = {
    "ls -la": "total 12\ndrwxr-xr-x 3 user user 4096 .\n-rw-r--r-- 1 user user  120 NOTES.md\ndrwxr-xr-x 2 user user 4096 tests\n",
    "cat NOTES.md": "# Notes\nThe range helper was fixed last week; check that the tests still pass.\n",
    "python3 -m pytest -q": "....                                                   [100%]\n4 passed in 0.02s\n",
}

# a system prompt of the size agents send (pi's is ~2 KB, Claude Code's tens of KB): the
# harness's fixed request fields ("stream": false where the agent left it out) stay
# well under 1% of a body
SYSTEM = "\n".join(
    [
        "You are a careful software engineer working in a git repository on the user's machine.",
        "Use the tools to inspect the repository before answering; never guess a file's content.",
        "Guidelines:",
        "- Read the files a change touches, and the tests that cover them, before you edit anything.",
        "- Prefer small, reviewable edits; keep the code's style; do not reformat unrelated lines.",
        "- Run the test suite after each change and read its output to the end.",
        "- When a command fails, read the error before trying something else; do not retry blindly.",
        "- Do not install packages, open network connections or touch files outside the repository.",
        "- Write no secrets (tokens, keys, passwords) to files, logs or command lines.",
        "- When the task is done, say what you changed and how you checked it, in a few sentences.",
        "Tools: bash runs one command line and returns its output; read_file returns a file's text;",
        "write_file replaces a file's text. Paths are relative to the repository root.",
    ]
)
TASK = "task_id: fidelity-tools\nCheck that the repository's tests pass and report what you find."


async def _agent(base_url: str, stream: bool) -> list[bytes]:
    """The agent loop with the official OpenAI SDK; returns its request bodies as sent."""
    sent: list[bytes] = []

    async def keep(request: httpx.Request) -> None:
        sent.append(request.content)

    async with httpx.AsyncClient(event_hooks={"request": [keep]}) as http:
        client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="test", http_client=http, max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
        for _ in range(len(SCRIPT)):
            if stream:
                content, calls = "", {}
                # usage asked for, as pi and most streaming agents do (and the harness does)
                events = await client.chat.completions.create(
                    model="scripted",
                    messages=messages,
                    tools=TOOLS,
                    stream=True,
                    stream_options={"include_usage": True},
                )  # type: ignore[call-overload]
                async for chunk in events:
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    content += delta.content or ""
                    for tcd in delta.tool_calls or []:
                        call = calls.setdefault(tcd.index, {"id": "", "name": "", "arguments": ""})
                        call["id"] += tcd.id or ""
                        call["name"] += (tcd.function.name or "") if tcd.function else ""
                        call["arguments"] += (tcd.function.arguments or "") if tcd.function else ""
                msg: dict[str, Any] = {"role": "assistant", "content": content}
                if calls:
                    msg["tool_calls"] = [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for c in calls.values()
                    ]
            else:
                resp = await client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)  # type: ignore[call-overload]
                msg = resp.choices[0].message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
            messages.append(msg)
            if not msg.get("tool_calls"):
                break
            for tc in msg["tool_calls"]:
                command = json.loads(tc["function"]["arguments"])["command"]
                messages.append({"role": "tool", "tool_call_id": tc["id"], "content": OUTPUTS[command]})
    return sent


@pytest.mark.parametrize("stream", [True, False])
async def test_replayed_requests_carry_the_recorded_tools_within_1pct_of_the_agents_bytes(tmp_path: Path, stream: bool):
    recorded = tmp_path / "recorded.jsonl"
    async with ScriptedModel(SCRIPT) as model, recording_proxy(model.url, recorded) as proxy:
        agent_bodies = await _agent(proxy, stream)
    (traj,) = [Trajectory.model_validate_json(line) for line in recorded.read_text().splitlines()]
    assert traj.tools == TOOLS  # kept as the agent sent them
    assert len(traj.turns) == len(agent_bodies) == 4

    replayed: list[bytes] = []

    async def on_chunk(session: Any, ctx: Any, params: aiohttp.TraceRequestChunkSentParams) -> None:
        replayed[-1] += params.chunk

    async def on_start(session: Any, ctx: Any, params: Any) -> None:
        replayed.append(b"")

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    trace.on_request_chunk_sent.append(on_chunk)
    with start_replay_server(recorded, divergence="content") as srv:
        async with aiohttp.ClientSession(trace_configs=[trace]) as session:
            client = ModelClient(srv.url, model=traj.model, session=session)
            res = await run_episode(
                traj, srv.url, mode="recorded", client=client, stream=stream, send_status_fields=False
            )
        stats = srv.stats()
    ep = res.episode
    assert (ep.outcome, ep.n_turns, ep.misses_diverged, stats["misses"]["total"]) == ("ok", 4, 0, 0)
    assert stats["tools_differ"] == 0  # the replay server found the recorded tools in every request
    assert all(t.byte_equal for t in res.turns)
    assert len(replayed) == 4
    for turn, (ours, theirs) in enumerate(zip(replayed, agent_bodies, strict=True)):
        body = json.loads(ours)
        assert [t["function"]["name"] for t in body["tools"]] == ["bash", "read_file", "write_file"], turn
        assert body["tools"] == json.loads(theirs)["tools"] == TOOLS
        assert abs(len(ours) - len(theirs)) <= 0.01 * len(theirs), (turn, len(ours), len(theirs))
        # the same fields in another order, but for the harness's `"stream":false` (15
        # bytes) where the SDK leaves `stream` out
        assert len(ours) - len(theirs) == (0 if stream else len(b',"stream":false')), turn
    assert [c.sample.bytes_sent for c in res.calls] == [len(b) for b in replayed]


async def test_the_replay_server_flags_requests_without_the_recorded_tools(tmp_path: Path):
    recorded = tmp_path / "recorded.jsonl"
    async with ScriptedModel(SCRIPT) as model, recording_proxy(model.url, recorded) as proxy:
        await _agent(proxy, False)
    (traj,) = [Trajectory.model_validate_json(line) for line in recorded.read_text().splitlines()]
    bare = traj.model_copy(update={"tools": None})  # a harness that would not send them
    with start_replay_server(recorded, divergence="content") as srv:
        res = await run_episode(bare, srv.url, mode="recorded", stream=False, send_status_fields=False)
        stats = srv.stats()
    assert (res.episode.outcome, res.episode.n_turns, stats["misses"]["total"]) == ("ok", 4, 0)  # served all the same
    assert stats["tools_differ"] == 4 and stats["trajectories"][traj.trajectory_id]["tools_differ"] == 4
    assert [c.headers.get("x-replay-tools") for c in res.calls] == ["differ"] * 4
