"""benchmaker.sweep.verdicts: a point's verdict in plain words, its key figures, how to
get valid points; and print_verdicts, the last screen of a sweep command with its exit
code under both policies. The rows are written here as sweep_summary.sql writes them."""

from __future__ import annotations

import io

from rich.console import Console

from benchmaker.recipes.swebench_replay import print_verdicts
from benchmaker.sweep.verdicts import Reason, advice, key_figures, pipeline_failures, verdict_line

LAG = "engine: event-loop lag p99 38.42 ms > 10 ms: client-side timestamps include client delay"


def _row(point: str, reason: str | None = None, **figures) -> dict:
    row = {
        "sweep_point": point,
        "valid": reason is None,
        "invalid_reason": reason,
        "n_episodes": 4,
        "n_requests": 16,
        "n_ok": 16,
        "request_throughput_per_s": 7.331940067,
        "p50_e2e_ms": 1.5674395,
        "p99_e2e_ms": 8.1045036,
        "p50_ttft_ms": None,
        "p99_ttft_ms": None,
        "misses_total": 0,
        "n_reverified": 4,
        "n_resolved_reverified": 3,
    }
    return {**row, **figures}


def test_loop_lag_reads_as_a_busy_machine_with_the_lag_and_the_limit():
    assert Reason(LAG).plain == (
        "your machine was busy: the client's event loop lagged 38 ms (p99; the limit is "
        "10 ms), so the timings include client delay"
    )
    assert verdict_line(_row("c4", LAG)) == (
        "c4: INVALID: your machine was busy: the client's event loop lagged "
        "38 ms (p99; the limit is 10 ms), so the timings include client delay"
    )
    assert verdict_line(_row("c1")) == "c1: valid"


def test_a_sharded_points_reasons_keep_the_shard_they_were_found_on():
    # as a 2-shard replay point records them: one loop lag per shard, "shard k engine: "
    row = _row("c8", f"shard 0 {LAG}; shard 1 {LAG.replace('38.42', '142.81')}")
    assert verdict_line(row) == (
        "c8: INVALID: shard 0: your machine was busy: the client's event loop lagged 38 ms (p99; the "
        "limit is 10 ms), so the timings include client delay; shard 1: your machine was busy: the "
        "client's event loop lagged 143 ms (p99; the limit is 10 ms), so the timings include client delay"
    )


def test_every_reason_of_a_point_is_in_its_line_and_unknown_reasons_stay_as_recorded():
    row = _row("c8", "achieved concurrency 5 < target 8; shard 1: worker 1 did not finish in time (stopped)")
    assert verdict_line(row) == (
        "c8: INVALID: the target concurrency was never reached: at most 5 of 8 were in "
        "flight at once; shard 1: worker 1 did not finish in time (stopped)"
    )
    assert Reason("client-saturated: schedule lag p99 4.25 ms > 2 ms").plain == (
        "the client fell behind its schedule: requests started 4.25 ms late (p99; the limit is 2 ms); the "
        "machine was busy or the rate is more than this client can send"
    )


def test_key_figures_name_counts_rates_percentiles_misses_and_resolved_with_its_n():
    assert key_figures(_row("c4")) == (
        "4 episodes, 16 requests (16 ok), 7.33 req/s, E2E p50 1.57 ms / p99 8.1 ms, "
        "0 replay misses, resolved 3 of 4 re-verified"
    )
    # an engine point: no episodes, no grading; TTFT present; 170.5 req/s shown without decimals past 3 digits
    engine = {
        "sweep_point": "closed-32",
        "valid": True,
        "n_requests": 1023,
        "n_ok": 1023,
        "request_throughput_per_s": 170.5,
        "p50_ttft_ms": 12.25,
        "p99_ttft_ms": 40.0,
    }
    assert key_figures(engine) == "1023 requests (1023 ok), 170 req/s, TTFT p50 12.2 ms / p99 40 ms"


def test_advice_raises_the_broken_limit_above_the_worst_lag_and_names_flag_and_variable():
    rows = [_row("c1"), _row("c2", LAG), _row("c4", LAG.replace("38.42", "61.5"))]
    # worst lag 61.5 ms: 61.5 * 1.25 = 76.9, rounded up to 80 ms
    assert advice(rows, load_average=13.2, cores=2) == [
        "To get valid points: run on a quieter machine (load average now 13.2 on 2 cores), sweep fewer points or "
        "lower concurrency, or raise the limit a point broke:",
        "  --max-loop-lag-ms 80  (or BENCHMAKER_MAX_LOOP_LAG_MS=80); a raised limit is kept in the run's "
        "manifest: timings may then include up to that much client delay",
    ]
    assert advice([_row("c1")]) == []


def test_a_point_that_measured_nothing_is_a_pipeline_failure():
    rows = [_row("c1", LAG), _row("c2", "engine: no request succeeded", n_ok=0)]
    assert pipeline_failures(rows) == ["c2"]
    assert verdict_line(rows[1]) == "c2: INVALID: nothing was measured: engine: no request succeeded"


def _printed(rows: list[dict], policy: str) -> tuple[int, str]:
    """(exit code, printed text with its line wrapping undone) of print_verdicts on a
    narrow (60 columns) non-terminal console."""
    buf = io.StringIO()
    code = print_verdicts(
        {"run_id": "r1", "points": rows}, policy, console=Console(file=buf, width=60, force_terminal=False)
    )
    return code, " ".join(buf.getvalue().split())


def test_the_exit_code_follows_the_verdicts_or_the_pipeline():
    busy = [_row("c1"), _row("c2", LAG)]
    assert _printed([_row("c1")], "verdict") == (
        0,
        "Verdict of run r1: 1 of 1 points valid c1: valid 4 episodes, "
        "16 requests (16 ok), 7.33 req/s, E2E p50 1.57 ms / p99 8.1 ms, "
        "0 replay misses, resolved 3 of 4 re-verified",
    )
    code, text = _printed(busy, "verdict")
    assert code == 1
    assert text.startswith("Verdict of run r1: 1 of 2 points valid c1: valid 4 episodes")
    assert "c2: INVALID: your machine was busy: the client's event loop lagged 38 ms" in text
    assert "--max-loop-lag-ms 50 (or BENCHMAKER_MAX_LOOP_LAG_MS=50)" in text  # 38.42 * 1.25 = 48.0 -> 50
    assert text.endswith("exit 1: a point is invalid (--exit-code pipeline: exit 0 whenever the pipeline ran)")
    code, text = _printed(busy, "pipeline")
    assert code == 0
    assert "c2: INVALID: your machine was busy" in text
    assert text.endswith(
        "exit 0: the pipeline ran (converted, replayed, graded, loaded, reported); the invalid "
        "points stay marked invalid in the warehouse and the report (--exit-code verdict: exit 1 "
        "for them)"
    )
    code, text = _printed([*busy, _row("c4", "engine: no request succeeded", n_ok=0)], "pipeline")
    assert code == 1
    assert text.endswith("exit 1: the pipeline measured nothing at c4")
