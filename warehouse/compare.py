"""Compare two runs sweep point by sweep point: differences in p50/p99 TTFT and E2E with
bootstrap confidence intervals and the difference in request throughput, for every pair
of points with the same target (concurrency or rate), plus warnings when the two sweeps
or their workloads differ.

The bootstrap itself is SQL, in the table macro `compare_points` of
`warehouse/views/compare_points.sql` (documented there: 95% percentile interval of
candidate - baseline, `n_boot` resamples drawn with a seeded hash); points are matched
on `compare_key` (warehouse/views/compare_key.sql). `compare_runs` pools every point of
a run (the nightly view v_nightly_regression reads it that way). Throughput is one
ratio per point (completed requests / measurement window, v_sweep_summary), so its
difference carries no interval (diff_ci_low/high None, verdict None).

    cmp = compare_points(con, "run-a", "run-b")
    [r.point_key for r in cmp.rows]   # 'concurrency=1', ... once per statistic
    cmp.warnings                      # ['points only in run-a: concurrency=16 (c16)', ...]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import duckdb
import orjson

from benchmaker.warehouse.errors import WarehouseError

# manifest config keys that say how a run was swept or where it wrote, not what it ran
_SWEEP_KEYS = frozenset(
    {
        "concurrency_sweep",
        "rate_sweep",
        "loads",
        "episodes_per_point",
        "duration_s",
        "out_dir",
        "warehouse",
        "label",
        "run_id",
        "shards",
        "dask_address",
        "exchange",
        "start_lead_s",
        "shard_timeout_s",
    }
)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One statistic of two runs (or of one matched sweep point of two runs). Values in
    the unit of `statistic`'s name (ms, per s); diff = candidate - baseline; the CI is
    None for throughput; verdict is 'regression' / 'improvement' / 'no-change' for
    latencies, None for throughput. `point_key` is the matched target
    ('concurrency=4', 'rate=2.0/s', a label, or 'run' for the pooled comparison);
    `baseline_sweep_point`/`candidate_sweep_point` the points' labels in each run."""

    statistic: str
    baseline_value: float | None
    candidate_value: float | None
    diff: float | None
    diff_ci_low: float | None
    diff_ci_high: float | None
    n_baseline: int | None
    n_candidate: int | None
    n_boot: int | None
    verdict: str | None
    point_key: str = "run"
    baseline_sweep_point: str | None = None
    candidate_sweep_point: str | None = None


@dataclass(frozen=True, slots=True)
class PointComparison:
    """`compare_points`' answer: rows ordered by point (by target number), then
    statistic; `points` the matched point keys in that order; `warnings` one line each
    for points present in one run only and for workload differences."""

    rows: list[Comparison]
    points: list[str]
    warnings: list[str] = field(default_factory=list)


def _check(con: duckdb.DuckDBPyConnection, baseline_run: str, candidate_run: str, n_boot: int) -> None:
    if n_boot < 1:
        raise WarehouseError(f"n_boot: expected >= 1 (got {n_boot})")
    known = {
        r[0]
        for r in con.execute("SELECT run_id FROM runs WHERE run_id IN (?, ?)", [baseline_run, candidate_run]).fetchall()
    }
    for run in (baseline_run, candidate_run):
        if run not in known:
            raise WarehouseError(f"run_id: no run {run!r} in the warehouse (see: benchmaker runs)")


def compare_runs(
    con: duckdb.DuckDBPyConnection,
    baseline_run: str,
    candidate_run: str,
    n_boot: int = 200,
    seed: int = 42,
) -> list[Comparison]:
    """Rows for p50/p99 TTFT and E2E (bootstrap CIs) then request and output throughput,
    every sweep point of each run pooled into one sample (see `compare_points` for the
    per-point comparison).

    `con` is any connection to a warehouse (read-only is fine). Raises WarehouseError
    when either run is not in the warehouse or n_boot < 1.
    """
    _check(con, baseline_run, candidate_run, n_boot)
    rows = con.execute(
        "SELECT statistic, baseline_value, candidate_value, diff, diff_ci_low, diff_ci_high, "
        "n_baseline, n_candidate, n_boot, verdict "
        "FROM compare_runs($a, $b, n_boot := $n, seed := $s)",
        {"a": baseline_run, "b": candidate_run, "n": n_boot, "s": seed},
    ).fetchall()
    out = [Comparison(*row) for row in rows]
    tp = con.execute(
        """
        SELECT b.request_throughput_per_s, c.request_throughput_per_s, b.n_ok, c.n_ok,
               b.output_throughput_tok_per_s, c.output_throughput_tok_per_s
        FROM v_run_summary AS b, v_run_summary AS c
        WHERE b.run_id = $a AND c.run_id = $b
        """,
        {"a": baseline_run, "b": candidate_run},
    ).fetchone()
    if tp is not None:
        out.append(_throughput("request_throughput_per_s", (tp[0], tp[1], tp[2], tp[3])))
        out.append(_throughput("output_throughput_tok_per_s", (tp[4], tp[5], tp[2], tp[3])))
    return out


