"""The summary row of a sweep point and the sweep table: every number comes from the SQL
files that define it once (docs/metrics.md), run over the point's own files.

    row = summarize_point(pdir, sweep_point="c4", concurrency=4, episodes_target=8)
    row["valid"], row["invalid_reason"], row["p99_e2e_ms"], row["resolved_rate_reverified"]
    write_point_summary(pdir, row)                         # pdir/point_summary.json
    headers, cells = sweep_table_rows([row, ...])           # the CLI table
    md = sweep_table_markdown([row, ...], title="run x")    # the Prefect artifact

The SQL, in the order it runs (one in-memory DuckDB connection per point):

    samples           the point's samples*.jsonl (benchmaker.engine.records.SAMPLE_COLUMNS): one
                      line per request, a model call of an episode included
    samples_summary   benchmaker/engine/sql/summary.sql over `samples` (and an empty `run_slo`):
                      request metrics
    episodes, turns   the point's episodes.jsonl / turns.jsonl (benchmaker.agent.episodes columns;
                      a turn line holds only what a turn has: its call is a sample)
    episodes_summary  benchmaker/sweep/sql/episode_summary.sql: episode metrics
    sweep_points      one row: what the point was asked to run and the writer's
                      verdict_reasons (engine self-checks, failed or late shards)
    -> benchmaker/sweep/sql/sweep_summary.sql: the row, with `valid` / `invalid_reason`

The warehouse creates the same three relations over every loaded run (views
`samples_summary`, `episodes_summary`, `v_sweep_summary`), so point_summary.json, the CLI
table, v_sweep_summary and the report show the same values for a point.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from benchmaker.agent.episodes import EPISODE_COLUMNS, TURN_COLUMNS
from benchmaker.engine.bundle import write_json_atomic
from benchmaker.engine.records import SAMPLE_COLUMNS
from benchmaker.engine.summary import create_run_slo, summary_sql

__all__ = [
    "TABLE_COLUMNS",
    "engine_point_row",
    "summarize_point",
    "sweep_table_markdown",
    "sweep_table_rows",
    "write_point_summary",
]

# (key of a summary row, column header) shown in the sweep table (CLI and Prefect artifact).
# Latencies and model/tool time per episode in ms; "rec. errors" are model calls that
# failed in the original recording, served as recorded (not in the error rate), "aborted"
# responses the server ended with finish reason abort/error/cancelled (summary.sql);
# "resolved ver./car." are rates among episodes whose outcome was re-verified / carried
# from the recording (never mixed).
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("sweep_point", "point"),
    ("target_concurrency", "target"),
    ("achieved_max_concurrency", "max in flight"),
    ("achieved_mean_concurrency", "mean in flight"),
    ("valid", "valid"),
    ("proof_ok", "proof"),
    ("usage_coverage", "usage cov."),
    ("n_episodes", "episodes"),
    ("n_turns", "turns"),
    ("n_requests", "requests"),
    ("request_throughput_per_s", "req/s"),
    ("p50_e2e_ms", "p50 E2E"),
    ("p99_e2e_ms", "p99 E2E"),
    ("p50_ttft_ms", "p50 TTFT"),
    ("p99_ttft_ms", "p99 TTFT"),
    ("mean_model_time_ms", "model/ep"),
    ("mean_tool_time_ms", "tool/ep"),
    ("misses_total", "misses"),
    ("divergences", "diverged"),
    ("n_recorded_error", "rec. errors"),
    ("n_aborted", "aborted"),
    ("resolved_rate_reverified", "resolved ver."),
    ("resolved_rate_carried", "resolved car."),
)

# The columns of the `sweep_points` relation sweep_summary.sql reads (a subset of the
# warehouse table's; migration 0009 adds verdict_reasons).
_POINT_COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR",
    "sweep_point": "VARCHAR",
    "concurrency": "INTEGER",
    "rate_per_s": "DOUBLE",
    "episodes": "INTEGER",
    "shards": "INTEGER",
    "verdict_reasons": "VARCHAR",
}


def _sql(name: str) -> str:
    return (resources.files("benchmaker.sweep") / "sql" / name).read_text(encoding="utf-8")


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _relation(paths: list[Path], columns: dict[str, str], sweep_point: str) -> str:
    """A typed read_json over `paths` (files of the point's directory, so every line's
    sweep_point is `sweep_point`, as the warehouse loader names lines under
    points/<name>/ that carry none), or an empty relation of the same columns when no
    file has a line (a point where nothing ran)."""
    paths = [p for p in paths if p.is_file() and p.stat().st_size > 0]
    if not paths:
        cols = ", ".join(f"NULL::{t} AS {k}" for k, t in columns.items())
        return f"SELECT {cols} WHERE false"
    typed = "{" + ", ".join(f"'{k}': '{v}'" for k, v in columns.items()) + "}"
    files = "[" + ", ".join(_quoted(p) for p in paths) + "]"
    sp = "'" + sweep_point.replace("'", "''") + "'"
    return (
        f"SELECT * REPLACE ({sp} AS sweep_point) FROM read_json({files}, "
        f"format='newline_delimited', columns={typed}, maximum_object_size=268435456)"
    )


def _plain(value: Any) -> Any:
    """DuckDB values as JSON-ready Python: a DECIMAL result (Decimal) becomes a float."""
    return float(value) if isinstance(value, Decimal) else value


def summarize_point(
    pdir: Path,
    *,
    sweep_point: str,
    concurrency: int | None,
    episodes_target: int | None = None,
    duration_s: float | None = None,
    rate_per_s: float | None = None,
    verdict_reasons: Sequence[str] = (),
    shards: int | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The summary row of one sweep point from the files in `pdir` (samples*.jsonl,
    episodes.jsonl, turns.jsonl; each may be missing): benchmaker/sweep/sql/sweep_summary.sql over
    summary.sql and episode_summary.sql (module docstring), units in the column names
    (_ms, _s, _per_s, _ns).

    `concurrency` is the target (episodes in flight for a replay point, requests in
    flight for a closed-loop engine point; None for open loop), `rate_per_s` the target
    arrival rate, `episodes_target` / `duration_s` what the point was asked to run
    (recorded as given), `verdict_reasons` what the caller found that the files cannot
    show (engine self-checks, failed shards): each makes the point invalid and is
    appended to `invalid_reason`. `run_id` defaults to the one in the files.

    The row holds those inputs (`concurrency`, `rate_per_s`, `episodes`, `duration_s`,
    `shards`, `verdict_reasons` '; '-joined or None: the keys the warehouse loads into
    sweep_points) and every column of sweep_summary.sql. Counts are 0 and percentiles
    None when nothing ran; a point with a target where nothing ran is invalid ("nothing
    ran at this point"). Raises duckdb.Error on a malformed line (our own writers make
    these files, so that is a bug, not user input).
    """
    pdir = Path(pdir)
    reasons = "; ".join(verdict_reasons) or None
    con = duckdb.connect()
    try:
        sample_files = sorted(pdir.glob("samples*.jsonl"))
        con.execute(f"CREATE TEMP VIEW samples AS {_relation(sample_files, SAMPLE_COLUMNS, sweep_point)}")
        create_run_slo(con)  # a sweep declares no SLO (nor does its manifest: runs.slo)
        con.execute(f"CREATE TEMP VIEW samples_summary AS {summary_sql().strip().rstrip(';')}")
        con.execute(
            f"CREATE TEMP VIEW episodes AS {_relation([pdir / 'episodes.jsonl'], EPISODE_COLUMNS, sweep_point)}"
        )
        con.execute(f"CREATE TEMP VIEW turns AS {_relation([pdir / 'turns.jsonl'], TURN_COLUMNS, sweep_point)}")
        con.execute(f"CREATE TEMP VIEW episodes_summary AS {_sql('episode_summary.sql').strip().rstrip(';')}")
        if run_id is None:
            found = con.execute(
                "SELECT coalesce((SELECT any_value(run_id) FROM samples), (SELECT any_value(run_id) FROM episodes))"
            ).fetchone()
            run_id = found[0] if found and found[0] is not None else ""
        cols = ", ".join(f"{k} {t}" for k, t in _POINT_COLUMNS.items())
        con.execute(f"CREATE TEMP TABLE sweep_points ({cols})")
        con.execute(
            "INSERT INTO sweep_points VALUES (?, ?, ?, ?, ?, ?, ?)",
            [run_id, sweep_point, concurrency, rate_per_s, episodes_target, shards, reasons],
        )
        cur = con.execute(_sql("sweep_summary.sql"))
        names = [d[0] for d in cur.description]
        values = cur.fetchone()
        if values is None:  # one aggregate row always
            raise RuntimeError("the sweep summary query returned no row")
    finally:
        con.close()
    row: dict[str, Any] = {
        "sweep_point": sweep_point,
        "concurrency": concurrency,
        "rate_per_s": rate_per_s,
        "episodes": episodes_target,
        "duration_s": duration_s,
        "shards": shards,
        "verdict_reasons": reasons,
    }
    row.update({k: _plain(v) for k, v in zip(names, values, strict=True)})
    return row


