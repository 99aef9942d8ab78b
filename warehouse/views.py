"""Warehouse views: one relation per SQL file in `warehouse/views/`, created in sorted
order of the relation name, plus three whose body is a SELECT kept beside the
code that runs it on one bundle (the one definition of each metric, docs/metrics.md):

    samples_summary    benchmaker/engine/sql/summary.sql (request metrics; also summary.json)
    episodes_summary   benchmaker/sweep/sql/episode_summary.sql (episode metrics; also point_summary.json)
    v_sweep_summary    benchmaker/sweep/sql/sweep_summary.sql (the sweep table and the point verdict;
                       also point_summary.json, sweep_points.jsonl and the CLI table)

Order (sorted by name, which is also the dependency order):

    compare_runs          table macro: bootstrap CIs of p50/p99 TTFT and E2E differences
    episodes_summary      CREATE OR REPLACE VIEW episodes_summary AS <episode_summary.sql>
    run_slo               each run's declared SLO bounds (runs.slo), judged by summary.sql
    samples               view over `requests` with exactly SAMPLE_COLUMNS
    samples_summary       CREATE OR REPLACE VIEW samples_summary AS <summary.sql>
    v_lane_summary, v_nightly_regression, v_run_summary, v_sweep_summary,
    v_tpot_definitions (each request's TPOT by ours, vLLM's and aiperf's formulas),
    v_turns (each turn beside its request), v_vllm_compat

DuckDB binds a view when it is created, so a file may only use relations that sort
before it. A file that fails raises ViewError naming it.
"""

from __future__ import annotations

import importlib.resources

import duckdb

from benchmaker.warehouse.errors import ViewError

# (view name, package, path in it) of the views whose SELECT lives beside its other reader
_SHARED_SQL = (
    ("samples_summary", "benchmaker.engine", "sql/summary.sql"),
    ("episodes_summary", "benchmaker.sweep", "sql/episode_summary.sql"),
    ("v_sweep_summary", "benchmaker.sweep", "sql/sweep_summary.sql"),
)


def view_files() -> list[tuple[str, str, str]]:
    """(relation name, file label, SQL) for every relation, in creation order."""
    root = importlib.resources.files("benchmaker.warehouse") / "views"
    items = [
        (entry.name[: -len(".sql")], f"warehouse/views/{entry.name}", entry.read_text(encoding="utf-8"))
        for entry in root.iterdir()
        if entry.name.endswith(".sql")
    ]
    for name, package, path in _SHARED_SQL:
        body = (importlib.resources.files(package) / path).read_text(encoding="utf-8").strip().rstrip(";")
        items.append((name, f"{package.replace('.', '/')}/{path}", f"CREATE OR REPLACE VIEW {name} AS\n{body}\n"))
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
