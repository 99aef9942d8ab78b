"""Run summaries computed by DuckDB SQL over samples (DESIGN §4).

The SQL lives in `benchmaker/sql/summary.sql` and is the one definition used by the run
bundle's summary.json, the warehouse views and the report. This module only runs it
over `samples.jsonl` files and reshapes the rows into nested dicts.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from benchmaker.records import SAMPLE_COLUMNS


def summary_sql() -> str:
    """The text of `benchmaker/sql/summary.sql`: one SELECT over a relation `samples`."""
    return (resources.files("benchmaker") / "sql" / "summary.sql").read_text(encoding="utf-8")


def samples_relation_sql(paths: list[Path]) -> str:
    """A DuckDB `read_json` expression over samples.jsonl files with the typed columns of
    SAMPLE_COLUMNS (so an all-null column keeps its type)."""
    cols = ", ".join(f"'{name}': '{typ}'" for name, typ in SAMPLE_COLUMNS.items())
    files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths)
    return (
        f"read_json([{files}], format='newline_delimited', columns={{{cols}}}, "
        "maximum_object_size=67108864)"
    )


SLO_COLUMNS = ("ttft_ms", "tpot_ms", "e2e_ms")


def create_run_slo(con: duckdb.DuckDBPyConnection, slo: Any = None) -> None:
    """Create the temp table `run_slo` (run_id, ttft_ms, tpot_ms, e2e_ms) that
    summary.sql judges SLOs by: one row per run_id of the relation `samples` carrying
    `slo`'s bounds in ms (a benchmaker.config.SLO, a dict with those keys, or None: no
    row, nothing judged). Needs `samples` to exist."""
    con.execute("CREATE TEMP TABLE run_slo (run_id VARCHAR, ttft_ms DOUBLE, tpot_ms DOUBLE, e2e_ms DOUBLE)")
    bounds = slo if isinstance(slo, dict) or slo is None else slo.model_dump()
    if bounds and any(bounds.get(k) is not None for k in SLO_COLUMNS):
        con.execute("INSERT INTO run_slo SELECT DISTINCT run_id, ?, ?, ? FROM samples",
                    [bounds.get(k) for k in SLO_COLUMNS])


def summarize_samples(paths: list[Path], slo: Any = None) -> list[dict[str, Any]]:
    """Run summary.sql over the given samples.jsonl files, judging `slo` (see
    create_run_slo; None: the samples' own slo_met); one dict per summary row (keys as
    the SQL's columns; stat columns are dicts with count/mean/min/p50/p90/p95/p99/max).
    Files that do not exist or are empty give no rows."""
    paths = [p for p in paths if p.exists() and p.stat().st_size > 0]
    if not paths:
        return []
    con = duckdb.connect()
    try:
        con.execute(f"CREATE TEMP VIEW samples AS SELECT * FROM {samples_relation_sql(paths)}")
        create_run_slo(con, slo)
        cur = con.execute(summary_sql())
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]
    finally:
        con.close()


def nest_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Shape summary rows as `{"run": {...}, "lanes": {name: {...}}, "stages": {...},
    "sweep_points": {...}}` (a single run's rows)."""
    out: dict[str, Any] = {"run": None, "lanes": {}, "stages": {}, "sweep_points": {}}
    plural = {"lane": "lanes", "stage": "stages", "sweep_point": "sweep_points"}
    for row in rows:
        body = {k: v for k, v in row.items() if k not in ("run_id", "group_by", "group_key")}
        if row["group_by"] == "run":
            out["run"] = body
        else:
            out[plural[row["group_by"]]][row["group_key"]] = body
    return out
