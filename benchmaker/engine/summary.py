"""Run summaries computed by DuckDB SQL over samples (docs/metrics.md).

The SQL lives in `benchmaker/engine/sql/summary.sql` and is the one definition used by the run
bundle's summary.json, the warehouse views and the report. This module runs it over
`samples.jsonl` files, reshapes the rows into nested dicts, and builds a run's
summary.json from them (`build_summary`: targets, self-checks, verdict), for a run, a
sharded run's merge (benchmaker.engine.workers.merge_shards) and a distributed point alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from benchmaker.engine.ceiling import calibration_for_manifest, ceiling_checks
from benchmaker.engine.load_models import Burst, ClosedLoop
from benchmaker.engine.records import SAMPLE_COLUMNS
from benchmaker.engine.selfcheck import verdict


def summary_sql() -> str:
    """The text of `benchmaker/engine/sql/summary.sql`: one SELECT over a relation `samples`."""
    return (resources.files("benchmaker.engine") / "sql" / "summary.sql").read_text(encoding="utf-8")


def samples_relation_sql(paths: list[Path]) -> str:
    """A DuckDB `read_json` expression over samples.jsonl files with the typed columns of
    SAMPLE_COLUMNS (so an all-null column keeps its type)."""
    cols = ", ".join(f"'{name}': '{typ}'" for name, typ in SAMPLE_COLUMNS.items())
    files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths)
    return f"read_json([{files}], format='newline_delimited', columns={{{cols}}}, maximum_object_size=67108864)"


SLO_COLUMNS = ("ttft_ms", "tpot_ms", "e2e_ms")


def create_run_slo(con: duckdb.DuckDBPyConnection, slo: Any = None) -> None:
    """Create the temp table `run_slo` (run_id, ttft_ms, tpot_ms, e2e_ms) that
    summary.sql judges SLOs by: one row per run_id of the relation `samples` carrying
    `slo`'s bounds in ms (a benchmaker.engine.config.SLO, a dict with those keys, or None: no
    row, nothing judged). Needs `samples` to exist."""
    con.execute("CREATE TEMP TABLE run_slo (run_id VARCHAR, ttft_ms DOUBLE, tpot_ms DOUBLE, e2e_ms DOUBLE)")
    bounds = slo if isinstance(slo, dict) or slo is None else slo.model_dump()
    if bounds and any(bounds.get(k) is not None for k in SLO_COLUMNS):
        con.execute(
            "INSERT INTO run_slo SELECT DISTINCT run_id, ?, ?, ? FROM samples", [bounds.get(k) for k in SLO_COLUMNS]
        )


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
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
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


def cap_notes(self_checks: dict[str, Any], run: dict[str, Any] | None) -> list[str]:
    """Verdict notes naming the client as the limit: open-loop arrivals held back or
    dropped by the in-flight cap (self_checks cap_waits / in_flight_cap, run n_dropped)."""
    cap, source = self_checks.get("in_flight_cap"), self_checks.get("in_flight_cap_source")
    notes = []
    if self_checks.get("cap_waits"):
        notes.append(
            f"client-side: {self_checks['cap_waits']} open-loop arrivals waited for a slot under the "
            f"in-flight cap {cap} ({source}); they were sent late (schedule lag)"
        )
    if run is not None and run.get("n_dropped"):
        notes.append(
            f"client-side: {run['n_dropped']} open-loop arrivals were dropped at the in-flight cap {cap} ({source})"
        )
    return notes


def build_summary(
    config: Any,
    loads: Mapping[str, Any],
    sample_paths: list[Path],
    self_checks: dict[str, Any],
    loop_lag: dict[str, Any],
    interrupted: bool,
    worker_failures: Sequence[str] = (),
    *,
    run_id: str,
    worker: int = 0,
    shards: int = 1,
    calibration: dict[str, Any] | None = None,
    interrupted_by: str | None = None,
) -> dict[str, Any]:
    """summary.json of a run over `sample_paths` (every shard's samples for a sharded
    run): summary.sql (judging `config.slo`), targets, self-checks and verdict.

    `config` is the run's benchmaker.engine.config.BenchConfig; `loads` maps each lane's name to
    its benchmaker.engine.load_models.LoadModel, in lane order. Targets are those of shard
    `worker` of `shards` (0 of 1: the whole run). `calibration` is this host's ceiling as
    copied into the manifest (default: benchmaker.engine.ceiling.calibration_for_manifest()).
    `self_checks` gets the ceiling checks added (mutated). A run interrupted by a stop
    signal names it (`interrupted_by`) in the summary and its verdict reason.
    """
    models = list(loads.values())
    nested = nest_summary(summarize_samples(sample_paths, config.slo))
    closed = [m for m in models if isinstance(m, ClosedLoop)]
    open_loop = len(closed) < len(models)
    target_conc = sum(m.workers_for(worker, shards) for m in closed) if closed and not open_loop else None
    if target_conc is not None and config.max_requests is not None:
        base, extra = divmod(config.max_requests, shards)  # this shard's share of max_requests
        target_conc = min(target_conc, base + (1 if worker < extra else 0))
    if calibration is None:  # e.g. a sharded run's parent, which built no manifest
        calibration = calibration_for_manifest()
    ceiling, ceiling_notes = ceiling_checks(calibration, nested["run"])
    self_checks.update(ceiling)
    summary = {
        "run_id": run_id,
        "kind": config.kind,
        "partial": interrupted,
        "target": {
            "lanes": {
                name: {
                    "load": m.spec,
                    "target_rate_per_s": m.target_rate_per_s(),
                    "concurrency": m.concurrency if isinstance(m, ClosedLoop) else None,
                }
                for name, m in loads.items()
            },
            "target_concurrency": target_conc,
            "duration_s": config.duration_s,
        },
        "verdict": verdict(
            # schedule lag is judged where arrivals are paced (not for inf = all at t0)
            nested["run"],
            limits=config.checks,
            open_loop=any(not isinstance(m, (ClosedLoop, Burst)) for m in models),
            target_concurrency=target_conc,
            loop_lag=loop_lag,
            interrupted=interrupted,
            worker_failures=list(worker_failures),
        ),
        "self_checks": self_checks,
        **nested,
    }
    summary["verdict"]["notes"].extend(ceiling_notes)
    summary["verdict"]["notes"].extend(cap_notes(self_checks, nested["run"]))
    if interrupted and interrupted_by:
        summary["interrupted_by"] = interrupted_by
        summary["verdict"]["reasons"] = [
            r.replace("interrupted before", f"interrupted by {interrupted_by} before")
            for r in summary["verdict"]["reasons"]
        ]
    return summary
