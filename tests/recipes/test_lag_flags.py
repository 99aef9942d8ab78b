"""`--max-loop-lag-ms` / `--max-schedule-lag-ms` on `sglang` and `sandbox`:
the limits given reach the run's manifest and judge its verdict. The loop lag is the
injected monitor's (tests/_fixed_lag.py: p99 7.5 ms), so the verdict does not depend on
how busy the host is. Bad values: tests/recipes/test_break_it.py."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmaker.recipes.cli import main
from tests._fixed_lag import LOOP_LAG_P99_MS, FixedLag
from tests.recipes.test_sglang_cli import server  # noqa: F401 - the fixture: a scenario server on 127.0.0.1


def _run(argv: list[str], out: Path) -> tuple[int, dict, dict]:
    """(exit code, manifest, summary) of `benchmaker <argv> --out-dir OUT`."""
    code = main([*argv, "--out-dir", str(out), "--no-progress"])
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    return (
        code,
        orjson.loads((bundle / "manifest.json").read_bytes()),
        orjson.loads((bundle / "summary.json").read_bytes()),
    )


def _lag_reasons(summary: dict) -> list[str]:
    return [r for r in summary["verdict"]["reasons"] if r.startswith("event-loop lag")]


@pytest.mark.parametrize("command", ["sglang", "sandbox"])
def test_the_lag_limits_given_reach_the_manifest_and_judge_the_run(command, server, tmp_path, monkeypatch):
    monkeypatch.setattr("benchmaker.engine.runner.LoopLagMonitor", FixedLag)
    argv = (["sglang", "--url", server + "/generate"] if command == "sglang" else ["sandbox", "--command", "true"]) + [
        "--max-requests",
        "3",
        "--max-schedule-lag-ms",
        "250",
    ]
    code, manifest, summary = _run([*argv, "--max-loop-lag-ms", "5"], tmp_path / "low")
    checks = manifest["config"]["checks"]
    assert (checks["max_loop_lag_p99_ms"], checks["max_schedule_lag_p99_ms"]) == (5.0, 250.0)
    assert _lag_reasons(summary) == [
        f"event-loop lag p99 {LOOP_LAG_P99_MS:.2f} ms > 5 ms: client-side timestamps include client delay"
    ]
    assert (code, summary["verdict"]["valid"], summary["run"]["n_ok"]) == (1, False, 3)

    # a p99 equal to the limit does not exceed it
    code, manifest, summary = _run([*argv, "--max-loop-lag-ms", "7.5"], tmp_path / "high")
    assert manifest["config"]["checks"]["max_loop_lag_p99_ms"] == 7.5
    assert _lag_reasons(summary) == []
    assert code == (0 if summary["verdict"]["valid"] else 1)


@pytest.mark.parametrize(
    "command",
    [
        [
            "swebench-replay",
            "--logs",
            str(Path(__file__).resolve().parents[2] / "examples" / "recordings" / "tiny-task.pi.jsonl"),
            "--dry-run",
        ],
        ["sandbox", "--command", "true", "--max-requests", "1"],
    ],
)
def test_a_bad_environment_limit_is_one_line_and_an_explicit_flag_wins(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BENCHMAKER_MAX_LOOP_LAG_MS", "fast")
    args = [
        *command,
        "--out-dir",
        str(tmp_path / "out"),
        *(["--warehouse", str(tmp_path / "w.duckdb")] if command[0] == "swebench-replay" else ["--no-progress"]),
    ]
    assert main(args) == 2
    assert (
        capsys.readouterr().err
        == "benchmaker: error: BENCHMAKER_MAX_LOOP_LAG_MS: expected a finite number of ms > 0 (got 'fast')\n"
    )
    assert main([*args, "--max-loop-lag-ms", "20"]) in (0, 1)  # ran: the flag's value, not the variable's
    assert capsys.readouterr().err == ""
