"""How much client time each client's TTFT clock holds before the server has the request:
the time from the client's clock start to the moment a loopback server (its own process)
has the whole request, per request, on one keep-alive connection.

    python conformance/presend.py [--n 200]     # prints both clients' figures, in us

- ours: the request built first (a RequestSpec, before the timed span, as the runner
  does), the clock read just before `RawTransport.stream(spec)` (the runner's `sent_ns`).
- vLLM's client (vllm/benchmarks/lib/endpoint_request_func.py, 0.32.0): `st =
  time.perf_counter()` and then `session.post(url, json=payload, headers=...)` on an
  aiohttp keep-alive connector (serve.py: limit = max concurrency, keepalive 60 s), so
  the JSON encoding of the payload and aiohttp's request building are inside its clock.

Both read time.perf_counter (CLOCK_MONOTONIC, one clock for every process on the host);
the server stamps it when a request's head and Content-Length body are complete, and
answers a 3-event chat stream. The first request of each also opens the connection.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["measure", "presend_us"]

_BODY = (
    b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
_RESP = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n0\r\n\r\n" % (len(_BODY), _BODY)
)
PROMPT = "request 1: " + "cache token server request stream " * 10


class _Stamp(asyncio.Protocol):
    def __init__(self, stamps: list[float]) -> None:
        self.stamps = stamps
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            n = int(head[i + 15 :].split(b"\r\n")[0]) if i >= 0 else 0
            if len(self.buf) < end + 4 + n:
                return
            self.stamps.append(time.perf_counter())
            self.buf = self.buf[end + 4 + n :]
            assert self.transport is not None
            self.transport.write(_RESP)


async def _serve(out: Path) -> None:
    stamps: list[float] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Stamp(stamps), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    out.write_text(json.dumps(stamps))


async def _ours(url: str, n: int) -> list[float]:
    from benchmaker.engine.http1 import RawTransport
    from benchmaker.workloads.datasets import StaticDataset
    from benchmaker.workloads.openai_responses import OpenAIResponsesWorkload

    transport = RawTransport()
    await transport.start()
    wl = OpenAIResponsesWorkload(
        url, "tiny", StaticDataset([PROMPT]), max_tokens=32, ignore_eos=True, extra_body={"store": False}
    )
    starts = []
    try:
        for seq in range(n):
            spec = wl.request(seq)
            starts.append(time.perf_counter())
            async with transport.stream(spec) as resp:
                async for _ in resp.chunks():
                    pass
    finally:
        await transport.aclose()
    return starts


async def _vllms(url: str, n: int) -> list[float]:
    import aiohttp

    payload = {"model": "tiny", "input": PROMPT, "max_output_tokens": 32, "stream": True, "store": False}
    payload["ignore_eos"] = True
    connector = aiohttp.TCPConnector(limit=1, limit_per_host=1, keepalive_timeout=60, force_close=False)
    starts = []
    async with aiohttp.ClientSession(connector=connector, trust_env=True) as session:
        for _ in range(n):
            st = time.perf_counter()
            starts.append(st)
            async with session.post(url=url, json=payload, headers={"Content-Type": "application/json"}) as resp:
                async for _ in resp.content.iter_any():
                    pass
    return starts


def presend_us(client: str, n: int, work: Path) -> list[float]:
    """Per request, in us: the server's stamp of the complete request - the client's clock
    start, `client` "ours" or "vllm", `n` requests in order (the first opens the
    connection). Raises RuntimeError when the stamp server does not start."""
    stamps = work / f"stamps-{client}-{time.time_ns()}.json"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(stamps)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        port = (proc.stdout.readline() if proc.stdout else "").strip()
        if not port.isdigit():
            raise RuntimeError(f"stamp server did not start (got {port!r})")
        url = f"http://127.0.0.1:{port}/v1/responses"
        starts = asyncio.run(_ours(url, n) if client == "ours" else _vllms(url, n))
    finally:
        for pipe in (proc.stdin, proc.stdout):
            if pipe:
                pipe.close()  # the server writes its stamps when its stdin closes
        proc.wait(30)
    got = json.loads(stamps.read_text())
    return [(s - c) * 1e6 for s, c in zip(got, starts, strict=True)]


def measure(n: int, work: Path, rounds: int = 2) -> dict[str, dict[str, float]]:
    """{client: {"first_us", "p50_us", "mean_us", "p90_us"}} over `rounds` alternated runs of
    `n` requests per client (first_us: the first request of the first run; the others over
    the requests after each run's first)."""
    runs: dict[str, list[list[float]]] = {"ours": [], "vllm": []}
    for _ in range(rounds):
        for client in runs:
            runs[client].append(presend_us(client, n, work))
    out = {}
    for client, got in runs.items():
        rest = sorted(x for run in got for x in run[1:])
        out[client] = {
            "first_us": got[0][0],
            "p50_us": statistics.median(rest),
            "mean_us": statistics.fmean(rest),
            "p90_us": rest[int(0.9 * (len(rest) - 1))],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve))
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for client, fig in measure(args.n, Path(tmp)).items():
            print(f"{client}: " + ", ".join(f"{k} {v:.0f}" for k, v in fig.items()))


if __name__ == "__main__":
    main()
