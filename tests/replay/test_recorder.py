"""benchmaker.replay_server.recorder: an agent episode through the recording proxy in front of a replay
server yields trajectories that a fresh replay server replays with zero misses and
byte-equal responses; bytes are relayed unchanged; flush is atomic; grouping rules."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette

from benchmaker.agent.harness import run_episode
from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.recorder import ChatAssembler, create_recorder_app
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

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / ".." / "shared" / "data" / "real"


def _traj(tid: str = "t0", first_user: str = "Fix the bug in calc.py") -> Trajectory:
    """Three turns: reasoning + a tool call with oddly spaced raw arguments; content +
    two tool calls (one failing) and a follow-up prompt; a final answer. Usage on each."""
    return Trajectory(
        trajectory_id=tid,
        source=Source(format="test", path="inline", sha256="0" * 64),
        match_key=match_key_for_messages([first_user, "Use small steps."]),
        model="m-1",
        system="You are a coding agent.",
        first_user=first_user,
        user_before_turns=["Use small steps."],
        turns=[
            Turn(
                index=0,
                response=Response(
                    content=None,
                    reasoning="Look at the file first.",
                    tool_calls=[
                        ToolCall(
                            id="call_a",
                            name="read",
                            arguments_raw='{ "path" :"calc.py"}',
                            arguments={"path": "calc.py"},
                        )
                    ],
                    finish_reason="tool_calls",
                ),
                usage=Usage(prompt_tokens=50, completion_tokens=12, total_tokens=62, cached_tokens=10),
                observations=[
                    Observation(tool_call_id="call_a", name="read", content="def add(a, b):\n  return a-b\n")
                ],
            ),
            Turn(
                index=1,
                response=Response(
                    content="Fixing it — «ünïcode» ok.",
                    tool_calls=[
                        ToolCall(
                            id="call_b",
                            name="edit",
                            arguments_raw='{"old":"a-b","new":"a+b"}',
                            arguments={"old": "a-b", "new": "a+b"},
                        ),
                        ToolCall(
                            id="call_c",
                            name="bash",
                            arguments_raw='{"command":"pytest -q"}',
                            arguments={"command": "pytest -q"},
                        ),
                    ],
                    finish_reason="tool_calls",
                ),
                usage=Usage(prompt_tokens=90, completion_tokens=30, total_tokens=120),
                observations=[
                    Observation(tool_call_id="call_b", name="edit", content="ok"),
                    Observation(tool_call_id="call_c", name="bash", content="1 failed", is_error=True),
                ],
                user_after=["Please also run the linter."],
            ),
            Turn(
                index=2,
                response=Response(content="Done: add() fixed.", finish_reason="stop"),
                usage=Usage(prompt_tokens=140, completion_tokens=6, total_tokens=146),
            ),
        ],
    )


def _write(trajs: list[Trajectory], path: Path) -> Path:
    path.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
    return path


@contextlib.asynccontextmanager
async def _proxy(upstream: str, out: Path, **kw) -> AsyncIterator[tuple[str, Starlette]]:
    """The recording proxy served by uvicorn on this loop (127.0.0.1, port 0), with its
    lifespan (shutdown writes the file); yields (base URL with the secret path segment,
    `http://127.0.0.1:PORT/<secret>`, app)."""
    secret = secrets.token_urlsafe(32)
    app = create_recorder_app(upstream, out, secret=secret, **kw)
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", access_log=False, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done(), "proxy did not start"
        await asyncio.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}/{secret}", app
    finally:
        server.should_exit = True
        await task
        sock.close()


def _responses(t: Trajectory) -> list[tuple]:
    return [(u.response, u.usage, u.observations, u.user_after) for u in t.turns]


@pytest.mark.parametrize("stream", [True, False])
async def test_episode_through_proxy_replays_with_zero_misses_and_byte_equal(tmp_path: Path, stream: bool):
    original = _traj()
    out = tmp_path / "recorded.jsonl"
    with start_replay_server(_write([original], tmp_path / "t0.jsonl")) as upstream:
        async with _proxy(upstream.url, out) as (url, _app):
            first = await run_episode(original, url, mode="recorded", stream=stream)
            async with httpx.AsyncClient() as c:
                flushed = (await c.post(url + "/flush")).json()
    assert (first.episode.outcome, first.episode.n_turns) == ("ok", 3)
    assert flushed == {"path": str(out), "trajectories": 1, "turns": 3, "skipped": {}}
    (rec,) = [t for _, t in load_trajectories(out)]
    # the recording equals the original: same key, prompts, responses, usage, observations
    assert rec.match_key == original.match_key
    assert (rec.system, rec.first_user, rec.user_before_turns, rec.model) == (
        original.system,
        original.first_user,
        original.user_before_turns,
        "m-1",
    )
    assert _responses(rec) == _responses(original)
    assert rec.terminated_by == "stop" and rec.source.format == "recording-proxy"
    assert all(t.timing is not None and t.timing.duration_ms > 0 for t in rec.turns)
    # a fresh replay server serving only the recording: zero misses, byte-equal turns,
    # for the recording's own episode and for the original agent's messages alike
    with start_replay_server(out, divergence="content") as fresh:
        for traj in (rec, original):
            res = await run_episode(traj, fresh.url, mode="recorded", stream=stream)
            ep = res.episode
            assert (ep.outcome, ep.n_turns) == ("ok", 3)
            assert (ep.misses_unknown_key, ep.misses_beyond_turns, ep.misses_diverged) == (0, 0, 0)
            assert [t.byte_equal for t in res.turns] == [True, True, True]
        stats = fresh.stats()
    assert stats["misses"]["total"] == 0 and stats["divergences"]["total"] == 0


async def test_real_recording_round_trips_through_proxy(tmp_path: Path):
    src = REAL / "swe-agent-pydicom-1458.traj"
    if not src.exists():
        pytest.skip(f"{src} absent")
    from benchmaker.trajectories.convert import iter_trajectories

    (original,) = list(iter_trajectories(src))
    out = tmp_path / "recorded.jsonl"
    with start_replay_server(_write([original], tmp_path / "t0.jsonl")) as upstream:
        async with _proxy(upstream.url, out, text_actions=True) as (url, _app):
            await run_episode(original, url, mode="recorded")
    (rec,) = [t for _, t in load_trajectories(out)]  # written at proxy shutdown
    assert [t.response for t in rec.turns] == [t.response for t in original.turns]
    with start_replay_server(out, divergence="content") as fresh:
        res = await run_episode(original, fresh.url, mode="recorded")
    assert res.episode.n_turns == len(original.turns)
    assert res.episode.misses_diverged + res.episode.misses_unknown_key + res.episode.misses_beyond_turns == 0
    assert all(t.byte_equal for t in res.turns)


async def test_proxy_relays_upstream_bytes_unchanged(tmp_path: Path):
    body = {
        "model": "m-1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the bug in calc.py"},
            {"role": "user", "content": "Use small steps."},
        ],
    }
    with start_replay_server(_write([_traj()], tmp_path / "t0.jsonl")) as upstream:
        async with httpx.AsyncClient() as c:
            direct = await c.post(upstream.url + "/v1/chat/completions", json=body)
            async with _proxy(upstream.url, tmp_path / "r.jsonl") as (url, _app):
                via = await c.post(url + "/v1/chat/completions", json=body)
                plain = await c.post(url + "/v1/chat/completions", json={**body, "stream": False})
                models = await c.get(url + "/v1/models")
                missing = await c.post(
                    url + "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": "unknown"}]}
                )
    assert via.status_code == 200 and via.content == direct.content
    assert via.headers["content-type"] == direct.headers["content-type"]
    assert plain.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{ "path" :"calc.py"}'
    assert models.json()["data"][0]["id"] == "m-1"  # pass-through, not recorded
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_key"
    recs = [t for _, t in load_trajectories(tmp_path / "r.jsonl")]
    # both requests are turn 0 of the same task: two conversations (the task run twice);
    # the 404 one is not recorded
    assert [len(t.turns) for t in recs] == [1, 1]
    assert [t.turns[0].response for t in recs] == [_traj().turns[0].response] * 2
    assert [t.trajectory_id[-2:] for t in recs] == ["-1", "-2"]


async def test_flush_is_atomic_and_groups_two_tasks_and_a_rerun(tmp_path: Path):
    a, b = _traj("a"), _traj("b", first_user="task_id: demo-2\nAdd a test.")
    out = tmp_path / "rec.jsonl"
    out.write_text("old content\n")
    with start_replay_server(_write([a, b], tmp_path / "t.jsonl")) as upstream:
        async with _proxy(upstream.url, out) as (url, _app):
            await asyncio.gather(run_episode(a, url), run_episode(b, url))
            await run_episode(a, url)  # the same task again: a second conversation
            async with httpx.AsyncClient() as c:
                flushed = (await c.post(url + "/flush")).json()
                health = (await c.get(url + "/health")).json()
            assert not (tmp_path / "rec.jsonl.tmp").exists()
    assert flushed["trajectories"] == 3 and flushed["turns"] == 9  # 3 conversations x 3 turns
    assert health == {"status": "ok", "conversations": 3, "turns": 9}
    trajs = [t for _, t in load_trajectories(out)]
    keys = sorted(t.match_key for t in trajs)
    assert keys == sorted([a.match_key, a.match_key, "task:demo-2"])
    assert {t.task_id for t in trajs} == {None, "demo-2"}
    assert len({t.trajectory_id for t in trajs}) == 3


async def test_upstream_error_is_relayed_and_not_recorded(tmp_path: Path):
    out = tmp_path / "rec.jsonl"
    with start_replay_server(_write([_traj()], tmp_path / "t.jsonl")) as upstream:
        async with _proxy(upstream.url, out) as (url, app):
            async with httpx.AsyncClient() as c:
                r = await c.post(url + "/v1/chat/completions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json"
    assert dict(app.state.recorder.skipped) == {"bad_request": 1, "upstream_errors": 1}
    assert out.read_text() == ""  # written at shutdown, no conversation


async def test_proxy_answers_502_when_upstream_is_down(tmp_path: Path):
    sock = socket.create_server(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()  # nothing listens there now
    async with _proxy(dead, tmp_path / "r.jsonl") as (url, _app):
        async with httpx.AsyncClient() as c:
            r = await c.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"


def test_assembler_reassembles_split_tool_call_deltas_and_waits_for_done():
    chunks = [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function",'
        b'"function":{"name":"bash","arguments":""}}]}}]}\n\ndata: {"choices":[{"index":0,"delta":'
        b'{"tool_calls":[{"index":0,"function":{"arguments":"{\\"cmd\\": "}}]}}]}\n',
        b'\ndata: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"ls\\"}"}}]}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n',
        b"data: [DONE]\n\n",
    ]
    asm = ChatAssembler(stream=True)
    done = [asm.feed(c, i) for i, c in enumerate(chunks)]
    assert done == [False, False, False, False, True]
    resp, known = asm.response()
    assert known and resp.content is None and resp.finish_reason == "tool_calls"
    assert [(t.id, t.name, t.arguments_raw) for t in resp.tool_calls] == [("c1", "bash", '{"cmd": "ls"}')]
    assert asm.first_token_ns == 1  # the name delta in the second chunk is the first token
    assert (asm.usage.prompt_tokens, asm.usage.completion_tokens) == (3, 4)


def test_assembler_marks_a_cut_stream_incomplete():
    asm = ChatAssembler(stream=True)
    asm.feed(b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n', 0)
    assert asm.finish() is False and asm.error == "stream ended before data: [DONE] after 1 token events"


async def test_a_title_request_is_relayed_and_opens_no_conversation(tmp_path: Path):
    # opencode's title request repeats the task before the session's first call: it is
    # side traffic, so the task's conversation opens with the session's own request
    traj = _traj()
    out = tmp_path / "rec.jsonl"
    title = {
        "model": "small",
        "messages": [
            {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
            {"role": "user", "content": "Generate a title for this conversation:"},
            {"role": "user", "content": traj.first_user},
        ],
    }
    with start_replay_server(_write([traj], tmp_path / "t.jsonl")) as upstream:
        async with _proxy(upstream.url, out) as (url, app):
            async with httpx.AsyncClient() as c:
                r = await c.post(url + "/v1/chat/completions", json=title)
                assert (r.status_code, r.headers["x-replay-side"]) == (200, "title")
            await run_episode(traj, url)
            skipped = dict(app.state.recorder.skipped)
    (rec,) = [t for _, t in load_trajectories(out)]
    assert skipped == {"title_request": 1}
    assert (rec.system, rec.first_user, rec.user_before_turns) == (traj.system, traj.first_user, traj.user_before_turns)
    assert len(rec.turns) == len(traj.turns)
