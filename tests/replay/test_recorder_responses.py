"""benchmaker.replay_server.recorder on OpenAI Responses (`/v1/responses`): an agent
speaking Responses through the recording proxy, in front of a replay server as the
scripted upstream, yields trajectories equal to the original that a fresh replay
server replays with zero misses, streamed and not."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.recorder import ResponsesAssembler
from benchmaker.replay_server.store import load_trajectories
from benchmaker.trajectories.trajectory import (
    Observation,
    Response,
    Source,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    match_key_for_messages,
)
from tests.replay.test_recorder import _proxy


def write_store(trajs: list[Trajectory], path: Path) -> Path:
    path.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
    return path


@contextlib.asynccontextmanager
async def recording_proxy(upstream: str, out: Path) -> AsyncIterator[str]:
    """The recording proxy of test_recorder._proxy; yields its base URL (with the secret)."""
    async with _proxy(upstream, out) as (url, _app):
        yield url


openai = pytest.importorskip("openai")

PATCH = "*** Begin Patch\n*** Update File: calc.py\n-  return a-b\n+  return a+b\n*** End Patch\n"


def _traj() -> Trajectory:
    """Three turns: reasoning + a function call; text + a custom (free-form) tool call;
    a final answer. Usage with cached and reasoning tokens on each."""
    first_user = "Fix the bug in calc.py"
    return Trajectory(
        trajectory_id="r0",
        source=Source(format="test", path="inline", sha256="0" * 64),
        match_key=match_key_for_messages([first_user]),
        model="gpt-rec",
        system="You are Codex.",
        first_user=first_user,
        turns=[
            Turn(
                index=0,
                response=Response(
                    content=None,
                    reasoning="Read the file first.",
                    tool_calls=[
                        ToolCall(
                            id="call_a",
                            name="shell",
                            arguments_raw='{"command":["cat","calc.py"]}',
                            arguments={"command": ["cat", "calc.py"]},
                        )
                    ],
                    finish_reason="tool_calls",
                ),
                usage=Usage(
                    prompt_tokens=50, completion_tokens=12, total_tokens=62, cached_tokens=10, reasoning_tokens=8
                ),
                observations=[
                    Observation(tool_call_id="call_a", name="shell", content="def add(a, b):\n  return a-b\n")
                ],
            ),
            Turn(
                index=1,
                response=Response(
                    content="Fixing it — «ünïcode».",
                    tool_calls=[ToolCall(id="call_b", name="apply_patch", arguments_raw=PATCH, type="custom")],
                    finish_reason="tool_calls",
                ),
                usage=Usage(
                    prompt_tokens=90, completion_tokens=30, total_tokens=120, cached_tokens=0, reasoning_tokens=0
                ),
                observations=[Observation(tool_call_id="call_b", name="apply_patch", content="Success.")],
            ),
            Turn(
                index=2,
                response=Response(content="Done: add() fixed.", finish_reason="stop"),
                usage=Usage(
                    prompt_tokens=140, completion_tokens=6, total_tokens=146, cached_tokens=64, reasoning_tokens=0
                ),
            ),
        ],
    )


def _output_items(output) -> list[dict]:
    """The items an agent sends back for a response's output (SDK objects -> dicts)."""
    items = []
    for item in output:
        d = item.model_dump(exclude_none=True)
        d.pop("status", None)
        items.append(d)
    return items


async def _episode(url: str, traj: Trajectory, stream: bool) -> list:
    """Run the Responses agent loop over `traj`'s observations; returns the responses."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    items: list[dict] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": traj.first_user}]}
    ]
    got = []
    for turn in traj.turns:
        if stream:
            async with client.responses.stream(model="m", instructions=traj.system, input=items) as s:
                async for _ in s:
                    pass
                resp = await s.get_final_response()
        else:
            resp = await client.responses.create(model="m", instructions=traj.system, input=items)
        got.append(resp)
        items += _output_items(resp.output)
        for o in turn.observations:
            kind = "custom_tool_call_output" if o.name == "apply_patch" else "function_call_output"
            items.append({"type": kind, "call_id": o.tool_call_id, "output": o.content})
    await client.close()
    return got


def _turns(t: Trajectory) -> list[tuple]:
    return [(u.response, u.usage, u.observations, u.user_after) for u in t.turns]


@pytest.mark.parametrize("stream", [True, False])
async def test_responses_agent_through_proxy_records_and_replays_with_zero_misses(tmp_path: Path, stream: bool):
    original = _traj()
    out = tmp_path / "recorded.jsonl"
    with start_replay_server(write_store([original], tmp_path / "t0.jsonl")) as upstream:
        async with recording_proxy(upstream.url, out) as url:
            got = await _episode(url, original, stream)
            async with httpx.AsyncClient() as c:
                flushed = (await c.post(url + "/flush")).json()
    assert [r.output_text for r in got] == ["", "Fixing it — «ünïcode».", "Done: add() fixed."]
    assert [item.type for item in got[1].output] == ["message", "custom_tool_call"]
    assert got[1].output[1].input == PATCH
    assert flushed == {"path": str(out), "trajectories": 1, "turns": 3, "skipped": {}}
    (rec,) = [t for _, t in load_trajectories(out)]
    assert (rec.match_key, rec.system, rec.first_user, rec.model) == (
        original.match_key,
        original.system,
        original.first_user,
        "m",
    )
    assert _turns(rec) == _turns(original)
    assert all(t.timing is not None and t.timing.duration_ms > 0 for t in rec.turns)
    assert all((t.timing.ttft_ms is not None) == stream for t in rec.turns)
    with start_replay_server(out, divergence="content") as fresh:
        again = await _episode(fresh.url, rec, stream)
        stats = fresh.stats()
    assert [r.output_text for r in again] == [r.output_text for r in got]
    assert stats["misses"]["total"] == 0 and stats["divergences"]["total"] == 0 and stats["served"] == 3


def test_assembler_waits_for_the_terminal_event_and_marks_a_cut_stream():
    done = (
        b'event: response.output_item.done\ndata: {"type":"response.output_item.done","sequence_number":3,'
        b'"output_index":0,"item":{"type":"message","role":"assistant","content":'
        b'[{"type":"output_text","text":"hi"}]}}\n\n'
    )
    delta = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"hi"}\n\n'
    completed = (
        b'event: response.completed\ndata: {"type":"response.completed","response":{"status":"completed",'
        b'"output":[],"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}}\n\n'
    )
    asm = ResponsesAssembler(stream=True)
    assert asm.feed(delta, 5) is False and asm.feed(done, 6) is False
    assert asm.feed(completed, 9) is True and asm.first_token_ns == 5
    response, known = asm.response()
    assert (response.content, response.finish_reason, known) == ("hi", "stop", True)
    assert (asm.usage.prompt_tokens, asm.usage.completion_tokens, asm.usage.total_tokens) == (3, 1, 4)
    cut = ResponsesAssembler(stream=True)
    cut.feed(delta, 1)
    assert cut.finish() is False and cut.error == "stream ended before response.completed after 1 token events"
