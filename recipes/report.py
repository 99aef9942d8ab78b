"""The `benchmaker report` command: one run's self-contained offline HTML report.

    benchmaker report RUN_ID -o report.html [--warehouse FILE] [--baseline RUN_A]

The warehouse is `--warehouse`, else env BENCHMAKER_WAREHOUSE, else ./warehouse.duckdb;
it is opened read-only. The report itself is benchmaker.warehouse.report (documented there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from benchmaker.engine.config import check_output_file
from benchmaker.recipes.app import app
from benchmaker.recipes.warehouse_cli import WarehouseOpt
from benchmaker.warehouse.connection import default_warehouse


@app.command(name="report")
def report(
    run_id: str,
    *,
    output: Annotated[Path, Parameter(name=["--output", "-o"])] = Path("report.html"),
    warehouse: WarehouseOpt = None,
    baseline: str | None = None,
) -> int:
    """Write the HTML report of one run (plots and summary tables; no network needed to view).

    Parameters
    ----------
    run_id
        The run to report (see: benchmaker runs).
    output
        Where to write the HTML file.
    baseline
        A run to compare with, sweep point by sweep point (as `benchmaker compare
        BASELINE RUN_ID`): differences with 95% bootstrap CIs, plotted and tabled.
    """
    check_output_file(output, "--output")
    from benchmaker.warehouse.report import write_report  # plotly: only when a report is written

    path = write_report(warehouse if warehouse is not None else default_warehouse(), run_id, output, baseline=baseline)
    print(f"wrote {path} (run {run_id})")
    return 0