def _throughput(statistic: str, values: tuple, **point: Any) -> Comparison:
    """The row of a throughput `statistic` from (baseline, candidate, n_baseline,
    n_candidate): its difference, without interval or verdict."""
    base, cand, n_base, n_cand = values
    diff = None if base is None or cand is None else cand - base
    return Comparison(statistic, base, cand, diff, None, None, n_base, n_cand, None, None, **point)


def compare_points(
    con: duckdb.DuckDBPyConnection,
    baseline_run: str,
    candidate_run: str,
    n_boot: int = 200,
    seed: int = 42,
    min_n: int | None = None,
) -> PointComparison:
    """Per matched sweep point (same target concurrency or rate, `compare_key`): rows for
    p50/p99 TTFT and E2E (bootstrap 95% CIs of candidate - baseline) then request
    throughput (req/s, no CI). A latency row gets no improvement/regression verdict when
    the point is invalid in either run (verdict "invalid point") or either run has fewer
    requests than `min_n` (None: min_n_for(statistic)) (verdict "n too small"). Warnings name the points
    found in one run only, each withheld verdict with its reason, and the workload
    differences (`workload_warnings`). A run without sweep points is one point, 'run'.

    Raises WarehouseError when either run is not in the warehouse or n_boot < 1.
    """
    _check(con, baseline_run, candidate_run, n_boot)
    cur = con.execute(
        "SELECT statistic, baseline_value, candidate_value, diff, diff_ci_low, diff_ci_high, n_baseline, "
        "n_candidate, n_boot, verdict, point_key, baseline_sweep_point, candidate_sweep_point "
        "FROM compare_points($a, $b, n_boot := $n, seed := $s)",
        {"a": baseline_run, "b": candidate_run, "n": n_boot, "s": seed},
    )
    latency: dict[str, list[Comparison]] = {}
    for values in cur.fetchall():  # the columns in Comparison's field order
        latency.setdefault(values[10], []).append(Comparison(*values))
    points = {run: _points(con, run) for run in (baseline_run, candidate_run)}
    base, cand = points[baseline_run], points[candidate_run]
    order = sorted(set(base) & set(cand) | set(latency), key=lambda k: _order(k, base, cand))
    rows: list[Comparison] = []
    withheld: list[str] = []
    for key in order:
        b, c = base.get(key), cand.get(key)
        small: dict[str, list[str]] = {}  # "n>=N" -> statistics
        for row in latency.get(key, []):
            row, why = _judged(row, b, c, min_n)
            rows.append(row)
            if why.startswith("n>="):
                small.setdefault(why[3:], []).append(row.statistic)
            elif why and why not in withheld:
                withheld.append(why)
        if small:
            first = latency[key][0]
            needs = ", ".join(f">= {n} for {', '.join(stats)}" for n, stats in small.items())
            withheld.append(
                f"{key}: n = {first.n_baseline} / {first.n_candidate} requests is too small for a "
                f"verdict (a CI needs, in each run, {needs})"
            )
        if b is None or c is None:
            continue
        rows.append(
            _throughput(
                "request_throughput_per_s",
                (b["tput"], c["tput"], b["n_ok"], c["n_ok"]),
                point_key=key,
                baseline_sweep_point=b["label"],
                candidate_sweep_point=c["label"],
            )
        )
    warnings = []
    for run, mine, other in ((baseline_run, base, cand), (candidate_run, cand, base)):
        only = [f"{k} ({mine[k]['label']})" for k in sorted(mine, key=lambda k: _order(k, mine, {})) if k not in other]
        if only:
            warnings.append(f"points only in {run}: {', '.join(only)} (not compared)")
    warnings += withheld
    warnings += workload_warnings(con, baseline_run, candidate_run)
    return PointComparison(rows=rows, points=order, warnings=warnings)


def _points(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, dict]:
    """{point key: {label, order, tput (req/s), n_ok}} of a run's sweep points (from
    sweep_points and v_sweep_summary); a run without sweep points is one point 'run'
    (v_run_summary)."""
    rows = con.execute(
        """
        SELECT compare_key(p.concurrency, p.rate_per_s, p.sweep_point), p.sweep_point,
               coalesce(p.concurrency::DOUBLE, p.rate_per_s), s.request_throughput_per_s, s.n_ok,
               s.valid, s.invalid_reason
        FROM sweep_points AS p
        LEFT JOIN v_sweep_summary AS s USING (run_id, sweep_point)
        WHERE p.run_id = $r
        """,
        {"r": run_id},
    ).fetchall()
    if not rows:
        rows = con.execute(
            "SELECT 'run', NULL, NULL, v.request_throughput_per_s, v.n_ok, "
            "CAST(r.summary -> '$.verdict.valid' AS BOOLEAN), "
            "nullif(array_to_string(CAST(r.summary -> '$.verdict.reasons' AS VARCHAR[]), '; '), '') "
            "FROM v_run_summary AS v JOIN runs AS r USING (run_id) WHERE run_id = $r",
            {"r": run_id},
        ).fetchall()
    return {
        key: {"label": label, "order": order, "tput": tput, "n_ok": n_ok, "valid": valid, "reason": reason}
        for key, label, order, tput, n_ok, valid, reason in rows
    }


