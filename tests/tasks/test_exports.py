"""`__all__` of tasks, flows, the sweep, point and shard modules is sorted and names real members."""

import importlib

import pytest


@pytest.mark.parametrize(
    "name",
    [
        "tasks",
        "flows",
        "benchmaker.sweep.sweep",
        "benchmaker.tasks.serve",
        "benchmaker.tasks.sweep",
        "benchmaker.sweep.shard",
        "benchmaker.tasks.shard",
        "benchmaker.tasks.replay_shard",
        "benchmaker.tasks.shard_runs",
        "benchmaker.flows.swebench_replay_shard",
        "benchmaker.flows.llm_sweep_shard",
        "benchmaker.tasks.distributed_point",
        "benchmaker.engine.exchange",
        "benchmaker.engine.shared_start",
        "benchmaker.flows.common",
        "benchmaker.flows.swebench_replay",
        "benchmaker.flows.llm_sweep",
        "benchmaker.sweep.point_summary",
        "benchmaker.engine.ceiling",
        "benchmaker.recipes.calibration",
        "benchmaker.sweep.point_run",
        "benchmaker.sweep.point",
        "benchmaker.workloads.agent_episode",
        "benchmaker.sweep.live",
    ],
)
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__)
    for member in module.__all__:
        assert hasattr(module, member), member
