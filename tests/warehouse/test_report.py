"""warehouse/report.py, warehouse/plots.py and `benchmaker report`: the report's table
values are the summary.json numbers of a real run, the plots (plotly figures) carry the
data they claim, and the file references nothing outside itself."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.records import RequestSpec, Sample
from benchmaker.engine.runner import BenchRunner, Lane
from benchmaker.engine.transport import NullTransport
from benchmaker.recipes.cli import main
from benchmaker.warehouse import report as report_mod
from benchmaker.warehouse.connection import open_readonly
from benchmaker.warehouse.errors import WarehouseError
from benchmaker.warehouse.loader import load_run
from benchmaker.warehouse.plots import Series, chart, plotly_js
from benchmaker.warehouse.report import collect_report_data, render_html, render_report, write_report
from tests.warehouse._bundle import MS, reference_bundle, sample, write_jsonl, write_manifest

# --- bundles -----------------------------------------------------------------------------


class _EventParser:
    """Every body chunk is one token event; ok when anything arrived."""

    def feed(self, data: bytes, t_ns: int, sample: Sample) -> None:
        if sample.first_token_ns is None:
            sample.first_token_ns = t_ns
            sample.token_event_ns = []
        sample.token_event_ns.append(t_ns)
        sample.n_token_events += 1

    def finish(self, sample: Sample) -> None:
        sample.outcome = "ok" if sample.n_token_events else "empty_output"


class _Workload:
    name = "null"

    def request(self, seq: int) -> RequestSpec:
        return RequestSpec("GET", "http://null/", meta={"seq": seq})

    def parser(self, spec: RequestSpec) -> _EventParser:
        return _EventParser()


def real_run(out_dir: Path) -> Path:
    """A real bundle written by BenchRunner: two lanes (20/s and 10/s for 0.5 s), sweep
    point "c2", 6-event streams from a NullTransport. Returns the bundle directory."""
    cfg = BenchConfig(load="constant:10", duration_s=0.5, out_dir=str(out_dir), sweep_point="c2")
    lanes = [Lane("chat", _Workload(), "constant:20"), Lane("rag", _Workload(), "constant:10")]
    result = BenchRunner(cfg, lanes=lanes, transport=NullTransport(chunks=(b"x",) * 6)).run_sync()
    return result.bundle_dir


# Sweep bundle: points c1, c2, c4; c workers each run 2 episodes of 3 turns; resolved
# episodes: 2 of 2 (c1), 3 of 4 (c2), 4 of 8 (c4), carried (not re-verified) ->
# resolved_rate_carried 1.0, 0.75, 0.5; resolved_rate_reverified NULL.
SWEEP_RESOLVED = {"c1": 1.0, "c2": 0.75, "c4": 0.5}


def sweep_bundle(run_dir: Path, run_id: str = "sweep-1") -> Path:
    write_manifest(run_dir, run_id)
    points = []
    seq = 0
    t_ms = 0.0
    for c in (1, 2, 4):
        name = f"c{c}"
        rows, episodes = [], []
        point_start = t_ms
        for w in range(c):
            t = point_start
            for e in range(2):
                ep_start = t
                for _turn in range(3):
                    ttft = 20.0 * c + 3.0 * ((seq * 7) % 5)
                    gap = 5.0 + c + (seq % 3)
                    events = [ttft + gap * k for k in range(10)]
                    e2e = events[-1] + 1.0
                    row = sample(
                        run_id,
                        seq,
                        sent_ms=t,
                        ttft_ms=ttft,
                        e2e_ms=e2e,
                        output_tokens=10,
                        events_ms=events,
                        sweep_point=name,
                        lane="agent",
                        worker=w,
                    )
                    row["intended_ns"] -= int(((seq * 13) % 7) * 0.2 * MS)  # 0..1.2 ms lag
                    rows.append(row)
                    seq += 1
                    t += e2e + 30.0  # tool time between turns
                ep_index = w * 2 + e
                episodes.append(
                    {
                        "run_id": run_id,
                        "sweep_point": name,
                        "concurrency": c,
                        "episode_id": f"{name}-e{ep_index}",
                        "trajectory_id": f"t{ep_index}",
                        "mode": "recorded",
                        "worker": w,
                        "started_ns": int(ep_start * MS),
                        "ended_ns": int(t * MS),
                        "n_turns": 3,
                        "n_requests": 3,
                        "model_time_ns": 0,
                        "tool_time_ns": 0,
                        "misses_unknown_key": 0,
                        "misses_beyond_turns": 0,
                        "misses_diverged": 0,
                        "divergences": 0,
                        "outcome": "ok",
                        "resolved": ep_index < {1: 2, 2: 3, 4: 4}[c],
                        "reverified": False,
                        "usage_complete": True,
                    }
                )
            t_ms = max(t_ms, t)
        write_jsonl(run_dir / "points" / name / "samples.jsonl", rows)
        write_jsonl(run_dir / "points" / name / "episodes.jsonl", episodes)
        points.append({"sweep_point": name, "concurrency": c, "episodes": 2 * c})
        t_ms += 100.0
    write_jsonl(run_dir / "sweep_points.jsonl", points)
    return run_dir


# --- reading the report back -------------------------------------------------------------


class _Cells(HTMLParser):
    """table name -> {(data-row, data-col): (json value, display text)}."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, dict[tuple[str, str], tuple[Any, str]]] = {}
        self._table: str | None = None
        self._cell: dict[str, str] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "table":
            self._table = a["data-table"]
            self.tables[self._table] = {}
        elif tag == "td" and "data-value" in a:
            self._cell, self._text = a, ""

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            key = (self._cell["data-row"], self._cell["data-col"])
            self.tables[self._table][key] = (json.loads(self._cell["data-value"]), self._text)
            self._cell = None