def write_point_summary(pdir: Path, row: dict[str, Any]) -> Path:
    """Write `row` to `pdir`/point_summary.json (atomic); returns the path."""
    path = Path(pdir) / "point_summary.json"
    write_json_atomic(path, row)
    return path


def engine_point_row(
    pdir: Path,
    summary: dict[str, Any],
    sweep_point: str,
    duration_s: float | None,
    shards: int | None = None,
) -> dict[str, Any]:
    """The sweep row of an engine sweep point (llm-sweep) whose samples*.jsonl are in
    `pdir`: summarize_point with the target of `summary` (its summary.json dict:
    target concurrency, the first lane's rate) and the engine verdict's reasons as
    `verdict_reasons`, plus `load` (the lane's rate spec). Raises KeyError when
    `summary` has no target lanes or verdict."""
    lane = next(iter(summary["target"]["lanes"].values()))
    target = summary["target"].get("target_concurrency")
    row = summarize_point(
        pdir,
        sweep_point=sweep_point,
        concurrency=target if target is not None else lane["concurrency"],
        rate_per_s=lane["target_rate_per_s"],
        duration_s=duration_s,
        verdict_reasons=list(summary["verdict"]["reasons"]),
        shards=shards,
        run_id=summary.get("run_id"),
    )
    return {"load": lane["load"], **row}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def sweep_table_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(headers, cells) of the sweep table: one line per point, the TABLE_COLUMNS keys
    formatted for display (None as "-", floats to 3 significant digits below 10,
    an invalid point's `valid` as "NO")."""
    headers = [h for _, h in TABLE_COLUMNS]
    cells = [[_cell(row.get(key)) for key, _ in TABLE_COLUMNS] for row in rows]
    return headers, cells


def sweep_table_markdown(rows: Sequence[dict[str, Any]], title: str | None = None) -> str:
    """The sweep table as GitHub markdown (for a Prefect markdown artifact), followed by
    one line per invalid point naming its reason."""
    headers, cells = sweep_table_rows(rows)
    lines = [f"## {title}", ""] if title else []
    lines.append("| " + " | ".join(headers) + " |")
    lines.append("|" + "---|" * len(headers))
    lines.extend("| " + " | ".join(c) + " |" for c in cells)
    lines.append("")
    lines.append(
        "Times in ms (E2E, TTFT: linear percentiles over successful requests; model/tool: mean per "
        "episode); usage cov.: successful requests with server usage / successful requests; "
        "rec. errors: calls that failed in the recording, served as recorded (not in the error rate); "
        "aborted: responses ended with finish reason abort/error/cancelled; "
        "resolved ver./car.: rate among re-verified / carried outcomes."
    )
    invalid = [r for r in rows if not r.get("valid", True)]
    if invalid:
        lines.append("")
        lines.extend(f"- **{r['sweep_point']} invalid**: {r.get('invalid_reason')}" for r in invalid)
    return "\n".join(lines) + "\n"
