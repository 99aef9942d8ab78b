"""The HTML report of one run: a single self-contained, offline file (inline CSS,
plotly.js inlined once, no external reference) with interactive plots (hover values,
zoom, legend toggles: warehouse/plots.py) and the summary tables.

    write_report(Path("warehouse.duckdb"), "bench-20261130T051735Z-b3992e", Path("report.html"))
    write_report(..., baseline="bench-...")   # plus the per-point comparison with a baseline run
    html = render_report(con, run_id)        # on an open (read-only) connection

Every number in the tables is a value of v_run_summary, v_sweep_summary or
v_lane_summary, i.e. of benchmaker/engine/sql/summary.sql, the SQL that wrote the bundle's
summary.json (docs/metrics.md, one definition). Each table cell carries the exact value as
JSON in `data-value` (floats in their shortest round-trip form) beside its display
text (4 significant digits), with `data-row`/`data-col` naming the metric:

    <table data-table="run-stats">  rows ttft_ms, e2e_ms, ...; cols count, mean, p50, ...
    <table data-table="run">        rows n_ok, request_throughput_per_s, ...; col "value"
    <table data-table="sweep">      rows v_sweep_summary columns; cols sweep points
    <table data-table="lanes">      rows "ttft_ms.p50", ...; cols lanes

The page opens with the run's verdict and, for a sweep, one row per point (valid or
why not, requests, throughput, latency, misses); the plots follow, and the tables
below are folded (`<details data-section="tables">`).

Plots (plotly figures, warehouse/plots.py), each in `<section class="panel" data-panel=...>`:
throughput vs target concurrency (or target rate) per sweep point, labelled, invalid
points marked; latency vs throughput (one point per sweep point from v_sweep_summary; per lane from
v_lane_summary when the run has no sweep point), TTFT and ITL CDFs (requests table),
resolved rate vs concurrency (episodes, via v_sweep_summary; re-verified and carried rates
as two series; replaced by a note when the run has no episodes), schedule lag over time, achieved concurrency over time and,
for sweeps with a target, achieved vs target concurrency and, with a baseline run, the
difference per matched sweep point of p50/p99 TTFT and E2E with their 95% bootstrap CIs
(benchmaker.warehouse.compare.compare_points, the numbers of `benchmaker compare`; panel
"compare", with its table and warnings). A panel without data shows a `<p class="note">`
instead of a chart. The queries are warehouse/queries/report_*.sql.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from html import escape
from pathlib import Path
from typing import Any

import duckdb

from benchmaker.warehouse.compare import PointComparison, compare_points
from benchmaker.warehouse.connection import DEFAULT_WAIT_S, open_readonly
from benchmaker.warehouse.errors import WarehouseError
from benchmaker.warehouse.plots import Series, chart, draw_script, plotly_js

__all__ = ["ReportData", "collect_report_data", "query_text", "render_html", "render_report", "write_report"]

CDF_MAX_POINTS = 1000  # per CDF series (report_latency_cdf.sql thins above this)
TIME_BINS = 200  # bins of the schedule-lag and in-flight panels

STAT_KEYS = ("count", "mean", "min", "p50", "p90", "p95", "p99", "max")
_FACT_COLUMNS = ("run_id", "kind", "label", "created_at", "workers", "git_sha", "n_sweep_points")
_LANE_ROWS = (
    "n_samples",
    "n_ok",
    "error_rate",
    "window_s",
    "request_throughput_per_s",
    "output_throughput_tok_per_s",
    "goodput_per_s",
    "max_concurrency",
    "mean_concurrency",
    "ttft_ms.p50",
    "ttft_ms.p99",
    "e2e_ms.p50",
    "e2e_ms.p99",
    "itl_event_ms.p50",
    "itl_event_ms.p99",
    "tpot_ms.p50",
    "tpot_ms.p99",
    "schedule_lag_ms.p50",
    "schedule_lag_ms.p99",
)


def query_text(name: str) -> str:
    """Text of warehouse/queries/<name>.sql (the report's queries and the CLI's, such as
    runs_list). Raises FileNotFoundError for an unknown name."""
    return (importlib.resources.files("benchmaker.warehouse") / "queries" / f"{name}.sql").read_text(encoding="utf-8")


def _query(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        cur = con.execute(query_text(name), params)
    except duckdb.Error as exc:
        raise WarehouseError(f"warehouse/queries/{name}.sql: {exc}") from exc
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


@dataclass(slots=True)
class ReportData:
    """Everything the report shows, as query rows (dicts keyed by column name).

    `info`: report_run_info.sql (manifest facts, verdict JSON text or None, n_episodes,
    n_sweep_points); `run`: the v_run_summary row; `sweep`/`lanes`: v_sweep_summary and
    v_lane_summary rows; `cdf`: (metric, series, value_ms, cum_fraction, n) rows;
    `schedule_lag`: (bin, t_s, n, p50_schedule_lag_ms, max_schedule_lag_ms) rows;
    `in_flight`: (series, bin, t_s, max_in_flight) rows.
    """

    info: dict[str, Any]
    run: dict[str, Any]
    sweep: list[dict[str, Any]]
    lanes: list[dict[str, Any]]
    cdf: list[dict[str, Any]]
    schedule_lag: list[dict[str, Any]]
    in_flight: list[dict[str, Any]]
    comparison: PointComparison | None = None
    baseline_run: str | None = None


def collect_report_data(con: duckdb.DuckDBPyConnection, run_id: str, baseline: str | None = None) -> ReportData:
    """Run the report's queries (warehouse/queries/report_*.sql) for `run_id`, and with
    `baseline` (a run_id) the per-point comparison against it (compare_points).

    Raises WarehouseError when a run is not in the warehouse, or naming the query file
    whose SQL failed."""
    p = {"run_id": run_id}
    info = _query(con, "report_run_info", p)
    if not info:
        raise WarehouseError(f"report: no run {run_id!r} in the warehouse (see: benchmaker runs)")
    run = _query(con, "report_run_summary", p)
    return ReportData(
        info=info[0],
        run=run[0] if run else {},
        sweep=_query(con, "report_sweep_summary", p),
        lanes=_query(con, "report_lane_summary", p),
        cdf=_query(con, "report_latency_cdf", {**p, "max_points": CDF_MAX_POINTS}),
        schedule_lag=_query(con, "report_schedule_lag", {**p, "n_bins": TIME_BINS}),
        in_flight=_query(con, "report_in_flight", {**p, "n_bins": TIME_BINS}),
        comparison=compare_points(con, baseline, run_id) if baseline else None,
        baseline_run=baseline,
    )


def render_report(con: duckdb.DuckDBPyConnection, run_id: str, baseline: str | None = None) -> str:
    """The report of `run_id` as one HTML document (str). Errors as collect_report_data."""
    return render_html(collect_report_data(con, run_id, baseline))


def write_report(
    warehouse: Path, run_id: str, out: Path, wait_s: float = DEFAULT_WAIT_S, baseline: str | None = None
) -> Path:
    """Render the report of `run_id` (compared with `baseline` when given) from the
    warehouse file (opened read-only, waiting up to `wait_s` s for a load's lock) into
    `out` (UTF-8, parents created); returns `out`. Raises WarehouseError (no such file
    or run), WarehouseLocked."""
    con = open_readonly(Path(warehouse), wait_s=wait_s)
    try:
        html = render_report(con, run_id, baseline)
    finally:
        con.close()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return out


# --- values ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A query value as JSON-able data (Decimal -> float, dates -> ISO text)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _display(value: Any) -> str:
    """Display text of a cell: 4 significant digits for floats, thousands separators for
    large numbers, an en dash for None (unknown, never 0)."""
    value = _plain(value)
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    return str(value)


def _cell(row: str, col: str, value: Any) -> str:
    value = _plain(value)
    data = (
        json.dumps(value, allow_nan=False)
        if not (isinstance(value, float) and not math.isfinite(value))
        else json.dumps(str(value))
    )
    cls = "num" if isinstance(value, (int, float)) and not isinstance(value, bool) else "txt"
    return (
        f'<td class="{cls}" data-row="{escape(row)}" data-col="{escape(col)}" '
        f'data-value="{escape(data)}">{escape(_display(value))}</td>'
    )


def _get(row: dict[str, Any], key: str) -> Any:
    """row[key], where "a.b" reads field b of struct column a."""
    head, _, field = key.partition(".")
    value = row.get(head)
    if field:
        return value.get(field) if isinstance(value, dict) else None
    return value


# --- tables ------------------------------------------------------------------------------


def _run_tables(run: dict[str, Any]) -> str:
    if not run or run.get("n_samples") is None:
        return '<p class="note">No measured request in this run: no request summary.</p>'
    summary = {k: v for k, v in run.items() if k not in _FACT_COLUMNS}
    stats = [k for k, v in summary.items() if isinstance(v, dict)]
    scalars = [k for k, v in summary.items() if not isinstance(v, dict)]
    out = [
        "<h3>Requests (v_run_summary)</h3>",
        '<table data-table="run"><thead><tr><th>metric</th><th>value</th></tr></thead><tbody>',
    ]
    for k in scalars:
        out.append(f"<tr><th>{escape(k)}</th>{_cell(k, 'value', summary[k])}</tr>")
    out.append("</tbody></table>")
    out.append("<h3>Distributions (ms; linear percentiles, quantile_cont)</h3>")
    out.append(
        '<table data-table="run-stats"><thead><tr><th>metric</th>'
        + "".join(f"<th>{c}</th>" for c in STAT_KEYS)
        + "</tr></thead><tbody>"
    )
    for k in stats:
        out.append(f"<tr><th>{escape(k)}</th>" + "".join(_cell(k, c, summary[k].get(c)) for c in STAT_KEYS) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _transposed(table: str, rows: list[dict[str, Any]], key: str, metrics: list[str]) -> str:
    names = [str(r[key]) if r[key] is not None else "(none)" for r in rows]
    out = [
        f'<div class="scroll"><table data-table="{table}"><thead><tr><th>{escape(key)}</th>'
        + "".join(f"<th>{escape(n)}</th>" for n in names)
        + "</tr></thead><tbody>"
    ]
    for m in metrics:
        out.append(
            f"<tr><th>{escape(m)}</th>"
            + "".join(_cell(m, n, _get(r, m)) for n, r in zip(names, rows, strict=True))
            + "</tr>"
        )
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _sweep_table(sweep: list[dict[str, Any]]) -> str:
    if not sweep:
        return ""
    metrics = [k for k in sweep[0] if k not in ("run_id", "sweep_point")]
    return "<h3>Sweep points (v_sweep_summary)</h3>\n" + _transposed("sweep", sweep, "sweep_point", metrics)


def _lane_table(lanes: list[dict[str, Any]]) -> str:
    if not lanes:
        return ""
    return "<h3>Lanes (v_lane_summary)</h3>\n" + _transposed(
        "lanes", lanes, "lane", ["n_requests_all_phases", *_LANE_ROWS]
    )


# --- plots -------------------------------------------------------------------------------


def _panel(panel: str, title: str, body: str, caption: str = "") -> str:
    cap = f'<p class="caption">{escape(caption)}</p>' if caption else ""
    return f'<section class="panel" data-panel="{panel}"><h3>{escape(title)}</h3>{body}{cap}</section>'


def _note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def _point_label(row: dict[str, Any]) -> str:
    """A sweep point's name as its plots label it: "(invalid)" after an invalid one."""
    return str(row["sweep_point"]) + ("" if row.get("valid") else " (invalid)")


def _latency_throughput(data: ReportData) -> str:
    title = "Latency vs throughput"
    if data.sweep:
        # each point labelled by name, an invalid one marked so on the plot itself
        rows, names, source = data.sweep, [_point_label(r) for r in data.sweep], "sweep point"
    elif data.lanes:
        rows, names, source = data.lanes, [str(r["lane"]) for r in data.lanes], "lane"
    else:
        rows, names, source = [data.run], [str(data.info["run_id"])], "run"
    # v_sweep_summary has p50_e2e_ms columns, the lane and run summaries e2e_ms.p50 structs
    key = "{q}_{m}_ms" if data.sweep else "{m}_ms.{q}"
    get = {f"{m} {q}": key.format(m=m, q=q) for m in ("e2e", "ttft") for q in ("p50", "p99")}
    xs = [r.get("request_throughput_per_s") for r in rows]
    series = [
        Series(name, xs, [_get(r, k) for r in rows], style="linepoints", labels=names if name == "e2e p99" else None)
        for name, k in get.items()
    ]
    if not any(x is not None for x in xs) or not any(any(v is not None for v in s.ys) for s in series):
        return _panel("latency-throughput", title, _note("No successful request: nothing to plot."))
    plot = chart(
        series,
        plot_id="latency-throughput",
        title=f"one point per {source}",
        x_label="throughput (requests/s)",
        y_label="latency (ms)",
        x_min=0,
        y_min=0,
    )
    return _panel(
        "latency-throughput",
        title,
        plot,
        "Percentiles of E2E (end - sent) and TTFT over successful measured requests; "
        "throughput = completed requests / measurement window.",
    )


def _throughput_panel(data: ReportData) -> str:
    """Throughput per sweep point against what the point asked for: its target
    concurrency (closed-loop points), else its target rate (open-loop points); each
    marker labelled by point, an invalid one so marked. Empty without such points."""
    rows = [r for r in data.sweep if r.get("target_concurrency") is not None]
    x_key, x_label, title = "target_concurrency", "target concurrency (in flight)", "Throughput vs concurrency"
    if not rows:
        rows = [r for r in data.sweep if r.get("target_rate_per_s") is not None]
        x_key, x_label, title = "target_rate_per_s", "target rate (requests/s)", "Throughput vs rate"
    if not rows:
        return ""
    xs = [r[x_key] for r in rows]
    names = [_point_label(r) for r in rows]
    ys = [r.get("request_throughput_per_s") for r in rows]
    if not any(y is not None for y in ys):
        return _panel("throughput", title, _note("No successful request: nothing to plot."))
    plot = chart(
        [Series("requests/s", xs, ys, style="linepoints", labels=names)],
        plot_id="throughput",
        title="one point per sweep point",
        x_label=x_label,
        y_label="throughput (requests/s)",
        x_min=0,
        y_min=0,
    )
    return _panel(
        "throughput",
        title,
        plot,
        "Completed requests / measurement window, per sweep point (v_sweep_summary).",
    )


def _cdf_panel(data: ReportData, metric: str, panel: str, title: str, x_label: str, order: list[str]) -> str:
    rows = [r for r in data.cdf if r["metric"] == metric]
    if not rows:
        return _panel(panel, title, _note("No samples for this metric (no successful request with token events)."))
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["series"], []).append(r)
    names = [n for n in order if n in by] + sorted(n for n in by if n not in order)
    series = [
        Series(
            f"{n} (n={by[n][0]['n']})", [r["value_ms"] for r in by[n]], [r["cum_fraction"] for r in by[n]], style="step"
        )
        for n in names
    ]
    plot = chart(
        series, plot_id=panel, title=title, x_label=x_label, y_label="fraction of samples", x_min=0, y_min=0, y_max=1
    )
    return _panel(panel, title, plot)


