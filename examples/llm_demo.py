"""Demo: benchmark a local scripted OpenAI-compatible server with `benchmaker llm`.

Starts `benchmaker.testing.scenario_server` on 127.0.0.1 (TTFT 20 ms, 32 one-token
chunks 5 ms apart, usage on the last chunk), runs 10 s of Poisson arrivals at 50 req/s
against it, prints the summary and the bundle path, and stops the server.

    python examples/llm_demo.py [extra `benchmaker llm` options]
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmaker.recipes.cli import main

SCENARIO = {"ttft_ms": 20, "itl_ms": 5, "content_chunks": 32}


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
        return main(
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
                "runs",
                *extra,
            ]
        )
    finally:
        server.terminate()
        server.wait(10)
        server.stdout.close()


if __name__ == "__main__":
    sys.exit(demo(sys.argv[1:]))
