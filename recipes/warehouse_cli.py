"""Warehouse commands of the `benchmaker` CLI: sql, runs, compare, export, load.

    benchmaker load RUN_DIR... [--warehouse FILE] [--token-events]
    benchmaker sql "SELECT * FROM v_sweep_summary" [--warehouse FILE] [--csv | --json | --vertical | --wide]
    benchmaker runs [--label nightly] [--limit 20]
    benchmaker compare RUN_A RUN_B [--n-boot 200] [--seed 42] [--json]
    benchmaker export --parquet DIR

The warehouse is `--warehouse`, else env BENCHMAKER_WAREHOUSE, else ./warehouse.duckdb.
Everything but `load` opens the file read-only (and waits while a load holds its lock).
"""

from __future__ import annotations

import csv as _csv
import sys
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import orjson
from cyclopts import Parameter
from rich.console import Console
from rich.table import Table

from benchmaker.engine.config import check_output_dir, check_output_file
from benchmaker.recipes.app import app, within
from benchmaker.warehouse.compare import compare_points
from benchmaker.warehouse.connection import default_warehouse, open_readonly
from benchmaker.warehouse.errors import WarehouseError
from benchmaker.warehouse.loader import RUN_TABLES, load_run

WarehouseOpt = Annotated[
    Path | None,
    Parameter(help="DuckDB warehouse file (default: $BENCHMAKER_WAREHOUSE or ./warehouse.duckdb)."),
]


def _path(warehouse: Path | None) -> Path:
    return warehouse if warehouse is not None else default_warehouse()


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return orjson.dumps(_jsonable(value)).decode()
    return str(value)


MAX_CELL_WIDTH = 40  # a narrow table's column is at most this wide, its longer values folded


def _whole(name: str) -> bool:
    """Whether column `name` holds identifiers (run_id, flow_run_id, ...), printed whole
    in every layout: a folded id cannot be copied into the next query."""
    return name == "id" or name.endswith("_id")


def _emit(names: list[str], rows: list[tuple], fmt: str, layout: str = "fit") -> None:
    """Print rows as a rich table ("table"), CSV ("csv") or a JSON list of objects ("json").

    A table's `layout`: "fit" (the default) prints the leading columns that fit the
    console's width (each at most MAX_CELL_WIDTH characters wide, longer values folded,
    never cut; identifier columns such as run_id whole) and names the columns left out on
    a line below; "wide" prints every column whole, however wide the lines get;
    "vertical" prints one block per row, a `name  value` line per column (as psql's
    expanded display)."""
    if fmt == "json":
        sys.stdout.write(
            orjson.dumps(
                [_jsonable(dict(zip(names, r, strict=True))) for r in rows], option=orjson.OPT_INDENT_2
            ).decode()
            + "\n"
        )
        return
    if fmt == "csv":
        writer = _csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([[_cell(v) for v in r] for r in rows])
        return
    console = Console()
    cells = [[_cell(v) for v in r] for r in rows]
    if layout == "vertical":
        width = max((len(n) for n in names), default=0)
        for i, row in enumerate(cells, 1):
            console.print(f"-[ row {i} ]" + "-" * max(0, width - 6), highlight=False, markup=False)
            for name, value in zip(names, row, strict=True):
                console.print(f"{name:<{width}}  {value}", highlight=False, markup=False, soft_wrap=True)
        if not cells:
            console.print("(no rows)")
        return
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    if layout == "wide":
        console.width = max(console.width, sum(w + 3 for w in widths) + 1)
    elif not console.is_terminal:  # piped or logged: no squeezing into 80 columns
        console.width = max(console.width, 200)
    # identifier columns whole where they fit the line (else folded too, never cut)
    whole = [_whole(n) and w + 4 <= console.width for n, w in zip(names, widths, strict=True)]
    shown: list[int] = []
    used = 1
    for i, w in enumerate(widths):
        need = (w if whole[i] or layout == "wide" else min(w, MAX_CELL_WIDTH)) + 3  # cell, padding, border
        if shown and used + need > console.width:
            break
        shown.append(i)
        used += need
    table = Table()
    for i in shown:
        table.add_column(
            names[i],
            overflow="fold",
            no_wrap=whole[i],
            min_width=widths[i] if whole[i] else None,
            max_width=None if whole[i] or layout == "wide" else MAX_CELL_WIDTH,
        )
    for c in cells:
        table.add_row(*[c[i] for i in shown])
    console.print(table)
    left = [n for i, n in enumerate(names) if i not in shown]
    if left:
        console.print(
            f"{len(left)} more columns not shown: {', '.join(left)} (name them in the SELECT, or "
            "--vertical for one block per row, --wide for every column, --csv/--json)",
            highlight=False,
            markup=False,
        )


