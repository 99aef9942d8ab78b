"""Load speed of the warehouse: 1,000,000 request rows (docs/query-the-warehouse.md; target:
<= 60 s on the 2-core reference machine).

Writes a run bundle of `--rows` realistic samples.jsonl lines (benchmaker.engine.records.Sample,
streamed LLM requests with `--events` token events each on average, split into
`--shards` files samples-w<k>.jsonl as a multi-worker run writes them) into a temp
directory, then times benchmaker.warehouse.loader.load_run into a fresh DuckDB file, then a second
load of the same run (the idempotent replace path). Prints the figures; exits 1 when the
first load exceeds `--target-s`.

    .venv/bin/python benchmarks/warehouse_load.py                 # 1,000,000 rows
    .venv/bin/python benchmarks/warehouse_load.py --rows 100000   # quicker look
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import orjson

from benchmaker.engine.records import Sample
from benchmaker.warehouse.loader import load_run

MS = 1_000_000


def write_bundle(run_dir: Path, rows: int, shards: int, events: int, seed: int = 1) -> int:
    """Write manifest.json and `shards` samples files holding `rows` samples; returns bytes."""
    rng = random.Random(seed)
    run_id = "bench-load"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "kind": "llm",
                "label": "bench",
                "created_at": "2026-11-30T00:00:00Z",
                "t0_wall_ns": time.time_ns(),
                "config": {"rate": "poisson:400"},
                "seed": seed,
                "versions": {"benchmaker": "0.1.0"},
                "git_sha": None,
                "host": {"hostname": "bench", "platform": sys.platform, "cpu_count": 2},
                "workers": shards,
                "slo": {"ttft_ms": 500.0, "tpot_ms": 50.0, "e2e_ms": None},
            }
        )
    )
    total = 0
    files = [open(run_dir / f"samples-w{k}.jsonl", "wb") for k in range(shards)]
    try:
        for seq in range(rows):
            worker = seq % shards
            intended = seq * 2_500_000  # 400 requests/s
            sent = intended + rng.randrange(0, 200_000)
            ttft = rng.randrange(20, 400) * MS
            n_events = rng.randrange(max(1, events // 4), events * 7 // 4 + 1)
            itl = rng.randrange(5, 40) * MS
            token_ns = [sent + ttft + i * itl for i in range(n_events)]
            end = token_ns[-1] + rng.randrange(0, 2) * MS
            ok = rng.random() > 0.01
            out_tokens = n_events + rng.randrange(0, 3)
            s = Sample(
                run_id=run_id,
                seq=seq,
                lane="chat",
                sweep_point=f"rate-{400 * (1 + seq * 4 // rows)}",
                worker=worker,
                outcome="ok" if ok else "http_error",
                error=None if ok else '{"error": {"message": "overloaded", "code": 503}}',
                http_status=200 if ok else 503,
                intended_ns=intended,
                sent_ns=sent,
                first_byte_ns=sent + ttft - MS if ok else None,
                first_token_ns=token_ns[0] if ok else None,
                first_content_ns=token_ns[0] if ok else None,
                end_ns=end if ok else sent + 3 * MS,
                token_event_ns=token_ns if ok else None,
                token_event_tokens=[None] * n_events if ok else None,
                n_token_events=n_events if ok else 0,
                usage_present=ok,
                prompt_tokens=rng.randrange(50, 2000) if ok else None,
                output_tokens=out_tokens if ok else None,
                cached_tokens=0 if ok else None,
                output_chars=4 * out_tokens if ok else 0,
                finish_reason="stop" if ok else None,
                bytes_sent=rng.randrange(500, 8000),
                bytes_received=200 * n_events,
                in_flight_at_send=rng.randrange(1, 64),
                slo_met=ttft <= 500 * MS,
                meta={"prompt_sha256": f"{rng.getrandbits(64):016x}", "row": seq},
            )
            line = orjson.dumps(s.to_dict()) + b"\n"
            total += len(line)
            files[worker].write(line)
    finally:
        for f in files:
            f.close()
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--events", type=int, default=32, help="mean token events per request")
    parser.add_argument("--target-s", type=float, default=60.0)
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        run_dir = Path(tmp) / "bench-load"
        t0 = time.perf_counter()
        size = write_bundle(run_dir, args.rows, args.shards, args.events)
        gen_s = time.perf_counter() - t0
        print(f"generated {args.rows:,} samples in {args.shards} shards, {size / 1e6:,.0f} MB, in {gen_s:.1f} s")
        db = Path(tmp) / "warehouse.duckdb"
        first = load_run(db, run_dir)
        print(
            f"load (new file):       {first.seconds:6.2f} s  {args.rows / first.seconds:,.0f} rows/s  "
            f"requests={first.rows['requests']:,}"
        )
        second = load_run(db, run_dir)
        print(f"load (replace run):    {second.seconds:6.2f} s  requests={second.rows['requests']:,}")
        print(f"warehouse file:        {db.stat().st_size / 1e6:,.0f} MB")
        ok = first.rows["requests"] == args.rows and first.seconds <= args.target_s
        print(f"target <= {args.target_s:g} s for {args.rows:,} rows: {'met' if ok else 'MISSED'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
