"""Orchestration overhead of the swebench-replay flow (issue #4: for points of >= 20 s
each, total flow wall time within 10% of the sum of the points). Not run by CI.

    .venv/bin/python benchmarks/flow_overhead.py [--duration 20] [--sweep 1,5]

Runs the flow (ephemeral Prefect) on the bundled example recording with a fixed
replay latency (`fixed:50:2`: 50 ms to first token, 2 ms per token) and
`duration_s` per point, then prints, from the Prefect API: the flow run's wall time
(start -> end state), each sweep-point task run's wall time, their sum, and the
overhead = flow wall - sum of points (convert, server start, grade, load, report and
Prefect's own bookkeeping), absolute and relative to the sum. Also the wall time of
the whole call including the ephemeral server's startup.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per sweep point (default 20)")
    ap.add_argument("--sweep", default="1,5", help="concurrency sweep (default 1,5)")
    ap.add_argument("--latency", default="fixed:50:2")
    args = ap.parse_args()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.swebench_replay import swebench_replay

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        out = asyncio.run(swebench_replay(
            logs=[REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"],
            concurrency_sweep=[int(x) for x in args.sweep.split(",")], duration_s=args.duration,
            latency=args.latency, out_dir=Path(tmp) / "artifacts", warehouse=Path(tmp) / "w.duckdb"))
        call_s = time.perf_counter() - t
        with get_client(sync_client=True) as client:
            fr = client.read_flow_run(out["flow_run_id"])
            trs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[fr.id])))
    flow_s = (fr.end_time - fr.start_time).total_seconds()
    points = sorted(((tr.start_time, (tr.end_time - tr.start_time).total_seconds(), tr.name)
                     for tr in trs if tr.name.startswith("run-sweep-point")), key=lambda x: x[0])
    sum_s = sum(p[1] for p in points)
    print(f"{'sweep point task':<28}{'wall s':>10}")
    for (_, s, name), row in zip(points, out["points"]):
        print(f"{name + ' (' + row['sweep_point'] + ')':<28}{s:>10.3f}")
    print(f"{'sum of points':<28}{sum_s:>10.3f}")
    print(f"{'flow run wall':<28}{flow_s:>10.3f}")
    over = flow_s - sum_s
    print(f"{'overhead':<28}{over:>10.3f}  ({over / sum_s:.1%} of the sum of the points; target <= 10%)")
    print(f"{'whole call incl. ephemeral server':<34}{call_s:>4.1f} s")
    return 0 if over / sum_s <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
