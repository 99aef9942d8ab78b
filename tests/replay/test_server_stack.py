"""The replay server's HTTP stack: uvicorn on httptools + uvloop by default,
h11 on request; the chat hot path's front door and one-pass message scan answer as the
Starlette routes did."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from benchmaker.replay_server.latency import parse_latency
from benchmaker.replay_server.server import CoalescedWrites, create_app, one_send_protocol, uvicorn_config
from benchmaker.replay_server.store import ReplayStore
from benchmaker.trajectories.errors import TrajectoryFormatError
from benchmaker.trajectories.trajectory import flatten_content
from tests.replay.test_server_fixtures import make_trajectory, request_messages, running_server, write_store

REPO = Path(__file__).resolve().parents[2]


def test_config_picks_httptools_and_uvloop_by_default():
    # both are dependencies of the package (pyproject.toml), so "auto" is the fast stack
    cfg = uvicorn_config(object())
    assert issubclass(cfg.http, HttpToolsProtocol) and cfg.loop == "uvloop"
    assert issubclass(uvicorn_config(object(), http="h11").http, H11Protocol)
    assert uvicorn_config(object(), lifespan="on").lifespan == "on"
    with pytest.raises(ValueError, match=r"http: unknown parser 'zttp' \(expected auto, httptools, h11\)"):
        uvicorn_config(object(), http="zttp")


@contextmanager
def _cli_server(path: Path, http: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """`python -m benchmaker.replay_server.server PATH --http HTTP` on 127.0.0.1: (process, base URL) once
    /health answers; terminated on exit."""
    with subprocess.Popen(
        [sys.executable, "-m", "benchmaker.replay_server.server", str(path), "--http", http],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        text=True,
    ) as proc:
        try:
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            for _ in range(200):  # the URL is printed before uvicorn starts accepting
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.05)
            yield proc, url
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_cli_serves_the_recorded_turns_on_each_parser(tmp_path, http):
    traj = make_trajectory("stack", 2)
    path = write_store(tmp_path / "t.jsonl", [traj])
    store = ReplayStore.load(path, latency=parse_latency("instant"))
    with _cli_server(path, http) as (_, url):
        for turn in (0, 1):
            r = httpx.post(url + "/v1/chat/completions", json={"messages": request_messages(traj, turn)})
            assert r.status_code == 200
            got = orjson.loads(r.content)
            want = orjson.loads(store.lookup(traj.match_key, None).turns[turn].body)
            assert got.pop("created") >= want.pop("created")  # rendered at each load
            assert got == want


def _write_syscalls(pid: int) -> int | None:
    """The process's write-family system calls so far (/proc/PID/io `syscw`), None where
    it cannot be read (not Linux, no task I/O accounting)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("syscw:"))
    except (OSError, StopIteration):
        return None


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_each_reply_leaves_the_server_in_one_send(tmp_path, http):
    # uvicorn writes the head at http.response.start and the body at http.response.body;
    # CoalescedWrites joins them (a client otherwise wakes twice per reply). Counted as
    # the server's write syscalls (uvloop writes sockets with write/writev), 20 replies
    # of each kind on one keep-alive connection
    traj = make_trajectory("one-send", 2)
    path = write_store(tmp_path / "t.jsonl", [traj])
    with _cli_server(path, http) as (proc, url), httpx.Client() as client:
        if _write_syscalls(proc.pid) is None:
            pytest.skip("/proc/PID/io is not readable here")
        for stream in (False, True):
            body = {"messages": request_messages(traj, 1), "stream": stream}
            assert client.post(url + "/v1/chat/completions", json=body).status_code == 200
            before = _write_syscalls(proc.pid)
            for _ in range(20):
                r = client.post(url + "/v1/chat/completions", json=body)
                assert r.status_code == 200 and r.content.endswith(b"[DONE]\n\n" if stream else b"}")
            assert _write_syscalls(proc.pid) - before == 20, "stream" if stream else "json"


