"""`stray_grace_s` (command mode: seconds a diverged agent may take to exit before its
process group is killed) is validated once at the edge, by the swebench-replay parameters
model (the YAML key of a deployment) and the CLI's `--stray-grace`, and every point of
the run carries it (benchmaker.sweep.point.ReplayPoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmaker.agent.harness import STRAY_GRACE_S
from benchmaker.flows.swebench_replay import ParameterError, validate_params

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"
COMMAND = {"logs": [EXAMPLE], "mode": "command", "command": ["python3", "agent.py"], "concurrency_sweep": [1, 4]}


def test_every_point_carries_the_grace() -> None:
    p = validate_params(**COMMAND, stray_grace_s=7.5)
    assert [(q.name, q.stray_grace_s) for q in p.points()] == [("c1", 7.5), ("c4", 7.5)]
    p = validate_params(**COMMAND)
    assert p.stray_grace_s is None
    assert [q.stray_grace_s for q in p.points()] == [STRAY_GRACE_S, STRAY_GRACE_S] == [2.0, 2.0]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({**COMMAND, "stray_grace_s": 0}, "stray_grace_s: expected a number > 0.0 (got 0)"),
        ({**COMMAND, "stray_grace_s": -1.5}, "stray_grace_s: expected a number > 0.0 (got -1.5)"),
        ({**COMMAND, "stray_grace_s": float("inf")}, "stray_grace_s: Input should be a finite number"),
        ({**COMMAND, "stray_grace_s": 3601}, "stray_grace_s: Input should be less than or equal to 3600 (got 3601)"),
        ({**COMMAND, "stray_grace_s": "soon"}, "stray_grace_s: Input should be a valid number"),
        (
            {"logs": [EXAMPLE], "stray_grace_s": 5},
            "stray_grace_s: a setting of mode command (got 5 with mode recorded)",
        ),
    ],
)
def test_a_bad_grace_is_named(params: dict, message: str) -> None:
    with pytest.raises(ParameterError) as info:
        validate_params(**params)
    assert message in str(info.value)


def test_cli_flag_is_checked_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmaker.recipes.cli import main

    base = ["swebench-replay", "--logs", str(EXAMPLE), "--dry-run"]
    assert main([*base, "--stray-grace", "5"]) == 2
    assert capsys.readouterr().err == (
        "benchmaker: error: --stray-grace: a setting of mode command (got 5 with mode recorded)\n"
    )
    rc = main([*base, "--mode", "command", "--command", "python3 agent.py", "--stray-grace", "0"])
    assert rc == 2
    assert "--stray-grace" in capsys.readouterr().err
