"""The engine vs a bare aiohttp loop vs a peer tool, against the same loopback server in
one run (not part of CI).

    .venv/bin/python benchmarks/peers.py [--seconds 5] [--concurrency 32] [--chunks 200]
                                         [--peer auto|aiperf|none] [--peer-bin PATH]

One instant server (benchmaker.testing.instant_server: pre-built responses, separate
process) serves every client; each client runs closed loop at `--concurrency` for
`--seconds`, one after the other, twice (alternated so drift hits all alike):

    bare     aiohttp: one ClientSession, `concurrency` tasks, each POSTs a streaming chat
             completion to /v1/chat/completions and reads the body to its end without
             parsing it (the I/O floor: the engine and the peer also parse every SSE
             event's JSON and stamp each token event, so their ratio to bare falls as
             `--chunks` grows)
    engine   BenchRunner `closed:<concurrency>` + OpenAIChatWorkload (streaming): ok
             requests / self_checks.wall_s
    peer     aiperf (PyPI), when found: `--peer-bin` or `aiperf` on PATH. aiperf pins
             cyclopts<5 and orjson~=3.11, so it lives in its own venv, e.g.
             python -m venv /tmp/peer-venv && /tmp/peer-venv/bin/pip install aiperf
             It runs `aiperf profile` with --concurrency, --benchmark-duration,
             --streaming and a tiny word-level tokenizer laid out as a cached hub repo
             (aiperf's `builtin` tokenizer downloads tiktoken data; no network here);
             its request throughput (request_throughput.avg: aiperf's own window) is
             read from the exported JSON (profile_export_aiperf.json).
             guidellm needs torch and a hub-hosted tokenizer, so it is not driven here.

Each response is the same OpenAI chat stream: a role chunk, `--chunks` one-token content
chunks, a finish chunk, a usage chunk and [DONE], written in 4 HTTP chunks.

Prints req/s of every round, the best round per client, and the ratios engine/bare,
peer/bare and engine/peer. When no peer is installed it says so in one line and prints
the engine/bare ratio only. Exit 0 always (figures, not a gate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmaker import BenchConfig, BenchRunner, OpenAIChatWorkload, StaticDataset  # noqa: E402
from benchmaker.engine.runner import run_on_fresh_loop  # noqa: E402
from benchmaker.testing.instant_server import start_instant_server  # noqa: E402

_BODY = json.dumps(
    {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
).encode()


# -- bare aiohttp ------------------------------------------------------------------------


async def _bare(url: str, concurrency: int, seconds: float) -> dict[str, float]:
    """`concurrency` tasks POSTing streaming chat requests and reading each body to its
    end for `seconds`: {"req_per_s", "n", "wall_s", "cpu_s"}."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        n = 0
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def worker() -> None:
            nonlocal n
            while time.perf_counter() < deadline:
                async with session.post(url, data=_BODY, headers=headers) as resp:
                    async for _ in resp.content.iter_any():
                        pass
                    if resp.status == 200:
                        n += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        return {"req_per_s": n / wall, "n": n, "wall_s": wall, "cpu_s": time.process_time() - cpu0}


# -- engine ------------------------------------------------------------------------------


def _engine(url: str, concurrency: int, seconds: float, out: Path) -> dict[str, float]:
    wl = OpenAIChatWorkload(url, "m", StaticDataset(["x"]))
    res = BenchRunner(
        BenchConfig(load=f"closed:{concurrency}", duration_s=seconds, out_dir=out, drain_s=10), workload=wl
    ).run_sync()
    sc, run = res.summary["self_checks"], res.summary["run"]
    shutil.rmtree(res.bundle_dir, ignore_errors=True)
    return {
        "req_per_s": run["n_ok"] / sc["wall_s"],
        "n": run["n_ok"],
        "wall_s": sc["wall_s"],
        "cpu_s": sc["client_cpu_s"],
    }


# -- peer: aiperf --------------------------------------------------------------------------


def find_aiperf(peer_bin: str | None) -> str | None:
    """Path of the aiperf executable: `peer_bin` when it exists, else `aiperf` on PATH,
    else None."""
    if peer_bin:
        return peer_bin if Path(peer_bin).exists() else None
    return shutil.which("aiperf")


