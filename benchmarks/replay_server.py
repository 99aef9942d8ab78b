"""Replay server benchmark: requests per server CPU second of the replay
server beside a bare ASGI app on the same server stack, on each stack, in one run.

    .venv/bin/python benchmarks/replay_server.py [--requests 3000] [--rounds 9] [--block 0]
        [--concurrency 64] [--stacks h11,httptools,granian] [--stream]

What it does: writes a 100-turn store (10 trajectories x 10 turns, ~600 characters of
content, one tool call and a ~1 KB observation per turn) to a temp dir and starts, each
in its own process pinned to CPU 0 (`os.sched_setaffinity`), for every stack:
- the replay server (`python -m benchmaker.replay_server.server STORE --http STACK`, instant latency);
- the bare app (`--serve-bare`, this file): a raw ASGI callable that reads the same
  request body, parses it with orjson and answers a fixed JSON body of the size of a
  replayed turn with the same headers. It is the stack's limit for this request: HTTP
  parsing, ASGI dispatch, one JSON parse, the same response on the wire.
Stacks: `h11` (uvicorn, pure-Python h11 parser, asyncio loop), `httptools` (uvicorn,
httptools + uvloop: the fast stack the replay server uses by default), `granian`
(granian's Rust HTTP server, ASGI interface, one worker, uvloop; only when the
granian package is installed).

One client process pinned to the other CPUs (aiohttp on uvloop) sends every request
with the full conversation up to its turn, as an agent would (bodies grow to ~17 KB).
All servers run at once; a round sends `--requests` requests to each (300 warm-up
requests each first). By default (`--block 0`) they are interleaved: `--concurrency`
x servers workers each send request k to every server in turn, starting at a rotating
one, so every server sees the same bodies at the same moments (~`--concurrency` in
flight each) and a busy machine's slow and quick spells fall on all alike within a
round: two identical bare apps then agree within ~2% per round, against ~7% with
blocks. `--block N` sends blocks of N requests at `--concurrency` that take turns
(block 1 to each server, block 2 to each, ...), the earlier method.
A server's figure is requests / server CPU s, where server CPU s is the
CPU time of its process tree (its threads' /proc/.../schedstat, in ns; granian runs a
worker process) over the round. Per CPU second is the one-core capacity and is far less
disturbed by other work on a shared machine than a wall rate.

Printed per round: every figure. At the end, per stack: the median over rounds of the
replay server's and the bare app's requests per CPU s, the median of the per-round
ratios replay / bare (target >= 0.9 on the fast stack) with their range over the rounds,
the server CPU us per request the replay app adds over the bare app (median of the
per-round differences of 1 / figure), and the median of the per-round ratios of each
stack's replay figure to h11's (target >= 2 for httptools).
Every response is checked (the same client work for every server): the replay
server's must be 200 and carry the recorded turn's content byte-equal; the bare app's
200 and its fixed content. With --stream the replay server on each stack also streams
the same requests once (instant latency), each checked to end with `data: [DONE]`.
Server RSS (VmRSS, KiB) of each replay server after the last round is printed. Exit
code 1 when a response is wrong, a miss is counted in /stats, or a target fails.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmaker.trajectories.trajectory import (  # noqa: E402
    Observation,
    Response,
    Source,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    match_key_for,
)

N_TRAJ = 10
N_TURNS = 10
WARMUP = 300
STACKS = ("h11", "httptools", "granian")
FAST = "httptools"


def _build_store(path: Path) -> list[tuple[bytes, str]]:
    """Write the store; return (request body, expected content) per turn."""
    requests: list[tuple[bytes, str]] = []
    with path.open("w", encoding="utf-8") as fh:
        for i in range(N_TRAJ):
            first_user = f"task_id: bench-{i}\nFix the failing test in module {i}. " + "details " * 40
            system = "You are a coding agent. " * 20
            turns = []
            for t in range(N_TURNS):
                content = f"Step {t} of task {i}: I will inspect the code. " * 12
                turns.append(
                    Turn(
                        index=t,
                        response=Response(
                            content=content,
                            tool_calls=[
                                ToolCall(
                                    id=f"call_{i}_{t}",
                                    name="bash",
                                    arguments_raw=orjson.dumps({"command": f"grep -rn foo src/{t}"}).decode(),
                                    arguments={"command": f"grep -rn foo src/{t}"},
                                )
                            ],
                            finish_reason="tool_calls",
                        ),
                        usage=Usage(prompt_tokens=1000 + t * 300, completion_tokens=150, total_tokens=1150 + t * 300),
                        observations=[
                            Observation(
                                tool_call_id=f"call_{i}_{t}",
                                name="bash",
                                content=f"src/{t}/a.py:1: foo = 1\n" * 40,
                                exit_code=0,
                            )
                        ],
                    )
                )
            traj = Trajectory(
                trajectory_id=f"bench-{i}",
                source=Source(format="bench", path="-", sha256="0"),
                match_key=match_key_for(first_user),
                model="bench-model",
                system=system,
                first_user=first_user,
                turns=turns,
            )
            fh.write(traj.model_dump_json() + "\n")
            messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": first_user}]
            for turn in turns:
                body = orjson.dumps({"model": "bench-model", "messages": messages})
                requests.append((body, turn.response.content or ""))
                tc = turn.response.tool_calls[0]
                messages = [
                    *messages,
                    {
                        "role": "assistant",
                        "content": turn.response.content,
                        "tool_calls": [
                            {
                                "id": tc.id,
                                "type": "function",
                                "function": {"name": tc.name, "arguments": tc.arguments_raw},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": tc.id, "content": turn.observations[0].content},
                ]
    return requests


# -- the bare app (the stack's limit) -------------------------------------------------

# the same response on the wire as a replayed turn of this store: a 946-byte JSON body
# (~600 characters of content, a tool call, usage) and the replay server's two
# x-replay-* headers (the HTTP work of answering is the stack's, not the app's)
_BARE_CONTENT = "x" * 827
_BARE_REPLY = orjson.dumps(
    {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": _BARE_CONTENT}, "finish_reason": "stop"}],
    }
)
_BARE_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(_BARE_REPLY)).encode()),
    (b"x-replay-trajectory", b"bench-0"),
    (b"x-replay-turn", b"0"),
]


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Raw ASGI: read the request body, orjson-parse it (a GET has none), answer 200 with
    a fixed 946-byte JSON body and the replay server's headers. Answers lifespan events."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(parts)
    if body:
        orjson.loads(body)
    await send({"type": "http.response.start", "status": 200, "headers": _BARE_HEADERS})
    await send({"type": "http.response.body", "body": _BARE_REPLY})


def granian_replay_app() -> Any:
    """Granian factory: the replay app over the store named by BENCH_REPLAY_STORE."""
    from benchmaker.replay_server.latency import parse_latency
    from benchmaker.replay_server.server import create_app
    from benchmaker.replay_server.store import ReplayStore

    store = ReplayStore.load(Path(os.environ["BENCH_REPLAY_STORE"]), latency=parse_latency("instant"))
    return create_app(store)


def _serve_bare(http: str) -> None:
    from benchmaker.replay_server.server import bind_socket, run_uvicorn

    sock, url = bind_socket("127.0.0.1", 0)
    print(url, flush=True)
    run_uvicorn(bare_app, sock, http=http)


# -- server processes -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """A server child process pinned to `cpu`; `url` its base URL."""

    def __init__(self, name: str, cmd: list[str], cpu: int, env: dict[str, str], port: int | None) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True, cwd=REPO
        )
        os.sched_setaffinity(self.proc.pid, [cpu])
        if port is None:
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            if not line.startswith("http://"):
                self.proc.kill()
                raise RuntimeError(f"{name}: server did not print its URL (got {line!r})")
            self.url = line.strip()
        else:
            self.url = f"http://127.0.0.1:{port}"
        self._wait_ready()

    def _wait_ready(self) -> None:
        import urllib.request

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}: server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.name}: server not ready after 30 s")

    def pids(self) -> list[int]:
        """The server process and its descendants (granian's worker)."""
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                todo.extend(int(c) for c in task.read_text().split())
        return out

    def cpu_s(self) -> float:
        """CPU time of the process tree in s: the sum over its threads of
        /proc/<pid>/task/<tid>/schedstat field 1 (ns on CPU; utime + stime in ns
        resolution rather than clock ticks)."""
        ns = 0
        for pid in self.pids():
            for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
                ns += int(stat.read_text().split()[0])
        return ns / 1e9

    def rss_kib(self) -> int:
        total = 0
        for pid in self.pids():
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total

    def stats(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(self.url + "/stats", timeout=5) as resp:
            return orjson.loads(resp.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _start(stack: str, app: str, store: Path, cpu: int) -> _Server:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), str(REPO / "benchmarks"), env.get("PYTHONPATH")) if p)
    py = sys.executable
    if stack == "granian":
        port = _free_port()
        env["BENCH_REPLAY_STORE"] = str(store)
        target = "replay_server:granian_replay_app" if app == "replay" else "replay_server:bare_app"
        cmd = [
            py,
            "-m",
            "granian",
            "--interface",
            "asgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--loop",
            "uvloop",
            "--log-level",
            "warning",
            "--no-ws",
            target,
        ]
        if app == "replay":
            cmd.insert(-1, "--factory")
        return _Server(f"{app}/{stack}", cmd, cpu, env, port)
    if app == "replay":
        cmd = [py, "-m", "benchmaker.replay_server.server", str(store), "--http", stack]
    else:
        cmd = [py, str(Path(__file__).resolve()), "--serve-bare", stack]
    return _Server(f"{app}/{stack}", cmd, cpu, env, None)


