"""`benchmaker runs` of a sweep run: one line per point with that point's figures and
verdict, never run-level figures that add sequential points together. An llm-sweep
bundle written here by hand (each engine point's clock starts at its own zero, as the
engine's does) is loaded into a real DuckDB file."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import orjson

from benchmaker.engine.records import Sample
from benchmaker.recipes.cli import main
from benchmaker.sweep.point_summary import summarize_point, write_point_summary
from benchmaker.sweep.sweep import point_dir, write_run_manifest, write_sweep_points
from benchmaker.warehouse.loader import load_run

MS = 1_000_000
RUN = "llm-sweep-hand"


def _request(point: str, seq: int, sent_ms: int) -> dict:
    """A request of `point`: sent at `sent_ms` on the point's own clock, first token
    10 ms later, done 100 ms after sending."""
    return Sample(
        run_id=RUN,
        seq=seq,
        lane="llm",
        sweep_point=point,
        outcome="ok",
        finish_reason="stop",
        intended_ns=sent_ms * MS,
        sent_ns=sent_ms * MS,
        first_token_ns=(sent_ms + 10) * MS,
        end_ns=(sent_ms + 100) * MS,
        usage_present=True,
        prompt_tokens=10,
        output_tokens=5,
    ).to_dict()


def _sweep(run_dir: Path) -> None:
    """closed-1: 2 requests one after the other (0-100, 100-200 ms): 2 / 0.2 s = 10 req/s,
    max 1 in flight. closed-2: 4 requests two at a time over the same 200 ms of its own
    clock: 20 req/s, max 2 in flight; invalid (an engine verdict reason)."""
    write_run_manifest(run_dir, run_id=RUN, kind="llm-sweep", label="hand", config={})
    rows = []
    for point, conc, starts, reasons in (
        ("closed-1", 1, [0, 100], []),
        (
            "closed-2",
            2,
            [0, 0, 100, 100],
            ["event-loop lag p99 38.42 ms > 10 ms: client-side timestamps include client delay"],
        ),
    ):
        pdir = point_dir(run_dir, point)
        pdir.mkdir(parents=True)
        (pdir / "samples.jsonl").write_bytes(
            b"".join(
                orjson.dumps(_request(point, i, t), option=orjson.OPT_APPEND_NEWLINE) for i, t in enumerate(starts)
            )
        )
        row = summarize_point(pdir, sweep_point=point, concurrency=conc, verdict_reasons=reasons)
        write_point_summary(pdir, row)
        rows.append(row)
    write_sweep_points(run_dir, rows)


def test_runs_of_an_llm_sweep_shows_each_point_and_no_summed_run_figures(tmp_path: Path, capsys) -> None:
    _sweep(tmp_path / "run")
    db = tmp_path / "w.duckdb"
    load_run(db, tmp_path / "run")
    assert main(["runs", "--warehouse", str(db), "--json"]) == 0
    got = [
        {
            k: r[k]
            for k in (
                "run_id",
                "sweep_point",
                "valid",
                "n_samples",
                "n_ok",
                "request_throughput_per_s",
                "p50_ttft_ms",
                "p50_e2e_ms",
            )
        }
        for r in json.loads(capsys.readouterr().out)
    ]
    # per point: 2 / 0.2 s and 4 / 0.2 s; the pooled run row (6 / 0.2 s = 30 req/s, the
    # two points added together) is not among them
    assert got == [
        {
            "run_id": RUN,
            "sweep_point": "closed-1",
            "valid": True,
            "n_samples": 2,
            "n_ok": 2,
            "request_throughput_per_s": 10.0,
            "p50_ttft_ms": 10.0,
            "p50_e2e_ms": 100.0,
        },
        {
            "run_id": RUN,
            "sweep_point": "closed-2",
            "valid": False,
            "n_samples": 4,
            "n_ok": 4,
            "request_throughput_per_s": 20.0,
            "p50_ttft_ms": 10.0,
            "p50_e2e_ms": 100.0,
        },
    ]
    assert main(["runs", "--warehouse", str(db)]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [RUN, "hand"] == lines[lines.index(next(x for x in lines if x and x[0] == RUN))][:2]
    assert ["closed-1", "yes", "2/2", "10.00", "10.0", "/", "10.0", "100.0", "/", "100.0"] in lines
    assert ["closed-2", "NO", "4/4", "20.00", "10.0", "/", "10.0", "100.0", "/", "100.0"] in lines
    assert not any("30.00" in line for line in lines)


def test_a_sweep_runs_run_row_has_no_time_figures_over_its_sequential_points(tmp_path: Path) -> None:
    _sweep(tmp_path / "run")
    db = tmp_path / "w.duckdb"
    load_run(db, tmp_path / "run")
    con = duckdb.connect(str(db), read_only=True)
    try:
        run = con.execute(
            "SELECT n_sweep_points, n_ok, request_throughput_per_s, max_concurrency, window_s, "
            "output_throughput_tok_per_s, e2e_ms.p50 FROM v_run_summary"
        ).fetchall()
        points = con.execute(
            "SELECT sweep_point, request_throughput_per_s, achieved_max_concurrency "
            "FROM v_sweep_summary ORDER BY sweep_point"
        ).fetchall()
    finally:
        con.close()
    # counts and latencies pooled over both points (6 requests, E2E 100 ms each); no
    # 30 req/s (10 + 20) nor max concurrency 3 (1 + 2)
    assert run == [(2, 6, None, None, None, None, 100.0)]
    assert points == [("closed-1", 10.0, 1), ("closed-2", 20.0, 2)]


def test_the_report_of_a_sweep_starts_with_its_verdict_per_point(tmp_path: Path) -> None:
    import re

    from benchmaker.warehouse.report import write_report

    _sweep(tmp_path / "run")
    db = tmp_path / "w.duckdb"
    load_run(db, tmp_path / "run")
    html = write_report(db, RUN, tmp_path / "report.html").read_text(encoding="utf-8")
    section = html[html.index('<section data-section="verdict">') :]
    assert html.index('data-section="verdict"') < html.index("<h2>Plots</h2>")  # first, above the plots
    assert section.startswith('<section data-section="verdict"><h2>Verdict: 1 of 2 points valid</h2>')
    rows = re.findall(
        r'<tr class="(ok|bad)" data-point="([^"]+)"><th>[^<]+</th><td>([^<]+)</td>'
        r'<td class="num">([^<]+)</td><td class="num">([^<]+)</td><td class="num">([^<]+)</td></tr>',
        section,
    )
    # an llm sweep: no episodes nor replay misses columns; 2 and 4 requests at 10 and
    # 20 req/s, E2E 100 ms each
    assert "episodes" not in section.split("</thead>")[0] and "misses" not in section.split("</thead>")[0]
    assert rows == [
        ("ok", "closed-1", "valid", "2 (2)", "10", "100 / 100"),
        (
            "bad",
            "closed-2",
            "INVALID: your machine was busy: the client&#x27;s event loop lagged 38 ms (p99; the "
            "limit is 10 ms), so the timings include client delay",
            "4 (4)",
            "20",
            "100 / 100",
        ),
    ]
    assert "<ul><li><code>--max-loop-lag-ms 50  (or BENCHMAKER_MAX_LOOP_LAG_MS=50)" in section
    assert "load average now" not in section  # read later, on another host: the run's load is not known
    # the latency-vs-throughput plot labels each point, the invalid one marked, axes in words
    marker = '<script type="application/json" class="plot-figure" data-plot="latency-throughput">'
    figure = json.loads(html[html.index(marker) + len(marker) :].split("</script>")[0])
    assert [t.get("text") for t in figure["data"] if t["name"] == "e2e p99"] == [["closed-1", "closed-2 (invalid)"]]
    assert figure["layout"]["xaxis"]["title"]["text"] == "throughput (requests/s)"
