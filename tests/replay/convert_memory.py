"""Shared by the conversion memory tests (test_convert_memory.py, test_convert_stream.py):
an OpenAI-messages session line of a known size and `convert_paths` under tracemalloc.
No tests here."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

from benchmaker.trajectories.convert import ConvertReport, convert_paths


def session_line(k: int) -> bytes:
    """One JSONL line of session `k` (~22 KB): the task, 20 tool-call turns each with a
    1000-byte tool result, a final answer."""
    messages: list[dict] = [{"role": "user", "content": f"Task {k}"}]
    for t in range(20):
        call = {"id": f"c{k}_{t}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        messages += [
            {"role": "assistant", "content": f"step {t}", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{k}_{t}", "content": "x" * 1000},
        ]
    messages.append({"role": "assistant", "content": "done"})
    return json.dumps({"messages": messages}).encode() + b"\n"


def convert_traced(src: Path, out: Path, **kw: Any) -> tuple[ConvertReport, int]:
    """(report, peak traced memory in bytes) of `convert_paths([src], out)` in this
    process (workers=1, no progress; `kw` go to convert_paths)."""
    tracemalloc.start()
    try:
        report = convert_paths([src], out, workers=1, progress=None, **kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return report, peak