def cells(html: str) -> dict[str, dict[tuple[str, str], tuple[Any, str]]]:
    p = _Cells()
    p.feed(html)
    return p.tables


def _report(tmp_path: Path, run_dir: Path) -> tuple[str, Path]:
    db = tmp_path / "w.duckdb"
    run_id = load_run(db, run_dir).run_id
    out = write_report(db, run_id, tmp_path / "out" / "report.html")
    return out.read_text(encoding="utf-8"), db


# --- the numbers are summary.json's ------------------------------------------------------


def test_report_tables_equal_summary_json_of_a_real_run(tmp_path):
    bundle = real_run(tmp_path / "runs")
    summary = orjson.loads((bundle / "summary.json").read_bytes())
    html, _ = _report(tmp_path, bundle)
    t = cells(html)
    run = summary["run"]
    assert run["n_ok"] == 15  # 10 chat (20/s) + 5 rag (10/s) in 0.5 s: the data is real

    # run: every scalar of summary.json "run" and nothing else, value for value
    scalars = {k: v for k, v in run.items() if not isinstance(v, dict)}
    assert {row: v for (row, _), (v, _) in t["run"].items()} == scalars
    # run-stats: every stat struct, every field
    stats = {k: v for k, v in run.items() if isinstance(v, dict)}
    assert {(m, c) for (m, c) in t["run-stats"]} == {(m, c) for m in stats for c in report_mod.STAT_KEYS}
    for (metric, col), (value, _) in t["run-stats"].items():
        assert value == stats[metric][col], (metric, col)
    assert t["run-stats"][("itl_event_ms", "count")][0] == 15 * 5  # 6 events -> 5 gaps

    # sweep: v_sweep_summary's flattened names map onto summary.json "sweep_points"
    point = summary["sweep_points"]["c2"]
    sweep = {row: v for (row, col), (v, _) in t["sweep"].items() if col == "c2"}
    assert sweep["n_requests"] == point["n_samples"]
    for name in (
        "n_ok",
        "error_rate",
        "window_s",
        "request_throughput_per_s",
        "output_throughput_tok_per_s",
        "goodput_per_s",
    ):
        assert sweep[name] == point[name], name
    for metric, struct in (("e2e", "e2e_ms"), ("ttft", "ttft_ms"), ("itl", "itl_event_ms"), ("tpot", "tpot_ms")):
        assert sweep[f"n_{metric}"] == point[struct]["count"]
        assert sweep[f"mean_{metric}_ms"] == point[struct]["mean"]
        for q in ("p50", "p90", "p99"):
            assert sweep[f"{q}_{metric}_ms"] == point[struct][q], (metric, q)
    assert sweep["max_requests_in_flight"] == point["max_concurrency"]
    assert sweep["mean_requests_in_flight"] == point["mean_concurrency"]
    assert sweep["valid"] is True  # no target concurrency declared

    # lanes
    for lane in ("chat", "rag"):
        for (row, col), (value, _) in t["lanes"].items():
            if col != lane or row == "n_requests_all_phases":
                continue
            head, _, field = row.partition(".")
            want = summary["lanes"][lane][head]
            assert value == (want[field] if field else want), (lane, row)


