"""Warehouse views: one relation per SQL file in `warehouse/views/`, created in sorted
order of the relation name (STYLE §7), plus `samples_summary`, whose body is the text of
`benchmaker/sql/summary.sql` (the one summary definition, shared with the run bundle's
summary.json and the report; DESIGN §4).

Order (sorted by name, which is also the dependency order):

    compare_runs          table macro: bootstrap CIs of p50/p99 TTFT and E2E differences
    samples               view over `requests` with exactly SAMPLE_COLUMNS
    samples_summary       CREATE OR REPLACE VIEW samples_summary AS <summary.sql>
    v_lane_summary, v_nightly_regression, v_run_summary, v_sweep_summary, v_vllm_compat

DuckDB binds a view when it is created, so a file may only use relations that sort
before it. A file that fails raises ViewError naming it.
"""

from __future__ import annotations

import importlib.resources

import duckdb

from warehouse.errors import ViewError

SUMMARY_VIEW = "samples_summary"


def summary_sql() -> str:
    """The text of `benchmaker/sql/summary.sql` (one SELECT over a relation `samples`)."""
    path = importlib.resources.files("benchmaker") / "sql" / "summary.sql"
    return path.read_text(encoding="utf-8")


def view_files() -> list[tuple[str, str, str]]:
    """(relation name, file label, SQL) for every relation, in creation order."""
    root = importlib.resources.files("warehouse") / "views"
    items = [
        (entry.name[: -len(".sql")], f"warehouse/views/{entry.name}", entry.read_text(encoding="utf-8"))
        for entry in root.iterdir()
        if entry.name.endswith(".sql")
    ]
    body = summary_sql().strip().rstrip(";")
    items.append(
        (SUMMARY_VIEW, "benchmaker/sql/summary.sql", f"CREATE OR REPLACE VIEW {SUMMARY_VIEW} AS\n{body}\n")
    )
    return sorted(items)


def install_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Create or replace every view and macro on a writable connection whose schema is
    migrated; returns the relation names in creation order. Raises ViewError naming the
    file whose statement failed (relations created before it stay)."""
    names = []
    for name, label, sql in view_files():
        try:
            con.execute(sql)
        except duckdb.Error as exc:
            raise ViewError(f"{label}: {exc}") from exc
        names.append(name)
    return names
