"""Workload and dataset specs as they appear in YAML configs, and their builders.

    workload:
      type: openai-chat            # http | openai-chat | openai-completions | sglang
      api: chat                    # openai-chat only: chat | responses | messages (Anthropic)
      url: http://127.0.0.1:8000/v1/chat/completions
      model: m
      api_key: ${OPENAI_API_KEY:-}
      max_tokens: 64
      ignore_eos: true             # vLLM/SGLang (every api): run on past EOS up to max_tokens
      dataset: {type: synthetic, input_words: [128, 512], count: 100, seed: 1}

Datasets: `{type: jsonl, path, field, reference_field}`, `{type: sharegpt, path}`,
`{type: synthetic, input_words, count, seed}`, `{type: static, items: [...]}`,
`{type: deeprag, path, depth, context_tokens_target, passthrough_meta, tokenizer}`.
Relative dataset paths are resolved against the config file's folder. Unknown keys are
rejected by pydantic naming the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmaker.engine.config import HttpUrlText, OptionalHttpUrl
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.types import CallableWorkload, Workload
from benchmaker.workloads.agent import AgentWorkload, load_agent_class
from benchmaker.workloads.anthropic_messages import AnthropicMessagesWorkload
from benchmaker.workloads.datasets import Dataset, JsonlDataset, ShareGPTDataset, StaticDataset, SyntheticDataset
from benchmaker.workloads.deeprag import DeepRAGDataset
from benchmaker.workloads.hf import HFDataset
from benchmaker.workloads.http import HttpWorkload
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from benchmaker.workloads.openai_completions import OpenAICompletionsWorkload
from benchmaker.workloads.openai_responses import OpenAIResponsesWorkload
from benchmaker.workloads.sandbox import SandboxWorkload
from benchmaker.workloads.sglang import SGLangWorkload, read_input_ids
from benchmaker.workloads.trace_replay import TraceReplayWorkload
from benchmaker.workloads.trace_synth import TraceSynthDataset, TraceSynthWorkload
from benchmaker.workloads.trajectory_replay import TrajectoryReplayWorkload, parse_think, read_conversations

__all__ = ["DatasetSpec", "WorkloadSpec", "build_dataset", "build_workload"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JsonlSpec(_Strict):
    type: Literal["jsonl"]
    path: Path
    field: str = "prompt"
    reference_field: str | None = None


class ShareGPTSpec(_Strict):
    type: Literal["sharegpt"]
    path: Path


class SyntheticSpec(_Strict):
    type: Literal["synthetic"]
    input_words: int | list[int] = 128
    count: int = 100
    seed: int = 0


class StaticSpec(_Strict):
    type: Literal["static"]
    items: list[Any]


class HFSpec(_Strict):
    """A HuggingFace dataset (workloads/hf.py; extra `benchmaker[hf]`): a local
    directory (save_to_disk output or data files) or a Hub name."""

    type: Literal["hf"]
    path: str
    split: str = "train"
    field: str = "prompt"
    reference_field: str | None = None
    name: str | None = None
    limit: int | None = Field(default=None, ge=1)


class DeepRAGSpec(_Strict):
    type: Literal["deeprag"]
    path: Path
    depth: int = Field(default=4, ge=1)
    context_tokens_target: int | None = Field(default=None, ge=1)
    passthrough_meta: list[str] = Field(default_factory=list)
    tokenizer: Path | None = None


DatasetSpec = Annotated[
    JsonlSpec | ShareGPTSpec | SyntheticSpec | StaticSpec | HFSpec | DeepRAGSpec, Field(discriminator="type")
]


class HttpSpec(_Strict):
    type: Literal["http"]
    url: HttpUrlText
    method: str = "GET"
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = None
    expected_status: int | list[int] = 200


class _Endpoint(_Strict):
    url: HttpUrlText
    stream: bool = True
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class _LLMSpec(_Endpoint):
    model: str
    dataset: DatasetSpec = Field(default_factory=lambda: SyntheticSpec(type="synthetic"))
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    ignore_eos: bool = False
    include_usage: bool = True


class OpenAIChatSpec(_LLMSpec):
    """An LLM endpoint's chat-style API: `api` chat (OpenAI /v1/chat/completions),
    responses (OpenAI /v1/responses; workloads/openai_responses.py) or messages (Anthropic
    /v1/messages, max_tokens required); the same prompts in each."""

    type: Literal["openai-chat"]
    api: Literal["chat", "responses", "messages"] = "chat"


class OpenAICompletionsSpec(_LLMSpec):
    type: Literal["openai-completions"]


class SandboxSpec(_Strict):
    """A command in a sandbox per sample (workloads/sandbox.py): `exec` on one sandbox
    or the create -> exec -> delete `lifecycle`; `local` subprocesses or `flash`."""

    type: Literal["sandbox"]
    command: str
    target: Literal["local", "flash"] = "local"
    mode: Literal["exec", "lifecycle"] = "exec"
    url: OptionalHttpUrl = None
    sandbox_id: str | None = None
    image: str | None = None
    sandbox_type: str = ""
    template: str | None = None
    memory_mb: int = Field(default=512, ge=1)
    cpu_cores: float = Field(default=1.0, gt=0)
    api_key: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    repo: Path | None = None


class AgentSpec(_Strict):
    """A user-defined agent class (workloads/agent.py): `class: module:Class` with
    `async def run_episode(self, episode_index, client) -> dict`; one episode per sample."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["agent"]
    class_: str = Field(alias="class")
    url: OptionalHttpUrl = None
    model: str | None = None
    api_key: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = Field(default=600.0, gt=0)