# -- the client process -----------------------------------------------------------------


async def _drive(
    targets: list[tuple[str, bool]],
    requests: list[tuple[bytes, str]],
    n: int,
    concurrency: int,
    stream: bool,
    block: int,
) -> tuple[float, int]:
    """Send `n` requests to each of `targets` ((url, replay?)): `block` <= 0, interleaved
    (concurrency x targets workers, each sending request k to every target in turn from
    a rotating first one); else in blocks of `block` requests taking turns (block 1 to
    every target, block 2 to every target, ...), each block at `concurrency`. Either
    way every target sees the same bodies. Returns (wall s, bad responses)."""
    import aiohttp

    bad = 0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(url: str, replay: bool, k: int) -> None:
            nonlocal bad
            body, expected = requests[k % len(requests)]
            if stream:
                body = body[:-1] + b',"stream":true}'
            async with session.post(url, data=body, headers={"content-type": "application/json"}) as resp:
                data = await resp.read()
            if resp.status != 200:
                bad += 1
            elif stream:
                bad += not data.endswith(b"data: [DONE]\n\n")
            # the same client work for every server (a slower client would offer a
            # server fewer requests per wake-up): parse and compare the content
            elif orjson.loads(data)["choices"][0]["message"]["content"] != (expected if replay else _BARE_CONTENT):
                bad += 1

        async def worker(url: str, replay: bool, counter: Any) -> None:
            for k in counter:
                await post(url, replay, k)

        async def interleaved(counter: Any) -> None:
            for k in counter:  # request k to every target, starting at a rotating one
                for j in range(len(targets)):
                    await post(*targets[(k + j) % len(targets)], k)

        start = time.perf_counter()
        if block <= 0:
            counter = iter(range(n))
            await asyncio.gather(*(interleaved(counter) for _ in range(concurrency * len(targets))))
            return time.perf_counter() - start, bad
        for first in range(0, n, block):
            for url, replay in targets:
                counter = iter(range(first, min(first + block, n)))
                await asyncio.gather(*(worker(url, replay, counter) for _ in range(concurrency)))
        return time.perf_counter() - start, bad


