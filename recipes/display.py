"""Terminal display of a run: a live progress line while it runs, a summary table after.

The live view (rich) refreshes 4 times a second from `BenchRunner.live`: elapsed, sent,
in flight, ok, errors, dropped, rolling p50/p99 of the last 2,000 E2E and TTFT values
(ms). It is shown only on a terminal. The summary table reads summary.json's shape.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.selfcheck import quantile_linear

console = Console()


def _live_table(runner: BenchRunner, started: float) -> Table:
    live = runner.live
    e2e, ttft = list(live.recent_e2e_ms), list(live.recent_ttft_ms)

    def q(xs: list[float], p: float) -> str:
        v = quantile_linear(xs, p)
        return "-" if v is None else f"{v:.1f}"

    t = Table.grid(padding=(0, 2))
    t.add_row(
        f"[bold]{time.monotonic() - started:6.1f}s[/]",
        f"sent {live.sent}",
        f"in flight {live.in_flight}",
        f"ok {live.ok}",
        f"[red]errors {live.errors}[/]" if live.errors else "errors 0",
        f"dropped {live.dropped}",
        f"E2E p50/p99 {q(e2e, 0.5)}/{q(e2e, 0.99)} ms",
        f"TTFT p50/p99 {q(ttft, 0.5)}/{q(ttft, 0.99)} ms",
    )
    return t


async def run_with_progress(runner: BenchRunner, show: bool) -> Any:
    """Run `runner` (awaiting `runner.run()`), with the live view when `show`."""
    if not show:
        return await runner.run()
    started = time.monotonic()
    with Live(_live_table(runner, started), console=console, refresh_per_second=4, transient=True) as view:
        task = asyncio.ensure_future(runner.run())
        while not task.done():
            await asyncio.wait([task], timeout=0.25)
            view.update(_live_table(runner, started))
        return task.result()


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


# summary counts that are not failures: successes, and successes flagged by how they ended
_FLAGGED = ("n_refusal", "n_length", "n_content_filter", "n_finish_unknown", "n_usage_invalid")
_NOT_ERRORS = (
    "n_ok",
    "n_sent",
    "n_samples",
    "n_ok_with_usage",
    "n_good",
    "n_tpot_first_event_assumed",
    "n_graded",
    "n_correct",
    "n_graded_wrong",
    "n_good_correct",
    *_FLAGGED,
)


# the latency rows that only a token-bearing response has
_TOKEN_LATENCIES = ("ttft_ms", "ttfc_ms", "itl_event_ms", "itl_token_ms", "itl_req_mean_ms", "tpot_ms")


def _carries_tokens(run: dict[str, Any]) -> bool:
    """False when no response of the run (a summary.json `run` dict) had a token: no
    streamed token event (ttft_ms count 0), no server usage (n_ok_with_usage 0) and no
    usage judged invalid, as for an HTTP or sandbox run. A dict without those counts
    is taken to carry tokens."""
    return bool(
        (run.get("ttft_ms") or {}).get("count") or run.get("n_ok_with_usage") != 0 or run.get("n_usage_invalid")
    )


def summary_tables(summary: dict[str, Any]) -> list[Table]:
    """Rich tables of a summary.json dict: headline figures and latency percentiles.
    A run without tokens (_carries_tokens) gets one "tokens" row instead of the token
    figures, and only the E2E latency rows."""
    run = summary.get("run") or {}
    tokens = _carries_tokens(run)
    head = Table(title=f"run {summary['run_id']}", show_header=False)
    head.add_column("metric")
    head.add_column("value", justify="right")
    rows = [
        ("requests ok / sent / all", f"{run.get('n_ok', 0)} / {run.get('n_sent', 0)} / {run.get('n_samples', 0)}"),
        (
            "errors",
            ", ".join(f"{k[2:]} {v}" for k, v in run.items() if k.startswith("n_") and k not in _NOT_ERRORS and v)
            or "none",
        ),
        ("successes flagged", ", ".join(f"{k[2:]} {run[k]}" for k in _FLAGGED if run.get(k)) or "none"),
        ("error rate", _fmt(run.get("error_rate"), 4)),
        ("window (s)", _fmt(run.get("window_s"), 3)),
        ("request throughput (req/s)", _fmt(run.get("request_throughput_per_s"))),
        (
            "offered / achieved send rate (req/s)",
            f"{_fmt(run.get('offered_rate_per_s'))} / {_fmt(run.get('achieved_send_rate_per_s'))}",
        ),
        (
            "schedule lag p50 / p99 (ms)",
            f"{_fmt((run.get('schedule_lag_ms') or {}).get('p50'), 3)} / {_fmt((run.get('schedule_lag_ms') or {}).get('p99'), 3)}",
        ),
        ("usage coverage", _fmt(run.get("usage_coverage"), 4)),
        (
            "output tokens total",
            _fmt(run.get("output_tokens_total"))
            if run.get("output_tokens_total") is not None
            else f"null: {run.get('token_totals_null_reason')}",
        ),
        ("output throughput (tok/s)", _fmt(run.get("output_throughput_tok_per_s"))),
        ("goodput (req/s)", _fmt(run.get("goodput_per_s"))),
        ("concurrency max / mean", f"{_fmt(run.get('max_concurrency'))} / {_fmt(run.get('mean_concurrency'))}"),
    ]
    if run.get("n_tpot_first_event_assumed"):
        rows.append(
            (
                "TPOT first token event",
                f"counted as 1 token in {run['n_tpot_first_event_assumed']} "
                "requests (the API states no per-event token count)",
            )
        )
    if run.get("n_graded"):  # answers graded: accuracy with its n (wrong answers are not errors)
        rows.insert(
            1,
            (
                "accuracy (correct / graded)",
                f"{_fmt(run.get('accuracy'), 3)} ({run.get('n_correct', 0)} "
                f"of {run['n_graded']}; {run.get('n_graded_wrong') or 0} "
                "graded wrong)",
            ),
        )
    if not tokens:
        dropped = ("usage coverage", "output tokens total", "output throughput (tok/s)")
        rows = [r for r in rows if r[0] not in dropped]
        rows.insert(-2, ("tokens", "none: no response streamed a token or stated usage"))
    for k, v in rows:
        head.add_row(k, v)
    lat = Table(title="latency (ms; linear percentiles, count = samples)")
    for col in ("metric", "mean", "p50", "p90", "p99", "max", "count"):
        lat.add_column(col, justify="right" if col != "metric" else "left")
    for name in (*(_TOKEN_LATENCIES if tokens else ()), "e2e_ms", "e2e_all_ms", "e2e_intended_ms"):
        stat = run.get(name) or {}
        lat.add_row(name, *(_fmt(stat.get(k)) for k in ("mean", "p50", "p90", "p99", "max", "count")))
    return [head, lat]


def monitor_failures(summary: dict[str, Any]) -> list[str]:
    """One line per monitor of the run (summary.json `self_checks.monitors`) whose samples
    failed, e.g. `monitor http://127.0.0.1:8000/metrics: 32 of 32 scrapes failed (last
    error: ...); monitor.jsonl lacks them`; [] when every sample succeeded."""
    lines = []
    for name, stats in ((summary.get("self_checks") or {}).get("monitors") or {}).items():
        errors = stats.get("errors") or 0
        if errors:
            lines.append(
                f"monitor {name}: {errors} of {stats.get('samples', errors)} scrapes failed (last error: "
                f"{stats.get('last_error')}); monitor.jsonl lacks them"
            )
    return lines


def print_summary(summary: dict[str, Any], bundle_dir: Any, out: Console | None = None) -> None:
    """Print the summary tables, the verdict with its reasons, and the bundle path (on
    `out`, default the module's console)."""
    out = out or console
    for table in summary_tables(summary):
        out.print(table)
    lanes = summary.get("lanes") or {}
    if len(lanes) > 1:
        t = Table(title="lanes")
        for col in ("lane", "ok", "errors", "req/s", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99"):
            t.add_column(col)
        for name, body in lanes.items():
            t.add_row(
                name,
                _fmt(body.get("n_ok")),
                _fmt((body.get("n_sent") or 0) - (body.get("n_ok") or 0)),
                _fmt(body.get("request_throughput_per_s")),
                *(_fmt((body.get(stat) or {}).get(q)) for stat in ("ttft_ms", "e2e_ms") for q in ("p50", "p99")),
            )
        out.print(t)
    for line in monitor_failures(summary):
        out.print(line, style="yellow", highlight=False, markup=False)
    verdict = summary["verdict"]
    if verdict["valid"]:
        out.print("[green]verdict: valid[/]")
    else:
        out.print("[red]verdict: INVALID[/] - " + "; ".join(verdict["reasons"]))
    for note in verdict.get("notes", []):
        if _carries_tokens(summary.get("run") or {}) or not note.startswith("token totals are null"):
            out.print(f"note: {note}")
    out.print(f"bundle: {bundle_dir}")


def print_comparison(cmp: Any, baseline_run: str, candidate_run: str, out: Console | None = None) -> None:
    """Print a `benchmaker.warehouse.compare.PointComparison` under a header naming the
    runs: one table per matched sweep point (statistic, baseline, candidate, diff =
    candidate - baseline with its 95% bootstrap CI, sample counts (requests), verdict;
    values in the statistic's unit, ms or req/s), then the warnings (points in one run
    only, workload differences) in yellow, or a note when no point matched."""
    out = out or console
    if not out.is_terminal:
        out.width = max(out.width, 120)
    n_boot = next((str(r.n_boot) for r in cmp.rows if r.n_boot), "-")
    out.print(
        f"[bold]{candidate_run}[/] (candidate) vs [bold]{baseline_run}[/] (baseline), per sweep point "
        f"matched by target; diff = candidate - baseline; 95% bootstrap CI ({n_boot} resamples); "
        f"n requests = baseline / candidate"
    )
    for key in cmp.points:
        rows = [r for r in cmp.rows if r.point_key == key]
        if not rows:
            continue
        labels = f"{rows[0].baseline_sweep_point or '-'} vs {rows[0].candidate_sweep_point or '-'}"
        table = Table(title=f"{key} ({labels})", title_justify="left")
        for col in ("statistic", "baseline", "candidate", "diff", "diff 95% CI", "n requests", "verdict"):
            table.add_column(col, justify="left" if col in ("statistic", "verdict") else "right", no_wrap=True)
        for r in rows:
            ci = "-" if r.diff_ci_low is None else f"[{r.diff_ci_low:.2f}, {r.diff_ci_high:.2f}]"
            style = {"regression": "red", "improvement": "green"}.get(r.verdict or "")
            table.add_row(
                r.statistic,
                _fmt(r.baseline_value),
                _fmt(r.candidate_value),
                _fmt(r.diff),
                ci,
                f"{_fmt(r.n_baseline)} / {_fmt(r.n_candidate)}",
                r.verdict or "-",
                style=style,
            )
        out.print(table)
    if not cmp.points:
        out.print("[yellow]no sweep point of the two runs has the same target: nothing compared[/]")
    for line in cmp.warnings:
        out.print(f"[yellow]warning: {line}[/]")


def runs_table(names: list[str], rows: list[tuple]) -> Table:
    """The `benchmaker runs` table of the rows of its query (warehouse/queries/
    runs_list.sql, columns `names`: run_id, sweep_point, label, created_at, valid,
    invalid_reason, n_samples, n_ok, request_throughput_per_s, p50/p99 TTFT and E2E in
    ms), fitting 120 columns: run ids whole (they are what `compare` and `sql` take;
    ours start with the kind, which --csv/--json still give), a sweep point's lines
    under its run's with the point name indented, validity as "yes" or "NO" (the reason
    in --csv/--json), requests as "ok/all", each latency as "p50 / p99" ms,
    created_at as MM-DD HH:MM (UTC); only the label wraps when the terminal is narrower."""
    table = Table(
        title="runs, newest first, a sweep run one line per point (latencies p50 / p99 in ms, linear "
        "percentiles; reasons and kind: --json)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
        pad_edge=False,
        show_edge=False,
    )
    cells = []
    shown: set[str] = set()
    for row in rows:
        r = dict(zip(names, row, strict=True))
        created = r.get("created_at")
        point = r.get("sweep_point")
        first = r["run_id"] not in shown
        shown.add(r["run_id"])
        when = created.strftime("%m-%d %H:%M") if created is not None else "-"
        if point is not None and first:  # the sweep run's own line: its id, label and date
            cells.append((str(r["run_id"]), r.get("label") or "", when, "", "", "", "", ""))
        valid = r.get("valid")
        cells.append(
            (
                f"  {point}" if point is not None else str(r["run_id"]),
                "" if point is not None else r.get("label") or "",
                "" if point is not None else when,
                "-" if valid is None else ("yes" if valid else "NO"),
                f"{_fmt(r.get('n_ok'))}/{_fmt(r.get('n_samples'))}",
                _fmt(r.get("request_throughput_per_s")),
                f"{_fmt(r.get('p50_ttft_ms'), 1)} / {_fmt(r.get('p99_ttft_ms'), 1)}",
                f"{_fmt(r.get('p50_e2e_ms'), 1)} / {_fmt(r.get('p99_e2e_ms'), 1)}",
            )
        )
    headers = ("run_id / point", "label", "created", "valid", "ok/requests", "req/s", "TTFT ms", "E2E ms")
    for k, col in enumerate(headers):
        if col == "label":
            table.add_column(col, overflow="fold", min_width=3)
            continue
        width = max([len(col)] + [len(c[k]) for c in cells])
        table.add_column(col, justify="left" if k < 4 else "right", no_wrap=True, min_width=width)
    for c in cells:
        table.add_row(*c)
    return table


def _figures(ev: Any) -> str:
    """A sweep point's live figures in ~70 characters (fits 80 columns beside its bar):
    episodes, model calls and calls/s, requests in flight, misses, elapsed, ETA."""

    def of(done: int, total: int | None) -> str:
        return f"{done}/{total}" if total is not None else f"{done}"

    rate = f" {ev.calls_per_s:.0f}/s" if ev.calls_per_s is not None else ""
    eta = "done" if ev.finished else (f"ETA {ev.eta_s:.0f}s" if ev.eta_s is not None else "ETA ?")
    if ev.episodes_total is None and ev.episodes_done == 0 and ev.misses == 0:  # an engine point (llm-sweep)
        return (
            f"requests {of(ev.calls_done, ev.calls_total)}{rate} · {ev.requests_in_flight} in flight · "
            f"{ev.errors} errors · {ev.elapsed_s:.0f}s {eta}"
        )
    return (
        f"ep {of(ev.episodes_done, ev.episodes_total)} · calls {of(ev.calls_done, ev.calls_total)}{rate} · "
        f"{ev.requests_in_flight} in flight · {ev.misses} miss · {ev.elapsed_s:.0f}s {eta}"
    )


class SweepProgressView:
    """The terminal view of sweep points in progress (benchmaker.progress events): one rich
    progress bar per point with episodes done/total, model calls done/total and calls/s,
    requests in flight, misses so far, elapsed and ETA. Used as a context manager around
    a flow call; shows nothing (and registers nothing) when `out` is not a terminal."""

    def __init__(self, out: Console | None = None) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        self.out = out or console
        self.progress = Progress(
            TextColumn("[bold]{task.description:<7}"),
            BarColumn(bar_width=10),
            TextColumn("{task.fields[figures]}"),
            console=self.out,
            transient=False,
            refresh_per_second=4,
        )
        self.tasks: dict[str, Any] = {}
        self._observe: Any = None

    def __call__(self, ev: Any) -> None:
        from benchmaker.progress import StageEvent

        if isinstance(ev, StageEvent):
            key = f"stage:{ev.stage}"
            count = f"{ev.done}/{ev.total} " if ev.total is not None else ""
            figures = f"{count}{ev.detail} {'done' if ev.finished else '...'} {ev.elapsed_s:.1f} s".strip()
            if key not in self.tasks:
                self.tasks[key] = self.progress.add_task(ev.stage, total=float(ev.total or 1), figures="")
            done = float(ev.total or 1) if ev.finished else float(ev.done if ev.total else 0)
            self.progress.update(self.tasks[key], completed=done, figures=figures)
            return
        if ev.point not in self.tasks:
            self.tasks[ev.point] = self.progress.add_task(ev.point, total=100.0, figures="")
        self.progress.update(self.tasks[ev.point], completed=100.0 * (ev.fraction or 0.0), figures=_figures(ev))

    def __enter__(self) -> SweepProgressView:
        if self.out.is_interactive:  # a terminal that can redraw a line (not TERM=dumb)
            from benchmaker.progress import observe

            self._observe = observe(self)
            self._observe.__enter__()
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._observe is not None:
            self.progress.stop()
            self._observe.__exit__(*exc)
            self._observe = None


def print_plan(params: dict[str, Any], trajectories: Path, *, trusted: bool = False) -> None:
    """Print the plan of a swebench-replay run (benchmaker.sweep.plan: points x episodes x model
    calls and an estimated duration) from the flow's parameters and the trajectories
    JSONL it replays. `trusted`: the file is the converter's own
    output (the conversion cache), read without validation (benchmaker.sweep.plan.plan_trajectories);
    otherwise a bad line raises benchmaker.trajectories.errors.TrajectoryFormatError."""
    from benchmaker.sweep.plan import format_plan, plan_trajectories, sweep_plan

    trajs = plan_trajectories(trajectories, trusted=trusted)
    plan = sweep_plan(
        trajs,
        params["concurrency_sweep"],
        episodes_per_point=params.get("episodes_per_point"),
        duration_s=params.get("duration_s"),
        latency=params.get("latency") or "instant",
    )
    console.print(format_plan(plan), highlight=False, soft_wrap=True)
