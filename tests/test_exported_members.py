"""Each package's `__all__` is sorted and names only what the package really exports."""

import importlib

import pytest


@pytest.mark.parametrize("name", ["benchmaker", "workloads", "warehouse"])
def test_all_is_sorted_and_importable(name):
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__)
    for member in module.__all__:
        assert hasattr(module, member), member


def test_the_tour_imports():
    from benchmaker import BenchConfig, BenchRunner, OpenAIChatWorkload, SyntheticDataset  # noqa: F401
