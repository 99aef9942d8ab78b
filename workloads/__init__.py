"""Workload types (protocols) and datasets; each turns items into requests and response
bytes into token events, and never schedules (the engine's load model does)."""

from typing import TYPE_CHECKING

from benchmaker.lazy_exports import lazy_getattr

# Every public name -> its module, imported on first access (PEP 562): a command or flow that
# uses one workload does not import them all.
_EXPORTS = {
    "AgentWorkload": "benchmaker.workloads.agent",
    "Dataset": "benchmaker.workloads.datasets",
    "Item": "benchmaker.workloads.datasets",
    "JsonlDataset": "benchmaker.workloads.datasets",
    "ShareGPTDataset": "benchmaker.workloads.datasets",
    "StaticDataset": "benchmaker.workloads.datasets",
    "SyntheticDataset": "benchmaker.workloads.datasets",
    "DeepRAGDataset": "benchmaker.workloads.deeprag",
    "ChoiceGrader": "benchmaker.workloads.graders",
    "ContainsGrader": "benchmaker.workloads.graders",
    "ExactGrader": "benchmaker.workloads.graders",
    "JsonSchemaGrader": "benchmaker.workloads.graders",
    "LLMJudgeGrader": "benchmaker.workloads.graders",
    "NumericGrader": "benchmaker.workloads.graders",
    "RegexGrader": "benchmaker.workloads.graders",
    "HFDataset": "benchmaker.workloads.hf",
    "HttpWorkload": "benchmaker.workloads.http",
    "OpenAIChatWorkload": "benchmaker.workloads.openai_chat",
    "OpenAICompletionsWorkload": "benchmaker.workloads.openai_completions",
    "OpenAIResponsesWorkload": "benchmaker.workloads.openai_responses",
    "build_dataset": "benchmaker.workloads.registry",
    "build_workload": "benchmaker.workloads.registry",
    "SandboxWorkload": "benchmaker.workloads.sandbox",
    "SGLangWorkload": "benchmaker.workloads.sglang",
    "TraceReplayWorkload": "benchmaker.workloads.trace_replay",
    "TraceSynthDataset": "benchmaker.workloads.trace_synth",
    "TraceSynthWorkload": "benchmaker.workloads.trace_synth",
    "TrajectoryReplayWorkload": "benchmaker.workloads.trajectory_replay",
}

if TYPE_CHECKING:  # the names for type checkers and editors
    from benchmaker.workloads.agent import AgentWorkload
    from benchmaker.workloads.datasets import (
        Dataset,
        Item,
        JsonlDataset,
        ShareGPTDataset,
        StaticDataset,
        SyntheticDataset,
    )
    from benchmaker.workloads.deeprag import DeepRAGDataset
    from benchmaker.workloads.graders import (
        ChoiceGrader,
        ContainsGrader,
        ExactGrader,
        JsonSchemaGrader,
        LLMJudgeGrader,
        NumericGrader,
        RegexGrader,
    )
    from benchmaker.workloads.hf import HFDataset
    from benchmaker.workloads.http import HttpWorkload
    from benchmaker.workloads.openai_chat import OpenAIChatWorkload
    from benchmaker.workloads.openai_completions import OpenAICompletionsWorkload
    from benchmaker.workloads.openai_responses import OpenAIResponsesWorkload
    from benchmaker.workloads.registry import build_dataset, build_workload
    from benchmaker.workloads.sandbox import SandboxWorkload
    from benchmaker.workloads.sglang import SGLangWorkload
    from benchmaker.workloads.trace_replay import TraceReplayWorkload
    from benchmaker.workloads.trace_synth import TraceSynthDataset, TraceSynthWorkload
    from benchmaker.workloads.trajectory_replay import TrajectoryReplayWorkload

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
    "OpenAIResponsesWorkload",
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
