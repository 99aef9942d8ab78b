"""Compare two runs: differences in p50/p99 TTFT and E2E with bootstrap confidence
intervals, and the difference in request and output throughput.

The bootstrap itself is SQL, in the table macro `compare_runs` of
`warehouse/views/compare_runs.sql` (documented there: 95% percentile interval of
candidate - baseline, `n_boot` resamples drawn with a seeded hash). v_nightly_regression
uses the same macro, so the CLI `benchmaker compare` and the nightly view agree.
Throughput is one ratio per run (completed requests / measurement window), so its
difference carries no interval (diff_ci_low/high None, verdict None).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from warehouse.errors import WarehouseError


@dataclass(frozen=True, slots=True)
class Comparison:
    """One statistic of two runs. Values in the unit of `statistic`'s name (ms, per s);
    diff = candidate - baseline; the CI is None for throughput; verdict is
    'regression' / 'improvement' / 'no-change' for latencies, None for throughput."""

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


def compare_runs(
    con: duckdb.DuckDBPyConnection,
    baseline_run: str,
    candidate_run: str,
    n_boot: int = 200,
    seed: int = 42,
) -> list[Comparison]:
    """Rows for p50/p99 TTFT and E2E (bootstrap CIs) then request and output throughput.

    `con` is any connection to a warehouse (read-only is fine). Raises WarehouseError
    when either run is not in the warehouse or n_boot < 1.
    """
    if n_boot < 1:
        raise WarehouseError(f"n_boot: expected >= 1 (got {n_boot})")
    known = {
        r[0]
        for r in con.execute(
            "SELECT run_id FROM runs WHERE run_id IN (?, ?)", [baseline_run, candidate_run]
        ).fetchall()
    }
    for run in (baseline_run, candidate_run):
        if run not in known:
            raise WarehouseError(f"run_id: no run {run!r} in the warehouse (see: benchmaker runs)")
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
        for name, base, cand in (
            ("request_throughput_per_s", tp[0], tp[1]),
            ("output_throughput_tok_per_s", tp[4], tp[5]),
        ):
            diff = None if base is None or cand is None else cand - base
            out.append(Comparison(name, base, cand, diff, None, None, tp[2], tp[3], None, None))
    return out
