"""`benchmaker swebench-replay --logs` converts the logs once per run: the CLI converts
them into the content-addressed cache before Prefect starts (to refuse bad logs and
print the plan) and hands the flow that file. Counted for real: every call of
benchmaker.trajectories.convert.convert_paths (the one converter entry point, wherever
it is called from) in real CLI runs of the flow on one Prefect harness; and a flow run
as a deployment starts it (no CLI) converts in its task, into the same one cache (the
file; Prefect keeps no result record of the conversion)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from tests.flows._verdict import run_flow
from tests.flows.test_swebench_replay_flow import _task_runs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
PI_TREE = REPO / "tests" / "replay" / "fixtures" / "pi_v3_tree.jsonl"

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.usefixtures("prefect_harness"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.fixture
def conversions(monkeypatch) -> list[list[str]]:
    """The file names given to each convert_paths call from now on, in call order."""
    import benchmaker.tasks.convert
    import benchmaker.trajectories.convert

    real, calls = benchmaker.trajectories.convert.convert_paths, []

    def counted(paths, out, **kw):
        calls.append([Path(p).name for p in paths])
        return real(paths, out, **kw)

    for module in (benchmaker.trajectories.convert, benchmaker.tasks.convert):
        monkeypatch.setattr(module, "convert_paths", counted)
    return calls


def test_a_cli_run_converts_each_log_once_and_a_second_run_none(tmp_path: Path, conversions, capsys) -> None:
    from benchmaker.recipes.cli import main

    logs = tmp_path / "logs"
    logs.mkdir()
    a, b = shutil.copy(EXAMPLE, logs / "a.pi.jsonl"), shutil.copy(PI_TREE, logs / "b.pi.jsonl")
    out = tmp_path / "artifacts"
    argv = [
        "swebench-replay",
        "--logs",
        str(a),
        str(b),
        "--concurrency",
        "1",
        "--out-dir",
        str(out),
        "--warehouse",
        str(tmp_path / "wh.duckdb"),
    ]
    assert main(argv) in (0, 1)  # 1: a point invalid for loop lag alone on a loaded host
    assert conversions == [["a.pi.jsonl", "b.pi.jsonl"]]  # the CLI's one conversion
    (cached,) = (out / "_cache" / "convert").glob("*/trajectories.jsonl")
    (bundle,) = (d for d in out.iterdir() if d.is_dir() and d.name != "_cache")
    config = json.loads((bundle / "manifest.json").read_text())["config"]
    assert (config["logs"], config["trajectories"]) == ([], str(cached))  # the flow replayed the CLI's file
    assert capsys.readouterr().out.startswith(
        "plan: 1 sweep point(s) x 2 trajectory(ies) (4-4 model calls each, 8 in all)"
    )
    assert main(argv) in (0, 1)
    assert len(conversions) == 1  # the second run: none
    bundles = sorted(d for d in out.iterdir() if d.is_dir() and d.name != "_cache")
    assert len(bundles) == 2

    # an option or a log changed: converted again (into another file), once
    assert main([*argv, "--lenient", "--dry-run"]) == 0
    assert main([*argv, "--format", "pi-session", "--dry-run"]) == 0
    assert len(conversions) == 3
    b.write_bytes(PI_TREE.read_bytes() + b"\n")  # one more (blank) line: other bytes, the same trajectory
    assert main([*argv, "--dry-run"]) == 0
    assert len(conversions) == 4
    assert len(list((out / "_cache" / "convert").glob("*/trajectories.jsonl"))) == 4
    assert cached.is_file()


def test_a_deployment_run_converts_in_the_task_and_a_second_run_finds_the_file(tmp_path: Path, conversions) -> None:
    from benchmaker.flows.swebench_replay import swebench_replay

    kw = dict(logs=[EXAMPLE], concurrency_sweep=[1], out_dir=tmp_path / "artifacts", warehouse=tmp_path / "wh.duckdb")
    first = asyncio.run(run_flow(swebench_replay, **kw))  # as `prefect deployment run` starts it: no CLI
    assert conversions == [["tiny-task.pi.jsonl"]]
    assert _task_runs(first["flow_run_id"])["convert-logs"][0].state.name == "Completed"
    second = asyncio.run(run_flow(swebench_replay, **kw))
    assert len(conversions) == 1  # the task ran (no Prefect cache) and found the complete file
    assert _task_runs(second["flow_run_id"])["convert-logs"][0].state.name == "Completed"
    assert second["trajectories"] == first["trajectories"]
    (cached,) = (tmp_path / "artifacts" / "_cache" / "convert").glob("*/trajectories.jsonl")
    assert first["trajectories"] == str(cached)  # one cached artifact: the file