def _client(store_path: str, cpus: list[int], conn: Any) -> None:
    """Client process: build the requests once, then serve (targets, n, concurrency,
    stream, block) commands from `conn` with (wall s, bad responses) until None."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    requests = _build_store(Path(store_path + ".client"))
    import uvloop

    while (cmd := conn.recv()) is not None:
        targets, n, concurrency, stream, block = cmd
        conn.send(uvloop.run(_drive(targets, requests, n, concurrency, stream, block)))


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3_000, help="measured requests per server per round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--block",
        type=int,
        default=0,
        help="requests per server per turn within a round (0: interleaved, request by request)",
    )
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight per server")
    parser.add_argument(
        "--stacks",
        default=",".join(STACKS),
        help="comma-separated subset of h11,httptools,granian (granian needs the package)",
    )
    parser.add_argument(
        "--stream", action="store_true", help="also stream the requests once from each replay server (instant latency)"
    )
    parser.add_argument("--serve-bare", metavar="HTTP", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        _serve_bare(args.serve_bare)
        return 0

    stacks = [s for s in args.stacks.split(",") if s]
    if "granian" in stacks:
        try:
            import granian  # noqa: F401
        except ImportError:
            print("granian not installed: its stack is left out")
            stacks.remove("granian")
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[0]
    client_cpus = cpus[1:] or cpus
    servers: dict[tuple[str, str], _Server] = {}
    ctx = mp.get_context("spawn")
    conn, child = ctx.Pipe()
    bad = misses = 0
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store_path = Path(tmp) / "trajectories.jsonl"
        _build_store(store_path)
        client = ctx.Process(target=_client, args=(str(store_path), client_cpus, child))
        client.start()

        def run(srvs: list[_Server], n: int, stream: bool = False) -> tuple[float, int]:
            conn.send(
                (
                    [(srv.url + "/v1/chat/completions", srv.name.startswith("replay")) for srv in srvs],
                    n,
                    args.concurrency,
                    stream,
                    args.block,
                )
            )
            return conn.recv()

        try:
            for stack in stacks:
                for app in ("replay", "bare"):
                    servers[(stack, app)] = _start(stack, app, store_path, server_cpu)
            order = list(servers.values())
            run(order, WARMUP)
            print(
                f"store: {N_TRAJ} trajectories x {N_TURNS} turns (request bodies 1.6-17 KB); servers on CPU "
                f"{server_cpu}, aiohttp client on CPUs {client_cpus}, concurrency {args.concurrency}, "
                f"{args.requests} requests per server per round, "
                + (
                    f"in blocks of {args.block} taking turns over the {len(order)} servers"
                    if args.block > 0
                    else f"interleaved request by request over the {len(order)} servers"
                )
            )
            for rnd in range(1, args.rounds + 1):
                cpu0 = {key: srv.cpu_s() for key, srv in servers.items()}
                # the order of the servers within a cycle flips every round
                elapsed, nbad = run(order if rnd % 2 else order[::-1], args.requests)
                bad += nbad
                cells = []
                for key, srv in servers.items():
                    rate = args.requests / max(srv.cpu_s() - cpu0[key], 1e-9)
                    figures.setdefault(key, []).append(rate)
                    cells.append(f"{key[1]}/{key[0]} {rate:>6,.0f}")
                print(
                    f"  round {rnd}: req per server CPU s: "
                    + "  ".join(cells)
                    + f"  ({args.requests * len(order) / elapsed:,.0f} req/s wall in all)"
                )
            stream_bad = 0
            if args.stream:
                for stack in stacks:
                    elapsed, nbad = run([servers[(stack, "replay")]], args.requests, stream=True)
                    stream_bad += nbad
                    print(
                        f"  streaming (instant) on {stack}: {args.requests / elapsed:,.0f} req/s wall; "
                        f"incomplete streams {nbad}"
                    )
            bad += stream_bad
            rss = {stack: servers[(stack, "replay")].rss_kib() for stack in stacks}
            for stack in stacks:
                misses += servers[(stack, "replay")].stats()["misses"]["total"]
        finally:
            conn.send(None)
            client.join()
            for srv in servers.values():
                srv.stop()

    rows = []
    ok = True
    h11 = figures.get(("h11", "replay"))
    print(
        f"\n{'stack':<10} {'replay req/CPU s':>17} {'bare req/CPU s':>15} {'replay/bare':>12} {'range':>12} "
        f"{'replay us over bare':>20} {'replay/h11 replay':>18} {'RSS KiB':>9}"
    )
    for stack in stacks:
        rep, bare = figures[(stack, "replay")], figures[(stack, "bare")]
        ratios = [r / b for r, b in zip(rep, bare, strict=False)]
        ratio = _median(ratios)
        over_us = _median([(1 / r - 1 / b) * 1e6 for r, b in zip(rep, bare, strict=False)])
        vs_h11 = _median([r / h for r, h in zip(rep, h11, strict=False)]) if h11 else None
        rows.append((stack, ratio, vs_h11))
        print(
            f"{stack:<10} {_median(rep):>17,.0f} {_median(bare):>15,.0f} {ratio:>12.3f} "
            f"{f'{min(ratios):.3f}-{max(ratios):.3f}':>12} {over_us:>20.1f} "
            f"{'-' if vs_h11 is None else f'{vs_h11:.2f}':>18} {rss[stack]:>9,}"
        )
    print(
        "(medians over rounds; ratios are medians of the per-round ratios, range their min-max; replay us over"
        " bare: server CPU us per request the replay app adds, median of the per-round differences)"
    )
    for stack, ratio, vs_h11 in rows:
        if stack == FAST:
            ok &= ratio >= 0.9
            print(f"target replay/bare on {FAST} >= 0.9: {ratio:.3f} {'PASS' if ratio >= 0.9 else 'FAIL'}")
            if vs_h11 is not None:
                ok &= vs_h11 >= 2.0
                print(
                    f"target replay on {FAST} / replay on h11 >= 2: {vs_h11:.2f} {'PASS' if vs_h11 >= 2.0 else 'FAIL'}"
                )
    print(f"wrong responses: {bad}; misses: {misses}")
    return 0 if ok and not bad and not misses else 1


if __name__ == "__main__":
    sys.exit(main())
