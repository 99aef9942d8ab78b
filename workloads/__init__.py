"""Workload types (protocols) and datasets; each turns items into requests and response
bytes into token events, and never schedules (STYLE §1)."""

from typing import TYPE_CHECKING

from benchmaker.lazy_exports import lazy_getattr

# Every public name -> its module, imported on first access (PEP 562): a command or flow that
# uses one workload does not import them all (issue #15).
_EXPORTS = {
    "AgentWorkload": "workloads.agent",
    "Dataset": "workloads.datasets",
    "Item": "workloads.datasets",
    "JsonlDataset": "workloads.datasets",
    "ShareGPTDataset": "workloads.datasets",
    "StaticDataset": "workloads.datasets",
    "SyntheticDataset": "workloads.datasets",
    "DeepRAGDataset": "workloads.deeprag",
    "ChoiceGrader": "workloads.graders",
    "ContainsGrader": "workloads.graders",
    "ExactGrader": "workloads.graders",
    "JsonSchemaGrader": "workloads.graders",
    "LLMJudgeGrader": "workloads.graders",
    "NumericGrader": "workloads.graders",
    "RegexGrader": "workloads.graders",
    "HFDataset": "workloads.hf",
    "HttpWorkload": "workloads.http",
    "OpenAIChatWorkload": "workloads.openai_chat",
    "OpenAICompletionsWorkload": "workloads.openai_completions",
    "build_dataset": "workloads.registry",
    "build_workload": "workloads.registry",
    "SandboxWorkload": "workloads.sandbox",
    "SGLangWorkload": "workloads.sglang",
    "TraceReplayWorkload": "workloads.trace_replay",
    "TraceSynthDataset": "workloads.trace_synth",
    "TraceSynthWorkload": "workloads.trace_synth",
    "TrajectoryReplayWorkload": "workloads.trajectory_replay",
}

if TYPE_CHECKING:  # the names for type checkers and editors
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

__getattr__ = lazy_getattr(__name__, _EXPORTS)

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
