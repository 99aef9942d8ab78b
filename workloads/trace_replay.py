"""Replay the requests of a recorded trace (`--record-trace FILE`, benchmaker.engine.trace).

    wl = TraceReplayWorkload(Path("trace.jsonl"))                    # same URLs, same bodies
    wl = TraceReplayWorkload(path, url="http://127.0.0.1:9000/v1/chat/completions",
                             api_key=key)                            # another server
    BenchRunner(BenchConfig(load="trace:trace.jsonl:2"), workload=wl)  # 2x faster

Request `seq` is the seq-th record in send order (sorted by recorded timestamp, then
recorded seq): exactly the order in which the `trace:FILE[:SPEEDUP]` load model sends
its arrivals, so each body goes out at its own (scaled) time. Past the last record the
records cycle (a closed-loop or rate load may ask for more).

The body and headers are sent as recorded, except that redacted headers ("***") are
left out, `api_key` adds `Authorization: Bearer KEY`, `headers` are added last (they
win), and `url` replaces every recorded URL. The response parser is chosen by the
recorded `protocol` (the recording workload's name): `openai-chat` and
`openai-completions` use their stream parsers (TTFT, ITL, usage as in a live run);
anything else is judged by status (2xx/3xx ok, like benchmaker.workloads.http).

YAML (benchmaker.workloads.registry): `{type: trace-replay, path: trace.jsonl, url: ..., api_key:
..., headers: {...}}` with `load: trace:trace.jsonl[:SPEEDUP]`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmaker.engine.records import RequestSpec
from benchmaker.engine.trace import TraceRecord, read_trace
from benchmaker.workloads.http import HttpParser

__all__ = ["TraceReplayWorkload"]

_OK_STATUS = frozenset(range(200, 400))


class TraceReplayWorkload:
    """The recorded requests of a trace file, in send order; implements
    `benchmaker.engine.types.Workload` (see module docstring). Raises ConfigError (from
    benchmaker.engine.trace.read_trace) naming `path:line: field` on a bad trace line."""

    name = "trace-replay"

    def __init__(
        self, path: Path, *, url: str | None = None, api_key: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        self.path = Path(path)
        self.records: list[TraceRecord] = read_trace(self.path)
        self.url = url
        self._extra = dict(headers or {})
        if api_key:
            self._extra = {"Authorization": f"Bearer {api_key}", **self._extra}

    def __len__(self) -> int:
        return len(self.records)

    def describe(self) -> dict[str, Any]:
        """Manifest description: type, trace path, record count, URL override."""
        return {"type": self.name, "path": str(self.path), "records": len(self.records), "url": self.url}

    def request(self, seq: int) -> RequestSpec:
        """The recorded request at position seq (mod the record count)."""
        rec = self.records[seq % len(self.records)]
        spec = rec.spec()
        if self.url is not None:
            spec.url = self.url
        if self._extra:
            lower = {k.lower() for k in self._extra}
            spec.headers = {k: v for k, v in spec.headers.items() if k.lower() not in lower} | self._extra
        spec.meta["trace_protocol"] = rec.protocol
        return spec

    def parser(self, spec: RequestSpec) -> Any:
        """A fresh parser for the recorded protocol (module docstring)."""
        protocol = spec.meta.get("trace_protocol")
        if protocol == "openai-chat":
            from benchmaker.apis.openai_chat import OpenAIChatParser

            return OpenAIChatParser(stream=spec.stream)
        if protocol == "openai-completions":
            from benchmaker.workloads.openai_completions import OpenAICompletionsParser

            return OpenAICompletionsParser(stream=spec.stream)
        return HttpParser(_OK_STATUS)
