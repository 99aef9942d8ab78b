"""flows.swebench_replay.validate_params: bad parameters are refused, naming them,
before any work (plain pydantic, no Prefect run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.swebench_replay import ParameterError, validate_params

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recordings" / "tiny-task.pi.jsonl"


def test_good_parameters_pass() -> None:
    p = validate_params(logs=[EXAMPLE], concurrency_sweep=[1, 5, 25])
    assert p.concurrency_sweep == [1, 5, 25] and p.mode == "recorded"


@pytest.mark.parametrize(("params", "message"), [
    ({"logs": [EXAMPLE], "concurrency_sweep": [0]}, "concurrency_sweep[0]: expected a number >= 1 (got 0)"),
    ({"logs": [EXAMPLE], "concurrency_sweep": []}, "concurrency_sweep: List should have at least 1 item"),
    ({"logs": [EXAMPLE], "concurrency_sweep": [1, 1]}, "concurrency_sweep[1]: duplicate point (got 1)"),
    ({"logs": [Path("/nonexistent/x.jsonl")]}, "logs[0]: no such file or directory (got '/nonexistent/x.jsonl')"),
    ({}, "logs: give logs paths or a trajectories file"),
    ({"logs": [EXAMPLE], "episodes_per_point": 2, "duration_s": 5}, "duration_s: give episodes_per_point or"),
    ({"logs": [EXAMPLE], "mode": "command"}, "command: mode command needs the agent command"),
    ({"logs": [EXAMPLE], "latency": "fixed:x"}, "latency: "),
    ({"logs": [EXAMPLE], "mode": "replay"}, "mode: Input should be 'recorded', 'execute' or 'command'"),
])
def test_bad_parameters_are_named(params: dict, message: str) -> None:
    with pytest.raises(ParameterError) as info:
        validate_params(**params)
    assert message in str(info.value)


def test_cli_refuses_bad_sweep_before_prefect_starts(capsys: pytest.CaptureFixture[str]) -> None:
    from recipes.cli import main

    rc = main(["swebench-replay", "--logs", str(EXAMPLE), "--concurrency-sweep", "1,0"])
    assert rc == 2
    assert "concurrency_sweep[1]: expected a number >= 1 (got 0)" in capsys.readouterr().err
