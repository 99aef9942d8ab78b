"""The load stage: the only warehouse writer (docs/query-the-warehouse.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from benchmaker.progress import stage
from benchmaker.tasks.transient import retry_on_transient
from benchmaker.warehouse.loader import load_run

__all__ = ["load_warehouse"]


@task(
    name="load-warehouse",
    cache_policy=NO_CACHE,
    retries=3,
    retry_delay_seconds=[2, 5, 10],
    retry_condition_fn=retry_on_transient,
)
def load_warehouse(warehouse: Path, run_dir: Path, wait_s: float = 60.0) -> dict[str, Any]:
    """Prefect shell over benchmaker.warehouse.loader.load_run (documented there; idempotent per
    run_id, waits up to `wait_s` s for another writer's lock). Retried only when the
    file stayed locked (WarehouseLocked). Returns {"run_id", "warehouse", "rows",
    "replaced", "seconds"}."""
    with stage("load", "into the warehouse"):  # live progress (benchmaker.progress)
        report = load_run(Path(warehouse), Path(run_dir), wait_s=wait_s)
    get_run_logger().info(
        "loaded run %s into %s: %s", report.run_id, report.warehouse, {k: v for k, v in report.rows.items() if v}
    )
    return {
        "run_id": report.run_id,
        "warehouse": str(report.warehouse),
        "rows": dict(report.rows),
        "replaced": report.replaced,
        "seconds": report.seconds,
    }