def _resolved_panel(data: ReportData) -> str:
    title = "Resolved rate vs concurrency"
    if not data.info.get("n_episodes"):
        return _panel(
            "resolved-concurrency",
            title,
            _note("No episodes in this run: resolved rate vs concurrency is not plotted."),
        )

    def x_of(r: dict[str, Any]) -> Any:
        return (
            r.get("target_concurrency")
            if r.get("target_concurrency") is not None
            else r.get("achieved_mean_concurrency")
        )

    series = []
    # never mixed (docs/metrics.md)
    for key, name in (("resolved_rate_reverified", "re-verified"), ("resolved_rate_carried", "carried")):
        pts = [(x_of(r), r.get(key), str(r["sweep_point"])) for r in data.sweep]
        pts = [p for p in pts if p[0] is not None and p[1] is not None]
        if pts:
            series.append(
                Series(name, [p[0] for p in pts], [p[1] for p in pts], style="linepoints", labels=[p[2] for p in pts])
            )
    if not series:
        return _panel(
            "resolved-concurrency",
            title,
            _note("The run's episodes carry no sweep point with a known resolution: nothing to plot."),
        )
    plot = chart(
        series,
        plot_id="resolved-concurrency",
        title=title,
        x_label="concurrency (target, else achieved mean; in flight)",
        y_label="resolved rate (fraction of episodes)",
        x_min=0,
        y_min=0,
        y_max=1,
    )
    return _panel(
        "resolved-concurrency",
        title,
        plot,
        "resolved / episodes with a known resolution, per sweep point, re-verified (a verifier ran) "
        "and carried (the recording's outcome) apart (v_sweep_summary).",
    )