def test_display_text_is_the_value_rounded_to_4_significant_digits(tmp_path):
    html, _ = _report(tmp_path, reference_bundle(tmp_path / "run-a"))
    stats = cells(html)["run-stats"]
    # TTFT 10/20/30/40 ms: p50 25, p99 = 30 + 0.97 * 10 = 39.7 (linear interpolation)
    assert stats[("ttft_ms", "p50")] == (25.0, "25")
    assert stats[("ttft_ms", "p99")] == (pytest.approx(39.7), "39.7")
    assert stats[("ttft_ms", "count")] == (4, "4")
    # TPOT = (E2E - TTFT) / 10: 9, 18, 27, 36 ms -> mean 22.5
    assert stats[("tpot_ms", "mean")] == (22.5, "22.5")
    run = cells(html)["run"]
    assert run[("output_tokens_total", "value")] == (44, "44")  # 4 requests x 11 tokens
    assert run[("goodput_per_s", "value")] == (None, "–")  # no SLO declared: unknown, not 0


# --- plots -------------------------------------------------------------------------------


def _panel(html: str, name: str) -> str:
    m = re.search(rf'<section class="panel" data-panel="{name}">(.*?)</section>', html, re.S)
    assert m, f"panel {name} missing"
    return m.group(1)


def figures(html: str) -> dict[str, dict]:
    """plot id -> the plotly figure (data, layout) the page draws there."""
    return {
        m.group(1): json.loads(m.group(2).replace("<\\/", "</"))
        for m in re.finditer(
            r'<script type="application/json" class="plot-figure" data-plot="([^"]+)">(.*?)</script>', html, re.S
        )
    }


def traces(html: str, plot: str) -> dict[str, dict]:
    return {t["name"]: t for t in figures(html)[plot]["data"]}


def test_sweep_report_plots_one_point_per_sweep_point_and_resolved_rates(tmp_path):
    html, db = _report(tmp_path, sweep_bundle(tmp_path / "sweep-1"))
    lt = traces(html, "latency-throughput")
    assert sorted(lt) == ["e2e p50", "e2e p99", "ttft p50", "ttft p99"]
    assert [len(t["x"]) for t in lt.values()] == [3] * 4  # one point per sweep point
    # each point labelled on the plot (its name beside the marker), not only on hover
    assert lt["e2e p99"]["text"] == ["c1", "c2", "c4"] and lt["e2e p99"]["mode"] == "lines+markers+text"
    resolved = traces(html, "resolved-concurrency")
    # (concurrency, resolved_rate_carried) from v_sweep_summary; no episode was
    # re-verified, so there is no re-verified series
    carried = resolved["carried"]
    assert (carried["x"], carried["y"]) == ([1, 2, 4], [1.0, 0.75, 0.5])
    assert "re-verified" not in resolved
    target = traces(html, "concurrency-target")
    # c workers run their episodes in parallel: achieved max == target at every point
    assert (target["achieved max"]["x"], target["achieved max"]["y"]) == ([1, 2, 4], [1, 2, 4])
    assert "Every point reached its target." in _panel(html, "concurrency-target")
    # throughput per point against its target concurrency, each marker labelled
    [tput] = traces(html, "throughput").values()
    want_tput = [cells(html)["sweep"][("request_throughput_per_s", p)][0] for p in ("c1", "c2", "c4")]
    assert (tput["x"], tput["y"], tput["text"]) == ([1, 2, 4], want_tput, ["c1", "c2", "c4"])
    assert figures(html)["throughput"]["layout"]["xaxis"]["title"]["text"] == "target concurrency (in flight)"
    sweep = cells(html)["sweep"]
    for point, rate in SWEEP_RESOLVED.items():
        assert sweep[("resolved_rate_carried", point)][0] == rate
    con = open_readonly(db)
    try:
        want = con.execute("SELECT sweep_point, p99_ttft_ms FROM v_sweep_summary").fetchall()
    finally:
        con.close()
    assert [(p, sweep[("p99_ttft_ms", p)][0]) for p, _ in want] == want


