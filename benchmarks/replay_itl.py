"""Replay server in fixed-latency mode, measured by the engine (not run by CI).

    .venv/bin/python benchmarks/replay_itl.py [--streams 50] [--ttft-ms 100] [--itl-ms 20]
                                             [--tokens 100] [--seconds 10]

Writes one trajectory (first user message "replay itl probe", one turn of `--tokens`
words), starts `benchmaker.replay_server.process.start_replay_server(..., latency="fixed:TTFT:ITL")` in
its own process, and runs BenchRunner `closed:STREAMS` with OpenAIChatWorkload against
it for `--seconds`. Prints the engine-measured TTFT and ITL (summary.json, linear
percentiles with counts) beside the setting, and the difference of the mean ITL from
the setting (target: within 0.5 ms at 50 concurrent streams).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmaker import BenchConfig, BenchRunner, OpenAIChatWorkload, StaticDataset  # noqa: E402
from benchmaker.replay_server.process import start_replay_server  # noqa: E402
from benchmaker.trajectories.trajectory import Response, Source, Trajectory, Turn, match_key_for  # noqa: E402

PROMPT = "replay itl probe"


def write_store(path: Path, tokens: int) -> None:
    content = " ".join(f"w{i}" for i in range(tokens))
    traj = Trajectory(
        trajectory_id="itl-probe",
        source=Source(format="synthetic", path=str(path), sha256=hashlib.sha256(content.encode()).hexdigest()),
        match_key=match_key_for(PROMPT),
        first_user=PROMPT,
        turns=[Turn(index=0, response=Response(content=content, finish_reason="stop"))],
    )
    path.write_text(traj.model_dump_json() + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "trajectories.jsonl"
        write_store(store, args.tokens)
        with start_replay_server(store, latency=f"fixed:{args.ttft_ms:g}:{args.itl_ms:g}") as server:
            wl = OpenAIChatWorkload(server.url + "/v1/chat/completions", "m", StaticDataset([PROMPT]))
            cfg = BenchConfig(load=f"closed:{args.streams}", duration_s=args.seconds, warmup_s=1.0, out_dir=Path(tmp))
            result = BenchRunner(cfg, workload=wl).run_sync()
            stats = server.stats()
    run = result.summary["run"]
    ttft, itl, req = run["ttft_ms"], run["itl_event_ms"], run["itl_req_mean_ms"]
    print(
        f"replay server fixed:{args.ttft_ms:g}:{args.itl_ms:g}, {args.tokens} tokens, closed:{args.streams}, "
        f"{args.seconds:g} s; ok {run['n_ok']} of {run['n_samples']}; server misses {stats.get('misses')}"
    )
    print(
        f"  TTFT ms        mean {ttft['mean']:.3f}  p50 {ttft['p50']:.3f}  p99 {ttft['p99']:.3f}  (n={ttft['count']})"
    )
    print(f"  ITL event ms   mean {itl['mean']:.3f}  p50 {itl['p50']:.3f}  p99 {itl['p99']:.3f}  (n={itl['count']})")
    print(f"  ITL per-request mean ms  mean {req['mean']:.3f}  (n={req['count']})")
    diff = itl["mean"] - args.itl_ms
    ok = abs(diff) <= 0.5
    print(f"mean ITL - setting = {diff:+.3f} ms  (target |diff| <= 0.5 ms)  {'PASS' if ok else 'FAIL'}")
    print(f"client verdict: {result.summary['verdict']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
