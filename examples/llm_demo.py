"""Demo: benchmark a local scripted OpenAI-compatible server with `benchmaker llm`.

Starts `benchmaker.testing.scenario_server` on 127.0.0.1 (TTFT 20 ms, 32 one-token
chunks 5 ms apart, usage on the last chunk), runs 10 s of Poisson arrivals at 50 req/s
against it, prints the summary and the bundle path, and stops the server.

    python examples/llm_demo.py [extra `benchmaker llm` options]

Like `make demo`, the demo shows the engine working: it exits 0 when the run was
measured and written, also when a busy machine made it invalid (the verdict and its
reasons are printed, then how to get a valid run); other exit codes are `benchmaker
llm`'s (2 bad input, 130 interrupted).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmaker.recipes.cli import main

SCENARIO = {"ttft_ms": 20, "itl_ms": 5, "content_chunks": 32}
OUT_DIR = Path("runs")


def demo(extra: list[str]) -> int:
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmaker.testing.scenario_server", "--port", "0", "--scenario", json.dumps(SCENARIO)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = server.stdout.readline().strip()
        if not url.startswith("http://"):
            print("the demo server did not start", file=sys.stderr)
            return 2
        print(f"scripted OpenAI-compatible server at {url}")
        before = set(OUT_DIR.glob("*/summary.json"))
        code = main(
            [
                "llm",
                "--url",
                f"{url}/v1/chat/completions",
                "--model",
                "demo",
                "--rate",
                "poisson:50",
                "--duration",
                "10s",
                "--out-dir",
                str(OUT_DIR),
                *extra,
            ]
        )
        written = set(OUT_DIR.glob("*/summary.json")) - before
        if code == 1 and written and not any(json.loads(p.read_text())["verdict"]["valid"] for p in written):
            print(
                "The demo ran: the run was measured and written, and judged INVALID for the "
                "reasons above (on a busy machine the client cannot keep its schedule). For a "
                "valid run: a quieter machine, or a raised limit, e.g. `.venv/bin/python "
                "examples/llm_demo.py --max-loop-lag-ms 50 --max-schedule-lag-ms 50` (kept in "
                "the run's manifest). Exit 0: the demo shows the engine working."
            )
            return 0
        return code
    finally:
        server.terminate()
        server.wait(10)
        server.stdout.close()


if __name__ == "__main__":
    sys.exit(demo(sys.argv[1:]))
