"""Long sessions: client CPU per turn of a replayed episode at turn 10
vs turn 400, beside the JSON serialisation cost of that turn's request body.

    .venv/bin/python benchmarks/long_session.py [--stream] [--window 5] [--rounds 5]

Needs the real pi session ../shared/data/real/pi-session-v1-large.jsonl (453 turns;
its late requests carry ~0.9 MB of history each); exits 0 with a note when absent.

The session is converted (benchmaker.trajectories.convert), served by `python -m benchmaker.replay_server.server` in its
own process (instant latency), and played `--rounds` times by benchmaker.agent.harness.run_episode
in mode "recorded" in this process, with no other work in it, each on a fresh uvloop
event loop (benchmaker.engine.runner.run_on_fresh_loop, the loop replay sweep points run on).
ModelClient.stream (each model call of the harness) is wrapped to stamp
time.process_time() as each call starts: client CPU of turn t = the stamp of call t+1 -
the stamp of call t (building the next request from the history, encoding and sending
it, reading and parsing the response, the episode's bookkeeping; the server's CPU is in
its own process); per turn, the median over the rounds. The call's exchange
(benchmaker.engine.request.RequestExchange, its open and close) is wrapped too, to split that CPU in three:
`request` from the call's start to the response headers (the body built from the
history's kept bytes, benchmaker.agent.model_client.MessageLog, and sent; the wait for the
headers), `response` from the headers to the body's end (reads and the stream parser),
`rest` from there to the next call (the episode's bookkeeping, the next turn's block).
After the runs, for each turn the request body the harness sent (benchmaker.trajectories.context.request_messages,
`model_client.ModelClient.body`) is serialised again, timed with orjson.dumps (the
floor of serialising the body from scratch) and json.dumps + encode (what ModelClient
did before ModelClient.encode used orjson), median of 5 each.

The HTTP client's own share, measured on the same server with the same bodies (the
window's middle turn, already encoded; client CPU per call, median of 5 interleaved
rounds of 50 calls): `aiohttp` = a bare aiohttp ClientSession post + `read()` (the
library ModelClient sends with), `raw` = the same exchange on the engine's own HTTP/1.1
client (benchmaker.engine.http1.RawTransport: one write, llhttp parse, body chunks read).
client CPU - aiohttp is what ModelClient, the harness and the parser add on top of the
library; aiohttp - raw is what moving ModelClient onto the engine's transport would
save; (client CPU - raw) / orjson is what ModelClient, the harness and the parser add
on top of the bare exchange, in units of the body's serialisation (the exchange itself,
mostly the kernel's loopback send of the body and the wake-up for the reply, is raw).

Printed for the turns around 10 and around 400 (`--window` turns either side, medians):
body MB, client CPU ms per turn, orjson ms, json ms, client CPU / orjson, the request
side / orjson, the response side in ms and, streamed, in us per token event (events per
turn beside it), the rest, the aiohttp and raw exchanges / orjson, and (client CPU -
raw) / orjson.
Target (the per-turn cost grows with the body only as the body's own
serialisation does): non-streamed, client CPU per turn <= 3x the serialisation cost at
both turns. Streamed, a turn also parses every event of its response (~25-6,500 per turn
in this session, a cost that grows with the response, not the request), so the 3x is
only meaningful for the request side: request <= 3x orjson, the response side given per
event. Exit 1 when the target fails or the episode ends before turn 400 + window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmaker.agent import model_client  # noqa: E402
from benchmaker.agent.harness import run_episode  # noqa: E402
from benchmaker.engine.request import RequestExchange  # noqa: E402
from benchmaker.engine.runner import run_on_fresh_loop  # noqa: E402
from benchmaker.replay_server.process import start_replay_server  # noqa: E402
from benchmaker.trajectories.context import request_messages  # noqa: E402
from benchmaker.trajectories.convert import convert_paths, read_trajectories  # noqa: E402

REAL = REPO.parent / "shared" / "data" / "real" / "pi-session-v1-large.jsonl"


def _timed(fn, repeat: int = 5) -> float:
    """Median s of `repeat` calls of fn()."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