def test_an_invalid_point_is_marked_on_the_plots_and_the_advice_names_its_flag(tmp_path):
    db = tmp_path / "w.duckdb"
    load_run(db, sweep_bundle(tmp_path / "sweep-1"))
    con = open_readonly(db)
    try:
        data = collect_report_data(con, "sweep-1")
    finally:
        con.close()
    reason = "engine: event-loop lag p99 79.24 ms > 10 ms: client-side timestamps include client delay"
    data.sweep[2].update(valid=False, invalid_reason=reason)  # c4
    html = render_html(data)
    [tput] = traces(html, "throughput").values()
    assert tput["text"] == ["c1", "c2", "c4 (invalid)"]
    assert traces(html, "latency-throughput")["e2e p99"]["text"] == ["c1", "c2", "c4 (invalid)"]
    verdict = re.search(r'<section data-section="verdict">(.*?)</section>', html, re.S).group(1)
    assert "<h2>Verdict: 2 of 3 points valid</h2>" in verdict
    assert (
        "<td>INVALID: your machine was busy: the client&#x27;s event loop lagged 79 ms (p99; the limit is 10 ms), "
        "so the timings include client delay</td>"
    ) in verdict
    # the flag to raise nested under the sentence that names it, not an item of its own
    advice = re.search(r'<ul class="advice">(.*)</ul>', verdict, re.S).group(1)
    assert advice.startswith("<li>To get valid points: ")
    assert re.search(r"<ul><li><code>--max-loop-lag-ms \d+ +\(or BENCHMAKER_MAX_LOOP_LAG_MS=\d+\)", advice)
    assert advice.count("<li>") == 2


def test_run_without_episodes_hides_the_resolved_panel_with_a_note(tmp_path):
    html, _ = _report(tmp_path, reference_bundle(tmp_path / "run-a"))
    # no card without data: the panel is a line under the plots instead
    assert 'data-panel="resolved-concurrency"' not in html
    not_plotted = re.search(r'<ul class="not-plotted" data-section="not-plotted">(.*?)</ul>', html, re.S).group(1)
    assert (
        "<li>Resolved rate vs concurrency: No episodes in this run: resolved rate vs concurrency is not plotted.</li>"
    ) in not_plotted
    assert 'data-panel="concurrency-target"' not in html  # no target concurrency declared
    assert 'data-panel="throughput"' not in html  # no sweep point: no throughput per point


def test_cdf_has_one_series_per_sweep_point(tmp_path, monkeypatch):
    db = tmp_path / "w.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    monkeypatch.setattr(report_mod, "CDF_MAX_POINTS", 2)
    con = open_readonly(db)
    try:
        data = collect_report_data(con, "run-a")
    finally:
        con.close()
    ttft = [(r["series"], r["value_ms"], r["cum_fraction"]) for r in data.cdf if r["metric"] == "ttft_ms"]
    # reference bundle: TTFT 10/20 ms in c1, 30/40 ms in c2; n = 2 per series, k = 2 // 2 = 1
    assert ttft == [("c1", 10.0, 0.5), ("c1", 20.0, 1.0), ("c2", 30.0, 0.5), ("c2", 40.0, 1.0)]


def test_cdf_thinning_over_one_series(tmp_path, monkeypatch):
    run_dir = tmp_path / "run-b"
    write_manifest(run_dir, "run-b")
    write_jsonl(
        run_dir / "samples.jsonl",
        [sample("run-b", i, sent_ms=10.0 * i, ttft_ms=float(i + 1), e2e_ms=50.0, output_tokens=2) for i in range(10)],
    )
    db = tmp_path / "w.duckdb"
    load_run(db, run_dir)
    monkeypatch.setattr(report_mod, "CDF_MAX_POINTS", 3)
    con = open_readonly(db)
    try:
        data = collect_report_data(con, "run-b")
    finally:
        con.close()
    ttft = [(r["value_ms"], r["cum_fraction"], r["n"]) for r in data.cdf if r["metric"] == "ttft_ms"]
    # TTFT 1..10 ms, n = 10, k = 10 // 3 = 3: ranks 1, 3, 6, 9 and 10 (the last)
    assert ttft == [(1.0, 0.1, 10), (3.0, 0.3, 10), (6.0, 0.6, 10), (9.0, 0.9, 10), (10.0, 1.0, 10)]


