"""Terminal tables of recipes/display.py: `benchmaker runs` fits 120 columns."""

from __future__ import annotations

from datetime import datetime

from rich.console import Console

from benchmaker.recipes.display import runs_table

NAMES = [
    "run_id",
    "sweep_point",
    "kind",
    "label",
    "created_at",
    "valid",
    "invalid_reason",
    "n_samples",
    "n_ok",
    "request_throughput_per_s",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_e2e_ms",
    "p99_e2e_ms",
]


def test_runs_table_fits_120_columns_with_whole_run_ids() -> None:
    run_id = "swebench-replay-20261201T011631Z-589680ee"  # 41 characters, as the flows name runs
    rows = [
        (
            run_id,
            None,
            "swebench-replay",
            "nightly-with-a-long-label",
            datetime(2026, 12, 1, 1, 16, 31),
            False,
            "event-loop lag p99 12.00 ms > 10 ms",
            12_345,
            12_340,
            1234.5678,
            12.345,
            1234.5,
            123.4,
            12_345.6,
        )
    ]
    console = Console(width=120, record=True, color_system=None)
    console.print(runs_table(NAMES, rows))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 120
    row = next(line for line in lines if line.startswith(run_id))  # the id is never wrapped
    # requests "ok/all", latencies "p50 / p99" ms (one decimal), created to the minute
    assert "12-01 01:16" in row and "12340/12345" in row and "12.3 / 1234.5" in row
    assert "123.4 / 12345.6" in row and "1234.57" in row and " NO " in row


def test_refusals_and_length_finishes_are_flagged_successes_not_errors() -> None:
    from benchmaker.recipes.display import summary_tables

    run = {"n_ok": 3, "n_sent": 5, "n_samples": 5, "n_aborted": 2, "n_refusal": 1, "n_length": 2, "n_content_filter": 0}
    console = Console(width=120, record=True, color_system=None)
    console.print(summary_tables({"run_id": "r", "run": run})[0])
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in console.export_text().splitlines()
        if line.count("│") == 3
    }
    assert rows["errors"] == "aborted 2"
    assert rows["successes flagged"] == "refusal 1, length 2"


def test_unknown_finishes_and_impossible_usage_are_flagged_successes_and_tpot_says_what_it_assumed() -> None:
    from benchmaker.recipes.display import summary_tables

    run = {
        "n_ok": 3,
        "n_sent": 3,
        "n_samples": 3,
        "n_finish_unknown": 1,
        "n_usage_invalid": 1,
        "n_tpot_first_event_assumed": 2,
        "output_tokens_total": None,
        "token_totals_null_reason": "1 of 3 successful requests have server token counts that cannot be true",
    }
    console = Console(width=160, record=True, color_system=None)
    console.print(summary_tables({"run_id": "r", "run": run})[0])
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in console.export_text().splitlines()
        if line.count("│") == 3
    }
    assert rows["errors"] == "none"
    assert rows["successes flagged"] == "finish_unknown 1, usage_invalid 1"
    assert rows["output tokens total"] == (
        "null: 1 of 3 successful requests have server token counts that cannot be true"
    )
    assert (
        rows["TPOT first token event"] == "counted as 1 token in 2 requests (the API states no per-event token count)"
    )


def test_graded_answers_show_accuracy_with_its_n_and_wrong_answers_are_not_errors() -> None:
    from benchmaker.recipes.display import summary_tables

    # 4 answers graded: 1 correct (ok), 3 wrong (graded_wrong), 1 transport error
    run = {
        "n_ok": 1,
        "n_sent": 5,
        "n_samples": 5,
        "n_graded": 4,
        "n_correct": 1,
        "n_graded_wrong": 3,
        "n_transport_error": 1,
        "accuracy": 0.25,
    }
    console = Console(width=120, record=True, color_system=None)
    console.print(summary_tables({"run_id": "r", "run": run})[0])
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in console.export_text().splitlines()
        if line.count("│") == 3
    }
    assert rows["accuracy (correct / graded)"] == "0.250 (1 of 4; 3 graded wrong)"
    assert rows["errors"] == "transport_error 1"


def test_a_run_whose_answers_were_all_graded_wrong_says_so_in_its_verdict() -> None:
    from types import SimpleNamespace

    from benchmaker.engine.selfcheck import verdict

    limits = SimpleNamespace(max_error_rate=0.1, max_schedule_lag_p99_ms=10.0, max_loop_lag_p99_ms=10.0)
    run = {"n_sent": 4, "n_ok": 0, "n_graded": 4, "n_graded_wrong": 4, "max_concurrency": 1}
    v = verdict(run, limits=limits, open_loop=False, target_concurrency=1, loop_lag={"p99": 1.0}, interrupted=False)
    assert v["reasons"] == ["no request succeeded (4 answers graded wrong: accuracy 0 of 4)"]
    v = verdict(
        {"n_sent": 4, "n_ok": 0, "n_transport_error": 4, "max_concurrency": 1},
        limits=limits,
        open_loop=False,
        target_concurrency=1,
        loop_lag={"p99": 1.0},
        interrupted=False,
    )
    assert v["reasons"] == ["no request succeeded"]


def _printed(summary: dict) -> str:
    from benchmaker.recipes.display import print_summary

    console = Console(width=120, record=True, color_system=None)
    print_summary(summary, "runs/r", out=console)
    return console.export_text()


def test_a_run_without_tokens_shows_no_token_figures_and_a_run_with_tokens_all() -> None:
    # an HTTP run: 50 ok responses, none streamed a token or stated usage (summary.sql
    # leaves ttft_ms at count 0 and the token totals null, selfcheck adds a note)
    e2e = {"count": 50, "mean": 1.5, "p50": 1.0, "p90": 2.0, "p99": 3.0, "max": 4.0}
    http_run = {
        "n_ok": 50,
        "n_sent": 50,
        "n_samples": 50,
        "n_ok_with_usage": 0,
        "usage_coverage": 0.0,
        "output_tokens_total": None,
        "token_totals_null_reason": "50 of 50 successful requests lack server usage",
        "ttft_ms": {"count": 0},
        "tpot_ms": {"count": 0},
        "e2e_ms": e2e,
    }
    verdict = {
        "valid": True,
        "reasons": [],
        "notes": ["token totals are null: 50 of 50 successful requests lack server usage"],
    }
    text = _printed({"run_id": "http-1", "run": http_run, "verdict": verdict})
    assert "tokens │ none: no response streamed a token or stated usage" in " ".join(text.split())
    metrics = [line.split("│")[1].strip() for line in text.splitlines() if line.count("│") == 8]
    assert metrics == ["e2e_ms", "e2e_all_ms", "e2e_intended_ms"]
    for gone in ("usage coverage", "output tokens total", "output throughput", "ttft_ms", "tpot_ms", "token totals"):
        assert gone not in text, gone
    # the same counts with one streamed token event: every row and the note are back
    llm_run = {**http_run, "ttft_ms": {**e2e, "count": 1}}
    text = _printed({"run_id": "llm-1", "run": llm_run, "verdict": verdict})
    metrics = [line.split("│")[1].strip() for line in text.splitlines() if line.count("│") == 8]
    assert metrics[:2] == ["ttft_ms", "ttfc_ms"] and len(metrics) == 9
    assert "output tokens total" in text and "note: token totals are null: 50 of 50" in text
    assert "│ tokens " not in text
