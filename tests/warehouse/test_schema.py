"""benchmaker.warehouse.schema: ordered migrations, in-place upgrade, storage compatibility."""

from __future__ import annotations

import duckdb

from benchmaker.warehouse.connection import connect_writer
from benchmaker.warehouse.loader import load_run
from benchmaker.warehouse.schema import STORAGE_COMPATIBILITY, current_version, migrate, migrations
from tests.warehouse._bundle import reference_bundle


def test_migrations_are_numbered_from_one_without_gaps():
    versions = [m.version for m in migrations()]
    assert versions == list(range(1, len(versions) + 1))  # 0001, 0002, ... in order
    assert len(versions) >= 2


def test_older_file_upgrades_in_place_and_keeps_its_rows(tmp_path):
    db = tmp_path / "w.duckdb"
    con = connect_writer(db)
    assert migrate(con, target=1) == 1  # a warehouse as made by the first release
    con.execute("INSERT INTO runs (run_id, kind) VALUES ('old-run', 'llm')")
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "baselines" not in tables  # added by 0002
    con.close()

    con = connect_writer(db)
    latest = migrations()[-1].version
    assert migrate(con) == latest
    assert con.execute("SELECT run_id FROM runs").fetchall() == [("old-run",)]
    assert con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall() == [
        (v,) for v in range(1, latest + 1)
    ]
    con.execute("INSERT INTO baselines VALUES ('nightly', 'old-run', NULL, NULL)")
    assert migrate(con) == latest  # idempotent: nothing left to apply
    assert current_version(con) == latest
    con.close()


def test_file_is_created_with_the_compatibility_storage_version(tmp_path):
    db = tmp_path / "w.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    con = duckdb.connect(str(db), read_only=True)
    tags = con.execute("SELECT tags FROM duckdb_databases() WHERE path = ?", [str(db)]).fetchone()[0]
    con.close()
    # DuckDB 2.0 records the format version as "<version>+"; default would be v2.0.0+.
    assert tags["storage_version"] == STORAGE_COMPATIBILITY + "+"


def test_package_exports_are_sorted_and_exist():
    import benchmaker.warehouse as warehouse

    assert warehouse.__all__ == sorted(warehouse.__all__)
    assert all(hasattr(warehouse, name) for name in warehouse.__all__)