def _format(csv: bool, json: bool) -> str:
    if csv and json:
        raise WarehouseError("--csv and --json: choose one")
    return "csv" if csv else "json" if json else "table"


@app.command(name="sql")
def sql(
    query: str,
    *,
    param: list[str] | None = None,
    warehouse: WarehouseOpt = None,
    csv: bool = False,
    json: bool = False,
    timeout: float = 60.0,
    wide: bool = False,
    vertical: bool = False,
) -> int:
    """Run one SQL query on a read-only connection to the warehouse and print the result.

    A table shows the leading columns that fit the terminal and names the others below
    it; --vertical prints one block per row instead, --wide every column.

    The connection touches nothing but the warehouse file: COPY TO, ATTACH, EXPORT,
    reading other files and loading extensions are refused, and SET cannot undo that
    (docs/query-the-warehouse.md).

    Parameters
    ----------
    query
        The SQL, e.g. "SELECT * FROM v_sweep_summary WHERE run_id = 'x'".
    param
        A value for the query's next `?` placeholder, in order (repeat the option),
        e.g. --param RUN_ID; passed as text (DuckDB casts it where compared).
    csv
        Print CSV instead of a table.
    json
        Print a JSON list of objects instead of a table.
    timeout
        Stop the query after this many seconds (execution and fetching; default 60):
        exit 2 with one line. DuckDB has no statement timeout of its own, so the
        connection is interrupted (`DuckDBPyConnection.interrupt`).
    wide
        Print every column of the table, however wide the lines get.
    vertical
        Print one block per row, one `column  value` line each (for wide results).
    """
    import math
    import threading

    import duckdb

    fmt = _format(csv, json)
    if wide and vertical:
        raise WarehouseError("--wide and --vertical: choose one")
    if not query.strip():
        raise WarehouseError('sql: empty query (give a statement, e.g. "SELECT * FROM runs")')
    if not (0 < timeout < math.inf):
        raise WarehouseError(f"--timeout: expected seconds > 0 (got {timeout:g})")
    con = open_readonly(_path(warehouse), sandboxed=True)
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        try:
            cur = con.execute(query, param or [])
            if cur.description is None:
                return 0
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        except duckdb.InterruptException:
            raise WarehouseError(
                f"sql: --timeout: the query ran longer than {timeout:g} s and was stopped (give a larger --timeout)"
            ) from None
        except duckdb.Error as exc:
            raise WarehouseError(f"sql: {str(exc).strip().splitlines()[0]}") from exc  # one line: no LINE/caret
    finally:
        timer.cancel()
        con.close()
    _emit(names, rows, fmt, layout="wide" if wide else "vertical" if vertical else "fit")
    return 0


@app.command(name="runs")
def runs(
    *,
    warehouse: WarehouseOpt = None,
    label: str | None = None,
    limit: Annotated[int, within(1, 1_000_000_000)] = 50,
    csv: bool = False,
    json: bool = False,
) -> int:
    """List the runs in the warehouse, newest first, with their headline numbers, whether
    each is valid (and why not) and whether it is partial (killed or interrupted;
    "PARTIAL" in the table's label). A sweep run (swebench-replay, llm-sweep) gets one
    line per sweep point, never run-level figures that would add its sequential points
    together. The table fits 120 columns; --csv/--json keep every column.

    Parameters
    ----------
    label
        Only runs with this label (e.g. nightly).
    limit
        At most this many runs.
    csv
        Print CSV with every column instead of the table.
    json
        Print JSON with every column instead of the table.
    """
    from benchmaker.warehouse.report import query_text

    fmt = _format(csv, json)
    con = open_readonly(_path(warehouse))
    try:
        cur = con.execute(query_text("runs_list"), {"label": label, "limit": limit})
        names, rows = [d[0] for d in cur.description], cur.fetchall()
        if fmt == "table":
            from benchmaker.recipes.display import runs_table

            console = Console()
            if not console.is_terminal:  # piped or logged: no squeezing below 120 columns
                console.width = max(console.width, 120)
            # a partial run (killed, interrupted: runs.partial) says so in its label cell
            at = names.index("label"), names.index("partial")
            rows = [
                tuple(f"PARTIAL {v or ''}".strip() if i == at[0] and r[at[1]] else v for i, v in enumerate(r))
                for r in rows
            ]
            console.print(runs_table(names, rows))
        else:
            _emit(names, rows, fmt)
    finally:
        con.close()
    return 0


