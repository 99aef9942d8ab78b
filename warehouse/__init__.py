"""The DuckDB warehouse: every run bundle loaded for SQL (docs/query-the-warehouse.md).

load_run(warehouse, run_dir)  the only writer: one transaction per run, idempotent
open_readonly(warehouse)      a read-only connection (waits while a load holds the lock)
migrate(con)                  ordered migrations, `schema_version` table
install_views(con)            views from warehouse/views/*.sql and summary.sql
"""

from benchmaker.warehouse.compare import compare_runs
from benchmaker.warehouse.connection import default_warehouse, open_readonly
from benchmaker.warehouse.loader import LoadReport, load_run
from benchmaker.warehouse.schema import migrate
from benchmaker.warehouse.views import install_views

__all__ = [
    "LoadReport",
    "compare_runs",
    "default_warehouse",
    "install_views",
    "load_run",
    "migrate",
    "open_readonly",
]
