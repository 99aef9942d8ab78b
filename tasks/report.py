"""The report stage: the run's HTML report (benchmaker.warehouse.report.write_report) and Prefect
artifacts for a sweep (docs/architecture.md): a table artifact of the sweep points, a markdown
artifact with the same table plus where the results are, and a link artifact to the
HTML report."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from benchmaker.sweep.sweep import TABLE_COLUMNS, sweep_table_markdown
from benchmaker.warehouse.report import write_report

__all__ = ["artifact_key", "publish_report"]


def artifact_key(text: str) -> str:
    """A Prefect artifact key from `text`: lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:100] or "sweep"


@task(name="publish-report", cache_policy=NO_CACHE)
def publish_report(
    run_id: str, rows: list[dict[str, Any]], run_dir: Path, warehouse: Path, kind: str
) -> dict[str, Any]:
    """Write the HTML report of `run_id` from `warehouse` to `<run_dir>/report.html` (a
    failure is logged and named in the markdown, never fails the run: the measurements
    are already loaded), then create the artifacts of the sweep (keys `<kind>-sweep`,
    `<kind>-summary`, `<kind>-report`, so the UI shows their history across runs).
    Returns {"markdown": str, "report": str | None (file URI)}."""
    report_path = Path(run_dir) / "report.html"
    report_error = None
    try:
        write_report(Path(warehouse), run_id, report_path)
    except Exception as exc:  # see docstring
        report_error = f"{type(exc).__name__}: {exc}"
        get_run_logger().warning("HTML report not written: %s", report_error)
    key = artifact_key(f"{kind}-sweep")
    table = [{header: row.get(field) for field, header in TABLE_COLUMNS} for row in rows]
    create_table_artifact(table=table, key=key, description=f"Sweep points of run {run_id}")
    md = sweep_table_markdown(rows, title=f"{kind} run `{run_id}`")
    md += f"\nRun directory: `{Path(run_dir).resolve()}`\n"
    md += (
        f"\nWarehouse: `{Path(warehouse).resolve()}`; read it with\n\n"
        f"    duckdb -readonly {Path(warehouse).resolve()} "
        f"\"SELECT * FROM v_sweep_summary WHERE run_id = '{run_id}'\"\n"
    )
    report = None
    if report_path.is_file():
        report = report_path.resolve().as_uri()
        create_link_artifact(link=report, link_text="HTML report", key=artifact_key(f"{kind}-report"))
        md += f"\nHTML report: {report}\n"
    elif report_error:
        md += f"\nHTML report not written: {report_error}\n"
    create_markdown_artifact(markdown=md, key=artifact_key(f"{kind}-summary"), description=f"Run {run_id}")
    return {"markdown": md, "report": report}