class _FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False
        self.extra = {"peername": ("127.0.0.1", 1)}

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str) -> object:
        return self.extra.get(name)


def test_coalesced_writes_join_one_loop_step():
    async def main() -> list[list[bytes]]:
        loop = asyncio.get_running_loop()
        seen = []
        t = _FakeTransport()
        w = CoalescedWrites(t, loop)
        w.write(b"HTTP/1.1 200 OK\r\n\r\n")
        w.writelines([b"{", b"}"])
        seen.append(list(t.writes))  # nothing sent within the step
        await asyncio.sleep(0)
        seen.append(list(t.writes))  # the step's writes in one send
        w.write(b"next")
        await asyncio.sleep(0)
        seen.append(list(t.writes))
        assert w.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is the transport's
        w.write(b"last")
        w.close()  # flushes before closing
        seen.append(list(t.writes))
        assert t.closed
        w.write(b"after close")
        await asyncio.sleep(0)  # dropped: the connection is closing
        seen.append(list(t.writes))
        t2 = _FakeTransport()
        w2 = CoalescedWrites(t2, loop)
        w2.write(b"held")
        w2.abort()
        await asyncio.sleep(0)
        assert t2.aborted and t2.writes == []
        return seen

    seen = asyncio.run(main())
    head = b"HTTP/1.1 200 OK\r\n\r\n"
    assert seen == [
        [],
        [head + b"{}"],
        [head + b"{}", b"next"],
        [head + b"{}", b"next", b"last"],
        [head + b"{}", b"next", b"last"],
    ]


def test_one_send_protocol_refuses_another_parser():
    with pytest.raises(ValueError, match="http: expected httptools or h11, got 'zttp'"):
        one_send_protocol("zttp")


