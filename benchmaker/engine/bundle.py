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
import platform
import re
import secrets
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.records import Sample

# A key names a secret when its last word is one of these (api_key, x-api-key, auth_token,
# Authorization, client_secret, ...); counts such as max_tokens or prompt_tokens are not.
_SECRET_KEY = re.compile(
    r"(?:^|[_-])(?:api[_-]?key|access[_-]?key|secret[_-]?key|token|secret|password|passwd|authorization|"
    r"cookie|credentials?)$",
    re.IGNORECASE,
)
REDACTED = "***"
# The password of a URL's userinfo (s3://KEY:SECRET@bucket, http://u:p@host): RFC 3986 §3.2.1.
# A password may hold an unencoded '/' or '@' (AWS secrets hold '/'; parsers split the
# userinfo at the LAST '@'), so it runs to the last '@' of the URL; a URL with a port and
# an '@' later in its path (http://h:80/a@b) is masked too: leaking a secret is worse
# than hiding a path.
_URL_PASSWORD = re.compile(r"(://[^/?#@:\s]*:)[^\s]*@")
# A secret-looking query parameter (?token=..., &api_key=..., &X-Amz-Signature=...).
_QUERY_SECRET = re.compile(
    r"([?&][^=&#\s]*(?:token|key|secret|password|passwd|signature|sig|credential)[^=&#\s]*=)[^&#\s]*",
    re.IGNORECASE)


def new_run_id(prefix: str = "") -> str:
    """A sortable unique run id: `[prefix-]YYYYmmddTHHMMSSZ-<6 hex>` (UTC)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{prefix + '-' if prefix else ''}{stamp}-{secrets.token_hex(3)}"


def redact(value: Any) -> Any:
    """A deep copy of `value` with the values of secret-looking keys (see _SECRET_KEY:
    api_key, token, secret, password, authorization, cookie, credential as the key's last
    word) replaced by "***", and in any string holding a URL the password of its
    userinfo (`s3://key:secret@bucket` -> `s3://key:***@bucket`) and secret-looking
    query values (`?token=***`)."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and _SECRET_KEY.search(k) and v not in (None, "") else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return _QUERY_SECRET.sub(rf"\1{REDACTED}", _URL_PASSWORD.sub(rf"\1{REDACTED}@", value))
    return value


def _git_sha() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
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
    *, run_id: str, kind: str, label: str | None, config: dict[str, Any], seed: int | None,
    t0_wall_ns: int, workers: int = 1, slo: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
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
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu_count": os.cpu_count()},
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


class SampleWriter:
    """Appends Samples to a samples.jsonl file as they finish.

    `write(sample)` serialises with orjson into a buffer; `flush()` hands it to the OS
    (the runner calls it every 0.2 s and at the end, so at most that much is lost if the
    process is killed). `count` is the number of lines written.
    """

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "ab", buffering=1 << 16)
        self.count = 0

    def write(self, sample: Sample) -> None:
        self._f.write(orjson.dumps(sample, option=orjson.OPT_APPEND_NEWLINE))
        self.count += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()


def wall_ns() -> int:
    """Wall-clock time in ns (dates the manifest only; never used for durations)."""
    return time.time_ns()
