"""harbor job outputs (laude-institute/harbor), one trajectory per trial. Source: harbor
src/harbor/models/trial/paths.py (`TrialPaths`) and models/trial/result.py
(`TrialResult`).

A trial's agent log is converted by its own converter (a native log before ATIF) and the
trial's result adds task id, reward, resolved and model. What each record becomes:
docs/log-formats.md#harbor-trial-and-harbor-jsonl.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from benchmaker.trajectories.converters.builder import TrajectoryBuilder
from benchmaker.trajectories.converters.json_reading import iter_jsonl
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.errors import ConvertError
from benchmaker.trajectories.trajectory import RecordedOutcome, Trajectory

FORMAT_TRIAL = "harbor-trial"
FORMAT_JSONL = "harbor-jsonl"

# Native agent logs first: ATIF keeps tool arguments parsed only.
_AGENT_LOG_PRIORITY = ("pi-session", "pi-events", "openhands", "swe-agent", "mini-swe-agent", "openai-messages", "atif")


def is_trial_dir(path: Path) -> bool:
    """A harbor trial directory: `result.json` beside an `agent/` or `verifier/` dir."""
    return (path / "result.json").is_file() and ((path / "agent").is_dir() or (path / "verifier").is_dir())


def is_meta_record(obj: Any) -> bool:
    """The first line of a cleaned harbor trial file."""
    return isinstance(obj, dict) and obj.get("type") == "meta"


def _load_json(path: Path, field: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConvertError(path, None, field, f"invalid UTF-8 at byte offset {exc.start}") from exc
    except json.JSONDecodeError as exc:
        raise ConvertError(path, exc.lineno, field, f"invalid JSON: {exc.msg}") from exc


def _resolved_from_report(report: Any, task_id: str | None) -> bool | None:
    if not isinstance(report, dict):
        return None
    if isinstance(report.get("resolved"), bool):
        return report["resolved"]
    entry = report.get(task_id) if task_id else None
    if entry is None and len(report) == 1:
        entry = next(iter(report.values()))
    if isinstance(entry, dict) and isinstance(entry.get("resolved"), bool):
        return entry["resolved"]
    return None


def _pick_agent_log(agent_dir: Path, detect_bytes: Callable[[bytes], str | None]) -> tuple[Path, str, bytes] | None:
    found: list[tuple[int, str, Path, str, bytes]] = []
    for f in sorted(agent_dir.rglob("*")):
        if not f.is_file() or f.suffix not in (".json", ".jsonl", ".traj"):
            continue
        data = f.read_bytes()
        fmt = detect_bytes(data)
        if fmt in _AGENT_LOG_PRIORITY:
            found.append((_AGENT_LOG_PRIORITY.index(fmt), str(f), f, fmt, data))
    if not found:
        return None
    found.sort(key=lambda t: (t[0], t[1]))
    _, _, path, fmt, data = found[0]
    return path, fmt, data


def convert_trial_dir(
    trial: Path,
    *,
    detect: Callable[[bytes], str | None],
    converters: Mapping[str, Callable[[FileContext], Iterator[Trajectory]]],
    lenient: bool = False,
) -> Iterator[Trajectory]:
    """Yield the Trajectory of one harbor trial directory; its agent log's format is
    told by `detect` and converted by `converters[format]` (the registry of
    benchmaker.trajectories.converters, which hands them in). Raises ConvertError
    (`<trial>/agent: no agent log ...`, bad result.json / reward.txt)."""
    result = _load_json(trial / "result.json", "result.json")
    if not isinstance(result, dict):
        raise ConvertError(trial / "result.json", None, None, "expected a TrialResult object", result)
    task_id = result.get("task_name") if isinstance(result.get("task_name"), str) else None
    reward: float | None = None
    vr = result.get("verifier_result")
    if isinstance(vr, dict) and isinstance(vr.get("rewards"), dict):
        r = vr["rewards"].get("reward")
        reward = float(r) if isinstance(r, int | float) and not isinstance(r, bool) else None
    reward_txt = trial / "verifier" / "reward.txt"
    if reward_txt.is_file():
        text = reward_txt.read_text(encoding="utf-8", errors="replace").strip()
        try:
            reward = float(text)
        except ValueError as exc:
            raise ConvertError(reward_txt, 1, "reward", "expected a number", text) from exc
    report_path = trial / "verifier" / "report.json"
    resolved = _resolved_from_report(_load_json(report_path, "report.json"), task_id) if report_path.is_file() else None
    exc_info = result.get("exception_info")
    exit_status = exc_info.get("exception_type") if isinstance(exc_info, dict) else None
    picked = _pick_agent_log(trial / "agent", detect) if (trial / "agent").is_dir() else None
    if picked is None:
        raise ConvertError(
            trial,
            None,
            "agent",
            "no agent log found in agent/ (expected a pi, OpenHands, SWE-agent, mini-swe-agent or ATIF file)",
        )
    log_path, inner, data = picked
    ctx = FileContext(str(log_path), hashlib.sha256(data).hexdigest(), data, lenient)
    model = None
    agent_info = result.get("agent_info")
    if isinstance(agent_info, dict) and isinstance(agent_info.get("model_info"), dict):
        model = agent_info["model_info"].get("name")
    for traj in converters[inner](ctx):
        traj.source.format = f"{FORMAT_TRIAL}/{inner}"
        traj.task_id = task_id or traj.task_id
        traj.model = traj.model or (model if isinstance(model, str) else None)
        traj.outcome = RecordedOutcome(
            patch=traj.outcome.patch,
            resolved=resolved if resolved is not None else traj.outcome.resolved,
            reward=reward,
            exit_status=exit_status or traj.outcome.exit_status,
        )
        yield traj


def convert_jsonl(ctx: FileContext) -> Iterator[Trajectory]:
    """Yield the Trajectory of a cleaned `<trial>.jsonl` (meta line + agent log lines).
    Raises ConvertError naming the file's own line numbers."""
    from benchmaker.trajectories.converters import pi_events, pi_session
    from benchmaker.trajectories.converters.openai_messages import feed_messages

    first_nl = ctx.data.find(b"\n")
    head = ctx.data if first_nl < 0 else ctx.data[:first_nl]
    try:
        meta = json.loads(head)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ctx.error(1, None, "first line is not a JSON meta record") from exc
    if not is_meta_record(meta):
        raise ctx.error(
            1,
            "type",
            'first line must be a meta record {"type": "meta", ...}',
            meta.get("type") if isinstance(meta, dict) else meta,
        )
    rest = b"\n" + ctx.data[first_nl + 1 :] if first_nl >= 0 else b""
    inner_ctx = FileContext(ctx.path, ctx.sha256, rest, ctx.lenient, ctx.skipped)
    records = [obj for _, obj in iter_jsonl(FileContext(ctx.path, ctx.sha256, rest, True))][:50]
    kinds = {r.get("type") for r in records if isinstance(r, dict)}
    if kinds & pi_events.EVENT_TYPES:
        trajs = list(pi_events.convert(inner_ctx))
    elif "message" in kinds or "session" in kinds:
        trajs = list(pi_session.convert(inner_ctx))
    elif records and all(isinstance(r, dict) and "role" in r for r in records):
        builder = TrajectoryBuilder(ctx, FORMAT_JSONL)
        lines = list(iter_jsonl(inner_ctx))
        for line, msg in lines:
            feed_messages([msg], builder, ctx, line, field_prefix="message")
        trajs = [builder.build(0)]
    else:
        raise ctx.error(2, None, "agent log lines are neither pi session entries, pi events nor OpenAI messages")
    for traj in trajs:
        traj.source.format = FORMAT_JSONL
        task_id = meta.get("task_name", meta.get("task_id"))
        traj.task_id = task_id if isinstance(task_id, str) else traj.task_id
        if isinstance(meta.get("model"), str):
            traj.model = meta["model"]
        reward = meta.get("reward")
        resolved = meta.get("resolved")
        traj.outcome = RecordedOutcome(
            patch=meta["patch"] if isinstance(meta.get("patch"), str) else traj.outcome.patch,
            resolved=resolved if isinstance(resolved, bool) else None,
            reward=float(reward) if isinstance(reward, int | float) and not isinstance(reward, bool) else None,
            exit_status=meta["exit_status"] if isinstance(meta.get("exit_status"), str) else None,
        )
        yield traj
