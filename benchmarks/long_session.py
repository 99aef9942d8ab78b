"""Long sessions (issue #17 item 4): client CPU per turn of a replayed episode at turn 10
vs turn 400, beside the JSON serialisation cost of that turn's request body.

    .venv/bin/python benchmarks/long_session.py [--stream] [--window 5]

Needs the real pi session ../shared/data/real/pi-session-v1-large.jsonl (453 turns;
its late requests carry ~0.9 MB of history each); exits 0 with a note when absent.

The session is converted (replay.convert), served by `python -m replay.server` in its
own process (instant latency), and played once by replay.harness.run_episode in mode
"recorded" in this process, with no other work in it. ModelClient.stream (each model call
of the harness) is wrapped to stamp time.process_time() as each call starts: client CPU of turn t = the stamp of
call t+1 - the stamp of call t (building the next request from the history, encoding
and sending it, reading and parsing the response, the episode's bookkeeping; the
server's CPU is in its own process). After the run, for each turn the request body the
harness sent (replay.context.request_messages, `model_client.ModelClient.body`) is
serialised again, timed with orjson.dumps (the floor) and json.dumps + encode (what
ModelClient did before ModelClient.encode used orjson), median of 5 each.

Printed for the turns around 10 and around 400 (`--window` turns either side, medians):
body MB, client CPU ms per turn, orjson ms, json ms, and client CPU / orjson. Target:
client CPU per turn <= 3x the serialisation cost at both (issue #17: the per-turn cost
grows with the body, and only as the body's own serialisation does). Exit 1 when the
target fails or the episode ends before turn 400 + window.
"""

from __future__ import annotations

import argparse
import asyncio
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

REAL = REPO.parent / "shared" / "data" / "real" / "pi-session-v1-large.jsonl"


def _timed(fn, repeat: int = 5) -> float:
    """Median s of `repeat` calls of fn()."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stream", action="store_true", help="stream the responses (default: non-streaming)")
    ap.add_argument("--window", type=int, default=5, help="turns either side of 10 and 400 (default 5)")
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

        model_client.ModelClient.stream = stream  # type: ignore[method-assign]
        try:
            with start_replay_server(traj_path, startup_timeout_s=60) as srv:
                t0 = time.perf_counter()
                result = asyncio.run(run_episode(traj, srv.url, mode="recorded", stream=args.stream))
                wall = time.perf_counter() - t0
        finally:
            model_client.ModelClient.stream = orig_stream  # type: ignore[method-assign]
        stamps.append(time.process_time())
    turns = len(stamps) - 1
    print(f"episode: {turns} of {len(traj.turns)} turns played in {wall:.1f} s, outcome {result.episode.outcome}"
          f" ({'streaming' if args.stream else 'non-streaming'})")
    cpu = [stamps[t + 1] - stamps[t] for t in range(turns)]
    client = model_client.ModelClient("http://unused")
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
        rows.append((centre, statistics.median(sizes), c, f, s))
        ok &= c <= 3 * f
    print(f"\n{'turn':>5} {'body MB':>8} {'client CPU ms':>14} {'orjson ms':>10} {'json ms':>8}"
          f" {'CPU/orjson':>11} {'CPU/json':>9}")
    for centre, size, c, f, s in rows:
        print(f"{centre:>5} {size / 1e6:>8.3f} {c * 1e3:>14.3f} {f * 1e3:>10.3f} {s * 1e3:>8.3f} {c / f:>11.1f}"
              f" {c / s:>9.2f}")
    print(f"(medians over turns {args.window} either side; target client CPU <= 3x orjson: "
          f"{'PASS' if ok else 'FAIL'})")
    total = sum(cpu)
    print(f"client CPU over the episode: {total:.2f} s for {turns} turns")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
