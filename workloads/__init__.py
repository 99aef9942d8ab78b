"""Workload types (protocols) and datasets; each turns items into requests and response
bytes into token events, and never schedules (STYLE §1)."""

from workloads.datasets import Dataset, Item, JsonlDataset, ShareGPTDataset, StaticDataset, SyntheticDataset
from workloads.http import HttpWorkload
from workloads.openai_chat import OpenAIChatWorkload
from workloads.openai_completions import OpenAICompletionsWorkload
from workloads.registry import build_dataset, build_workload

__all__ = [
    "Dataset",
    "HttpWorkload",
    "Item",
    "JsonlDataset",
    "OpenAIChatWorkload",
    "OpenAICompletionsWorkload",
    "ShareGPTDataset",
    "StaticDataset",
    "SyntheticDataset",
    "build_dataset",
    "build_workload",
]
