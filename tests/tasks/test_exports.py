"""`__all__` of tasks, flows, the sweep, point and shard modules is sorted and names real members."""

import importlib

import pytest


@pytest.mark.parametrize("name", [
    "tasks", "flows", "replay.sweep", "tasks.serve", "tasks.sweep", "replay.shard", "tasks.shard",
    "tasks.replay_shard", "flows.shard_runs", "flows.swebench_replay_distributed", "flows.llm_sweep_distributed",
    "benchmaker.exchange", "benchmaker.shared_start", "flows.common", "flows.swebench_replay", "flows.llm_sweep",
    "replay.point_summary", "benchmaker.ceiling", "benchmaker.calibrate", "replay.point_run",
    "workloads.agent_episode", "replay.live",
])
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__)
    for member in module.__all__:
        assert hasattr(module, member), member
