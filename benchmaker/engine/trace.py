"""Request traces: every request of a run with its intended send time, for replay.

    BenchRunner(cfg, workload=wl, record_trace=Path("trace.jsonl"))   # record
    # replay at 2x speed: load "trace:trace.jsonl:2" + benchmaker.workloads.trace_replay.TraceReplayWorkload

One JSON object per line, one line per request the runner built (in the order they
were dispatched; arrivals dropped at the in-flight cap were never built and are not
in the trace):

    {"timestamp": 0.25,             # intended send time, s from the run's t0
     "seq": 5, "lane": "default", "protocol": "openai-chat",   # the workload's name
     "method": "POST", "url": "http://.../v1/chat/completions",
     "headers": {"Content-Type": "application/json", "Authorization": "***"},
     "stream": true,
     "body": "{\\"model\\": ...}",    # the exact body as UTF-8 text, null when none
     "body_b64": null}              # base64 of the body when it is not UTF-8

`timestamp` is the field `benchmaker.engine.load_models.Trace` reads, so `trace:FILE[:SPEEDUP]`
replays the recorded arrival times (first arrival moved to 0, divided by SPEEDUP).
Secrets: every header value but those of a short list of safe headers (Content-Type,
Accept, User-Agent, ...: `benchmaker.engine.bundle.redact_headers`) is written as "***",
and so are the URL's userinfo and query values (`redact_url`); the body is written as
sent (a replay of the file needs its own credentials and query values). With several worker shards, shard k writes `<stem>-w<k><suffix>`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.bundle import REDACTED, JsonlAppender, redact_headers, redact_url
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.load_models import NS_PER_S
from benchmaker.engine.records import RequestSpec

__all__ = ["TraceRecord", "TraceWriter", "read_trace", "shard_trace_path"]


@dataclass(slots=True)
class TraceRecord:
    """One recorded request (line shape in the module docstring). `headers` are as
    written, i.e. with secret values "***"; `body` is bytes (None when none)."""

    timestamp_s: float
    seq: int
    lane: str
    protocol: str | None
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    stream: bool = False

    def spec(self) -> RequestSpec:
        """A RequestSpec sending this request again; redacted headers ("***") are left
        out (the replaying workload adds its own credentials)."""
        headers = {k: v for k, v in self.headers.items() if v != REDACTED}
        return RequestSpec(
            method=self.method,
            url=self.url,
            headers=headers,
            body=self.body,
            stream=self.stream,
            meta={"trace_seq": self.seq, "trace_lane": self.lane},
        )


def shard_trace_path(path: Path, worker: int, shards: int) -> Path:
    """The file shard `worker` of `shards` writes: `path` itself for one shard, else
    `<stem>-w<worker><suffix>` beside it."""
    if shards <= 1:
        return Path(path)
    path = Path(path)
    return path.with_name(f"{path.stem}-w{worker}{path.suffix}")


class TraceWriter(JsonlAppender):
    """Appends one line per request to a trace file (truncated when opened).

        tw = TraceWriter(Path("trace.jsonl"))
        tw.write(seq, "default", "openai-chat", intended_ns, spec)   # before sending
        tw.close()

    Lines are buffered and handed to the OS by `flush()` (the runner flushes with its
    samples, every 0.2 s) and at `close()` (fsync'd). `count` is the requests written.
    Raises OSError when the file cannot be created. A later write that fails (a full
    disk) never raises: the file keeps the whole lines of the last good flush and
    `error` holds the OSError (a `benchmaker.engine.bundle.JsonlAppender`; `loss()`
    says it in one line: the file, why, the requests kept and dropped).
    """

    def __init__(self, path: Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, "wb")

    def loss(self, what: str = "the request trace", noun: str = "requests") -> str:
        return super().loss(what, noun)

    def write(self, seq: int, lane: str, protocol: str | None, intended_ns: int, spec: RequestSpec) -> None:
        """Record request `seq` of `lane`, intended at `intended_ns` (ns from t0)."""
        body = b"".join(spec.body) if isinstance(spec.body, list) else spec.body
        text = b64 = None
        if body is not None:
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                b64 = base64.b64encode(body).decode("ascii")
        line = {
            "timestamp": intended_ns / NS_PER_S,
            "seq": seq,
            "lane": lane,
            "protocol": protocol,
            "method": spec.method,
            "url": redact_url(spec.url),
            "headers": redact_headers(dict(spec.headers)),
            "stream": spec.stream,
            "body": text,
            "body_b64": b64,
        }
        self.write_line(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))


def _field(
    obj: dict[str, Any], name: str, types: tuple[type, ...], path: Path, lineno: int, required: bool = True
) -> Any:
    value = obj.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        expected = "/".join(t.__name__ for t in types)
        raise ConfigError(f"{path}:{lineno}: {name}: expected {expected} (got {str(value)[:60]!r})")
    return value


def read_trace(path: Path) -> list[TraceRecord]:
    """Read a trace file, records sorted by (timestamp, seq): the order in which
    `trace:FILE` sends them. Raises ConfigError naming `path:line: field` on the first
    bad line (not JSON, a missing or mistyped field, bad base64) or when the file is
    unreadable or has no record."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read trace: {exc}") from exc
    records: list[TraceRecord] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{lineno}: not a JSON object: {exc}") from exc
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}:{lineno}: expected a JSON object (got {line[:60]!r})")
        body_text = _field(obj, "body", (str,), path, lineno, required=False)
        b64 = _field(obj, "body_b64", (str,), path, lineno, required=False)
        body: bytes | None = body_text.encode("utf-8") if body_text is not None else None
        if b64 is not None:
            try:
                body = base64.b64decode(b64, validate=True)
            except binascii.Error as exc:
                raise ConfigError(f"{path}:{lineno}: body_b64: not base64 ({exc})") from exc
        headers = _field(obj, "headers", (dict,), path, lineno, required=False) or {}
        records.append(
            TraceRecord(
                timestamp_s=float(_field(obj, "timestamp", (int, float), path, lineno)),
                seq=_field(obj, "seq", (int,), path, lineno),
                lane=_field(obj, "lane", (str,), path, lineno, required=False) or "default",
                protocol=_field(obj, "protocol", (str,), path, lineno, required=False),
                method=_field(obj, "method", (str,), path, lineno),
                url=_field(obj, "url", (str,), path, lineno),
                headers={str(k): str(v) for k, v in headers.items()},
                body=body,
                stream=bool(obj.get("stream", False)),
            )
        )
    if not records:
        raise ConfigError(f"{path}: trace has no records")
    records.sort(key=lambda r: (r.timestamp_s, r.seq))
    return records
