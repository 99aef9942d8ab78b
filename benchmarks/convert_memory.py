"""Peak memory of `convert_paths` for one file of many sessions against one file of one
session of the same size: conversion memory should grow with the largest session, not
with the file.

    .venv/bin/python benchmarks/convert_memory.py [--sessions 2000] [--turns 20]

Writes, in a temporary directory, a log of `--sessions` sessions (openai-messages: one
conversation per JSONL row, the file format that holds many sessions) and a log of one
such session, each of `--turns` assistant turns with a tool call and a ~1 KB tool
result per turn. Each is converted (workers=1) in a fresh child process
(`python -c`), which reports:

- peak RSS, MiB: resource.getrusage(RUSAGE_SELF).ru_maxrss of the child after the
  conversion, less its value before it (the interpreter and imports);
- peak traced, MiB: tracemalloc's peak of Python allocations during the conversion
  (started after the imports).

The file sizes, trajectories converted, both peaks and the traced peak beyond the file's
own bytes are printed. A file of at least STREAM_MIN_BYTES (4 MiB) of JSON lines is
streamed from disk (benchmaker.trajectories.convert): its bytes are never held, so the
peak stays near the one-session figure plus the head format detection reads, whatever
`--sessions` is; one that holds the file's bytes, every converted trajectory until the
file ends, or a whole-file parse grows with it.

Measured here (2000 sessions of 20 turns, 49.4 MiB): first, peak traced 693.5 MiB (peak
RSS +182 MiB); then, the file's bytes held and one session, 52.4 MiB (RSS +52.7 MiB);
streamed, 5.7 MiB (RSS +7.6 MiB): the 2 MiB head that holds the 50 records detection
reads, and one session (one session alone: 0.4 MiB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, tracemalloc
from pathlib import Path
from benchmaker.trajectories.convert import convert_paths
src, out = Path(sys.argv[1]), Path(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
report = convert_paths([src], out, workers=1, progress=None)
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rss_kib": after - before, "traced_bytes": peak, "trajectories": report.trajectories}))
"""


def session_row(k: int, turns: int) -> dict:
    """One openai-messages conversation: a user prompt, then `turns` assistant turns, each
    a bash tool call with its ~1 KB result."""
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    messages.append({"role": "user", "content": f"Task {k}: fix the bug in module_{k}.py"})
    for t in range(turns):
        call_id = f"call_{k}_{t}"
        args = json.dumps({"command": f"grep -n pattern_{t} src/module_{k}.py"})
        messages.append(
            {
                "role": "assistant",
                "content": f"Looking at step {t}.",
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": args}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": f"{t}: " + "x" * 1000})
    messages.append({"role": "assistant", "content": "Done."})
    return {"messages": messages}


def measure(src: Path, work: Path) -> dict:
    """The child's figures for converting `src` (module docstring)."""
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(src), str(work / (src.stem + ".out.jsonl"))],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bm-convert-memory-") as tmp:
        work = Path(tmp)
        many, one = work / "many.jsonl", work / "one.jsonl"
        with many.open("wb") as fh:
            for k in range(args.sessions):
                fh.write(json.dumps(session_row(k, args.turns)).encode() + b"\n")
        one.write_bytes(json.dumps(session_row(0, args.turns)).encode() + b"\n")
        figures = {name: measure(path, work) for name, path in (("one", one), ("many", many))}
        print(
            f"{'log':6} {'file MiB':>9} {'trajectories':>12} {'peak RSS MiB':>13} {'peak traced MiB':>16} {'beyond file':>12}"
        )
        for name, path in (("one", one), ("many", many)):
            f = figures[name]
            size = path.stat().st_size
            print(
                f"{name:6} {size / 2**20:9.2f} {f['trajectories']:12d} "
                f"{f['rss_kib'] / 1024:13.1f} {f['traced_bytes'] / 2**20:16.1f} {(f['traced_bytes'] - size) / 2**20:12.1f}"
            )
        o, m = figures["one"], figures["many"]
        print(
            f"many/one: file {many.stat().st_size / one.stat().st_size:.0f}x, "
            f"peak traced beyond the file's bytes {(m['traced_bytes'] - many.stat().st_size) / 2**20:.1f} MiB "
            f"against {(o['traced_bytes'] - one.stat().st_size) / 2**20:.1f} MiB"
        )


if __name__ == "__main__":
    main()