async def _client_floors(base_url: str, payload: bytes, calls: int = 50, rounds: int = 5) -> tuple[float, float]:
    """(aiohttp s, raw s): client CPU per exchange of `payload` with the replay server at
    `base_url`, by a bare aiohttp session (post + read) and by the engine's RawTransport
    (module doc); medians of `rounds` interleaved rounds of `calls` exchanges. Raises
    RuntimeError when a response is not 200."""
    import aiohttp

    from benchmaker.engine.http1 import RawTransport
    from benchmaker.engine.records import RequestSpec

    url = base_url + "/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    spec = RequestSpec("POST", url, headers, payload)
    transport = RawTransport()
    await transport.start()
    lib: list[float] = []
    raw: list[float] = []
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
            for _ in range(rounds):
                t0 = time.process_time()
                for _ in range(calls):
                    async with session.post(url, data=payload, headers=headers) as resp:
                        await resp.read()
                        if resp.status != 200:
                            raise RuntimeError(f"aiohttp exchange: HTTP {resp.status}")
                lib.append((time.process_time() - t0) / calls)
                t0 = time.process_time()
                for _ in range(calls):
                    async with transport.stream(spec) as resp:
                        async for _data in resp.chunks():
                            pass
                        if resp.status != 200:
                            raise RuntimeError(f"raw exchange: HTTP {resp.status}")
                raw.append((time.process_time() - t0) / calls)
    finally:
        await transport.aclose()
    return statistics.median(lib), statistics.median(raw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stream", action="store_true", help="stream the responses (default: non-streaming)")
    ap.add_argument("--window", type=int, default=5, help="turns either side of 10 and 400 (default 5)")
    ap.add_argument("--rounds", type=int, default=5, help="episodes played; per-turn CPU is their median")
    args = ap.parse_args()
    if not REAL.exists():
        print(f"{REAL} is absent: no long session to replay (skipped)")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-long-") as tmp:
        traj_path = Path(tmp) / "trajectories.jsonl"
        convert_paths([REAL], traj_path)
        traj = next(iter(read_trajectories(traj_path)))
        stamps: list[tuple[int, float]] = []  # (phase, process_time) in order
        orig_stream = model_client.ModelClient.stream
        orig_open = RequestExchange.open
        orig_close = RequestExchange.close
        clock = time.process_time

        def stream(self, messages, **kwargs):
            stamps.append((_CALL, clock()))
            return orig_stream(self, messages, **kwargs)

        async def open_(self, transport, spec):
            out = await orig_open(self, transport, spec)
            stamps.append((_HEADERS, clock()))
            return out

        async def close(self):
            stamps.append((_END, clock()))
            return await orig_close(self)

        client = model_client.ModelClient("http://unused")
        per_round: list[list[list[float]]] = []  # round -> turn -> [total, request, response, rest]
        events: list[int] = []
        floors: dict[int, tuple[float, float]] = {}
        with start_replay_server(traj_path, startup_timeout_s=60) as srv:
            for _ in range(args.rounds):
                stamps.clear()
                model_client.ModelClient.stream = stream
                RequestExchange.open = open_
                RequestExchange.close = close
                try:
                    t0 = time.perf_counter()
                    result = run_on_fresh_loop(run_episode(traj, srv.url, mode="recorded", stream=args.stream))
                    wall = time.perf_counter() - t0
                    stamps.append((_CALL, clock()))
                finally:
                    model_client.ModelClient.stream = orig_stream
                    RequestExchange.open = orig_open
                    RequestExchange.close = orig_close
                per_round.append(_phases(stamps))
                events = [len(c.sample.token_event_ns or ()) for c in result.calls]
                print(
                    f"episode: {len(per_round[-1])} of {len(traj.turns)} turns played in {wall:.1f} s, outcome "
                    f"{result.episode.outcome} ({'streaming' if args.stream else 'non-streaming'})"
                )
            for centre in (10, 400):
                if centre < len(traj.turns):
                    payload = client.encode(
                        client.body(request_messages(traj, centre), stream=args.stream, model=traj.model)
                    )
                    floors[centre] = run_on_fresh_loop(_client_floors(srv.url, payload))
    turns = min(len(r) for r in per_round)
    cpu = [[statistics.median(r[t][k] for r in per_round) for k in range(4)] for t in range(turns)]
    ok = True
    rows = []
    for centre in (10, 400):
        lo, hi = max(0, centre - args.window), centre + args.window
        if hi >= turns:
            print(f"turn {centre}: the episode ended at turn {turns - 1}")
            ok = False
            continue
        sizes, fast, slow = [], [], []
        for t in range(lo, hi + 1):
            body = client.body(request_messages(traj, t), stream=args.stream)
            sizes.append(len(orjson.dumps(body)))
            fast.append(_timed(lambda body=body: orjson.dumps(body)))
            slow.append(_timed(lambda body=body: json.dumps(body).encode()))
        c, req, resp, rest = (statistics.median(cpu[t][k] for t in range(lo, hi + 1)) for k in range(4))
        n_ev = statistics.median(events[lo : hi + 1])
        per_event = (
            statistics.median(cpu[t][2] / events[t] for t in range(lo, hi + 1) if events[t])
            if any(events[lo : hi + 1])
            else None
        )
        f, s = statistics.median(fast), statistics.median(slow)
        rows.append((centre, statistics.median(sizes), c, f, s, req, resp, n_ev, per_event, rest, *floors[centre]))
        ok &= (req if args.stream else c) <= 3 * f
    print(
        f"\n{'turn':>5} {'body MB':>8} {'client CPU ms':>14} {'orjson ms':>10} {'json ms':>8}"
        f" {'CPU/orjson':>11} {'request/orjson':>15} {'response ms':>12} {'events':>7} {'us/event':>9}"
        f" {'rest ms':>8} {'aiohttp/orjson':>15} {'raw/orjson':>11} {'(CPU-raw)/orjson':>17}"
    )
    for centre, size, c, f, s, req, resp, n_ev, per_event, rest, lib, raw in rows:
        ev = "-" if per_event is None else f"{per_event * 1e6:.1f}"
        print(
            f"{centre:>5} {size / 1e6:>8.3f} {c * 1e3:>14.3f} {f * 1e3:>10.3f} {s * 1e3:>8.3f} {c / f:>11.1f}"
            f" {req / f:>15.1f} {resp * 1e3:>12.3f} {n_ev:>7.0f} {ev:>9} {rest * 1e3:>8.3f} {lib / f:>15.1f}"
            f" {raw / f:>11.1f} {(c - raw) / f:>17.1f}"
        )
    what = "request side (build + send, to the response headers)" if args.stream else "client CPU per turn"
    print(
        f"(medians over turns {args.window} either side and {args.rounds} episodes; request + response + rest = "
        f"client CPU; aiohttp and raw: one exchange of the middle turn's body; orjson: the body serialised "
        f"from scratch, which the harness no longer does (MessageLog); (CPU-raw)/orjson: what the client, "
        f"harness and parser add to the bare exchange)"
    )
    if args.stream:
        print(
            "streamed: each turn also parses its response's token events, a cost of the response, not of the "
            "request; the 3x target is only meaningful for the request side, the response side is per event"
        )
    print(f"target {what} <= 3x orjson: {'PASS' if ok else 'FAIL'}")
    total = sum(row[0] for row in cpu)
    print(f"client CPU over the episode: {total:.2f} s for {turns} turns")
    return 0 if ok else 1


_CALL, _HEADERS, _END = 0, 1, 2


def _phases(stamps: list[tuple[int, float]]) -> list[list[float]]:
    """Per turn [total, request, response, rest] CPU s from the stamps of one episode:
    (_CALL, t) as each call starts (and once after the episode), (_HEADERS, t) when its
    response headers arrived, (_END, t) when its body ended; a call without headers
    (failed before them) counts its whole time as request."""
    out: list[list[float]] = []
    starts = [i for i, (kind, _) in enumerate(stamps) if kind == _CALL]
    for a, b in zip(starts, starts[1:], strict=False):
        t0, t1 = stamps[a][1], stamps[b][1]
        marks = {kind: t for kind, t in stamps[a + 1 : b]}
        headers = marks.get(_HEADERS, t1)
        end = marks.get(_END, headers)
        out.append([t1 - t0, headers - t0, end - headers, t1 - end])
    return out


if __name__ == "__main__":
    sys.exit(main())
