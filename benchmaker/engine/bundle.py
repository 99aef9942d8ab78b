"""The run bundle: `OUT_DIR/<run_id>/` with manifest.json, samples.jsonl, summary.json.

    manifest.json   resolved config (secrets redacted), seed, versions, git sha, host,
                    t0 on the wall clock (the only wall-clock stamp of a run)
    samples.jsonl   one Sample per line, appended as each request finishes and flushed
                    at least every `flush_interval_s` (default 0.2 s) and at close
    summary.json    written at the end (also after Ctrl-C, then with "partial": true)

Files are written so a crash never leaves a summary that claims to be complete:
summary.json is written to a temp file and renamed into place.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.ceiling import host_facts
from benchmaker.engine.records import Sample

# A key names a secret when its last word is one of these (api_key, x-api-key, auth_token,
# Authorization, client_secret, ...); counts such as max_tokens or prompt_tokens are not.
_SECRET_KEY = re.compile(
    r"(?:^|[_-])(?:api[_-]?key|access[_-]?key|secret[_-]?key|token|secret|password|passwd|authorization|"
    r"cookie|credentials?)$",
    re.IGNORECASE,
)
REDACTED = "***"
# Request headers whose values are kept in files: they describe the request's format,
# never who sends it. Every other header's value is written as "***" (X-Api-Key,
# Ocp-Apim-Subscription-Key, Cookie, X-Auth, any custom header). Lower-case names.
SAFE_HEADERS = frozenset(
    {
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "connection",
        "content-encoding",
        "content-language",
        "content-length",
        "content-type",
        "expect",
        "host",
        "pragma",
        "te",
        "transfer-encoding",
        "user-agent",
        "anthropic-version",
        "openai-beta",
        "x-stainless-lang",
        "x-stainless-package-version",
        "x-stainless-os",
        "x-stainless-arch",
        "x-stainless-runtime",
        "x-stainless-runtime-version",
        "x-stainless-retry-count",
        "x-stainless-timeout",
        "x-request-id",
    }
)
# A URL's userinfo (s3://KEY:SECRET@bucket, http://u:p@host, http://ghp_TOKEN@host):
# RFC 3986 §3.2.1; all of it is replaced. A password may hold an unencoded '/' or '@'
# (AWS secrets hold '/'; parsers split the userinfo at the LAST '@'), so with a ':' it
# runs to the last '@' of the URL; a URL with a port and an '@' later in its path
# (http://h:80/a@b) is masked too: leaking a secret is worse than hiding a path.
_URL_PASSWORD = re.compile(r"(://)[^/?#@:\s]*:[^\s]*@")
_URL_USER = re.compile(r"(://)[^/?#@:\s]+@")
# Every query parameter's value (?api_key=..., &auth=..., &X-Amz-Signature=...): a name
# tells nothing sure about its value (RFC 3986 §3.4).
_QUERY_VALUE = re.compile(r"([?&][^=&#\s]+=)[^&#\s]*")
_HEADER_LINE = re.compile(r"^\s*([^:\s]+)\s*:(.*)$")


def new_run_id(prefix: str = "") -> str:
    """A sortable unique run id: `[prefix-]YYYYmmddTHHMMSSZ-<6 hex>` (UTC)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{prefix + '-' if prefix else ''}{stamp}-{secrets.token_hex(3)}"


def redact_url(text: str) -> str:
    """`text` with every URL's userinfo replaced by "***" (`http://u:p@h/` ->
    `http://***@h/`, `http://ghp_x@h/` -> `http://***@h/`) and every query parameter's
    value by "***" (`?api_key=s&n=1` -> `?api_key=***&n=***`); text without "://" is
    returned as is."""
    if "://" not in text:
        return text
    text = _URL_USER.sub(rf"\1{REDACTED}@", _URL_PASSWORD.sub(rf"\1{REDACTED}@", text))
    return _QUERY_VALUE.sub(rf"\1{REDACTED}", text)


def redact_headers(headers: Any) -> Any:
    """Request headers as they may be written to a file: a mapping (name -> value) or
    a list of "Name: value" lines, with the value of every header not in SAFE_HEADERS
    (case-insensitive) replaced by "***" (an empty value stays empty). Anything else
    is redacted as `redact` does."""
    if isinstance(headers, dict):
        return {
            k: (
                redact(v)
                if isinstance(k, str) and k.strip().lower() in SAFE_HEADERS
                else v
                if v in (None, "")
                else REDACTED
            )
            for k, v in headers.items()
        }
    if isinstance(headers, (list, tuple)):
        out = []
        for line in headers:
            m = _HEADER_LINE.match(line) if isinstance(line, str) else None
            if m is None:
                out.append(redact(line))
            elif m.group(1).lower() in SAFE_HEADERS or not m.group(2).strip():
                out.append(redact_url(line))
            else:
                out.append(f"{m.group(1)}: {REDACTED}")
        return out
    return redact(headers)