_SNAPSHOT = "0" * 40
_TOKENIZER_REPO = "benchmaker/tiny-tok"
_TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"[UNK]": 0}
vocab.update({f"w{i}": i + 1 for i in range(2000)})
t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
t.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]", eos_token="[UNK]").save_pretrained(sys.argv[1])
"""


def _offline_tokenizer(exe: str, hf_home: Path) -> str | None:
    """Lay a tiny word-level tokenizer out as a cached hub repo `benchmaker/tiny-tok`
    under `hf_home` (aiperf's `builtin` tokenizer downloads tiktoken data, and it takes
    no plain folder when offline). Built with the peer venv's python (tokenizers and
    transformers come with aiperf). Returns an error string, or None on success."""
    repo = hf_home / "hub" / ("models--" + _TOKENIZER_REPO.replace("/", "--"))
    snap = repo / "snapshots" / _SNAPSHOT
    if (snap / "tokenizer.json").is_file():
        return None
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(_SNAPSHOT)
    made = subprocess.run(
        [str(Path(exe).with_name("python")), "-c", _TOKENIZER_SCRIPT, str(snap)], capture_output=True, text=True
    )
    if made.returncode != 0:
        return "local tokenizer: " + " | ".join(made.stderr.strip().splitlines()[-2:])
    return None


def _aiperf(exe: str, base_url: str, concurrency: int, seconds: float, chunks: int, work: Path) -> dict[str, Any]:
    """One `aiperf profile` run (closed loop at `concurrency`, streaming chat, for
    `seconds`); {"req_per_s", "n", "wall_s"} from its JSON export (request_throughput.avg,
    request_count.avg), or {"error": "..."} when it failed."""
    hf_home = work / "hf"
    err = _offline_tokenizer(exe, hf_home)
    if err:
        return {"error": err}
    art = work / f"aiperf-{time.time_ns()}"
    cmd = [
        exe,
        "profile",
        "--model",
        "m",
        "--url",
        base_url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(concurrency),
        "--benchmark-duration",
        str(seconds),
        "--tokenizer",
        _TOKENIZER_REPO,
        "--prompt-input-tokens-mean",
        "1",
        "--prompt-input-tokens-stddev",
        "0",
        "--prompt-output-tokens-mean",
        str(chunks),
        "--artifact-dir",
        str(art),
        "--ui-type",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
    ]
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 180)
    wall = time.perf_counter() - t0
    exports = sorted(art.rglob("profile_export_aiperf.json"))
    if proc.returncode != 0 or not exports:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"aiperf exit {proc.returncode}: {' | '.join(tail)}"}
    data = json.loads(exports[0].read_text())
    thr = data.get("request_throughput") or {}
    count = data.get("request_count") or {}
    return {"req_per_s": thr.get("avg"), "n": count.get("avg"), "wall_s": wall}


# -- main ----------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--chunks", type=int, default=200, help="content chunks per streamed response")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--peer", choices=["auto", "aiperf", "none"], default="auto")
    ap.add_argument("--peer-bin", default=None, help="path of the aiperf executable (its own venv)")
    args = ap.parse_args()

    exe = None if args.peer == "none" else find_aiperf(args.peer_bin)
    if exe is None and args.peer != "none":
        print(
            "peer: no peer tool installed (aiperf not found; guidellm needs torch and a hub tokenizer): "
            "comparing the engine with bare aiohttp only. Install aiperf in its own venv and pass --peer-bin."
        )
    results: dict[str, list[dict[str, Any]]] = {"bare": [], "engine": [], "peer": []}
    work = Path(tempfile.mkdtemp(prefix="benchmaker-peers-"))
    try:
        with start_instant_server(sse_chunks=args.chunks) as server:
            url = server.url + "/v1/chat/completions"
            print(
                f"server {server.url} ({args.chunks} chunks per stream), concurrency {args.concurrency}, "
                f"{args.seconds:g} s per run, {args.rounds} rounds"
            )
            for rnd in range(1, args.rounds + 1):
                b = run_on_fresh_loop(_bare(url, args.concurrency, args.seconds))
                results["bare"].append(b)
                e = _engine(url, args.concurrency, args.seconds, work)
                results["engine"].append(e)
                line = (
                    f"round {rnd}: bare {b['req_per_s']:>8,.0f} req/s  engine {e['req_per_s']:>8,.0f} req/s"
                    f"  (cpu per req: bare {b['cpu_s'] / b['n'] * 1e6:.0f} us, "
                    f"engine {e['cpu_s'] / e['n'] * 1e6:.0f} us)"
                )
                if exe is not None:
                    p = _aiperf(exe, server.url, args.concurrency, args.seconds, args.chunks, work)
                    results["peer"].append(p)
                    line += (
                        f"  aiperf {p['req_per_s']:>8,.0f} req/s"
                        if "error" not in p
                        else f"  aiperf failed: {p['error']}"
                    )
                print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def best(name: str) -> float | None:
        vals = [r["req_per_s"] for r in results[name] if r.get("req_per_s")]
        return max(vals) if vals else None

    bare, engine, peer = best("bare"), best("engine"), best("peer")
    print(
        "\nbest round (req/s):  bare {}  engine {}  peer {}".format(
            *tuple(f"{v:,.0f}" if v else "-" for v in (bare, engine, peer))
        )
    )
    print(f"ratio engine / bare: {engine / bare:.3f}")
    if peer:
        print(f"ratio peer (aiperf) / bare: {peer / bare:.3f}")
        print(f"ratio engine / peer (aiperf): {engine / peer:.3f}")
    elif exe is None:
        print("ratio peer: not measured (no peer tool installed)")
    else:
        print("ratio peer: not measured (aiperf failed; see the round lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