def _lag_panel(data: ReportData) -> str:
    title = "Schedule lag over time"
    if not data.schedule_lag:
        return _panel("schedule-lag", title, _note("No measured request was sent: no schedule lag."))
    xs = [r["t_s"] for r in data.schedule_lag]
    series = [
        Series("max", xs, [r["max_schedule_lag_ms"] for r in data.schedule_lag]),
        Series("p50", xs, [r["p50_schedule_lag_ms"] for r in data.schedule_lag]),
    ]
    plot = chart(
        series,
        plot_id="schedule-lag",
        title=title,
        x_label="intended send time (s from t0)",
        y_label="schedule lag (ms; sent - intended)",
        y_min=0,
    )
    lag = data.run.get("schedule_lag_ms") or {}
    cap = (
        f"Run: p50 {_display(lag.get('p50'))} ms, p99 {_display(lag.get('p99'))} ms "
        f"over {_display(lag.get('count'))} requests; {TIME_BINS} time bins."
    )
    return _panel("schedule-lag", title, plot, cap)


def _in_flight_panel(data: ReportData) -> str:
    title = "Achieved concurrency over time"
    if not data.in_flight:
        return _panel("in-flight", title, _note("No request or episode with both ends timed."))
    by: dict[str, list[dict[str, Any]]] = {}
    for r in data.in_flight:
        by.setdefault(r["series"], []).append(r)
    # requests first, episodes (the sweep's concurrency for agent runs) drawn on top
    series = [
        Series(n, [r["t_s"] for r in rows], [r["max_in_flight"] for r in rows])
        for n, rows in sorted(by.items(), key=lambda kv: kv[0] != "requests")
    ]
    plot = chart(
        series,
        plot_id="in-flight",
        title=title,
        x_label="time (s from t0)",
        y_label="max in flight per time bin",
        y_min=0,
    )
    run = data.run
    if run.get("max_concurrency") is None and data.sweep:  # a sweep: per point (v_sweep_summary)
        cap = (
            "Max in flight per point: "
            + ", ".join(f"{r['sweep_point']} {_display(r.get('achieved_max_concurrency'))}" for r in data.sweep)
            + "."
        )
    else:
        cap = (
            f"Run, requests: max {_display(run.get('max_concurrency'))}, time-weighted mean "
            f"{_display(run.get('mean_concurrency'))}."
        )
    return _panel("in-flight", title, plot, cap)


