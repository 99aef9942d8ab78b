"""ATIF trajectories (Agent Trajectory Interchange Format, the `agent/trajectory.json`
harbor writes), one trajectory per file. Source: laude-institute/harbor
docs/rfcs/0001-trajectory-format.md (ATIF v1.0-v1.5).

Root: `{"schema_version": "ATIF-v1.x", "session_id", "agent": {"name", "version",
"model_name"?, "tool_definitions"?}, "steps": [...], "final_metrics"?}`; the agent's
`tool_definitions` (ATIF v1.5+) become the trajectory's `tools` (chat_shape_tools). Steps: `source` "system" (the system
prompt in `message`), "user" (a prompt), "agent" (a turn: `message` is the content,
`reasoning_content`, `tool_calls [{tool_call_id, function_name, arguments}]`,
`observation {results: [{source_call_id, content}]}`, `metrics {prompt_tokens,
completion_tokens, cached_tokens}`, `model_name`). ATIF keeps tool arguments parsed, so
`arguments_raw` is synthesised (`arguments_raw_synthesized`). A step of another source is
skipped and counted as `step_source:<name>`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.content_parts import text_of
from benchmaker.trajectories.converters.json_reading import dict_or_empty, non_negative_int, read_json_document
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.tool_calls import chat_shape_tools, synthesized_call
from benchmaker.trajectories.trajectory import Observation, Response, Trajectory, Usage

FORMAT = "atif"


def _usage(metrics: Any) -> Usage | None:
    if not isinstance(metrics, dict):
        return None
    usage = Usage(
        prompt_tokens=non_negative_int(metrics.get("prompt_tokens")),
        completion_tokens=non_negative_int(metrics.get("completion_tokens")),
        cached_tokens=non_negative_int(metrics.get("cached_tokens")),
    )
    return None if usage == Usage() else usage


def build(doc: Any, ctx: FileContext, builder: TrajectoryBuilder) -> None:
    """Feed an ATIF document into `builder`. Raises ConvertError (`steps[i].field`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ctx.error(None, "steps", "expected an ATIF object with a `steps` list", type(doc).__name__)
    agent = dict_or_empty(doc.get("agent"))
    if isinstance(agent.get("model_name"), str):
        builder.model = agent["model_name"]
    builder.tools = chat_shape_tools(agent.get("tool_definitions"))
    for i, step in enumerate(doc["steps"]):
        where = f"steps[{i}]"
        if not isinstance(step, dict):
            raise ctx.error(None, where, "expected a step object", step)
        source = step.get("source")
        message = step.get("message", "")
        text = text_of(message, builder)
        if source == "system":
            builder.set_system(text)
        elif source == "user":
            builder.user(text)
        elif source == "agent":
            calls = []
            for j, tc in enumerate(step.get("tool_calls") or []):
                if not isinstance(tc, dict) or not isinstance(tc.get("tool_call_id"), str):
                    raise ctx.error(None, f"{where}.tool_calls[{j}].tool_call_id", "missing tool call id", tc)
                name = str(tc.get("function_name", ""))
                calls.append(synthesized_call(tc["tool_call_id"], name, tc.get("arguments", {}), builder))
            reasoning = step.get("reasoning_content")
            builder.turn(
                Response(
                    content=text,
                    reasoning=reasoning if isinstance(reasoning, str) else None,
                    tool_calls=calls,
                    finish_reason="tool_calls" if calls else "stop",
                ),
                usage=_usage(step.get("metrics")),
                model=step.get("model_name") if isinstance(step.get("model_name"), str) else None,
            )
            obs = step.get("observation")
            for res in obs.get("results", []) if isinstance(obs, dict) else []:
                if not isinstance(res, dict):
                    continue
                builder.observation(
                    Observation(
                        tool_call_id=res.get("source_call_id") if isinstance(res.get("source_call_id"), str) else None,
                        content=text_of(res.get("content"), builder),
                    )
                )
        else:
            builder.skip(f"step_source:{source}")  # a source this converter does not read


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the one Trajectory of an ATIF file. Raises ConvertError."""
    builder = TrajectoryBuilder(ctx, FORMAT)
    build(read_json_document(ctx), ctx, builder)
    yield builder.build(0)