def redact(value: Any) -> Any:
    """A deep copy of `value` as it may be written to a file: the values of
    secret-looking keys (see _SECRET_KEY: api_key, token, secret, password,
    authorization, cookie, credential as the key's last word) replaced by "***", the
    value of a key named `headers` (or ending in `_headers` / `-headers`) redacted by
    redact_headers, and in any string holding a URL its userinfo and query values
    (redact_url)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            name = k.lower() if isinstance(k, str) else ""
            if name and _SECRET_KEY.search(name) and v not in (None, ""):
                out[k] = REDACTED
            elif name == "headers" or name.endswith(("_headers", "-headers")):
                out[k] = redact_headers(v)
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def _git_sha() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _versions() -> dict[str, Any]:
    packages: dict[str, str | None] = {}
    for name in ("benchmaker", "aiohttp", "httptools", "httpx", "duckdb", "pydantic", "prefect", "orjson", "uvloop"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {"benchmaker": packages["benchmaker"], "python": sys.version.split()[0], "packages": packages}


def build_manifest(
    *,
    run_id: str,
    kind: str,
    label: str | None,
    config: dict[str, Any],
    seed: int | None,
    t0_wall_ns: int,
    workers: int = 1,
    slo: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest.json content (the run bundle, docs/architecture.md). `config` is redacted here."""
    manifest = {
        "run_id": run_id,
        "kind": kind,
        "label": label,
        "created_at": datetime.fromtimestamp(t0_wall_ns / 1e9, UTC).isoformat(),
        "t0_wall_ns": t0_wall_ns,
        "config": redact(config),
        "seed": seed,
        "versions": _versions(),
        "git_sha": _git_sha(),
        "host": host_facts(),
        "workers": workers,
        "slo": slo,
    }
    if extra:
        manifest.update(redact(extra))
    return manifest


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write `obj` as indented JSON to `path` via a temp file and rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY, default=str))
    os.replace(tmp, path)


class JsonlAppender:
    """Appends lines (bytes ending in a newline) to a file, buffered; a write that fails
    keeps what is whole on disk.

        out = JsonlAppender(Path("monitor.jsonl"))           # "ab"; mode="wb" truncates
        out.write_line(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
        out.flush()                                          # hands the buffer to the OS
        out.close()                                          # flush + fsync

    `count` is the number of lines written. A write, flush or close that fails (ENOSPC:
    a full disk, EDQUOT, EIO) never raises: the file is cut back to the whole lines of
    the last good flush (`kept` of them), later lines are dropped (`dropped`), and
    `error` holds the OSError for the caller to report (`loss(what)` says it in one
    line). Opening raises OSError as `open` does.
    """

    def __init__(self, path: Path, mode: str = "ab"):
        self.path = Path(path)
        self._f = open(self.path, mode, buffering=1 << 16)
        self.count = 0
        self.kept = 0  # lines on disk as of the last good flush
        self._kept_bytes = self._f.tell()
        self.dropped = 0
        self.error: OSError | None = None

    def write_line(self, line: bytes) -> None:
        """Append `line` (ending in a newline) to the buffer."""
        if self.error is not None:
            self.dropped += 1
            return
        try:
            self._f.write(line)
        except OSError as exc:  # the buffer filled and its flush failed
            self.dropped += 1
            self._fail(exc)
            return
        self.count += 1

    def flush(self) -> None:
        if self.error is not None or self._f.closed:
            return
        try:
            self._f.flush()
        except OSError as exc:
            self._fail(exc)
            return
        self.kept, self._kept_bytes = self.count, self._f.tell()

    def _fail(self, exc: OSError) -> None:
        self.error = exc
        self.dropped += self.count - self.kept
        self.count = self.kept
        try:
            self._f.close()  # tries the buffer once more; what it adds is cut below
        except OSError:
            pass
        try:
            os.truncate(self.path, self._kept_bytes)  # never needs space
        except OSError:
            pass

    def close(self) -> None:
        if self._f.closed:
            return
        self.flush()
        if self.error is not None:
            return
        try:
            os.fsync(self._f.fileno())
            self._f.close()
        except OSError as exc:
            self._fail(exc)

    def loss(self, what: str, noun: str) -> str:
        """The failed write in one line: `path: cannot write WHAT (strerror); the KEPT NOUN
        written before it are kept there, DROPPED later ones are not`."""
        err = self.error
        why = (err.strerror or str(err)) if err is not None else "no error"
        return (
            f"{self.path}: cannot write {what} ({why}); the {self.kept} {noun} written before it are kept "
            f"there, {self.dropped} later ones are not"
        )


class SampleWriter(JsonlAppender):
    """Appends Samples to a samples.jsonl file as they finish (a JsonlAppender: a failed
    write keeps the whole lines of the last good flush and never raises).

    `write(sample)` serialises with orjson into a buffer; `flush()` hands it to the OS
    (the runner calls it every 0.2 s and at the end, so at most that much is lost if the
    process is killed). `count` is the number of lines written.
    """

    def write(self, sample: Sample) -> None:
        """Append `sample` as one JSON line."""
        self.write_line(orjson.dumps(sample, option=orjson.OPT_APPEND_NEWLINE))


def wall_ns() -> int:
    """Wall-clock time in ns (dates the manifest only; never used for durations)."""
    return time.time_ns()