@app.command(name="compare")
def compare(
    run_a: str,
    run_b: str,
    *,
    warehouse: WarehouseOpt = None,
    n_boot: int = 200,
    seed: Annotated[int, within(0, 2**63 - 1)] = 42,
    csv: bool = False,
    json: bool = False,
) -> int:
    """Compare run B (candidate) with run A (baseline), sweep point by sweep point
    (matched by target concurrency or rate): p50/p99 TTFT and E2E differences with 95%
    bootstrap confidence intervals, and request throughput differences; one block per
    point, then warnings for points in one run only and for differing workloads.

    Parameters
    ----------
    run_a
        Baseline run_id.
    run_b
        Candidate run_id.
    n_boot
        Bootstrap resamples.
    seed
        Seed of the resampling (same seed, same intervals).
    csv
        One CSV row per point and statistic (warnings on stderr).
    json
        A JSON list of those rows (warnings on stderr).
    """
    from benchmaker.recipes.display import print_comparison

    fmt = _format(csv, json)
    con = open_readonly(_path(warehouse))
    try:
        cmp = compare_points(con, run_a, run_b, n_boot=n_boot, seed=seed)
    finally:
        con.close()
    if fmt == "table":
        print_comparison(cmp, run_a, run_b)
        return 0
    names = [
        "point_key",
        "baseline_sweep_point",
        "candidate_sweep_point",
        "statistic",
        "baseline_value",
        "candidate_value",
        "diff",
        "diff_ci_low",
        "diff_ci_high",
        "n_baseline",
        "n_candidate",
        "n_boot",
        "verdict",
    ]
    _emit(names, [tuple(getattr(r, n) for n in names) for r in cmp.rows], fmt)
    for line in cmp.warnings:
        print(f"warning: {line}", file=sys.stderr)
    return 0


@app.command(name="export")
def export(
    *,
    parquet: Path,
    warehouse: WarehouseOpt = None,
) -> int:
    """Export every run table to Parquet under `DIR/<table>/date=YYYY-MM-DD/run_id=<id>/`
    (hive partitioning by the run's created_at date, UTC, and run_id; existing files of
    the same partitions are overwritten).

    Parameters
    ----------
    parquet
        Output directory.
    """
    check_output_dir(parquet, "--parquet")
    con = open_readonly(_path(warehouse))
    parquet.mkdir(parents=True, exist_ok=True)
    try:
        for table in RUN_TABLES:
            n = (con.execute(f"SELECT count(*) FROM {table}").fetchone() or (0,))[0]
            if n == 0:
                continue
            out = str(parquet / table).replace("'", "''")
            con.execute(
                f"""
                COPY (
                    SELECT t.*, coalesce(strftime(r.created_at, '%Y-%m-%d'), 'unknown') AS date
                    FROM {table} AS t
                    LEFT JOIN (SELECT run_id AS _rid, created_at FROM runs) AS r ON r._rid = t.run_id
                ) TO '{out}' (FORMAT parquet, PARTITION_BY (date, run_id), OVERWRITE_OR_IGNORE)
                """
            )
            print(f"{table}: {n} rows -> {out}/")
    finally:
        con.close()
    return 0


@app.command(name="load")
def load(
    run_dirs: list[Path],
    *,
    warehouse: WarehouseOpt = None,
    token_events: bool = False,
) -> int:
    """Load run bundles into the warehouse (idempotent per run_id, one transaction each).

    Parameters
    ----------
    run_dirs
        Run bundle directories (each with manifest.json).
    token_events
        Also fill the token_events table (one row per token-bearing event).
    """
    path = check_output_file(_path(warehouse), "--warehouse")
    for run_dir in run_dirs:
        report = load_run(path, run_dir, token_events=token_events)
        rows = ", ".join(f"{t} {n}" for t, n in report.rows.items() if n)
        verb = "replaced" if report.replaced else "loaded"
        print(
            f"{verb} {report.run_id} into {path} in {report.seconds:.2f} s: {rows}"
            + (f" (PARTIAL: {report.partial_reason})" if report.partial_reason else "")
        )
    return 0
