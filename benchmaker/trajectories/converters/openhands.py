"""OpenHands event lists and evaluation output. Source: All-Hands-AI/OpenHands
openhands/events/serialization and evaluation/benchmarks/swe_bench/run_infer.py
(`EvalOutput`).

One turn per model response (the actions sharing
`tool_call_metadata.model_response.id`), built from that OpenAI chat-completion
response; a `condensation` action is a ContextEdit on the next turn
(openhands/memory/view.py `View.from_events`). SDK events (objects with a `kind`) are
read by `openhands_sdk`. What each record becomes: docs/log-formats.md#openhands.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.content_parts import text_of
from benchmaker.trajectories.converters.json_reading import (
    dict_or_empty,
    first_byte,
    first_jsonl_objects,
    is_one_multiline_document,
    iter_jsonl,
    iter_rows,
    read_json_document,
)
from benchmaker.trajectories.converters.openai_messages import finish_reason_of, reasoning_of
from benchmaker.trajectories.converters.openhands_sdk import CondensedView, feed_sdk_events, is_sdk_events
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.converters.tool_calls import tool_call_from_openai
from benchmaker.trajectories.converters.usage import openai_usage
from benchmaker.trajectories.trajectory import Observation, RecordedOutcome, Response, Trajectory

FORMAT = "openhands"


def forgotten_ids(args: dict[str, Any], seen: list[object]) -> list[object] | None:
    """The event ids a legacy `CondensationAction` forgets among the events `seen` so far:
    `forgotten_event_ids`, else those in the range `forgotten_events_start_id..
    forgotten_events_end_id` (inclusive: event ids increase); None when neither is
    given. Ids that are not strings or integers are left out."""
    ids = args.get("forgotten_event_ids")
    if isinstance(ids, list):
        return [i for i in ids if isinstance(i, str | int) and not isinstance(i, bool)]
    start, end = args.get("forgotten_events_start_id"), args.get("forgotten_events_end_id")
    if isinstance(start, int) and isinstance(end, int):
        return [i for i in seen if isinstance(i, int) and start <= i <= end]
    return None


def _turn_from_response(mr: Any, builder: TrajectoryBuilder, ctx: FileContext, where: str, line: int | None) -> None:
    choices = mr.get("choices") if isinstance(mr, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ctx.error(line, f"{where}.choices", "expected a non-empty list", choices)
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise ctx.error(line, f"{where}.choices[0].message", "expected an object", msg)
    raw_calls = msg.get("tool_calls") or []
    calls = [
        tool_call_from_openai(tc, builder, f"{where}.choices[0].message.tool_calls[{j}]", ctx, line)
        for j, tc in enumerate(raw_calls)
    ]
    finish = choices[0].get("finish_reason")
    finish_reason = finish_reason_of(finish, bool(calls), ctx, line, f"{where}.choices[0].finish_reason")
    content = msg.get("content")
    builder.turn(
        Response(
            content=content if content is None or isinstance(content, str) else text_of(content, builder),
            reasoning=reasoning_of(msg),
            tool_calls=calls,
            finish_reason=finish_reason,
        ),
        usage=openai_usage(mr.get("usage")),
        model=mr.get("model") if isinstance(mr.get("model"), str) else None,
    )


def _events_trajectory(
    events: Any, ctx: FileContext, line: int | None, index: int, prefix: str = "", record: dict[str, Any] | None = None
) -> Trajectory:
    if not isinstance(events, list):
        raise ctx.error(line, prefix.rstrip(".") or None, "expected a JSON array of events", events)
    builder = TrajectoryBuilder(ctx, FORMAT)
    if is_sdk_events(events):
        feed_sdk_events(events, builder, ctx, line, prefix)
        return _finish(builder, ctx, line, index, record)
    view = CondensedView(builder)
    current_response_id: object = None
    response_event: object = None  # the event whose turn holds the current model response
    for i, ev in enumerate(events):
        where = f"{prefix}[{i}]"
        if not isinstance(ev, dict):
            raise ctx.error(line, where, "expected an event object", ev)
        tcm = ev.get("tool_call_metadata")
        args = dict_or_empty(ev.get("args"))
        event_id = ev.get("id")
        if not isinstance(event_id, str | int) or isinstance(event_id, bool):
            event_id = ("index", i)  # no usable id: nothing can name this event
        if "action" in ev:
            action = ev["action"]
            if action == "condensation":
                forgotten = forgotten_ids(args, [e for e, _ in view.events])
                if forgotten is None:
                    builder.skip("condensation_without_forgotten_events")
                    forgotten = []
                view.forget([*forgotten, event_id], args.get("summary"), args.get("summary_offset"))
            elif action == "condensation_request":
                view.forgotten.add(event_id)  # View drops it; it is no message
                builder.skip("action:condensation_request")
            elif isinstance(tcm, dict) and isinstance(tcm.get("model_response"), dict):
                mr = tcm["model_response"]
                rid = mr.get("id")
                if rid is None or rid != current_response_id:
                    view.add(
                        event_id,
                        True,
                        lambda mr=mr, where=where: _turn_from_response(
                            mr, builder, ctx, f"{where}.tool_call_metadata.model_response", line
                        ),
                    )
                    current_response_id, response_event = rid, event_id
                else:
                    view.add(event_id, True, same_as=response_event)
            elif action == "message" and ev.get("source") == "user":
                view.add(
                    event_id,
                    True,
                    lambda args=args, ev=ev: builder.user(text_of(args.get("content", ev.get("message", "")), builder)),
                )
            elif action == "system":
                builder.set_system(text_of(args.get("content", ""), builder))
                view.add(event_id, True)
            elif action == "message" and ev.get("source") == "agent":
                view.add(
                    event_id,
                    True,
                    lambda args=args, ev=ev: builder.turn(
                        Response(content=args.get("content", ev.get("message")), finish_reason="stop")
                    ),
                )
                builder.skip("agent_message_without_model_response")
                current_response_id = None
            else:
                builder.skip(f"action:{action}")
                view.add(event_id, True)
        elif "observation" in ev:
            kind = ev["observation"]
            if isinstance(tcm, dict) and isinstance(tcm.get("tool_call_id"), str):
                extras = dict_or_empty(ev.get("extras"))
                code = extras.get("exit_code")
                obs = Observation(
                    tool_call_id=tcm["tool_call_id"],
                    name=tcm.get("function_name"),
                    content=text_of(ev.get("content", ""), builder),
                    is_error=kind == "error",
                    exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                )
                view.add(event_id, True, lambda obs=obs: builder.observation(obs))
            elif kind == "condense" and isinstance(ev.get("content"), str):  # a stored AgentCondensationObservation
                view.add(event_id, True, lambda ev=ev: builder.user(ev["content"]))
            else:
                builder.skip(f"observation:{kind}")
                view.add(event_id, True)
        else:
            builder.skip("event_without_action_or_observation")
    return _finish(builder, ctx, line, index, record)


def _finish(
    builder: TrajectoryBuilder, ctx: FileContext, line: int | None, index: int, record: dict[str, Any] | None
) -> Trajectory:
    if record is None:
        return builder.build(index, line=line)
    metadata = dict_or_empty(record.get("metadata"))
    llm = dict_or_empty(metadata.get("llm_config"))
    if not llm and isinstance(metadata.get("llm"), dict):  # SDK benchmarks: `metadata.llm` (an LLM)
        llm = metadata["llm"]
    if builder.model is None and isinstance(llm.get("model"), str):
        builder.model = llm["model"]
    test_result = dict_or_empty(record.get("test_result"))
    patch = test_result.get("git_patch")
    task_id = record.get("instance_id")
    error = record.get("error")
    return builder.build(
        index,
        line=line,
        task_id=str(task_id) if isinstance(task_id, str | int) and not isinstance(task_id, bool) else None,
        outcome=RecordedOutcome(
            patch=patch if isinstance(patch, str) else None,
            exit_status=error if isinstance(error, str) and error else None,
        ),
    )


def is_eval_record(obj: Any) -> bool:
    """An OpenHands evaluation output record: an object whose `history` is a list of
    events (objects with `action` or `observation` and no chat `role`: SWE-agent history
    messages carry an `action` field too; or SDK events, `openhands_sdk.is_sdk_events`)."""
    history = obj.get("history") if isinstance(obj, dict) else None
    return (
        isinstance(history, list)
        and bool(history)
        and all(isinstance(e, dict) and "role" not in e for e in history)
        and (any("action" in e or "observation" in e for e in history) or is_sdk_events(history))
    )


def convert(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the Trajectories of an OpenHands event list (one), evaluation record (one)
    or evaluation output.jsonl (one per line), see docs/log-formats.md#openhands. Raises
    ConvertError (`path:line: history[i].field: problem`, i = index in the event list);
    with `ctx.lenient` a bad output.jsonl line is skipped and counted as `bad_row`."""
    lead = first_byte(ctx.head)
    if lead == ord("["):
        yield _events_trajectory(read_json_document(ctx), ctx, None, 0)
        return
    if is_sdk_events(first_jsonl_objects(ctx.head, 1)):  # SDK events, one per line
        yield _events_trajectory([e for _, e in iter_jsonl(ctx)], ctx, None, 0)
        return
    if lead == ord("{") and is_one_multiline_document(ctx.head):
        doc = read_json_document(ctx)
        yield _events_trajectory(doc.get("history") if isinstance(doc, dict) else doc, ctx, None, 0, "history", doc)
        return
    yield from iter_rows(ctx, lambda row, line, index: _row(row, ctx, line, index))


def _row(row: Any, ctx: FileContext, line: int, index: int) -> Trajectory:
    if not isinstance(row, dict):
        raise ctx.error(line, None, "expected an evaluation output object with `history`", row)
    return _events_trajectory(row.get("history"), ctx, line, index, "history", row)