def _target_panel(data: ReportData) -> str:
    rows = [r for r in data.sweep if r.get("target_concurrency") is not None]
    if not rows:
        return ""
    xs = [r["target_concurrency"] for r in rows]
    names = [str(r["sweep_point"]) for r in rows]
    series = [
        Series("target", xs, xs, style="line", color="#999999"),
        Series("achieved max", xs, [r.get("achieved_max_concurrency") for r in rows], style="linepoints", labels=names),
        Series("achieved mean", xs, [r.get("achieved_mean_concurrency") for r in rows], style="linepoints"),
    ]
    title = "Achieved vs target concurrency"
    plot = chart(
        series,
        plot_id="concurrency-target",
        title=title,
        x_label="target concurrency (in flight)",
        y_label="achieved (in flight)",
        x_min=0,
        y_min=0,
    )
    invalid = [f"{r['sweep_point']}: {r['invalid_reason']}" for r in rows if r.get("valid") is False]
    cap = "Invalid points: " + "; ".join(invalid) if invalid else "Every point reached its target."
    return _panel("concurrency-target", title, plot, cap)


def _compare_panel(data: ReportData) -> str:
    cmp = data.comparison
    if cmp is None:
        return ""
    title = f"vs baseline {data.baseline_run}: difference per sweep point"
    warn = "".join(f'<p class="note warn">warning: {escape(w)}</p>' for w in cmp.warnings)
    rows = [r for r in cmp.rows if r.diff_ci_low is not None]
    if not rows:
        return _panel(
            "compare", title, _note("No sweep point of the two runs has the same target: nothing compared.") + warn
        )
    series = []
    for stat in ("p50_ttft_ms", "p99_ttft_ms", "p50_e2e_ms", "p99_e2e_ms"):
        pts = [r for r in rows if r.statistic == stat]
        if pts:
            series.append(
                Series(
                    stat,
                    [r.point_key for r in pts],
                    [r.diff for r in pts],
                    style="errorbars",
                    labels=[f"{r.baseline_sweep_point} -> {r.candidate_sweep_point}, {r.verdict}" for r in pts],
                    err_low=[r.diff_ci_low for r in pts],
                    err_high=[r.diff_ci_high for r in pts],
                )
            )
    plot = chart(
        series,
        plot_id="compare",
        title="candidate - baseline, 95% bootstrap CI",
        x_label="sweep point (matched by target)",
        y_label="difference (ms)",
        x_category=True,
    )
    head = "".join(
        f"<th>{c}</th>" for c in ("point", "statistic", "baseline", "candidate", "diff", "95% CI", "n", "verdict")
    )
    body = []
    for r in cmp.rows:
        ci = "–" if r.diff_ci_low is None else f"[{_display(r.diff_ci_low)}, {_display(r.diff_ci_high)}]"
        key = f"{r.point_key}/{r.statistic}"
        body.append(
            f"<tr><th>{escape(r.point_key)}</th><th>{escape(r.statistic)}</th>"
            f"{_cell(key, 'baseline', r.baseline_value)}{_cell(key, 'candidate', r.candidate_value)}"
            f"{_cell(key, 'diff', r.diff)}<td>{escape(ci)}</td>"
            f"<td>{escape(_display(r.n_baseline))} / {escape(_display(r.n_candidate))}</td>"
            f"<td>{escape(r.verdict or '–')}</td></tr>"
        )
    table = (
        f'<div class="scroll"><table data-table="compare"><thead><tr>{head}</tr></thead><tbody>'
        + "".join(body)
        + "</tbody></table></div>"
    )
    return _panel(
        "compare",
        title,
        plot + warn + table,
        "Points matched by target concurrency or rate; latencies over successful measured "
        "requests; throughput in req/s has no interval (one ratio per point).",
    )


