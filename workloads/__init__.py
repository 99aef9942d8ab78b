"""Workload types (protocols) and datasets; each turns items into requests and response
bytes into token events, and never schedules (STYLE §1)."""

from workloads.agent import AgentWorkload
from workloads.datasets import Dataset, Item, JsonlDataset, ShareGPTDataset, StaticDataset, SyntheticDataset
from workloads.deeprag import DeepRAGDataset
from workloads.graders import (
    ChoiceGrader, ContainsGrader, ExactGrader, JsonSchemaGrader, LLMJudgeGrader, NumericGrader, RegexGrader,
)
from workloads.hf import HFDataset
from workloads.http import HttpWorkload
from workloads.openai_chat import OpenAIChatWorkload
from workloads.openai_completions import OpenAICompletionsWorkload
from workloads.registry import build_dataset, build_workload
from workloads.sandbox import SandboxWorkload
from workloads.sglang import SGLangWorkload
from workloads.trace_replay import TraceReplayWorkload
from workloads.trace_synth import TraceSynthDataset, TraceSynthWorkload
from workloads.trajectory_replay import TrajectoryReplayWorkload

__all__ = [
    "AgentWorkload",
    "ChoiceGrader",
    "ContainsGrader",
    "Dataset",
    "DeepRAGDataset",
    "ExactGrader",
    "HFDataset",
    "HttpWorkload",
    "Item",
    "JsonSchemaGrader",
    "JsonlDataset",
    "LLMJudgeGrader",
    "NumericGrader",
    "OpenAIChatWorkload",
    "OpenAICompletionsWorkload",
    "RegexGrader",
    "SGLangWorkload",
    "SandboxWorkload",
    "ShareGPTDataset",
    "StaticDataset",
    "SyntheticDataset",
    "TraceReplayWorkload",
    "TraceSynthDataset",
    "TraceSynthWorkload",
    "TrajectoryReplayWorkload",
    "build_dataset",
    "build_workload",
]
