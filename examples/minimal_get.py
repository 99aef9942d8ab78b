"""The smallest benchmark: GET one URL with the Python API and print the result.

    python examples/minimal_get.py http://127.0.0.1:8080/health [--requests 50] [--concurrency 4 | --rate poisson:20] [--out-dir runs]

Builds an HttpWorkload (GET, status 200 is ok), runs it with BenchRunner and prints the
run id, the outcome counts and the E2E latency percentiles in ms (end of body - sent,
both `time.perf_counter_ns()` on this client). The bundle (manifest.json, samples.jsonl,
summary.json) goes to OUT_DIR/<run_id>/; `benchmaker load OUT_DIR/<run_id>` puts it in
the warehouse. Exit code: 0 valid run, 1 invalid (reasons printed), 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.runner import BenchRunner
from benchmaker.recipes.bench import load_of
from benchmaker.workloads.http import HttpWorkload


def run_get(url: str, *, requests: int = 20, rate: str = "closed:1", out_dir: Path = Path("runs")):
    """GET `url` `requests` times at `rate` (a rate spec: closed:N, constant:R, poisson:R);
    returns the engine's RunResult (`.bundle_dir`, `.summary`, `.valid`)."""
    config = BenchConfig(load=rate, max_requests=requests, out_dir=out_dir, kind="http", label="example-get")
    return BenchRunner(config, workload=HttpWorkload(url, "GET")).run_sync()


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring); returns the exit code."""
    ap = argparse.ArgumentParser(prog="python examples/minimal_get.py", description=__doc__.split("\n")[0])
    ap.add_argument("url", nargs="?", help="URL to GET, e.g. http://127.0.0.1:8080/health")
    ap.add_argument("--requests", type=int, default=20, help="requests to send (default 20)")
    ap.add_argument("--concurrency", type=int, help="requests in flight, each sent as one ends (default 1)")
    ap.add_argument("--rate", help="open-loop arrivals instead of --concurrency: constant:R, poisson:R, ...")
    ap.add_argument("--out-dir", type=Path, default=Path("runs"), help="folder for run bundles (default runs)")
    args = ap.parse_args(argv)
    try:
        rate = load_of(args.rate, args.concurrency)  # the CLI's rule: one of the two, closed:1 without
    except ConfigError as exc:
        ap.error(str(exc))
    if args.url is None:
        ap.print_usage()
        return 2
    result = run_get(args.url, requests=args.requests, rate=rate, out_dir=args.out_dir)
    run = result.summary["run"]
    e2e = run["e2e_ms"]
    print(f"run {result.run_id}: {run['n_ok']} ok of {run['n_samples']}")
    if e2e["count"]:
        print(f"e2e ms: p50 {e2e['p50']:.2f}  p99 {e2e['p99']:.2f}  (n={e2e['count']})")
    print(f"bundle: {result.bundle_dir}")
    if not result.valid:
        print("verdict: INVALID - " + "; ".join(result.summary["verdict"]["reasons"]))
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