class SGLangSpec(_Endpoint):
    """SGLang native `/generate` (workloads/sglang.py): text prompts from `dataset`, or
    token ids from `input_ids` (inline lists) or `input_ids_file` (JSONL)."""

    type: Literal["sglang"]
    dataset: DatasetSpec | None = None
    input_ids: list[list[int]] | None = None
    input_ids_file: Path | None = None
    max_new_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    sampling_params: dict[str, Any] = Field(default_factory=dict)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    incremental: bool = False


class TraceReplaySpec(_Strict):
    """`{type: trace-replay, path, url, api_key, headers}`: the requests of a recorded
    trace (`--record-trace`), with `load: trace:PATH[:SPEEDUP]` (workloads/trace_replay.py)."""

    type: Literal["trace-replay"]
    path: Path
    url: OptionalHttpUrl = None
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class TraceSynthSpec(_Endpoint):
    """`{type: trace-synth, url, model, path, order, seed, api}`: TraceLab-style token-count
    rows as byte-exact growing prompts, max_tokens = each row's output count
    (workloads/trace_synth.py)."""

    type: Literal["trace-synth"]
    model: str
    path: Path
    order: Literal["contiguous", "round-robin", "shuffled"] = "contiguous"
    seed: int | str = 0
    api: Literal["completions", "chat"] = "completions"


class TrajectoryReplaySpec(_Endpoint):
    """`{type: trajectory-replay, url, model, path, concurrency, sessions, active_sessions,
    think, seed, ...}`: prefix-cache replay of conversations (workloads/trajectory_replay.py).
    Its lane must run `closed:<concurrency>` (checked by the run file)."""

    type: Literal["trajectory-replay"]
    model: str
    path: Path
    concurrency: int = Field(ge=1)
    sessions: Literal["contiguous", "interleaved"] = "contiguous"
    active_sessions: int | None = Field(default=None, ge=1)
    think: str | None = None
    seed: int = 0
    tokenizer: Path | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None


WorkloadSpec = Annotated[
    HttpSpec
    | TraceReplaySpec
    | OpenAIChatSpec
    | OpenAICompletionsSpec
    | SandboxSpec
    | AgentSpec
    | SGLangSpec
    | TraceSynthSpec
    | TrajectoryReplaySpec,
    Field(discriminator="type"),
]


def _resolve(path: Path, base_dir: Path | None) -> Path:
    return path if path.is_absolute() or base_dir is None else base_dir / path


def _kwargs(spec: BaseModel, *names: str) -> dict[str, Any]:
    """The spec's fields as keyword arguments of the object it builds (the constructors
    take the spec's field names), without `type` and `names`; `api_key` "" (an unset
    `${VAR:-}`) as None."""
    kwargs = spec.model_dump(exclude={"type", *names})
    if "api_key" in kwargs:
        kwargs["api_key"] = kwargs["api_key"] or None
    return kwargs


