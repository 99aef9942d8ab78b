"""prefect.yaml: an ad-hoc deployment's stored parameters hold for any recording, so
`prefect deployment run swebench-replay/adhoc --param logs='[...]'` never replays other
recordings against the bundled example's task."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
OTHER = REPO / "tests" / "replay" / "fixtures" / "pi_v3_tree.jsonl"


def _deployments() -> list[dict]:
    return yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]


def test_adhoc_replay_deployment_carries_nothing_of_the_example_task() -> None:
    (adhoc,) = [d for d in _deployments() if d["flow_name"] == "swebench-replay" and d["name"] == "adhoc"]
    params = adhoc["parameters"]
    assert params.get("mode", "recorded") == "recorded" and "task_dirs" not in params and "command" not in params


def test_overriding_logs_of_the_adhoc_deployment_gives_valid_parameters(monkeypatch) -> None:
    from benchmaker.flows.swebench_replay import validate_params

    monkeypatch.chdir(REPO)  # relative paths are relative to the checkout (the pull step)
    (adhoc,) = [d for d in _deployments() if d["flow_name"] == "swebench-replay" and d["name"] == "adhoc"]
    # what `--param logs='["<other recording>"]'` leaves: the stored parameters, logs replaced
    p = validate_params(**{**adhoc["parameters"], "logs": [os.fspath(OTHER)]})
    assert (p.mode, p.task_dirs, p.logs) == ("recorded", [], [OTHER])
