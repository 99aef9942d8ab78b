"""Long sessions (issue #17 item 4): client CPU per turn of a replayed episode at turn 10
vs turn 400, beside the JSON serialisation cost of that turn's request body.

    .venv/bin/python benchmarks/long_session.py [--stream] [--window 5] [--rounds 3]

Needs the real pi session ../shared/data/real/pi-session-v1-large.jsonl (453 turns;
its late requests carry ~0.9 MB of history each); exits 0 with a note when absent.

The session is converted (replay.convert), served by `python -m replay.server` in its
own process (instant latency), and played `--rounds` times by replay.harness.run_episode
in mode "recorded" in this process, with no other work in it, each on a fresh uvloop
event loop (benchmaker.runner.run_on_fresh_loop, the loop replay sweep points run on).
ModelClient.stream (each model call of the harness) is wrapped to stamp
time.process_time() as each call starts: client CPU of turn t = the stamp of call t+1 -
the stamp of call t (building the next request from the history, encoding and sending
it, reading and parsing the response, the episode's bookkeeping; the server's CPU is in
its own process); per turn, the median over the rounds. After the runs, for each turn
the request body the harness sent (replay.context.request_messages,
`model_client.ModelClient.body`) is serialised again, timed with orjson.dumps (the
floor) and json.dumps + encode (what ModelClient did before ModelClient.encode used
orjson), median of 5 each.

The HTTP client's own share, measured on the same server with the same bodies (the
window's middle turn, already encoded; client CPU per call, median of 5 interleaved
rounds of 50 calls): `aiohttp` = a bare aiohttp ClientSession post + `read()` (the
library ModelClient sends with), `raw` = the same exchange on the engine's own HTTP/1.1
client (benchmaker.http1.RawTransport: one write, llhttp parse, body chunks read).
client CPU - aiohttp is what ModelClient, the harness and the parser add on top of the
library; aiohttp - raw is what moving ModelClient onto the engine's transport would
save.

Printed for the turns around 10 and around 400 (`--window` turns either side, medians):
body MB, client CPU ms per turn, orjson ms, json ms, client CPU / orjson, and the
aiohttp and raw exchanges / orjson. Target:
client CPU per turn <= 3x the serialisation cost at both (issue #17: the per-turn cost
grows with the body, and only as the body's own serialisation does). Exit 1 when the
target fails or the episode ends before turn 400 + window.
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

from replay import model_client  # noqa: E402
from replay.context import request_messages  # noqa: E402
from replay.convert import convert_paths, read_trajectories  # noqa: E402
from replay.harness import run_episode  # noqa: E402
from replay.process import start_replay_server  # noqa: E402
from benchmaker.runner import run_on_fresh_loop  # noqa: E402

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

    from benchmaker.http1 import RawTransport
    from benchmaker.records import RequestSpec

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
    ap.add_argument("--rounds", type=int, default=3, help="episodes played; per-turn CPU is their median")
    args = ap.parse_args()
    if not REAL.exists():
        print(f"{REAL} is absent: no long session to replay (skipped)")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-long-") as tmp:
        traj_path = Path(tmp) / "trajectories.jsonl"
        convert_paths([REAL], traj_path)
        traj = next(iter(read_trajectories(traj_path)))
        stamps: list[float] = []
        orig_stream = model_client.ModelClient.stream

        def stream(self, messages, **kwargs):  # type: ignore[no-untyped-def]
            stamps.append(time.process_time())
            return orig_stream(self, messages, **kwargs)

        client = model_client.ModelClient("http://unused")
        per_round: list[list[float]] = []
        floors: dict[int, tuple[float, float]] = {}
        with start_replay_server(traj_path, startup_timeout_s=60) as srv:
            for _ in range(args.rounds):
                stamps.clear()
                model_client.ModelClient.stream = stream  # type: ignore[method-assign]
                try:
                    t0 = time.perf_counter()
                    result = run_on_fresh_loop(run_episode(traj, srv.url, mode="recorded", stream=args.stream))
                    wall = time.perf_counter() - t0
                    stamps.append(time.process_time())
                finally:
                    model_client.ModelClient.stream = orig_stream  # type: ignore[method-assign]
                per_round.append([stamps[t + 1] - stamps[t] for t in range(len(stamps) - 1)])
                print(f"episode: {len(stamps) - 1} of {len(traj.turns)} turns played in {wall:.1f} s, outcome "
                      f"{result.episode.outcome} ({'streaming' if args.stream else 'non-streaming'})")
            for centre in (10, 400):
                if centre < len(traj.turns):
                    payload = client.encode(client.body(request_messages(traj, centre), stream=args.stream,
                                                        model=traj.model))
                    floors[centre] = run_on_fresh_loop(_client_floors(srv.url, payload))
    turns = min(len(r) for r in per_round)
    cpu = [statistics.median(r[t] for r in per_round) for t in range(turns)]
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
            fast.append(_timed(lambda: orjson.dumps(body)))
            slow.append(_timed(lambda: json.dumps(body).encode()))
        c, f, s = statistics.median(cpu[lo : hi + 1]), statistics.median(fast), statistics.median(slow)
        rows.append((centre, statistics.median(sizes), c, f, s, *floors[centre]))
        ok &= c <= 3 * f
    print(f"\n{'turn':>5} {'body MB':>8} {'client CPU ms':>14} {'orjson ms':>10} {'json ms':>8}"
          f" {'CPU/orjson':>11} {'CPU/json':>9} {'aiohttp/orjson':>15} {'raw/orjson':>11}")
    for centre, size, c, f, s, lib, raw in rows:
        print(f"{centre:>5} {size / 1e6:>8.3f} {c * 1e3:>14.3f} {f * 1e3:>10.3f} {s * 1e3:>8.3f} {c / f:>11.1f}"
              f" {c / s:>9.2f} {lib / f:>15.1f} {raw / f:>11.1f}")
    print(f"(medians over turns {args.window} either side and {args.rounds} episodes; aiohttp and raw: one "
          f"exchange of the middle turn's body; target client CPU <= 3x orjson: {'PASS' if ok else 'FAIL'})")
    total = sum(cpu)
    print(f"client CPU over the episode: {total:.2f} s for {turns} turns")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
