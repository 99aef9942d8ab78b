"""The break-it corpus: bad input a hostile or careless user gives the CLI.

Every case must exit 2 with one line on stderr that starts `benchmaker: error:` and
names the flag or file:line:field, with no traceback, before any request is sent
(the URL is the discard port: a case that ran would exit 0/1, not 2). Cases run
through the real entry point `benchmaker.recipes.cli.main`, in process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmaker.recipes.cli import main

URL = "http://127.0.0.1:9/v1/chat/completions"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recordings" / "tiny-task.pi.jsonl"
LLM = ["llm", "--url", URL, "--model", "m"]
ONE = ["--max-requests", "1"]

# (case id, argv, a piece of the one-line message)
CLI_CASES = [
    ("closed-1e12", [*LLM, "--rate", "closed:1e12", *ONE], "--rate: rate spec 'closed:1e12': concurrency"),
    ("closed-inf", [*LLM, "--rate", "closed:inf", *ONE], "--rate: rate spec 'closed:inf'"),
    ("closed-nan", [*LLM, "--rate", "closed:nan", *ONE], "NaN is not a number"),
    ("closed-half", [*LLM, "--rate", "closed:2.5", *ONE], "concurrency must be a whole number"),
    ("closed-0", [*LLM, "--rate", "closed:0", *ONE], "--rate:"),
    ("closed-neg-think", [*LLM, "--rate", "closed:2:-1s", *ONE], "--rate:"),
    ("poisson-0", [*LLM, "--rate", "poisson:0", *ONE], "rate must be in 1e-06..1e+06 req/s, or inf"),
    ("poisson-neg", [*LLM, "--rate", "poisson:-3", *ONE], "rate must be in"),
    ("poisson-tiny", [*LLM, "--rate", "constant:1e-300", *ONE], "rate must be in"),
    ("poisson-1e12", [*LLM, "--rate", "poisson:1e12", *ONE], "rate must be in 1e-06..1e+06 req/s"),
    ("poisson-nan", [*LLM, "--rate", "poisson:nan", *ONE], "NaN is not a number"),
    ("constant-inf-no-max", [*LLM, "--rate", "constant:inf", "--duration", "5s"], "needs --max-requests"),
    ("gamma-burst-0", [*LLM, "--rate", "gamma:5:0", *ONE], "burstiness must be in 0.001..1000"),
    ("gamma-burst-nan", [*LLM, "--rate", "gamma:5:nan", *ONE], "NaN is not a number"),
    ("ramp-zero-duration", [*LLM, "--rate", "ramp:1..5@0s", *ONE], "ramp: needs"),
    ("stages-zero", [*LLM, "--rate", "stages:1,2@0s"], "stage duration must be > 0"),
    ("stages-empty", [*LLM, "--rate", "stages:@5s"], "--rate:"),
    ("unknown-model", [*LLM, "--rate", "posson:5", *ONE], "unknown load model 'posson'"),
    ("no-colon", [*LLM, "--rate", "5", *ONE], "--rate: rate spec '5'"),
    ("trace-missing", [*LLM, "--rate", "trace:/nonexistent/t.txt", *ONE], "cannot read"),
    ("duration-0", [*LLM, "--duration", "0s"], "--duration: Input should be greater than 0"),
    ("duration-neg", [*LLM, "--duration", "-5"], "--duration:"),
    ("duration-inf", [*LLM, "--duration", "inf"], "--duration:"),
    ("duration-nan", [*LLM, "--duration", "nan"], "--duration:"),
    ("duration-1000-days", [*LLM, "--duration", "24000h"], "30 days"),
    ("duration-words", [*LLM, "--duration", "ten seconds"], "--duration: expected a duration"),
    ("no-end", [*LLM, "--rate", "poisson:5"], "give --duration or --max-requests"),
    ("warmup-too-long", [*LLM, "--duration", "5s", "--warmup", "5s"], "must be shorter"),
    ("max-requests-0", [*LLM, "--max-requests", "0"], "--max-requests: Input should be greater than or equal to 1"),
    ("max-requests-huge", [*LLM, "--max-requests", "99999999999"], "--max-requests:"),
    ("max-tokens-neg", [*LLM, "--max-tokens", "-1", *ONE], "--max-tokens: expected 1..10000000"),
    ("temperature-nan", [*LLM, "--temperature", "nan", *ONE], "--temperature:"),
    ("input-words-0", [*LLM, "--input-words", "0", *ONE], "--input-words:"),
    ("slo-nan", [*LLM, "--slo-ttft-ms", "nan", *ONE], "--slo-ttft-ms: Input should be a finite number"),
    ("slo-neg", [*LLM, "--slo-ttft-ms", "-5", *ONE], "--slo-ttft-ms: Input should be greater than 0"),
    ("slo-inf", [*LLM, "--slo-e2e-ms", "inf", *ONE], "--slo-e2e-ms:"),
    (
        "error-rate-5",
        [*LLM, "--max-error-rate", "5", *ONE],
        "--max-error-rate: Input should be less than or equal to 1",
    ),
    ("error-rate-neg", [*LLM, "--max-error-rate", "-0.1", *ONE], "--max-error-rate:"),
    ("error-rate-nan", [*LLM, "--max-error-rate", "nan", *ONE], "--max-error-rate:"),
    ("ttft-timeout-0", [*LLM, "--ttft-timeout", "0", *ONE], "--ttft-timeout: Input should be greater than 0"),
    ("total-timeout-neg", [*LLM, "--total-timeout=-1s", *ONE], "--total-timeout:"),
    ("missing-value", [*LLM, "--total-timeout"], "--total-timeout requires an argument"),
    ("unknown-flag", [*LLM, "--bogus", "1"], "Unknown option"),
    ("missing-url", ["llm", "--model", "m"], "--url"),
    ("workers-100000", [*LLM, "--workers", "100000", *ONE], "--workers: Input should be less than or equal to 256"),
    ("workers-0", [*LLM, "--workers", "0", *ONE], "--workers:"),
    ("workers-word", [*LLM, "--workers", "many", *ONE], "--workers:"),
    ("max-in-flight-0", [*LLM, "--max-in-flight", "0", *ONE], "--max-in-flight:"),
    (
        "max-in-flight-huge",
        [*LLM, "--rate", "poisson:5", "--max-in-flight", "999999999", *ONE],
        "more than this host can hold in flight",
    ),
    ("overflow-bogus", [*LLM, "--overflow", "bogus", *ONE], "--overflow:"),
    ("transport-bogus", [*LLM, "--transport", "bogus", *ONE], "--transport:"),
    ("seed-neg", [*LLM, "--seed", "-1", *ONE], "--seed:"),
    ("label-control", [*LLM, "--label", "a\x1bb", *ONE], "--label: expected printable text"),
    ("api-bogus", [*LLM, "--api", "bogus", *ONE], "--api: expected chat, completions, responses, messages"),
    (
        "metrics-interval-0",
        [*LLM, "--metrics-url", "http://127.0.0.1:9/metrics", "--metrics-interval", "0s", *ONE],
        "--metrics-interval:",
    ),
    ("metrics-url-ftp", [*LLM, "--metrics-url", "ftp://x/metrics", *ONE], "--metrics-url:"),
    ("url-words", ["llm", "--url", "not a url", "--model", "m", *ONE], "--url: expected an http:// or https://"),
    ("url-ftp", ["llm", "--url", "ftp://127.0.0.1/x", "--model", "m", *ONE], "--url: expected an http:// or https://"),
    ("url-port-99999", ["llm", "--url", "http://127.0.0.1:99999/v1", "--model", "m", *ONE], "--url: not a valid URL"),
    ("url-port-0", ["llm", "--url", "http://127.0.0.1:0/v1", "--model", "m", *ONE], "--url: port must be"),
    ("url-no-host", ["llm", "--url", "http:///v1", "--model", "m", *ONE], "--url:"),
    ("http-url-bad", ["http", "--url", "localhost:8000", *ONE], "--url:"),
    ("http-header", ["http", "--url", "http://127.0.0.1:9/", "--header", "nocolon", *ONE], "--header:"),
    ("http-duration-0", ["http", "--url", "http://127.0.0.1:9/", "--duration", "0"], "--duration:"),
    ("sglang-url-ftp", ["sglang", "--url", "ftp://x/generate", *ONE], "--url:"),
    (
        "sglang-slo-nan",
        ["sglang", "--url", "http://127.0.0.1:9/generate", "--slo-ttft-ms", "nan", *ONE],
        "--slo-ttft-ms: Input should be a finite number",
    ),
    ("sandbox-timeout-0", ["sandbox", "--command", "true", "--total-timeout", "0", *ONE], "--total-timeout:"),
    ("sandbox-url-ftp", ["sandbox", "--command", "true", "--target", "flash", "--url", "ftp://x", *ONE], "--url:"),
    (
        "llm-sweep-url-ftp",
        ["llm-sweep", "--base-url", "ftp://x", "--model", "m", "--concurrency", "1"],
        "--base-url: expected an http:// or https://",
    ),
    (
        "llm-sweep-duration-nan",
        [
            "llm-sweep",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--concurrency",
            "1",
            "--duration",
            "nan",
        ],
        "--duration: expected a duration like 500ms, 10s, 2m (got 'nan')",
    ),
    (
        "llm-sweep-rate-inf",
        ["llm-sweep", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate-sweep", "inf"],
        "--rate-sweep: expected requests/s",
    ),
    (
        "llm-sweep-concurrency-huge",
        ["llm-sweep", "--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "100000000"],
        "more than this host can hold",
    ),
    (
        "llm-sweep-load-inf",
        ["llm-sweep", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "constant:inf"],
        "point constant:inf: an infinite rate",
    ),
    (
        "swebench-concurrency-huge",
        ["swebench-replay", "--logs", str(EXAMPLE), "--concurrency", "100000000", "--dry-run"],
        "--concurrency: 100000000 in flight is more than",
    ),
    (
        "swebench-sandbox-url",
        [
            "swebench-replay",
            "--logs",
            str(EXAMPLE),
            "--mode",
            "execute",
            "--sandbox",
            "flash",
            "--sandbox-url",
            "ftp://x",
            "--sandbox-image",
            "i",
            "--dry-run",
        ],
        "--sandbox-url:",
    ),
    (
        "sglang-loop-lag-0",
        ["sglang", "--url", "http://127.0.0.1:9/generate", "--max-loop-lag-ms", "0", *ONE],
        "--max-loop-lag-ms: Input should be greater than 0 (got 0.0)",
    ),
    (
        "sglang-schedule-lag-nan",
        ["sglang", "--url", "http://127.0.0.1:9/generate", "--max-schedule-lag-ms", "nan", *ONE],
        "--max-schedule-lag-ms: Input should be a finite number",
    ),
    (
        "sandbox-loop-lag-inf",
        ["sandbox", "--command", "true", "--max-loop-lag-ms", "inf", *ONE],
        "--max-loop-lag-ms: Input should be a finite number",
    ),
    (
        "sandbox-schedule-lag-neg",
        ["sandbox", "--command", "true", "--max-schedule-lag-ms", "-1", *ONE],
        "--max-schedule-lag-ms: Input should be greater than 0 (got -1.0)",
    ),
    (
        "swebench-loop-lag-neg",
        ["swebench-replay", "--logs", str(EXAMPLE), "--max-loop-lag-ms", "-5", "--dry-run"],
        "--max-loop-lag-ms: Input should be greater than 0 (got -5.0)",
    ),
    (
        "swebench-schedule-lag-inf",
        ["swebench-replay", "--logs", str(EXAMPLE), "--max-schedule-lag-ms", "inf", "--dry-run"],
        "--max-schedule-lag-ms: Input should be a finite number",
    ),
    (
        "llm-sweep-loop-lag-nan",
        [
            "llm-sweep",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--concurrency",
            "1",
            "--max-loop-lag-ms",
            "nan",
        ],
        "--max-loop-lag-ms: Input should be a finite number",
    ),
    (
        "llm-sweep-schedule-lag-0",
        [
            "llm-sweep",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--concurrency",
            "1",
            "--max-schedule-lag-ms",
            "0",
        ],
        "--max-schedule-lag-ms: Input should be greater than 0 (got 0.0)",
    ),
    (
        "swebench-rate-typo",
        ["swebench-replay", "--logs", str(EXAMPLE), "--rate", "posson:1", "--dry-run"],
        "--rate: unknown load model 'posson' in rate spec 'posson:1'",
    ),
    (
        "swebench-rate-closed",
        ["swebench-replay", "--logs", str(EXAMPLE), "--rate", "closed:2", "--dry-run"],
        "--rate: a closed loop is a concurrency_sweep point, not a rate (got 'closed:2')",
    ),
    (
        "llm-sweep-loads-typo",
        ["llm-sweep", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "posson:1"],
        "--rate: unknown load model 'posson' in rate spec 'posson:1'",
    ),
    ("runs-limit-neg", ["runs", "--limit", "-1"], 'Invalid value "-1" for --limit. Must be >= 1.'),
    ("runs-limit-huge", ["runs", "--limit", "10000000000000000000000"], "for --limit. Must be <= 1000000000."),
    ("serve-replay-port-70000", ["serve-replay", str(EXAMPLE), "--port", "70000"], "for --port. Must be <= 65535."),
    ("serve-replay-port-neg", ["serve-replay", str(EXAMPLE), "--port", "-1"], 'Invalid value "-1" for --port.'),
    ("record-port-70000", ["record", "--upstream", "http://127.0.0.1:9", "--port", "70000"], "for --port. Must be"),
    (
        "record-idle-timeout-0",
        ["record", "--upstream", "http://127.0.0.1:9", "--idle-timeout", "0"],
        "--idle-timeout: expected a duration above 0 (got '0')",
    ),
    (
        "record-total-timeout-typo",
        ["record", "--upstream", "http://127.0.0.1:9", "--total-timeout", "10 mins"],
        "--total-timeout: expected a duration like 500ms, 10s, 2m (got '10 mins')",
    ),
    ("compare-seed-neg", ["compare", "a", "b", "--seed", "-1"], 'Invalid value "-1" for --seed. Must be >= 0.'),
    ("calibrate-sse-chunks-0", ["calibrate", "--sse-chunks", "0"], 'Invalid value "0" for --sse-chunks.'),
    ("calibrate-duration-0", ["calibrate", "--duration", "0s"], "--duration: expected more than 0 s (got '0s')"),
    ("calibrate-seconds-0", ["calibrate", "--seconds", "0"], "--duration: expected more than 0 s (got 0.0)"),
    ("calibrate-duration-typo", ["calibrate", "--duration", "5 secs"], "--duration: expected a duration like 500ms"),
    ("sandbox-memory-neg", ["sandbox", "--command", "true", "--memory-mb", "-1"], "for --memory-mb. Must be >= 1."),
    ("sandbox-cpu-nan", ["sandbox", "--command", "true", "--cpu-cores", "nan"], 'Invalid value "nan" for --cpu-cores.'),
    ("sandbox-timeout-neg", ["sandbox", "--command", "true", "--timeout", "-1"], "for --timeout. Must be > 0."),
    (
        "trajectory-replay-active-0",
        ["trajectory-replay", str(EXAMPLE), "--url", URL, "--model", "m", "--active-sessions", "0"],
        'Invalid value "0" for --active-sessions. Must be >= 1.',
    ),
    (
        "trajectory-replay-max-tokens-neg",
        ["trajectory-replay", str(EXAMPLE), "--url", URL, "--model", "m", "--max-tokens", "-1"],
        'Invalid value "-1" for --max-tokens.',
    ),
    (
        "trajectory-replay-temperature-nan",
        ["trajectory-replay", str(EXAMPLE), "--url", URL, "--model", "m", "--temperature", "nan"],
        'Invalid value "nan" for --temperature.',
    ),
    (
        "swebench-temperature-nan",
        ["swebench", "--url", URL, "--model", "m", "--task-dirs", str(EXAMPLE.parent), "--temperature", "nan"],
        'Invalid value "nan" for --temperature.',
    ),
    (
        "swebench-replay-shards-0",
        ["swebench-replay", "--logs", str(EXAMPLE), "--shards", "0", "--dry-run"],
        'Invalid value "0" for --shards. Must be >= 1.',
    ),
    (
        "swebench-replay-start-lead-neg",
        ["swebench-replay", "--logs", str(EXAMPLE), "--start-lead", "-1", "--dry-run"],
        "for --start-lead. Must be > 0.",
    ),
    (
        "llm-sweep-shard-timeout-inf",
        ["llm-sweep", "--base-url", "http://127.0.0.1:9", "--model", "m", "--shard-timeout", "inf"],
        'Invalid value "inf" for --shard-timeout. Must be <= 2592000.',
    ),
    ("sql-empty", ["sql", ""], "sql: empty query"),
    ("model-empty", ["llm", "--url", URL, "--model", "", *ONE], "--model: expected the model name the endpoint serves"),
    ("api-key-env-empty", [*LLM, "--api-key-env", "", *ONE], "--api-key-env: expected the name of an environment"),
    (
        "url-space-in-host",
        ["llm", "--url", "http://127.0 .0.1:9/v1/chat/completions", "--model", "m", *ONE],
        "--url: a space or control character in the host",
    ),
    (
        "workers-beyond-closed-loop",  # 3 of 4 workers would send nothing: 1 of 2 requests sent
        [*LLM, "--workers", "4", "--rate", "closed:1", "--max-requests", "2"],
        "--workers: 4 worker processes share 1 closed-loop request(s) in flight: give at most 1 workers",
    ),
    ("sql-blank", ["sql", "  \n\t"], "sql: empty query"),
]


def _one_line_error(capsys: pytest.CaptureFixture[str], code: int, piece: str) -> str:
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert err.startswith("benchmaker: error: ") and err.count("\n") == 1, err
    assert piece in err, err
    return err


@pytest.mark.parametrize("argv,piece", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_bad_cli_input_is_a_one_line_error_exit_2(argv, piece, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # the sweep commands setdefault these; set here, monkeypatch restores them after
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", os.environ.get("PREFECT_SERVER_ANALYTICS_ENABLED", "false"))
    monkeypatch.setenv(
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
        os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90"),
    )
    monkeypatch.setenv("BENCHMAKER_WAREHOUSE", str(tmp_path / "w.duckdb"))
    if argv[0] == "sql":  # a real (empty) warehouse, so only the query is wrong
        import duckdb

        duckdb.connect(str(tmp_path / "w.duckdb")).close()
    _one_line_error(capsys, main(argv), piece)
    assert not (tmp_path / "runs").exists()  # nothing ran


def _paths(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    os.symlink("afile.loop2", tmp_path / "afile.loop")
    os.symlink("afile.loop", tmp_path / "afile.loop2")
    return afile


PATH_CASES = [
    (
        "out-dir-symlink-loop",  # afile.loop -> afile.loop2 -> afile.loop
        lambda a: [*LLM, "--out-dir", f"{a}.loop/runs", *ONE],
        "--out-dir:",
        ".loop is a symbolic link that loops or points nowhere",
    ),
    ("out-dir-under-file", lambda a: [*LLM, "--out-dir", f"{a}/runs", *ONE], "--out-dir:", "is under a file"),
    ("out-dir-is-file", lambda a: [*LLM, "--out-dir", str(a), *ONE], "--out-dir:", "is a file"),
    ("trace-is-dir", lambda a: [*LLM, "--record-trace", str(a.parent), *ONE], "--record-trace:", "is a directory"),
    ("trace-under-file", lambda a: [*LLM, "--record-trace", f"{a}/t.jsonl", *ONE], "--record-trace:", "under a file"),
    ("report-o-dir", lambda a: ["report", "r1", "-o", str(a.parent)], "--output:", "is a directory"),
    ("report-o-under-file", lambda a: ["report", "r1", "-o", f"{a}/r.html"], "--output:", "under a file"),
    ("convert-o-dir", lambda a: ["convert", str(a), "-o", str(a.parent)], "--output:", "is a directory"),
    (
        "load-warehouse-under-file",
        lambda a: ["load", str(a.parent), "--warehouse", f"{a}/w.duckdb"],
        "--warehouse:",
        "under a file",
    ),
    (
        "load-warehouse-dir",
        lambda a: ["load", str(a.parent), "--warehouse", str(a.parent)],
        "--warehouse:",
        "is a directory",
    ),
    ("export-under-file", lambda a: ["export", "--parquet", f"{a}/pq"], "--parquet:", "under a file"),
    ("sql-warehouse-dir", lambda a: ["sql", "SELECT 1", "--warehouse", str(a.parent)], "", "is a directory"),
    (
        "swebench-out-dir-under-file",
        lambda a: ["swebench-replay", "--logs", str(EXAMPLE), "--out-dir", f"{a}/x", "--dry-run"],
        "--out-dir:",
        "under a file",
    ),
    (
        "swebench-warehouse-under-file",
        lambda a: ["swebench-replay", "--logs", str(EXAMPLE), "--warehouse", f"{a}/w.duckdb", "--dry-run"],
        "--warehouse:",
        "under a file",
    ),
]


@pytest.mark.parametrize("make,flag,piece", [c[1:] for c in PATH_CASES], ids=[c[0] for c in PATH_CASES])
def test_bad_output_path_is_refused_before_any_work(make, flag, piece, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    afile = _paths(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    err = _one_line_error(capsys, main(make(afile)), piece)
    assert flag in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing created


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_out_dir_is_refused(tmp_path, monkeypatch, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    _one_line_error(capsys, main([*LLM, "--out-dir", str(locked / "runs"), *ONE]), "permission denied")


BOMB = (
    "\n".join(
        ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]
    )
    + "\n"
)
HTTP_WL = 'workload: {type: http, url: "http://127.0.0.1:9/"}\n'

# (case id, YAML text, a piece of the message: the file name and line are checked too)
YAML_CASES = [
    ("max-requests-true", "load: closed:1\nmax_requests: true\n" + HTTP_WL, ":2: max_requests: expected a number, not"),
    (
        "python-name-tag",
        "load: !!python/name:os.system closed:1\nmax_requests: 1\n" + HTTP_WL,
        ":1: load: not valid YAML: could not determine a constructor for the tag",
    ),
    ("billion-laughs", BOMB, ":6: YAML aliases expand to more than 100000 nodes"),
    ("self-alias", "a: &a [*a]\n", ":1: YAML alias refers to itself"),
    ("deep-nesting", "a: " + "[" * 2000 + "]" * 2000 + "\n", "YAML nested too deeply"),
    (
        "run-id-traversal",
        "load: closed:1\nmax_requests: 1\nrun_id: ../../../tmp/x\n" + HTTP_WL,
        ":3: run_id: use letters, digits",
    ),
    ("run-id-slash", "load: closed:1\nmax_requests: 1\nrun_id: a/b\n" + HTTP_WL, ":3: run_id:"),
    ("duration-inf", "load: closed:1\nduration_s: .inf\n" + HTTP_WL, ":2: duration_s:"),
    ("duration-nan", "load: closed:1\nduration_s: .nan\n" + HTTP_WL, ":2: duration_s:"),
    ("closed-inf", "load: closed:inf\nmax_requests: 1\n" + HTTP_WL, ":1: load:"),
    ("slo-nan", "load: closed:1\nmax_requests: 1\nslo: {ttft_ms: .nan}\n" + HTTP_WL, ":3: slo.ttft_ms:"),
    (
        "error-rate-2",
        "load: closed:1\nmax_requests: 1\nchecks: {max_error_rate: 2}\n" + HTTP_WL,
        ":3: checks.max_error_rate:",
    ),
    ("url-ftp", "load: closed:1\nmax_requests: 1\nworkload: {type: http, url: 'ftp://h/x'}\n", ":3: workload"),
    ("url-port", "load: closed:1\nmax_requests: 1\nworkload: {type: http, url: 'http://h:70000/'}\n", ":3: workload"),
    (
        "lane-name-slash",
        "duration_s: 1\nmix:\n  lanes:\n    - {name: ../x, rate: 'closed:1', "
        "workload: {type: http, url: 'http://127.0.0.1:9/'}}\n",
        "mix.lanes[0].name:",
    ),
    (
        "lane-inf-no-max",
        "duration_s: 1\nmix:\n  lanes:\n    - {name: a, rate: 'constant:inf', "
        "workload: {type: http, url: 'http://127.0.0.1:9/'}}\n",
        "needs max_requests",
    ),
    (
        "lane-concurrency-over-host",
        "duration_s: 1\nmix:\n  lanes:\n    - {name: a, rate: 'closed:999999', "
        "workload: {type: http, url: 'http://127.0.0.1:9/'}}\n",
        "more than this host can hold",
    ),
    ("unknown-key", "load: closed:1\nmax_requests: 1\nbogus: 1\n" + HTTP_WL, ":3: bogus: unknown key"),
    ("not-a-mapping", "- 1\n- 2\n", ":1: expected a mapping"),
    (
        "duplicate-key",
        "load: closed:1\nmax_requests: 1\nload: closed:2\n" + HTTP_WL,
        ":3: not valid YAML: duplicate key 'load' (first at line 1)",
    ),
    (
        "duplicate-nested-key",
        "load: closed:1\nmax_requests: 1\nworkload:\n  type: http\n  url: 'http://127.0.0.1:9/'\n  url: 'http://x/'\n",
        ":6: not valid YAML: duplicate key 'url' (first at line 5)",
    ),
    ("out-dir-under-file", "load: closed:1\nmax_requests: 1\nout_dir: afile/runs\n" + HTTP_WL, "out_dir: "),
]


@pytest.mark.parametrize("text,piece", [c[1:] for c in YAML_CASES], ids=[c[0] for c in YAML_CASES])
def test_bad_run_file_is_a_file_line_error_exit_2(text, piece, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _paths(tmp_path)
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(text)
    # the alias bomb is refused by counting, before it is expanded: no hang, no memory growth
    err = _one_line_error(capsys, main(["run", str(run_yaml)]), piece)
    assert str(run_yaml) in err
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "tmp").exists()


def test_a_grader_file_with_a_duplicate_key_is_a_file_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.yaml").write_text("type: numeric\nabs_tol: 0.1\nabs_tol: 5\n")
    err = _one_line_error(capsys, main([*LLM, "--grader", "@g.yaml", *ONE]), "--grader: g.yaml:3: not YAML/JSON: ")
    assert err.endswith("duplicate key 'abs_tol' (first at line 2)\n")
    assert not (tmp_path / "runs").exists()


def test_no_example_runs_an_interpreter_named_python():
    """A stock host may have only `python3`: examples and tests use
    `python3` or sys.executable, never a bare `python` command."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    bare = re.compile(r"""(?:["';]|&&)\s*python\s+-[cmu]\b""")  # a command string, not prose
    offenders = [
        f"{p.relative_to(root)}:{i}"
        for base in ("examples", "tests")
        for p in sorted((root / base).rglob("*"))
        if p.suffix in (".yaml", ".yml", ".py", ".sh", ".json")
        and p.is_file()
        and p.name != Path(__file__).name
        and "recordings" not in p.parts  # recorded agent actions are data, replayed as recorded
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if bare.search(line)
    ]
    assert offenders == [], f"bare `python` in {offenders}; use python3 or {sys.executable!r}"


# -- hostile servers: bounded memory and deadlines (a real server on 127.0.0.1) ------------


@pytest.fixture(scope="module")
def hostile():
    from tests.hostile_server import HostileServer

    with HostileServer() as srv:
        yield srv


def _samples(run_dir: Path) -> list[dict]:
    import json

    [bundle] = list(run_dir.iterdir())
    return [json.loads(line) for line in (bundle / "samples.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("path,coding", [("/bomb-gzip", "gzip"), ("/bomb-deflate", "deflate")])
def test_a_compression_bomb_response_ends_the_request_as_an_error(path, coding, hostile, tmp_path, monkeypatch, capsys):
    import resource

    monkeypatch.chdir(tmp_path)
    code = main(["http", "--url", hostile.url + path, "--max-requests", "2", "--out-dir", "runs"])
    capsys.readouterr()
    assert code == 1  # every request failed: a failed run, with its samples kept
    samples = _samples(tmp_path / "runs")
    assert [s["outcome"] for s in samples] == ["transport_error", "transport_error"]
    assert {s["error"] for s in samples} == {
        f"decoded body over {64 << 20} bytes (Content-Encoding {coding}): a compression bomb?"
    }
    # 100 MiB decoded per request was refused at 64 MiB: never held (peak RSS well under 2 bombs)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 1_500_000  # KiB


@pytest.mark.parametrize("path,coding", [("/bomb-gzip", "gzip"), ("/bomb-deflate", "deflate")])
def test_a_compression_bomb_ends_the_request_as_an_error_on_the_aiohttp_transport(
    path, coding, hostile, tmp_path, monkeypatch, capsys
):
    import resource

    monkeypatch.chdir(tmp_path)
    argv = ["llm", "--url", hostile.url + path, "--model", "m", "--transport", "aiohttp"]
    code = main([*argv, "--max-requests", "2", "--out-dir", "runs"])
    capsys.readouterr()
    assert code == 1  # every request failed: a failed run, with its samples kept
    samples = _samples(tmp_path / "runs")
    assert [s["outcome"] for s in samples] == ["transport_error", "transport_error"]
    assert {s["error"] for s in samples} == {
        f"decoded body over {64 << 20} bytes (Content-Encoding {coding}): a compression bomb?"
    }
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 1_500_000  # KiB: never held whole


def test_the_aiohttp_transport_reads_a_decoded_error_body_under_the_same_cap(hostile):
    import asyncio

    from benchmaker.engine.errors import TransportError
    from benchmaker.engine.records import RequestSpec
    from benchmaker.engine.transport import AiohttpTransport

    async def read(path: str) -> bytes:
        transport = AiohttpTransport()
        try:
            async with transport.stream(RequestSpec("GET", hostile.url + path, {}, None)) as resp:
                return await resp.read()
        finally:
            await transport.aclose()

    assert asyncio.run(read("/metrics-bomb")) == b"# filler comment line of a metrics page\n" * ((20 << 20) // 40)
    with pytest.raises(TransportError, match=r"^decoded body over 67108864 bytes \(Content-Encoding gzip\)"):
        asyncio.run(read("/bomb-gzip"))


def test_a_metrics_bomb_and_an_endless_metrics_body_are_failed_samples_not_a_hang(
    hostile, tmp_path, monkeypatch, capsys
):
    import json
    import time

    from benchmaker.testing.instant_server import start_instant_server

    monkeypatch.chdir(tmp_path)
    with start_instant_server(sse_chunks=5) as srv:
        t = time.monotonic()
        code = main(
            [
                "llm",
                "--url",
                srv.url + "/v1/chat/completions",
                "--model",
                "m",
                "--duration",
                "2s",
                "--rate",
                "closed:1",
                "--metrics-url",
                hostile.url + "/metrics-bomb",
                "--metrics-url",
                hostile.url + "/metrics-endless",
                "--metrics-interval",
                "1s",
                "--out-dir",
                "runs",
            ]
        )
        took_s = time.monotonic() - t
    capsys.readouterr()
    assert code in (0, 1)  # the run's own verdict (host load may void it); it ended
    assert took_s < 60
    [bundle] = list((tmp_path / "runs").iterdir())
    monitors = json.loads((bundle / "summary.json").read_text())["self_checks"]["monitors"]
    by_url = {name: m for name, m in monitors.items()}
    errors = sorted(m["last_error"] for m in by_url.values())
    assert len(errors) == 2 and all(m["rows"] == 0 and m["errors"] == m["samples"] for m in by_url.values())
    assert errors[0].startswith(
        f"RuntimeError: GET {hostile.url}/metrics-endless: no whole answer within the scrape deadline (1 s)"
    )
    assert errors[1] == (
        f"ValueError: GET {hostile.url}/metrics-bomb: body over {16 << 20} bytes decoded "
        f"(Content-Encoding gzip): a compression bomb?"
    )


# -- files that are not files, inputs that loop, outputs that are inputs, slow queries ------

_PI_CYCLE = (
    "\n".join(
        [
            '{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/work/x"}',
            '{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user",'
            '"content":[{"type":"text","text":"hi"}],"timestamp":1767225600000}}',
            '{"type":"message","id":"b2","parentId":"a1","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":'
            '"assistant","content":[{"type":"text","text":"ok"}],"api":"openai-completions","provider":"openai","model":"m",'
            '"usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2},"stopReason":"stop",'
            '"timestamp":1767225601000}}',
            # the id of line 2 again, as the child of line 3: line 3's parent link would loop
            '{"type":"message","id":"a1","parentId":"b2","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"user",'
            '"content":[{"type":"text","text":"again"}],"timestamp":1767225602000}}',
        ]
    )
    + "\n"
)

# (case id, argv builder over tmp_path (FIFO f.fifo, pi file cyc.jsonl, warehouse w.duckdb made), message)
FILE_CASES = [
    (
        "dataset-fifo",
        lambda d: [*LLM, "--dataset", f"{d}/f.fifo", *ONE],
        "f.fifo: is a FIFO (named pipe), not a regular file",
    ),
    ("dataset-dev-zero", lambda d: [*LLM, "--dataset", "/dev/zero", *ONE], "/dev/zero: is a character device"),
    ("trace-rate-fifo", lambda d: [*LLM, "--rate", f"trace:{d}/f.fifo", *ONE], "f.fifo is a FIFO"),
    ("trace-rate-dev-zero", lambda d: [*LLM, "--rate", "trace:/dev/zero", *ONE], "/dev/zero is a character device"),
    (
        "record-trace-fifo",
        lambda d: [*LLM, "--record-trace", f"{d}/f.fifo", *ONE],
        "--record-trace: " + "{d}/f.fifo is a FIFO",
    ),
    ("run-file-fifo", lambda d: ["run", f"{d}/f.fifo"], "f.fifo: is a FIFO"),
    ("convert-fifo", lambda d: ["convert", f"{d}/f.fifo", "-o", f"{d}/out.jsonl"], "not a regular file"),
    (
        "pi-parent-cycle",
        lambda d: ["convert", f"{d}/cyc.jsonl", "-o", f"{d}/out.jsonl"],
        "cyc.jsonl:3: parentId: names an id that a later entry (line 4) uses again: the session tree would loop "
        '(got "a1")',
    ),
    (
        "convert-deep-nesting",  # json's parser recursed past the interpreter's limit: a RecursionError
        lambda d: ["convert", f"{d}/deep.json", "-o", f"{d}/out.jsonl", "--format", "openai-messages"],
        "deep.json:1: JSON nested too deeply to read",
    ),
    (
        "convert-deep-nesting-detected",
        lambda d: ["convert", f"{d}/deep.json", "-o", f"{d}/out.jsonl"],
        "deep.json: unknown log format",
    ),
    (
        "convert-output-is-input",
        lambda d: ["convert", f"{d}/cyc.jsonl", "-o", f"{d}/cyc.jsonl"],
        "cyc.jsonl: is also the output file (-o): converting would replace it",
    ),
    (
        "sql-timeout",
        lambda d: [
            "sql",
            "SELECT count(*) FROM range(100000000000) a",
            "--warehouse",
            f"{d}/w.duckdb",
            "--timeout",
            "0.5",
        ],
        "sql: --timeout: the query ran longer than 0.5 s and was stopped",
    ),
    (
        "sql-timeout-0",
        lambda d: ["sql", "SELECT 1", "--warehouse", f"{d}/w.duckdb", "--timeout", "0"],
        "--timeout: expected seconds > 0",
    ),
]


@pytest.mark.parametrize("make,piece", [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_unreadable_looping_or_overlapping_files_are_one_line_errors(make, piece, tmp_path, monkeypatch, capsys):
    import time

    import duckdb

    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "f.fifo")
    (tmp_path / "cyc.jsonl").write_text(_PI_CYCLE)
    (tmp_path / "deep.json").write_text('{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}")
    duckdb.connect(str(tmp_path / "w.duckdb")).close()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name != "f.fifo"}
    t = time.monotonic()
    _one_line_error(capsys, main(make(tmp_path)), piece.replace("{d}", str(tmp_path)))
    assert time.monotonic() - t < 30  # refused, not blocked on the FIFO nor run to the end
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name != "f.fifo"}
    assert after == before and not (tmp_path / "runs").exists()  # nothing written, nothing replaced


@pytest.mark.parametrize("url", ["notaurl", "ftp://127.0.0.1:4200/api"])
def test_a_bad_prefect_api_url_is_one_line_naming_it_before_the_flow(url, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREFECT_API_URL", url)
    argv = ["swebench-replay", "--logs", str(EXAMPLE), "--concurrency", "1", "--out-dir", "art"]
    _one_line_error(capsys, main([*argv, "--warehouse", "w.duckdb"]), "PREFECT_API_URL: expected an http:// or")
    assert list(tmp_path.glob("art/swebench-replay-*/manifest.json")) == []  # no flow run started


@pytest.mark.parametrize("count", ["1" + "0" * 30, "1e400"], ids=["10**30", "1e400"])
def test_a_token_count_no_model_reports_is_converted_as_unknown_and_served(count, tmp_path, monkeypatch, capsys):
    """A converter never writes a number its own readers refuse: 10**30 (beyond 64 bits:
    orjson, hence the replay server, refused it) and 1e400 (inf) become None."""
    from benchmaker.replay_server.store import ReplayStore
    from benchmaker.trajectories.convert import read_trajectories

    monkeypatch.chdir(tmp_path)
    usage = f'{{"prompt_tokens": {count}, "completion_tokens": 5}}'
    row = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "usage": ' + usage
    (tmp_path / "big.jsonl").write_text(row + "}]}\n")
    assert main(["convert", "big.jsonl", "-o", "t.jsonl"]) == 0
    [traj] = list(read_trajectories(tmp_path / "t.jsonl"))
    assert (traj.turns[0].usage.prompt_tokens, traj.turns[0].usage.completion_tokens) == (None, 5)
    assert ReplayStore.load(tmp_path / "t.jsonl").trajectories[0].trajectory.turns[0].usage == traj.turns[0].usage


@pytest.mark.parametrize(
    "argv",
    [["convert", "logs", "-o", "out.jsonl"], ["swebench-replay", "--logs", "logs", "--dry-run", "--out-dir", "art"]],
    ids=["convert", "swebench-replay"],
)
def test_two_copies_of_one_session_in_a_logs_directory_are_one_line_naming_both(argv, tmp_path, monkeypatch, capsys):
    import shutil

    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").mkdir()
    shutil.copyfile(EXAMPLE, tmp_path / "logs" / "a.jsonl")
    shutil.copyfile(EXAMPLE, tmp_path / "logs" / "b.jsonl")
    err = _one_line_error(capsys, main(argv), f"{tmp_path}/logs/b.jsonl: holds the same session as ")
    assert f"as {tmp_path}/logs/a.jsonl (trajectory_id " in err
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "art").exists()


@pytest.mark.parametrize(
    "upstream",
    ["http://me:pw-S3CRET@127.0.0.1:9", "http://ghp_S3CRET@127.0.0.1:9/v1", "http://127.0.0.1:9/v1?api_key=S3CRET"],
)
def test_record_refuses_credentials_in_the_upstream_url_without_printing_them(upstream, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _one_line_error(
        capsys,
        main(["record", "--upstream", upstream, "-o", "t.jsonl"]),
        "--upstream: expected a base URL without user:password@, ?query or #fragment",
    )
    assert "S3CRET" not in err and "***" in err
    assert list(tmp_path.iterdir()) == []


def _sqlite_file(d: Path) -> None:
    import sqlite3

    con = sqlite3.connect(d / "w.sqlite")
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()


def _bad_task(d: Path) -> None:
    (d / "task").mkdir()
    (d / "task" / "task.json").write_text('{"task_id": "t", "timeout_s": -5}')


# checked before any work: the sweep would otherwise run to its end (or its first episode)
# and only then find them
PRE_WORK_CASES = [
    (
        "swebench-warehouse-sqlite",
        _sqlite_file,
        lambda d: ["swebench-replay", "--logs", str(EXAMPLE), "--warehouse", f"{d}/w.sqlite", "--dry-run"],
        "--warehouse: ",
    ),
    (
        "llm-sweep-warehouse-sqlite",
        _sqlite_file,
        lambda d: [
            "llm-sweep",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--concurrency",
            "1",
            "--warehouse",
            f"{d}/w.sqlite",
        ],
        "--warehouse: ",
    ),
    (
        "swebench-bad-task-json",
        _bad_task,
        lambda d: [
            "swebench-replay",
            "--logs",
            str(EXAMPLE),
            "--mode",
            "execute",
            "--task-dirs",
            f"{d}/task",
            "--dry-run",
        ],
        "--task-dirs: {d}/task/task.json: timeout_s: expected a number > 0 (got -5)",
    ),
]


@pytest.mark.parametrize("setup,make,piece", [c[1:] for c in PRE_WORK_CASES], ids=[c[0] for c in PRE_WORK_CASES])
def test_warehouse_and_task_json_are_checked_before_any_work(setup, make, piece, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    err = _one_line_error(capsys, main(make(tmp_path)), piece.replace("{d}", str(tmp_path)))
    assert "w.sqlite" in err or "task.json" in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted at tmp_path/disk, unmounted after the test (root only)."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def _fill_with_a_run(disk: Path, *more: str) -> int:
    """`benchmaker llm` of 5000 requests (4 in flight) into runs/ on `disk`: its exit code."""
    from benchmaker.testing.instant_server import start_instant_server

    with start_instant_server(sse_chunks=50) as srv:
        argv = ["llm", "--url", srv.url + "/v1/chat/completions", "--model", "m", "--rate", "closed:4"]
        return main([*argv, "--max-requests", "5000", "--out-dir", str(disk / "runs"), *more])


def test_a_full_disk_keeps_the_samples_written_so_far_and_says_where(small_disk, tmp_path, monkeypatch, capsys):
    """ENOSPC from the sample writer (a 1 MiB tmpfs filled by the run): one line naming
    samples.jsonl, exit 1, and the file holds exactly the whole samples it reports."""
    import json

    monkeypatch.chdir(tmp_path)
    code = _fill_with_a_run(small_disk)
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "Traceback" not in out + err and err.count("\n") == 1
    [bundle] = list((small_disk / "runs").iterdir())
    lines = (bundle / "samples.jsonl").read_text().splitlines()
    assert err == (
        f"benchmaker: error: {bundle / 'samples.jsonl'}: cannot write samples (No space left on "
        f"device); the {len(lines)} samples written before it are kept there, "
        f"{5000 - len(lines)} later ones are not and no summary was written\n"
    )
    assert len(lines) > 100 and all(json.loads(line)["outcome"] == "ok" for line in lines)
    assert (bundle / "manifest.json").is_file() and not (bundle / "summary.json").exists()


def test_a_full_disk_under_two_workers_keeps_each_shards_samples_and_says_where(
    small_disk, tmp_path, monkeypatch, capsys
):
    """--workers 2 on a 1 MiB tmpfs: each worker whose samples-w<k>.jsonl filled the disk
    says so in the one line (no worker traceback), exit 1, its file holds exactly the
    whole samples it reports (none when the other worker filled the disk first), and no
    summary is written."""
    import json
    import re

    monkeypatch.chdir(tmp_path)
    code = _fill_with_a_run(small_disk, "--workers", "2")
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "Traceback" not in out + err and err.count("\n") == 1, err
    [bundle] = list((small_disk / "runs").iterdir())
    one = (
        rf"({re.escape(str(bundle))}/samples-w([01])\.jsonl): cannot write samples \(No space left on device\); "
        r"the (\d+) samples written before it are kept there, (\d+) later ones are not and no summary was written"
    )
    m = re.fullmatch(rf"benchmaker: error: {one}(?:; {one})?\n", err)
    assert m is not None, err
    groups = [m.groups()[i : i + 4] for i in (0, 4) if m.group(i + 1) is not None]
    assert [g[1] for g in groups] == sorted({g[1] for g in groups})  # each shard once, in worker order
    for path, _, kept, later in groups:
        lines = Path(path).read_text().splitlines()
        assert len(lines) == int(kept) and int(later) > 0
        assert all(json.loads(line)["outcome"] == "ok" for line in lines)
    # a worker may meet the disk its sibling filled before its first whole sample
    assert sum(int(g[2]) for g in groups) > 0
    assert not (bundle / "summary.json").exists()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_the_agents_aiohttp_session_ends_a_compression_bomb_as_an_error(stream, hostile):
    import asyncio

    import aiohttp

    from benchmaker.agent.model_client import ModelClient

    async def call():
        async with aiohttp.ClientSession() as session:
            client = ModelClient(hostile.url + "/bomb-gzip", model="m", session=session)
            return await client.chat([{"role": "user", "content": "hi"}], stream=stream)

    res = asyncio.run(call())
    assert (res.outcome, res.error) == (
        "transport_error",
        f"decoded body over {64 << 20} bytes (Content-Encoding gzip): a compression bomb?",
    )
