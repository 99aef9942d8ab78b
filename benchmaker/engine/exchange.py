"""Where the shards of a distributed run hand their files to the orchestrator when the
load hosts share no filesystem: a path or an fsspec URL every host
reaches (s3://bucket/prefix, gs://..., az://..., file:///mnt/x; the protocol's fsspec
package must be installed on every host, e.g. s3fs).

    ex = Exchange("s3://bench/exchange")
    ex.put_file(Path("trajectories.jsonl"), "run-1/trajectories.jsonl")   # orchestrator
    ex.get_file("run-1/trajectories.jsonl", Path("/tmp/t.jsonl"))         # load host
    ex.put_dir(Path("/tmp/shard-0"), "run-1/points/c8/_shards/w0")       # load host
    ex.get_dir("run-1/points/c8/_shards", Path("artifacts/run-1/points/c8/_shards"))
    ex.remove("run-1")                                                  # orchestrator
    ex.clock_offset("run-1")              # this host's wall clock vs the storage's

Keys are `/`-separated paths under the exchange's root. Files move whole (fsspec
put_file/get_file): a shard writes locally while it measures and uploads after, so no
storage latency is ever inside a timed span.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import fsspec

__all__ = ["Exchange", "absolute_exchange", "shards_key"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "created", "mtime_ns")


def _mtime_ns(info: dict[str, Any]) -> int | None:
    """The modification time in an fsspec `info()` dict as ns since the epoch (the key
    and type differ by filesystem: float s for local, datetime for memory/S3, ISO
    string for GCS; a naive datetime is taken as UTC); None when the filesystem
    states none. Float seconds keep ~0.25 us near today's epoch seconds."""
    for key in _MTIME_KEYS:
        value = info.get(key)
        if value is None:
            continue
        if key == "mtime_ns":
            return int(value)
        if isinstance(value, str):
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=UTC)
            return (value - _EPOCH) // timedelta(microseconds=1) * 1000
        if isinstance(value, (int, float)):
            return round(value * 1e9)
    return None


def absolute_exchange(url: str) -> str:
    """`url` with a relative local path made absolute against this process's working
    directory (a plain path, or `file://` + a relative path), so that processes with
    other working directories (Dask workers, pool workers) reach the same place; other
    URLs unchanged. Raises ValueError (naming `exchange`) for a URL carrying a password
    (it would be stored with the run's parameters; give credentials through the
    environment or the fsspec configuration instead)."""
    parts = urlsplit(url)
    if parts.password is not None:
        raise ValueError(
            f"exchange: a password in the URL is refused (it would be stored with the run); give "
            f"credentials through the environment or fsspec config (got {parts.scheme}://...)"
        )
    if "://" not in url:
        return str(Path(url).resolve())
    if url.startswith("file://") and not url[len("file://") :].startswith("/"):
        return "file://" + str(Path(url[len("file://") :]).resolve())
    return url