# --- page --------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1280px; }
h1 { font-size: 20px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
h3 { font-size: 14px; margin: 12px 0 6px; }
.facts { color: #555; font-size: 13px; }
.verdict.ok { color: #0a6e31; } .verdict.bad { color: #b00020; }
tr.bad th, tr.bad td:nth-child(2) { font-weight: bold; }  /* no colour: series colours are the plots' */
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(580px, 1fr)); gap: 16px; }
.panel { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; background: #fafafa; }
.panel .plot { width: 100%; min-height: 380px; }
.note.warn { color: #8a5a00; }
.note { color: #666; font-style: italic; } .caption { color: #555; font-size: 12px; margin: 4px 0; }
table { border-collapse: collapse; font-size: 12px; margin-bottom: 12px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; } th { background: #f0f0f0; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
details.tables > summary { cursor: pointer; } details.tables > summary h2 { display: inline; }
.scroll { overflow-x: auto; }
"""


def _header(data: ReportData) -> str:
    info = data.info
    facts = " · ".join(
        f"{k}: {escape(_display(info.get(k)))}" for k in ("kind", "label", "created_at", "workers", "git_sha", "seed")
    )
    verdict = ""
    if info.get("verdict"):
        v = json.loads(info["verdict"]) if isinstance(info["verdict"], str) else info["verdict"]
        if isinstance(v, dict) and "valid" in v:
            reasons = "; ".join(str(x) for x in v.get("reasons") or [])
            cls = "ok" if v["valid"] else "bad"
            verdict = (
                f'<p class="verdict {cls}">Verdict: {"valid" if v["valid"] else "INVALID"}'
                f"{' — ' + escape(reasons) if reasons else ''}</p>"
            )
    return f'<h1>benchmaker report: {escape(str(info["run_id"]))}</h1><p class="facts">{facts}</p>{verdict}'


def _verdict_section(data: ReportData) -> str:
    """The sweep's answer first: how many points are valid, then one row per point (its
    verdict in plain words, benchmaker.sweep.verdicts; episodes, requests, throughput,
    p50/p99 E2E, replay misses), then how to get valid points. Empty without sweep points."""
    if not data.sweep:
        return ""
    from benchmaker.sweep.verdicts import advice, reasons_of

    n_valid = sum(1 for r in data.sweep if r.get("valid"))
    replay = any(r.get("n_episodes") for r in data.sweep)  # episodes and misses: replay points only

    def num(v: Any, fmt: str = "{:.3g}") -> str:
        return "-" if v is None else fmt.format(v)

    head = (
        "<tr><th>point</th><th>verdict</th>"
        + ("<th>episodes</th>" if replay else "")
        + "<th>requests (ok)</th><th>requests/s</th><th>E2E p50 / p99 (ms)</th>"
        + ("<th>replay misses</th>" if replay else "")
        + "</tr>"
    )
    rows = []
    for r in data.sweep:
        valid = bool(r.get("valid"))
        said = "valid" if valid else "INVALID: " + ("; ".join(x.plain for x in reasons_of(r)) or "no reason recorded")
        rows.append(
            f'<tr class="{"ok" if valid else "bad"}" data-point="{escape(str(r["sweep_point"]))}">'
            f"<th>{escape(str(r['sweep_point']))}</th><td>{escape(said)}</td>"
            + (f'<td class="num">{num(r.get("n_episodes"), "{}")}</td>' if replay else "")
            + f'<td class="num">{num(r.get("n_requests"), "{}")} ({num(r.get("n_ok"), "{}")})</td>'
            f'<td class="num">{num(r.get("request_throughput_per_s"))}</td>'
            f'<td class="num">{num(r.get("p50_e2e_ms"))} / {num(r.get("p99_e2e_ms"))}</td>'
            + (f'<td class="num">{num(r.get("misses_total"), "{}")}</td>' if replay else "")
            + "</tr>"
        )
    tips = _advice_items([line for line in advice(data.sweep, this_host=False) if line.strip()])
    return (
        f'<section data-section="verdict"><h2>Verdict: {n_valid} of {len(data.sweep)} points valid</h2>'
        f'<table data-table="verdict"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
        + (f'<ul class="advice">{tips}</ul>' if tips else "")
        + "</section>"
    )


def _advice_items(lines: list[str]) -> str:
    """The advice's lines as list items; an indented line (a flag to raise, under the
    sentence that names it) is nested in the item before it."""
    items: list[list[str]] = []
    for line in lines:
        if line[:1].isspace() and items:
            items[-1].append(line.strip())
        else:
            items.append([line.strip()])
    return "".join(
        f"<li>{escape(head)}"
        + ("<ul>" + "".join(f"<li><code>{escape(sub)}</code></li>" for sub in subs) + "</ul>" if subs else "")
        + "</li>"
        for head, *subs in items
    )


def render_html(data: ReportData) -> str:
    """The report page for collected data (see module docstring for its structure)."""
    order = [str(r["sweep_point"]) for r in data.sweep] or [str(r["lane"]) for r in data.lanes]
    panels = [
        _throughput_panel(data),
        _latency_throughput(data),
        _cdf_panel(data, "ttft_ms", "ttft-cdf", "TTFT CDF", "time to first token (ms; first token - sent)", order),
        _cdf_panel(data, "itl_event_ms", "itl-cdf", "ITL CDF", "gap between token events (ms)", order),
        _resolved_panel(data),
        _lag_panel(data),
        _in_flight_panel(data),
        _target_panel(data),
        _compare_panel(data),
    ]
    # a card only where there is data: a panel with nothing to draw becomes a line below
    drawn = [p for p in panels if p and ('class="plot"' in p or 'data-panel="compare"' in p)]
    empty = [p for p in panels if p and p not in drawn]
    not_plotted = "".join(
        f"<li>{m.group(1)}: {m.group(2)}</li>"
        for p in empty
        for m in [re.search(r"<h3>(.*?)</h3><p class=\"note\">(.*?)</p>", p)]
        if m
    )
    body = [
        _header(data),
        _verdict_section(data),
        "<h2>Plots</h2>",
        '<div class="grid">' + "\n".join(drawn) + "</div>",
        f'<ul class="not-plotted" data-section="not-plotted">{not_plotted}</ul>' if not_plotted else "",
        '<details class="tables" data-section="tables"><summary><h2>Summary tables</h2></summary>',
        _run_tables(data.run),
        _sweep_table(data.sweep),
        _lane_table(data.lanes),
        "</details>",
    ]
    title = f"benchmaker report {data.info['run_id']}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style>\n"
        f'<script id="plotly-js">{plotly_js()}</script></head><body>\n'
        + "\n".join(b for b in body if b)
        + "\n"
        + draw_script()
        + "\n</body></html>\n"
    )