# Fewest requests per run for a verdict on a statistic: a bootstrap interval from fewer
# than MIN_N_FOR_CI values is not trusted (our rule), and a q-quantile needs at least
# 1 / (1 - q) values before it is more than the largest one (p99: 100).
MIN_N_FOR_CI = 20


def min_n_for(statistic: str) -> int:
    """Fewest requests per run for a verdict on `statistic` (e.g. "p99_e2e_ms": 100,
    "p50_ttft_ms": MIN_N_FOR_CI)."""
    if statistic.startswith("p") and statistic[1:3].isdigit():
        q = int(statistic[1:3]) / 100
        return max(MIN_N_FOR_CI, round(1 / (1 - q)))
    return MIN_N_FOR_CI


def _judged(row: Comparison, base: dict | None, cand: dict | None, min_n: int | None) -> tuple[Comparison, str]:
    """`row` with its verdict withheld, and why ("" when it stands): "invalid point"
    when the point is invalid in either run, "n too small" when either run has fewer
    requests than `min_n` (None: min_n_for(row.statistic))."""
    if row.verdict is None:
        return row, ""
    bad = [
        f"{run} {p['label'] or 'run'} is invalid ({p['reason'] or 'no reason recorded'})"
        for run, p in (("baseline", base), ("candidate", cand))
        if p is not None and p.get("valid") is False
    ]
    if bad:
        return dataclasses.replace(row, verdict="invalid point"), f"{row.point_key}: no verdict: {'; '.join(bad)}"
    need = min_n_for(row.statistic) if min_n is None else min_n
    if (row.n_baseline or 0) < need or (row.n_candidate or 0) < need:
        return dataclasses.replace(row, verdict="n too small"), f"n>={need}"
    return row, ""


def _order(key: str, *runs: dict[str, dict]) -> tuple:
    for run in runs:
        if key in run and run[key]["order"] is not None:
            return (0, run[key]["order"], key)
    return (1, 0.0, key)


def workload_warnings(con: duckdb.DuckDBPyConnection, baseline_run: str, candidate_run: str) -> list[str]:
    """Lines naming what differs between the workloads of two runs: the run kind, the
    trajectories their episodes played (by trajectory_id), and the manifest config
    values other than how the run was swept or where it wrote (`_SWEEP_KEYS`). Empty
    when the workloads look the same."""
    rows = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT run_id, kind, config FROM runs WHERE run_id IN (?, ?)", [baseline_run, candidate_run]
        ).fetchall()
    }
    (kind_a, config_a), (kind_b, config_b) = rows[baseline_run], rows[candidate_run]
    out = []
    if kind_a != kind_b:
        out.append(f"workloads differ: kind {kind_a!r} vs {kind_b!r}")
    trajs = dict(
        con.execute(
            "SELECT run_id, list(DISTINCT trajectory_id) FROM episodes WHERE run_id IN (?, ?) "
            "AND trajectory_id IS NOT NULL GROUP BY run_id",
            [baseline_run, candidate_run],
        ).fetchall()
    )
    ta, tb = set(trajs.get(baseline_run) or []), set(trajs.get(candidate_run) or [])
    if ta != tb:
        out.append(
            f"workloads differ: trajectories played: {len(ta - tb)} only in {baseline_run}, "
            f"{len(tb - ta)} only in {candidate_run}, {len(ta & tb)} in both"
        )
    ca, cb = _config(config_a), _config(config_b)
    changed = [k for k in sorted(set(ca) | set(cb)) if k not in _SWEEP_KEYS and ca.get(k) != cb.get(k)]
    if changed:
        shown = "; ".join(f"{k}: {_short(ca.get(k))} vs {_short(cb.get(k))}" for k in changed[:6])
        more = f" (+{len(changed) - 6} more)" if len(changed) > 6 else ""
        out.append(f"workloads differ: config {shown}{more}")
    return out


def _config(value: object) -> dict:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def _short(value: object, width: int = 40) -> str:
    text = orjson.dumps(value).decode() if value is not None else "unset"
    return text if len(text) <= width else text[: width - 3] + "..."
