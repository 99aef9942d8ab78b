"""Replay server benchmark: non-streaming throughput on one core and memory over 10,000
requests (issue #3: target >= 3,000 req/s, memory flat).

    .venv/bin/python benchmarks/replay_server.py [--requests 10000] [--concurrency 64] [--stream]

What it does: writes a 100-turn store (10 trajectories x 10 turns, ~600 characters of
content, one tool call and a ~1 KB observation per turn) to a temp dir; starts the
server with `replay.process.start_replay_server` (instant latency) and pins it to CPU 0
(`os.sched_setaffinity`); runs an aiohttp client in a separate process pinned to the
other CPUs, each request carrying the full conversation up to its turn as an agent
would (so request bodies grow to ~17 KB). It checks that every response is 200 and
byte-equal to the recorded turn's content, then prints:
- throughput: requests / wall time of the measured phase (req/s), client side;
- server CPU: utime + stime of the server process over the measured phase, and
  requests per CPU-second (the one-core capacity, robust to a busy machine);
- RSS of the server (VmRSS from /proc/<pid>/status, KiB) after a 1,000-request warm-up
  and after the measured requests, and their difference;
- with --stream, the same requests streamed (instant latency), each checked to end
  with `data: [DONE]`.
Exit code 1 when a response is wrong or a miss is counted in /stats.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from replay.process import start_replay_server  # noqa: E402
from replay.trajectory import (  # noqa: E402
    Observation, Response, Source, ToolCall, Trajectory, Turn, Usage, match_key_for,
)

N_TRAJ = 10
N_TURNS = 10


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
                turns.append(Turn(
                    index=t,
                    response=Response(
                        content=content,
                        tool_calls=[ToolCall(id=f"call_{i}_{t}", name="bash",
                                             arguments_raw=orjson.dumps({"command": f"grep -rn foo src/{t}"}).decode(),
                                             arguments={"command": f"grep -rn foo src/{t}"})],
                        finish_reason="tool_calls"),
                    usage=Usage(prompt_tokens=1000 + t * 300, completion_tokens=150, total_tokens=1150 + t * 300),
                    observations=[Observation(tool_call_id=f"call_{i}_{t}", name="bash",
                                              content=f"src/{t}/a.py:1: foo = 1\n" * 40, exit_code=0)],
                ))
            traj = Trajectory(trajectory_id=f"bench-{i}", source=Source(format="bench", path="-", sha256="0"),
                              match_key=match_key_for(first_user), model="bench-model", system=system,
                              first_user=first_user, turns=turns)
            fh.write(traj.model_dump_json() + "\n")
            messages: list[dict] = [{"role": "system", "content": system},
                                    {"role": "user", "content": first_user}]
            for turn in turns:
                body = orjson.dumps({"model": "bench-model", "messages": messages})
                requests.append((body, turn.response.content or ""))
                tc = turn.response.tool_calls[0]
                messages = [*messages,
                            {"role": "assistant", "content": turn.response.content,
                             "tool_calls": [{"id": tc.id, "type": "function",
                                             "function": {"name": tc.name, "arguments": tc.arguments_raw}}]},
                            {"role": "tool", "tool_call_id": tc.id, "content": turn.observations[0].content}]
    return requests


async def _drive(url: str, requests: list[tuple[bytes, str]], n: int, concurrency: int,
                 stream: bool) -> tuple[float, int]:
    import aiohttp

    bad = 0
    counter = iter(range(n))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker() -> None:
            nonlocal bad
            for k in counter:
                body, expected = requests[k % len(requests)]
                if stream:
                    body = body[:-1] + b',"stream":true}'
                async with session.post(url, data=body,
                                        headers={"content-type": "application/json"}) as resp:
                    data = await resp.read()
                if resp.status != 200:
                    bad += 1
                elif stream:
                    bad += not data.endswith(b"data: [DONE]\n\n")
                elif orjson.loads(data)["choices"][0]["message"]["content"] != expected:
                    bad += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - start, bad


def _client(url: str, store_path: str, n: int, concurrency: int, cpus: list[int], stream: bool,
            out) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    requests = _build_store(Path(store_path + ".client"))
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    elapsed, bad = asyncio.run(_drive(url, requests, n, concurrency, stream))
    out.send((elapsed, bad))


def _run_client(url: str, store_path: Path, n: int, concurrency: int, cpus: list[int],
                stream: bool = False) -> tuple[float, int]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_client, args=(url, str(store_path), n, concurrency, cpus, stream, child))
    proc.start()
    result = parent.recv()
    proc.join()
    return result


def _cpu_s(pid: int) -> float:
    """utime + stime of `pid` in s (/proc/<pid>/stat fields 14 and 15, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--stream", action="store_true",
                        help="also measure streaming (instant latency) throughput")
    args = parser.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[0]
    client_cpus = cpus[1:] or cpus
    with tempfile.TemporaryDirectory() as tmp:
        store_path = Path(tmp) / "trajectories.jsonl"
        _build_store(store_path)
        with start_replay_server(store_path) as srv:
            os.sched_setaffinity(srv.pid, [server_cpu])
            url = srv.url + "/v1/chat/completions"
            _run_client(url, store_path, args.warmup, args.concurrency, client_cpus)
            rss_before = _rss_kib(srv.pid)
            cpu_before = _cpu_s(srv.pid)
            elapsed, bad = _run_client(url, store_path, args.requests, args.concurrency, client_cpus)
            cpu_s = _cpu_s(srv.pid) - cpu_before
            rss_after = _rss_kib(srv.pid)
            stream_result = None
            if args.stream:
                stream_result = _run_client(url, store_path, args.requests, args.concurrency,
                                            client_cpus, stream=True)
            stats = srv.stats()
    rate = args.requests / elapsed
    print(f"store: {N_TRAJ} trajectories x {N_TURNS} turns; server on CPU {server_cpu}, "
          f"aiohttp client on CPUs {client_cpus}, concurrency {args.concurrency}")
    print(f"non-streaming throughput: {rate:,.0f} req/s ({args.requests} requests in {elapsed:.2f} s; "
          f"target >= 3,000)")
    print(f"server CPU: {cpu_s:.2f} s for {args.requests} requests = "
          f"{args.requests / max(cpu_s, 1e-9):,.0f} req per CPU-second (capacity of one core "
          f"when the CPU is not shared; the wall rate above drops when other processes compete)")
    print(f"server RSS: {rss_before} KiB after {args.warmup} warm-up requests, {rss_after} KiB after "
          f"{args.requests} more (delta {rss_after - rss_before:+d} KiB)")
    if stream_result is not None:
        print(f"streaming throughput (instant): {args.requests / stream_result[0]:,.0f} req/s; "
              f"incomplete streams: {stream_result[1]}")
        bad += stream_result[1]
    print(f"wrong responses: {bad}; misses: {stats['misses']['total']}; served: {stats['served']}")
    return 1 if bad or stats["misses"]["total"] else 0


if __name__ == "__main__":
    sys.exit(main())