class Exchange:
    """A directory every load host reaches, by path or fsspec URL. Raises ValueError
    for an unknown protocol or a password in the URL (absolute_exchange), ImportError
    when the protocol's package is missing."""

    def __init__(self, url: str):
        absolute_exchange(url)  # refuses a password
        self.url = url
        self.fs, self.root = fsspec.core.url_to_fs(url)
        self.root = self.root.rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root}/{key.strip('/')}" if key.strip("/") else self.root

    def put_file(self, local: Path, key: str) -> None:
        """Upload the file `local` to `key`."""
        path = self._path(key)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.put_file(str(local), path)

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write `data` to `key` (replacing it)."""
        path = self._path(key)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, data)

    def read_glob(self, pattern: str) -> dict[str, bytes]:
        """The contents of every key matching `pattern` (a key with fsspec glob
        wildcards, e.g. `rid/points/c4/_shards/a*/progress-w*.json`), by key; a key
        removed while being read is left out."""
        out = {}
        for path in sorted(self.fs.glob(self._path(pattern))):
            try:
                out[path[len(self.root) :].lstrip("/")] = self.fs.cat_file(path)
            except FileNotFoundError:
                continue
        return out

    def get_file(self, key: str, local: Path) -> Path:
        """Download `key` to the file `local` (parents created); returns `local`.
        Raises FileNotFoundError when `key` does not exist."""
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        self.fs.get_file(self._path(key), str(local))
        return local

    def put_dir(self, local_dir: Path, key: str) -> list[str]:
        """Upload every file under `local_dir` to `key`/<its relative path>; returns
        the keys written, sorted."""
        local_dir = Path(local_dir)
        keys = []
        for f in sorted(p for p in local_dir.rglob("*") if p.is_file()):
            rel = f.relative_to(local_dir).as_posix()
            self.put_file(f, f"{key.strip('/')}/{rel}")
            keys.append(f"{key.strip('/')}/{rel}")
        return keys

    def get_dir(self, key: str, local_dir: Path) -> list[Path]:
        """Download every file under `key` into `local_dir`/<its relative path>;
        returns the local paths, sorted ([] when `key` holds nothing)."""
        base = self._path(key)
        out = []
        for remote in sorted(self.fs.find(base)):
            rel = remote[len(base) :].lstrip("/") if remote.startswith(base) else remote.rsplit("/", 1)[-1]
            out.append(self.get_file(f"{key.strip('/')}/{rel}", Path(local_dir) / rel))
        return out

    def fetch_attempt(self, run_id: str, sweep_point: str, attempt: int, local_dir: Path) -> list[Path]:
        """Download the shards' files of attempt `attempt` of `sweep_point`
        (shards_key) into `local_dir`, then delete the point's shard files here (of
        every attempt: a straggler's too); returns the local paths."""
        got = self.get_dir(shards_key(run_id, sweep_point, attempt), local_dir)
        self.remove(shards_key(run_id, sweep_point))
        return got

    def remove(self, key: str) -> None:
        """Delete `key` and everything under it (nothing when absent)."""
        path = self._path(key)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def clock_offset(self, key: str) -> dict[str, Any]:
        """This host's wall clock against the storage's, as
        benchmaker.engine.shared_start.measure_clock_offset does for a mounted path: writes a
        probe under `key` and compares the modification time the storage stamped with
        the local wall clock around the write. Returns {"reference": "storage mtime
        (<protocol>)" or None when the storage states no time, "wall_offset_ns"
        (positive: this host is ahead; None without a reference), "bracket_ns" (the
        write's duration plus the stamp's resolution: 1 s when the storage stamps
        whole seconds, as S3 does), "hostname"}."""
        probe = f"{key.strip('/')}/.clock-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path = self._path(probe)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        before = time.time_ns()
        self.fs.pipe_file(path, b"x")
        after = time.time_ns()
        try:
            local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))
            mtime = os.stat(path).st_mtime_ns if local else _mtime_ns(self.fs.info(path))
        finally:
            self.fs.rm(path)
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        resolution = 1_000_000_000 if mtime is not None and mtime % 1_000_000_000 == 0 else 0
        return {
            "reference": None if mtime is None else f"storage mtime ({protocol})",
            "wall_offset_ns": None if mtime is None else (before + after) // 2 - mtime,
            "bracket_ns": after - before + resolution,
            "hostname": socket.gethostname(),
        }


def shards_key(run_id: str, sweep_point: str, attempt: int | None = None) -> str:
    """The key under which the shards of one sweep point leave their files:
    `<run_id>/points/<sweep_point>/_shards[/a<attempt>]`, the same layout as the point's
    staging directory in the run bundle. `attempt` (the attempt's shared start,
    `start_wall_ns`) keeps a straggler of an earlier attempt of the point out of the
    files of a later one; without it, the key of every attempt of the point."""
    base = f"{run_id}/points/{sweep_point}/_shards"
    return base if attempt is None else f"{base}/a{attempt}"