def test_cli_refuses_an_unknown_parser(tmp_path):
    path = write_store(tmp_path / "t.jsonl", [make_trajectory("x", 1)])
    out = subprocess.run(
        [sys.executable, "-m", "benchmaker.replay_server.server", str(path), "--http", "nope"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 2
    assert "invalid choice: 'nope'" in out.stderr


def test_front_door_and_routes_agree(tmp_path):
    traj = make_trajectory("door", 2)
    path = write_store(tmp_path / "t.jsonl", [traj])
    with running_server(path) as url, httpx.Client() as client:
        body = {"messages": request_messages(traj, 1)}
        a = client.post(url + "/v1/chat/completions", json=body)
        b = client.post(url + "/chat/completions", json=body)
        assert a.status_code == b.status_code == 200
        assert a.content == b.content
        # not POST: through Starlette's router, which answers 405 with an Allow header
        r = client.get(url + "/chat/completions")
        assert (r.status_code, r.headers["allow"]) == (405, "POST")
        # a message that is not an object: named by its index (the scan's slow path)
        msgs = request_messages(traj, 1)
        msgs.insert(1, ["not", "a", "message"])
        r = client.post(url + "/v1/chat/completions", content=orjson.dumps({"messages": msgs}))
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "messages[1]: must be an object (got list)"
        assert client.get(url + "/stats").json()["served"] == 2


async def test_root_path_goes_through_starlette(tmp_path):
    # a chat path under a root_path is not the front door's: Starlette strips the prefix
    traj = make_trajectory("root", 1)
    app = create_app(ReplayStore.load(write_store(tmp_path / "t.jsonl", [traj]), latency=parse_latency("instant")))
    transport = httpx.ASGITransport(app=app, root_path="/api")
    async with httpx.AsyncClient(transport=transport, base_url="http://replay") as client:
        r = await client.post("/api/v1/chat/completions", json={"messages": request_messages(traj, 0)})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == traj.turns[0].response.content


def test_turn_index_counts_every_assistant_message(tmp_path):
    # roles scanned in one pass: turn = number of assistant messages, key from the user
    # messages before the first assistant one, the system message found anywhere
    traj = make_trajectory("count", 3)
    path = write_store(tmp_path / "t.jsonl", [traj])
    with running_server(path) as url, httpx.Client() as client:
        msgs = request_messages(traj, 2)
        assert sum(m["role"] == "assistant" for m in msgs) == 2
        r = client.post(url + "/v1/chat/completions", json={"messages": msgs})
        assert r.json()["choices"][0]["message"]["content"] == traj.turns[2].response.content
        r = client.post(url + "/v1/chat/completions", json={"messages": [*msgs, {"role": "assistant"}] * 2})
        # 2 + 1 assistant messages, twice over: turn 6 is beyond the 3 recorded turns
        assert (r.status_code, r.json()["error"]["code"]) == (409, "beyond_turns")


@pytest.mark.parametrize(
    "text, code",
    [
        ("ls\nexit code 2", 2),
        ("EXIT STATUS: 4", 4),
        ("<returncode>7</returncode>\n<output>exit code 1</output>", 7),  # first pattern first
        ("<returncode>x</returncode> exited with code 3", 3),
        ("résumé: exit code 5", 5),  # not ASCII: the regex runs on the text as it is
        ("Größe: Exit_Code=6", 6),
        ("no status here " * 100, None),
    ],
)
def test_exit_code_in_with_substring_prechecks(text, code):
    from benchmaker.replay_server.store import exit_code_in

    assert exit_code_in(text) == code


@pytest.mark.parametrize("enabled", [True, False])
def test_store_load_leaves_the_gc_as_it_was(tmp_path, enabled):
    import gc

    path = write_store(tmp_path / "t.jsonl", [make_trajectory("gc", 2)])
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        store = ReplayStore.load(path, latency=parse_latency("instant"))
        assert gc.isenabled() is enabled
        assert store.n_turns == 2
        path.write_bytes(b"not json\n")
        with pytest.raises(TrajectoryFormatError, match="t.jsonl:1"):
            ReplayStore.load(path, latency=parse_latency("instant"))
        assert gc.isenabled() is enabled  # also after a failed load
    finally:
        (gc.enable if was else gc.disable)()


def test_store_match_equals_lookup_turn_then_lookup(tmp_path):
    # match() is the hot path's one call for lookup_turn, needs_system and lookup
    from benchmaker.replay_server.store import request_key
    from benchmaker.trajectories.context import request_messages as log_request_messages
    from benchmaker.trajectories.convert import iter_trajectories

    pi = Path(__file__).resolve().parents[1] / "data" / "cases" / "logs" / "pi-compaction-small.jsonl"
    edited = next(iter(iter_trajectories(pi)))
    a = make_trajectory("shared", 2, trajectory_id="a", system="S1")
    b = make_trajectory("shared", 2, trajectory_id="b", system="S2")
    store = ReplayStore.load(write_store(tmp_path / "t.jsonl", [edited, a, b]), latency=parse_latency("instant"))

    def old(key, n, system):
        text = None
        if system is not None and store.needs_system(key):
            text = flatten_content(system.get("content"))
        hit = store.lookup_turn(key, n)
        if hit is not None:
            return hit
        entry = store.lookup(key, text)
        return None if entry is None else (entry, n)

    cases = []
    for k in range(len(edited.turns)):  # turns before and after the compaction
        msgs = log_request_messages(edited, k)
        cases.append((*request_key(msgs), next((m for m in msgs if m["role"] == "system"), None)))
    for system in (
        {"role": "system", "content": "S2"},
        {"role": "system", "content": [{"type": "text", "text": "S2"}]},
        {"role": "system", "content": None},
        {"role": "system", "content": "other"},
        None,
    ):
        cases.append((a.match_key, 1, system))
    cases.append(("task:none", 0, None))
    assert any(store.lookup_turn(key, n) is not None for key, n, _ in cases)  # the edit's turns are in
    for key, n, system in cases:
        assert store.match(key, n, system) == old(key, n, system), (key, n, system)
    assert store.match(a.match_key, 1, {"role": "system", "content": "S2"})[0].trajectory_id == "b"
    assert store.match(a.match_key, 1, None)[0].trajectory_id == "a"
