"""Opening the warehouse file: one writer at a time, readers read-only, both waiting
(bounded) while another process holds the file lock.

DuckDB locks the whole file for the lifetime of a writable connection; while it is held,
every other process fails to open it, read-only included, with
`IOException: IO Error: Could not set lock on file "<path>": Conflicting lock is held in
<exe> (PID n)` (checked on DuckDB 2.0.0). We retry that error with exponential backoff
(50 ms doubling to 2 s, +-25% jitter) until `wait_s` has passed, then raise
WarehouseLocked naming the file and the holder.

`open_readonly(path, sandboxed=True)` is for SQL typed by a user (`benchmaker sql`): it
also sets SANDBOX_CONFIG, so the query can touch nothing but the warehouse file:
`enable_external_access=false` refuses COPY TO/FROM, ATTACH of other files, EXPORT,
read_csv/read_json of any path and INSTALL/LOAD of extensions ("Permission Error: ...
file system operations are disabled by configuration"); `lock_configuration=true`
refuses any SET that would undo it. Source: DuckDB "Securing DuckDB"
(duckdb.org/docs/stable/operations_manual/securing_duckdb/overview); checked on 2.0.1.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import duckdb

from benchmaker.warehouse.errors import WarehouseError, WarehouseLocked
from benchmaker.warehouse.schema import STORAGE_COMPATIBILITY

DEFAULT_WAIT_S = 120.0
_LOCK_TEXT = "Could not set lock on file"
# settings of a connection that runs user-typed SQL (module docstring)
SANDBOX_CONFIG = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}


def default_warehouse() -> Path:
    """The warehouse path used when none is given: env `BENCHMAKER_WAREHOUSE`, else
    `./warehouse.duckdb`."""
    return Path(os.environ.get("BENCHMAKER_WAREHOUSE") or "warehouse.duckdb")


def is_lock_error(exc: BaseException) -> bool:
    """True for DuckDB's "file is locked by another process" error."""
    return isinstance(exc, duckdb.IOException) and _LOCK_TEXT in str(exc)


def _check_duckdb_file(path: Path) -> None:
    """Raise WarehouseError unless `path` is absent, empty or starts like a DuckDB
    database file (the magic "DUCK" at byte 8, DuckDB's storage header). Checked
    before DuckDB opens it: DuckDB would take a SQLite file for one to attach and
    try to download its sqlite_scanner extension."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except (FileNotFoundError, IsADirectoryError):
        return
    except OSError as exc:
        raise WarehouseError(f"{path}: cannot read warehouse ({exc.strerror})") from None
    if head and head[8:12] != b"DUCK":
        kind = "a SQLite database" if head.startswith(b"SQLite forma") else "no DuckDB file header"
        raise WarehouseError(f"{path}: not a DuckDB warehouse file ({kind}); give a .duckdb file or a new path")


def _connect(path: Path, read_only: bool, wait_s: float, sandboxed: bool = False) -> duckdb.DuckDBPyConnection:
    _check_duckdb_file(path)
    config: dict = {} if read_only else {"storage_compatibility_version": STORAGE_COMPATIBILITY}
    if sandboxed:
        config.update(SANDBOX_CONFIG)
    deadline = time.monotonic() + wait_s
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            if not is_lock_error(exc):
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise WarehouseError(f"{path}: cannot open warehouse: {first}") from exc
            left = deadline - time.monotonic()
            if left <= 0:
                raise WarehouseLocked(
                    f"{path}: warehouse still locked by another process after {wait_s:g} s ({exc})"
                ) from exc
            time.sleep(min(left, delay * random.uniform(0.75, 1.25)))
            delay = min(delay * 2, 2.0)


def connect_writer(path: Path, wait_s: float = DEFAULT_WAIT_S) -> duckdb.DuckDBPyConnection:
    """A writable connection to the warehouse at `path` (created, with
    STORAGE_COMPATIBILITY, when absent). Waits up to `wait_s` seconds for another
    process's lock. Raises WarehouseLocked, or WarehouseError for other open failures.
    Only the loader (benchmaker.warehouse.loader) writes; everything else uses open_readonly."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return _connect(Path(path), read_only=False, wait_s=wait_s)


def open_readonly(path: Path, wait_s: float = DEFAULT_WAIT_S, *, sandboxed: bool = False) -> duckdb.DuckDBPyConnection:
    """A read-only connection to an existing warehouse, waiting up to `wait_s` seconds
    while a load holds the lock; `sandboxed` adds SANDBOX_CONFIG (no file, network or
    extension access, configuration locked). Raises WarehouseError when the file does
    not exist or is not a file (DuckDB would otherwise fail with a less direct
    message), WarehouseLocked on timeout."""
    path = Path(path)
    if not path.is_file():
        what = (
            "is a directory, not a warehouse file"
            if path.is_dir()
            else "no warehouse file (load a run first: benchmaker load)"
        )
        raise WarehouseError(f"{path}: {what}")
    return _connect(path, read_only=True, wait_s=wait_s, sandboxed=sandboxed)