def build_dataset(spec: Any, base_dir: Path | None = None) -> Dataset:
    """Dataset object of a DatasetSpec; relative paths resolve against `base_dir`.
    Raises DatasetError (a ConfigError) naming the file and line of a bad row."""
    if isinstance(spec, JsonlSpec):
        return JsonlDataset(_resolve(spec.path, base_dir), spec.field, reference_field=spec.reference_field)
    if isinstance(spec, ShareGPTSpec):
        return ShareGPTDataset(_resolve(spec.path, base_dir))
    if isinstance(spec, SyntheticSpec):
        return SyntheticDataset(spec.input_words, count=spec.count, seed=spec.seed)
    if isinstance(spec, DeepRAGSpec):
        return DeepRAGDataset(
            _resolve(spec.path, base_dir),
            **_kwargs(spec, "path", "tokenizer"),
            tokenizer=_resolve(spec.tokenizer, base_dir) if spec.tokenizer else None,
        )
    if isinstance(spec, HFSpec):
        local = _resolve(Path(spec.path), base_dir)
        return HFDataset(str(local) if local.exists() else spec.path, **_kwargs(spec, "path"))
    return StaticDataset(spec.items)


def build_workload(spec: Any, base_dir: Path | None = None) -> Workload | CallableWorkload:
    """Workload object of a WorkloadSpec (see module docstring)."""
    if isinstance(spec, HttpSpec):
        return HttpWorkload(spec.url, spec.method, spec.headers, spec.body, spec.expected_status)
    if isinstance(spec, TraceReplaySpec):
        return TraceReplayWorkload(_resolve(spec.path, base_dir), **_kwargs(spec, "path"))
    if isinstance(spec, SandboxSpec):
        repo = _resolve(spec.repo, base_dir) if spec.repo is not None else None
        try:
            return SandboxWorkload(spec.command, **_kwargs(spec, "command", "repo"), repo=repo)
        except ValueError as exc:
            raise ConfigError(f"workload (sandbox): {exc}") from None
    if isinstance(spec, AgentSpec):
        agent = load_agent_class(spec.class_, base_dir)
        return AgentWorkload(agent, **_kwargs(spec, "class_"))
    if isinstance(spec, SGLangSpec):
        return _build_sglang(spec, base_dir)
    if isinstance(spec, TrajectoryReplaySpec):
        return TrajectoryReplayWorkload(
            spec.url,
            spec.model,
            read_conversations(_resolve(spec.path, base_dir)),
            **_kwargs(spec, "url", "model", "path", "think", "tokenizer"),
            think=parse_think(spec.think),
            tokenizer=_resolve(spec.tokenizer, base_dir) if spec.tokenizer else None,
        )
    if isinstance(spec, TraceSynthSpec):
        dataset = TraceSynthDataset(_resolve(spec.path, base_dir), order=spec.order, seed=spec.seed)
        return TraceSynthWorkload(
            spec.url, spec.model, dataset, **_kwargs(spec, "url", "model", "path", "order", "seed")
        )
    cls: type[OpenAIChatWorkload] = OpenAICompletionsWorkload
    if isinstance(spec, OpenAIChatSpec):
        by_api: dict[str, type[OpenAIChatWorkload]] = {
            "responses": OpenAIResponsesWorkload,
            "messages": AnthropicMessagesWorkload,
        }
        cls = by_api.get(spec.api, OpenAIChatWorkload)
    kwargs = _kwargs(spec, "url", "model", "dataset", "api")
    return cls(spec.url, spec.model, build_dataset(spec.dataset, base_dir), **kwargs)


def _build_sglang(spec: SGLangSpec, base_dir: Path | None) -> SGLangWorkload:
    """SGLangWorkload of a spec; at most one of dataset, input_ids, input_ids_file (none:
    the default synthetic dataset). Raises ConfigError/DatasetError."""
    given = [k for k in ("dataset", "input_ids", "input_ids_file") if getattr(spec, k) is not None]
    if len(given) > 1:
        raise ConfigError(f"sglang: give at most one of dataset, input_ids, input_ids_file (got {', '.join(given)})")
    ids = spec.input_ids
    if spec.input_ids_file is not None:
        ids = read_input_ids(_resolve(spec.input_ids_file, base_dir))
    dataset = None
    if ids is None:
        dataset = build_dataset(spec.dataset or SyntheticSpec(type="synthetic"), base_dir)
    kwargs = _kwargs(spec, "url", "dataset", "input_ids", "input_ids_file")
    return SGLangWorkload(spec.url, dataset, input_ids=ids, **kwargs)
