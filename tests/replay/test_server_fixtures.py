"""Shared helpers of the replay server tests: trajectory builders, an in-process server
on 127.0.0.1 port 0 (uvicorn in a thread), and an SSE event splitter. No tests here."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import uvicorn

from benchmaker.replay_server.latency import parse_latency
from benchmaker.replay_server.server import bind_socket, create_app, uvicorn_config
from benchmaker.replay_server.store import ReplayStore
from benchmaker.trajectories.trajectory import (
    Observation,
    Response,
    Source,
    Timing,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    match_key_for,
)

# Strings that break naive stream handling: multi-byte UTF-8, an astral emoji (a
# surrogate pair in UTF-16 / JSON \u escapes), a ZWJ sequence, CRLF, U+2028 (a line
# break for str.splitlines), a lone CR, a tab and a JSON-significant quote/backslash.
NASTY = 'Héllo wörld 😀 👩‍💻\r\nline\u2028two\rthree\t"q" \\ end ∑ 中文'
NASTY_ARGS = '{"command": "printf \'%s\\\\n\' 😀 \\"x\\"", "path": "a\u2028b"}'
NASTY_REASONING = "think… 🤔\r\n\u2028done"


def source() -> Source:
    return Source(format="test", path="test.jsonl", sha256="0" * 64)


def first_user_for(task: str) -> str:
    return f"Please fix the bug.\ntask_id: {task}\n"


def make_trajectory(
    task: str,
    n_turns: int = 3,
    *,
    trajectory_id: str | None = None,
    system: str | None = "You are a coding agent.",
    tool_call_ids: bool = True,
    usage: bool = True,
    timing: Timing | None = None,
) -> Trajectory:
    """`n_turns` turns: every turn but the last has a bash tool call (`call_<t>`) and one
    observation `out <t>\\nexit code 0` (exit_code 0); the last turn stops. Turn 0 has
    reasoning; contents/arguments use the NASTY strings."""
    first_user = first_user_for(task)
    turns = []
    for t in range(n_turns):
        last = t == n_turns - 1
        cid = f"call_{t}"
        turns.append(
            Turn(
                index=t,
                response=Response(
                    content=f"{NASTY} #{t}",
                    reasoning=NASTY_REASONING if t == 0 else None,
                    tool_calls=[] if last else [ToolCall(id=cid, name="bash", arguments_raw=NASTY_ARGS)],
                    finish_reason="stop" if last else "tool_calls",
                ),
                usage=Usage(prompt_tokens=100 + t, completion_tokens=20 + t, total_tokens=120 + 2 * t, cached_tokens=64)
                if usage
                else None,
                timing=timing,
                observations=[]
                if last
                else [
                    Observation(
                        tool_call_id=cid if tool_call_ids else None,
                        name="bash",
                        content=f"out {t}\nexit code 0",
                        exit_code=0,
                    )
                ],
            )
        )
    return Trajectory(
        trajectory_id=trajectory_id or f"traj-{task}",
        source=source(),
        task_id=task,
        match_key=match_key_for(first_user),
        model="rec-model",
        system=system,
        first_user=first_user,
        turns=turns,
    )


def write_store(path: Path, trajectories: list[Trajectory]) -> Path:
    path.write_text("".join(t.model_dump_json() + "\n" for t in trajectories), encoding="utf-8")
    return path


def request_messages(traj: Trajectory, turn: int, *, system: bool = True) -> list[dict]:
    """The messages an agent replaying `traj` sends for `turn`: system, first user, the
    user_before_turns messages, then per earlier turn the assistant message and its
    observations (as role "tool" with tool_call_id when recorded with one, else role
    "user")."""
    messages: list[dict] = []
    if system and traj.system is not None:
        messages.append({"role": "system", "content": traj.system})
    messages.append({"role": "user", "content": traj.first_user})
    messages.extend({"role": "user", "content": u} for u in traj.user_before_turns)
    for t in traj.turns[:turn]:
        r = t.response
        msg: dict = {"role": "assistant", "content": r.content}
        if r.tool_calls:
            msg["tool_calls"] = [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments_raw}}
                for tc in r.tool_calls
            ]
        messages.append(msg)
        for o in t.observations:
            if o.tool_call_id is not None:
                messages.append({"role": "tool", "tool_call_id": o.tool_call_id, "content": o.content})
            else:
                messages.append({"role": "user", "content": o.content})
    return messages


@contextmanager
def running_server(
    store_path: Path,
    *,
    latency: str = "instant",
    token: str | None = None,
    divergence: str = "off",
) -> Iterator[str]:
    """Serve `store_path` in-process (uvicorn in a daemon thread, the CLI's uvicorn_config) on 127.0.0.1 port 0;
    yields the base URL; stops the server on exit."""
    store = ReplayStore.load(store_path, latency=parse_latency(latency))
    app = create_app(store, token=token, divergence=divergence)
    sock, url = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn_config(app))  # the CLI's stack
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("in-process replay server did not start")
        time.sleep(0.005)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def sse_events(raw: bytes) -> list[bytes]:
    """Split an SSE body into event payloads (the bytes after `data: `), on the blank
    line only (never on U+2028 or a lone CR inside the JSON)."""
    assert raw.endswith(b"\n\n"), raw[-50:]
    out = []
    for block in raw[:-2].split(b"\n\n"):
        assert block.startswith(b"data: "), block[:50]
        assert b"\n" not in block, block[:80]
        out.append(block[len(b"data: ") :])
    return out


def reassemble(events: list[bytes]) -> dict:
    """Concatenate the deltas of chat.completion.chunk events into
    {"role", "content", "reasoning", "tool_calls": [{"id", "type", "name", "arguments"}],
    "finish_reason", "usage", "done"}."""
    out: dict = {
        "role": None,
        "content": None,
        "reasoning": None,
        "tool_calls": [],
        "finish_reason": None,
        "usage": None,
        "done": False,
    }
    for ev in events:
        assert not out["done"], "event after [DONE]"
        if ev == b"[DONE]":
            out["done"] = True
            continue
        chunk = orjson.loads(ev)
        assert chunk["object"] == "chat.completion.chunk"
        if chunk.get("usage") is not None:
            out["usage"] = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            if "role" in delta:
                out["role"] = delta["role"]
            for key, name in (("content", "content"), ("reasoning_content", "reasoning")):
                if delta.get(key) is not None:
                    out[name] = (out[name] or "") + delta[key]
            for tc in delta.get("tool_calls") or []:
                idx = tc["index"]
                if idx == len(out["tool_calls"]):
                    out["tool_calls"].append(
                        {"id": tc["id"], "type": tc["type"], "name": tc["function"]["name"], "arguments": ""}
                    )
                out["tool_calls"][idx]["arguments"] += tc["function"].get("arguments", "")
            if choice.get("finish_reason") is not None:
                out["finish_reason"] = choice["finish_reason"]
    return out
