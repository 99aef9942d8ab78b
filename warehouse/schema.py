"""Warehouse schema: ordered SQL migrations and the `schema_version` table.

Migrations are the files `warehouse/migrations/NNNN_<name>.sql`, applied in order of
NNNN, each in its own transaction, each recorded as one row of
`schema_version(version, name, applied_at)`. A file made by an older version of this
code upgrades in place: `migrate` applies only the versions not recorded in it (one
that landed with a lower number after a higher one was applied still runs, so each
migration must be idempotent: `IF NOT EXISTS`), so calling it on an up-to-date file
does nothing.

Files are created with `storage_compatibility_version = STORAGE_COMPATIBILITY` so that
older DuckDB builds can open them: DuckDB 2.0 writes a format DuckDB 1.x cannot read
unless asked. "v1.2.0" lets any DuckDB >= 1.2 open the file, which covers
the `duckdb` CLI on PyPI (package `duckdb-cli`, 1.5.6 at the time of writing) and the
Python package down to the `duckdb>=1.3` that pyproject allows. The setting only
applies when DuckDB creates the file; the version is kept in the file after that.
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass

import duckdb

from benchmaker.warehouse.errors import MigrationError

STORAGE_COMPATIBILITY = "v1.2.0"

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: `version` is its NNNN prefix, `name` the file name."""

    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """All migration files of the package, sorted by version.

    Raises MigrationError when a file name does not match `NNNN_<name>.sql` or two files
    share a version.
    """
    root = importlib.resources.files("benchmaker.warehouse") / "migrations"
    found: dict[int, Migration] = {}
    for entry in root.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        m = _NAME.match(entry.name)
        if m is None:
            raise MigrationError(f"warehouse/migrations/{entry.name}: file name: expected NNNN_<name>.sql")
        version = int(m.group(1))
        if version in found:
            raise MigrationError(
                f"warehouse/migrations/{entry.name}: version {version} also used by {found[version].name}"
            )
        found[version] = Migration(version, entry.name, entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """Highest applied migration version of the open database; 0 for a new file."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    row = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection, target: int | None = None) -> int:
    """Apply every migration not yet recorded in the file, up to `target` (default:
    all), in order, each in one transaction. Returns the highest applied version.

    The connection must be writable and outside a transaction. Raises MigrationError
    naming the file whose SQL failed; versions applied before it stay applied.
    """
    version = current_version(con)
    applied = {int(r[0]) for r in con.execute("SELECT version FROM schema_version").fetchall()}
    for mig in migrations():
        if mig.version in applied or (target is not None and mig.version > target):
            continue
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute(mig.sql)
            con.execute(
                "INSERT INTO schema_version VALUES (?, ?, now() AT TIME ZONE 'UTC')",
                [mig.version, mig.name],
            )
            con.execute("COMMIT")
        except duckdb.Error as exc:
            con.execute("ROLLBACK")
            raise MigrationError(f"warehouse/migrations/{mig.name}: {exc}") from exc
        version = max(version, mig.version)
    return version