def test_in_flight_series_reaches_the_summary_max(tmp_path):
    db = tmp_path / "w.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    con = open_readonly(db)
    try:
        data = collect_report_data(con, "run-a")
        # the summary's max over the run's one timeline (v_run_summary leaves it NULL for
        # this two-point sweep: it is per point there)
        (pooled_max,) = con.execute(
            "SELECT max_concurrency FROM samples_summary WHERE group_by = 'run' AND run_id = 'run-a'"
        ).fetchone()
    finally:
        con.close()
    req = [r for r in data.in_flight if r["series"] == "requests"]
    assert len(req) == report_mod.TIME_BINS
    # sent 0/100/200/300 ms, E2E 100..400 ms: [0,100] [100,300] [200,500] [300,700]
    # -> 1 in flight until 200 ms, 2 from 200 to 500 ms, 1 until 700 ms
    assert max(r["max_in_flight"] for r in req) == pooled_max == 2
    assert data.run["max_concurrency"] is None
    assert req[0]["max_in_flight"] == 1 and req[-1]["max_in_flight"] == 1
    assert req[0]["t_s"] == 0.0 and req[-1]["t_s"] == pytest.approx(0.7 * 199 / 200)
    assert data.schedule_lag and all(r["max_schedule_lag_ms"] == 0.0 for r in data.schedule_lag)


def test_report_is_self_contained(tmp_path):
    html, _ = _report(tmp_path, sweep_bundle(tmp_path / "sweep-1"))
    # plotly.js inlined once, exactly the installed package's bundle (no CDN, no src=)
    m = re.search(r'<script id="plotly-js">(.*?)</script>', html, re.S)
    assert m and m.group(1) == plotly_js() and html.count(plotly_js()) == 1
    lower = (html[: m.start()] + html[m.end() :]).lower()
    for needle in ("<link", "src=", "href=", "url(", "@import", "http://", "https://"):
        assert needle not in lower, needle
    assert (
        len(figures(html)) == lower.count('<div class="plot"') == 8
    )  # throughput, latency, TTFT, ITL, resolved, lag, in flight, target


def test_unknown_run_is_an_error_naming_it(tmp_path):
    db = tmp_path / "w.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    con = open_readonly(db)
    try:
        with pytest.raises(WarehouseError, match="no run 'nope' in the warehouse"):
            render_report(con, "nope")
    finally:
        con.close()


def test_cli_writes_the_report_and_exits_2_on_unknown_run(tmp_path, capsys):
    db = tmp_path / "w.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    out = tmp_path / "r.html"
    assert main(["report", "run-a", "-o", str(out), "--warehouse", str(db)]) == 0
    assert capsys.readouterr().out == f"wrote {out} (run run-a)\n"
    assert cells(out.read_text())["run"][("n_ok", "value")][0] == 4
    assert main(["report", "zz", "-o", str(out), "--warehouse", str(db)]) == 2
    assert "no run 'zz'" in capsys.readouterr().err


# --- plots -------------------------------------------------------------------------------


def _figure(html: str) -> dict:
    (fig,) = figures(html).values()
    return fig


def test_step_series_is_a_staircase_from_zero():
    fig = _figure(
        chart([Series("cdf", [1.0, 2.0], [0.5, 1.0], style="step")], plot_id="p", title="t", x_label="x", y_label="y")
    )
    (t,) = fig["data"]
    # a first point at y = 0 on the first x, then plotly's horizontal-then-vertical steps
    assert (t["x"], t["y"], t["line"]["shape"], t["mode"]) == ([1.0, 1.0, 2.0], [0.0, 0.5, 1.0], "hv", "lines")


def test_error_bars_are_offsets_of_the_interval_ends():
    html = chart(
        [
            Series(
                "p99",
                ["concurrency=1", "concurrency=4"],
                [5.0, -2.0],
                style="errorbars",
                err_low=[4.0, -3.5],
                err_high=[6.5, None],
            )
        ],
        plot_id="c",
        title="t",
        x_label="x",
        y_label="y",
        x_category=True,
    )
    (t,) = _figure(html)["data"]
    # [4, 6.5] around 5 -> -1 / +1.5; [-3.5, unknown] around -2 -> -1.5 / 0
    assert t["error_y"]["array"] == [1.5, 0] and t["error_y"]["arrayminus"] == [1.0, 1.5]
    assert _figure(html)["layout"]["xaxis"]["type"] == "category"


def test_chart_without_points_says_no_data_and_bad_style_raises():
    html = chart([Series("s", [None], [1.0])], plot_id="p", title="t", x_label="x", y_label="y")
    assert 'data-points="0"' in html
    assert _figure(html)["layout"]["annotations"][0]["text"] == "no data"
    with pytest.raises(ValueError, match="style: unknown 'bars'"):
        chart([Series("s", [1.0], [1.0], style="bars")], plot_id="p", title="t", x_label="x", y_label="y")
