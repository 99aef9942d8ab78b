"""A live coding agent: the harness's execute mode driven by a real model.

    tasks = [load_live_task(Path("examples/tiny-task"))]
    run = await run_live(tasks, "http://127.0.0.1:8000", model="m", concurrency=2,
                         out_dir=Path("artifacts/run1"), run_id="run1")
    run.results[0].trajectory      # a benchmaker.trajectories.trajectory.Trajectory, ready for swebench-replay

Each episode: a fresh sandbox from the task (local temp copy of the task repo, or a
Flash sandbox), a conversation that starts with the task prompt, then per turn: one
streamed chat call to the model with pi's four tools (bash, read, write, edit; JSON
schemas below), the received tool calls run in the sandbox by `benchmaker.agent.tools.run_pi_tool`
(the same code as execute-mode replay, so a replay of the written trajectory sees the
same observations), their results sent back as `tool` messages. The episode ends when
a response has no tool calls (`terminated_by` "stop"), after `max_turns` calls
("max_turns"), or when a model call fails ("error"; outcome "error"/"timeout"). Then the
workspace diff is taken and the verifier runs the task's test command (`resolved`).

The prompt: a `task_id: <id>` line (it makes the trajectory's match key `task:<id>`),
then task.json's `prompt` (or `problem_statement`) when present, else an instruction
to make the test command pass.

Files written to `out_dir` (each line appended as its episode finishes):
`trajectories.jsonl` (schema benchmaker.trajectories.trajectory; source format "benchmaker-live",
source.sha256 = sha256 of the trajectory's JSON without its source, recorded outcome =
the diff as `patch`, the verifier's `resolved`, `exit_status` = terminated_by),
`episodes.jsonl`, `turns.jsonl` (mode "execute", `byte_equal` None),
`grades.jsonl` (grader "verifier": resolved / unresolved / error), `concurrency.json`.
Several attempts of one task share one match key: a replay server serves the first.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmaker.agent.episodes import Episode, TurnRecord
from benchmaker.agent.harness import (
    MISS_BY_STATUS,
    SampleSink,
    SandboxFactory,
    concurrency_proof,
    observation_message,
    rebase_sample,
)
from benchmaker.agent.harness import served as _served
from benchmaker.agent.model_client import ChatResult, ModelClient
from benchmaker.agent.sandbox import Sandbox, SandboxError
from benchmaker.agent.tools import run_pi_tool
from benchmaker.agent.verifier import TASK_FILE, TaskSpec, Verdict, load_task, verify
from benchmaker.engine.bundle import SampleWriter
from benchmaker.engine.records import Outcome, Sample
from benchmaker.sweep.grade import grade_line
from benchmaker.trajectories.errors import InputError
from benchmaker.trajectories.trajectory import (
    Observation,
    RecordedOutcome,
    Response,
    Source,
    Timing,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    match_key_for_messages,
)
from benchmaker.workloads.agent import start_model_transport

__all__ = [
    "LIVE_FORMAT",
    "LiveEpisodeResult",
    "LiveRunResult",
    "LiveTask",
    "PI_TOOL_SCHEMAS",
    "load_live_task",
    "run_live",
    "run_live_episode",
]

LIVE_FORMAT = "benchmaker-live"
"""`source.format` of trajectories written by the live agent."""


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


_STRING = {"type": "string"}
PI_TOOL_SCHEMAS: list[dict[str, Any]] = [
    _tool(
        "bash",
        "Run a bash command in the repository; returns stdout and stderr.",
        {
            "command": {"type": "string", "description": "The command."},
            "timeout": {"type": "number", "description": "Timeout in seconds (default 180)."},
        },
        ["command"],
    ),
    _tool(
        "read",
        "Read a text file (first 2000 lines / 50 KB; use offset/limit for more).",
        {
            "path": _STRING,
            "offset": {"type": "integer", "description": "1-based first line."},
            "limit": {"type": "integer", "description": "Number of lines."},
        },
        ["path"],
    ),
    _tool("write", "Create or overwrite a file.", {"path": _STRING, "content": _STRING}, ["path", "content"]),
    _tool(
        "edit",
        "Replace one exact, unique occurrence of oldText with newText in a file.",
        {"path": _STRING, "oldText": _STRING, "newText": _STRING},
        ["path", "oldText", "newText"],
    ),
]
"""OpenAI `tools` for pi's bash/read/write/edit (argument names as benchmaker.agent.tools runs them)."""

_FINISH = {"stop", "tool_calls", "length", "content_filter", "error", "aborted"}


@dataclass(slots=True)
class LiveTask:
    """A task for the live agent: its TaskSpec (repo, test command) and the first user message."""

    spec: TaskSpec
    prompt: str


def load_live_task(task_dir: Path) -> LiveTask:
    """Read `<task_dir>/task.json` (benchmaker.agent.verifier.load_task) and build the prompt
    (module docstring). Raises InputError `path: field: problem (got VALUE)`."""
    spec = load_task(task_dir)
    path = Path(task_dir) / TASK_FILE
    obj = json.loads(path.read_text(encoding="utf-8"))
    text = obj.get("prompt", obj.get("problem_statement"))
    if text is not None and not isinstance(text, str):
        raise InputError(path, None, "prompt", "expected a string", text)
    if not text:
        test = spec.test_command or "the test suite"
        text = (
            f"The tests of this repository fail. Find and fix the bug so that `{test}` passes. "
            "Use the tools to read, edit and run code; answer without a tool call when done."
        )
    return LiveTask(spec, f"task_id: {spec.task_id}\n{text}")


@dataclass(slots=True)
class LiveEpisodeResult:
    """One live episode: its Episode and TurnRecords, the Trajectory it recorded, the
    final workspace diff (None when the sandbox failed) and the verifier's Verdict."""

    episode: Episode
    turns: list[TurnRecord]
    trajectory: Trajectory
    diff: str | None = None
    verdict: Verdict | None = None


def _usage(call: ChatResult) -> Usage | None:
    u = call.usage
    if u is None:
        return None
    details = u.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None

    def nat(v: Any) -> int | None:
        return v if isinstance(v, int) and v >= 0 else None

    return Usage(
        prompt_tokens=nat(call.prompt_tokens),
        completion_tokens=nat(call.output_tokens),
        cached_tokens=nat(call.cached_tokens),
        reasoning_tokens=nat(reasoning),
        total_tokens=nat(u.get("total_tokens")),
    )


def _timing(call: ChatResult) -> Timing:
    wall_sent_ns = time.time_ns() - (time.perf_counter_ns() - call.sent_ns)
    started = datetime.fromtimestamp(wall_sent_ns / 1e9, UTC).isoformat().replace("+00:00", "Z")
    ttft = None if call.first_token_ns is None else (call.first_token_ns - call.sent_ns) / 1e6
    return Timing(ttft_ms=ttft, duration_ms=(call.end_ns - call.sent_ns) / 1e6, started_at=started)


def _response(call: ChatResult, turn: int) -> Response:
    """The received response as a trajectory Response; tool calls without an id get
    `call_<turn>_<k>` (set on `call` too, so the next request carries the same id)."""
    tcs = []
    for k, tc in enumerate(call.tool_calls):
        if not tc.id:
            tc.id = f"call_{turn}_{k}"
        try:
            parsed = json.loads(tc.arguments) if tc.arguments else None
        except ValueError:
            parsed = None
        tcs.append(
            ToolCall(
                id=tc.id,
                name=tc.name,
                arguments_raw=tc.arguments,
                arguments=parsed if isinstance(parsed, dict) else None,
            )
        )
    finish = call.finish_reason if call.finish_reason in _FINISH else ("tool_calls" if tcs else "stop")
    return Response(content=call.content, reasoning=call.reasoning, tool_calls=tcs, finish_reason=finish)


def _content_sha256(traj: Trajectory) -> str:
    body = traj.model_dump(mode="json", exclude={"source"})
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


async def run_live_episode(
    task: LiveTask,
    base_url: str,
    *,
    model: str | None,
    sandbox_factory: SandboxFactory,
    client: ModelClient | None = None,
    api_key: str | None = None,
    system: str | None = None,
    max_turns: int = 50,
    stream: bool = True,
    send_status_fields: bool = False,
    extra_body: dict[str, Any] | None = None,
    run_id: str = "run",
    episode_id: str | None = None,
    worker: int = 0,
    concurrency: int | None = None,
    t0_ns: int | None = None,
    source_path: str = "",
    sample_sink: SampleSink | None = None,
) -> LiveEpisodeResult:
    """Play one live episode of `task` against the model at `base_url` (module docstring).

    `sandbox_factory(task.spec)` makes the sandbox (closed at the end). `send_status_fields`
    adds the non-standard `is_error` to tool messages (a replay server checks it; real
    endpoints may reject it). `extra_body` is merged into every request body (e.g.
    temperature). `sample_sink` gets each model call's engine Sample as it finishes
    (benchmaker.agent.harness.SampleSink). Model and sandbox failures never raise: the episode ends
    with outcome "error"/"timeout" and `error` set. Raises ValueError when max_turns < 1.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns: expected >= 1 (got {max_turns})")
    t0 = time.perf_counter_ns() if t0_ns is None else t0_ns
    eid = episode_id or uuid.uuid4().hex[:16]
    ep = Episode(
        run_id=run_id,
        sweep_point=None,
        concurrency=concurrency,
        episode_id=eid,
        trajectory_id=eid,
        task_id=task.spec.task_id,
        mode="execute",
        worker=worker,
        started_ns=time.perf_counter_ns() - t0,
        ended_ns=0,
    )
    records: list[TurnRecord] = []
    turns: list[Turn] = []
    calls: list[ChatResult] = []
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system is not None else []
    messages.append({"role": "user", "content": task.prompt})
    terminated_by = "max_turns"
    own_client = client is None
    client = client or ModelClient(base_url, api_key=api_key, model=model, t0_ns=t0)
    sb: Sandbox | None = None
    diff: str | None = None
    verdict: Verdict | None = None
    try:
        sb = await sandbox_factory(task.spec)
        for i in range(max_turns):
            call = await client.chat(messages, stream=stream, tools=PI_TOOL_SCHEMAS, **(extra_body or {}))
            calls.append(call)
            ep.n_requests += 1
            ep.model_time_ns += call.model_time_ns
            miss = MISS_BY_STATUS.get(call.status or 0) if call.outcome == Outcome.HTTP_ERROR.value else None
            if miss:
                setattr(ep, f"misses_{miss}", getattr(ep, f"misses_{miss}") + 1)
            rec = TurnRecord(
                run_id=run_id,
                sweep_point=None,
                episode_id=eid,
                turn_index=i,
                miss_kind=miss,
                n_tool_calls=len(call.tool_calls),
            )
            records.append(rec)
            if sample_sink is not None:
                sample = call.sample
                if call.t0_ns != t0:
                    rebase_sample(sample, call.t0_ns - t0)
                    call.t0_ns = t0
                sample.run_id, sample.worker, sample.lane = run_id, worker, "agent"
                sample.meta = {"episode_id": eid, "turn_index": i, "miss_kind": miss, "task_id": task.spec.task_id}
                sample_sink(sample)
            if not _served(call):
                terminated_by = "error"
                ep.outcome = "timeout" if call.outcome == Outcome.TIMEOUT.value else "error"
                ep.error = (
                    f"turn {i}: {call.outcome}"
                    + (f" {call.status}" if call.status else "")
                    + (f": {call.error}" if call.error else "")
                )
                break
            ep.n_turns += 1
            response = _response(call, i)
            messages.append(call.message())
            observations: list[Observation] = []
            for tc in call.tool_calls:
                try:
                    args = json.loads(tc.arguments) if tc.arguments else {}
                except ValueError:
                    args = None
                out = await run_pi_tool(sb, tc.name, args if isinstance(args, dict) else None)
                rec.tool_time_ns += out.duration_ns
                observations.append(
                    Observation(
                        tool_call_id=tc.id,
                        name=tc.name,
                        content=out.content,
                        is_error=out.is_error,
                        exit_code=out.exit_code,
                    )
                )
                messages.append(observation_message(out, tc.id, send_status_fields=send_status_fields))
            ep.tool_time_ns += rec.tool_time_ns
            turns.append(
                Turn(index=i, response=response, usage=_usage(call), timing=_timing(call), observations=observations)
            )
            if not call.tool_calls:
                terminated_by = "stop"
                break
        diff = await sb.diff()
        if task.spec.test_command:
            verdict = await verify(sb, task.spec)
    except SandboxError as exc:
        ep.outcome, ep.error = "error", f"sandbox: {exc}"
        terminated_by = "error"
    except asyncio.CancelledError:
        ep.outcome, ep.error = "cancelled", "cancelled"
        raise
    finally:
        if own_client:
            await client.aclose()
        if sb is not None:
            try:
                await asyncio.shield(sb.close())
            except (SandboxError, asyncio.CancelledError):
                pass
        _finish(ep, calls, diff, verdict, t0)
    traj = Trajectory(
        trajectory_id=eid,
        source=Source(format=LIVE_FORMAT, path=source_path, sha256="0" * 64),
        task_id=task.spec.task_id,
        match_key=match_key_for_messages([task.prompt]),
        model=model,
        system=system,
        first_user=task.prompt,
        terminated_by=terminated_by,
        outcome=RecordedOutcome(patch=diff, resolved=verdict.resolved if verdict else None, exit_status=terminated_by),
        turns=turns,
    )
    traj.source.sha256 = _content_sha256(traj)
    return LiveEpisodeResult(ep, records, traj, diff, verdict)


def _finish(ep: Episode, calls: list[ChatResult], diff: str | None, verdict: Verdict | None, t0: int) -> None:
    firsts = [first - c.sent_ns for c in calls if (first := c.first_token_ns) is not None]
    if calls and len(firsts) == len(calls):
        ep.first_token_ns_sum = sum(firsts)
    complete = bool(calls) and all(c.prompt_tokens is not None and c.output_tokens is not None for c in calls)
    ep.usage_complete = complete
    if complete:
        ep.prompt_tokens = sum(c.prompt_tokens or 0 for c in calls)  # all known (complete)
        ep.output_tokens = sum(c.output_tokens or 0 for c in calls)
    ep.diff_sha256 = None if diff is None else hashlib.sha256(diff.encode("utf-8")).hexdigest()
    if verdict is not None:
        ep.resolved, ep.reverified = verdict.resolved, verdict.reverified
    ep.ended_ns = time.perf_counter_ns() - t0


def _grade(res: LiveEpisodeResult, run_id: str) -> dict[str, Any]:
    v = res.verdict
    detail: str | None
    if v is None or v.resolved is None:
        verdict, detail = "error", (v.error if v else None) or res.episode.error or "not verified"
    else:
        verdict = "resolved" if v.resolved else "unresolved"
        detail = v.error or (f"exit_code={v.exit_code}" if v.exit_code is not None else None)
    score = None if verdict == "error" else (1.0 if verdict == "resolved" else 0.0)
    ep = {"run_id": run_id, "sweep_point": None, "episode_id": res.episode.episode_id}
    return grade_line(ep, "verifier", verdict, score, detail)


@dataclass(slots=True)
class LiveRunResult:
    """A live run: episode results in finish order, its concurrency proof and files."""

    results: list[LiveEpisodeResult]
    proof: Any
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def resolved(self) -> int:
        """Episodes the verifier resolved."""
        return sum(1 for r in self.results if r.episode.resolved)


class _LiveWorkload:
    """The live episodes of `run_live` as an engine CallableWorkload: episode `seq`
    plays task seq mod len(tasks), attempt seq // len(tasks), and appends its lines to
    the run's files (module docstring); each model call is an engine Sample in
    samples.jsonl."""

    def __init__(
        self,
        tasks: list[LiveTask],
        base_url: str,
        out_dir: Path,
        run_id: str,
        concurrency: int,
        episode_kwargs: dict[str, Any],
        transport: str = "raw",
    ):
        self.name = "live-agent"
        self.tasks = tasks
        self.base_url = base_url
        self.out_dir = out_dir
        self.run_id = run_id
        self.concurrency = concurrency
        self.kwargs = episode_kwargs
        self.results: list[LiveEpisodeResult] = []
        self.files = {n: out_dir / f"{n}.jsonl" for n in ("trajectories", "episodes", "turns", "grades")}
        self._handles: dict[str, Any] = {}
        self._writer: SampleWriter | None = None
        self.transport = transport
        self._transport: Any = None
        self._n_calls = 0
        self._free: list[int] = []
        self._next_slot = 0

    def describe(self) -> dict[str, Any]:
        return {"type": "live-agent", "url": self.base_url, "tasks": [t.spec.task_id for t in self.tasks]}

    async def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._handles = {n: open(p, "w", encoding="utf-8") for n, p in self.files.items()}
        self._writer = SampleWriter(self.out_dir / "samples.jsonl")
        self._transport = await start_model_transport(self.transport)
        start = getattr(self.kwargs.get("sandbox_factory"), "start", None)
        if start is not None:  # its process spawner, before the clock
            await start()  # benchmaker.agent.sandbox.LocalSandboxFactory

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None
        aclose = getattr(self.kwargs.get("sandbox_factory"), "aclose", None)
        if aclose is not None:
            await aclose()
        for h in self._handles.values():
            h.close()
        if self._writer is not None:
            self._writer.close()

    async def execute(self, seq: int, sample: Sample, t0_ns: int) -> str | None:
        task = self.tasks[seq % len(self.tasks)]
        attempt = seq // len(self.tasks)
        writer = self._writer
        assert writer is not None, "start() was not awaited"

        def sink(s: Sample) -> None:
            s.seq = self._n_calls
            self._n_calls += 1
            s.phase = sample.phase
            writer.write(s)

        slot = heapq.heappop(self._free) if self._free else self._next_slot
        if slot == self._next_slot:
            self._next_slot += 1
        client = ModelClient(
            self.base_url,
            api_key=self.kwargs.get("api_key"),
            model=self.kwargs.get("model"),
            transport=self._transport,
            t0_ns=t0_ns,
        )
        try:
            res = await run_live_episode(
                task,
                self.base_url,
                client=client,
                run_id=self.run_id,
                episode_id=f"{self.run_id}-{task.spec.task_id}-{attempt}",
                worker=slot,
                concurrency=self.concurrency,
                t0_ns=t0_ns,
                source_path=str(self.files["trajectories"]),
                sample_sink=sink,
                **self.kwargs,
            )
        finally:
            heapq.heappush(self._free, slot)
        self.results.append(res)
        h = self._handles
        h["trajectories"].write(res.trajectory.model_dump_json() + "\n")
        h["episodes"].write(json.dumps(res.episode.to_dict()) + "\n")
        h["turns"].writelines(json.dumps(t.to_dict()) + "\n" for t in res.turns)
        h["grades"].write(json.dumps(_grade(res, self.run_id)) + "\n")
        for f in h.values():
            f.flush()
        writer.flush()
        ep = res.episode
        sample.meta = {
            "episode_id": ep.episode_id,
            "task_id": ep.task_id,
            "slot": slot,
            "n_turns": ep.n_turns,
            "n_requests": ep.n_requests,
            "resolved": ep.resolved,
        }
        if ep.outcome == "ok":
            sample.outcome = Outcome.OK.value
        else:
            sample.outcome = Outcome.TIMEOUT.value if ep.outcome == "timeout" else Outcome.PROTOCOL_ERROR.value
            sample.error = ep.error
        return None


async def run_live(
    tasks: list[LiveTask],
    base_url: str,
    *,
    model: str | None,
    sandbox_factory: SandboxFactory,
    out_dir: Path,
    run_id: str,
    concurrency: int = 1,
    attempts: int = 1,
    api_key: str | None = None,
    system: str | None = None,
    max_turns: int = 50,
    stream: bool = True,
    send_status_fields: bool = False,
    extra_body: dict[str, Any] | None = None,
    t0_ns: int | None = None,
    transport: str = "raw",
) -> LiveRunResult:
    """Run `attempts` episodes of every task on the engine, `closed:<concurrency>` with
    an episode as the unit of work (one engine transport shared by the episodes:
    `transport`, `raw` by default, the engine's HTTP/1.1 client, or `aiohttp`), and write
    the files of the module docstring into `out_dir` as episodes finish, plus
    samples.jsonl (one engine Sample per model call), episode_samples.jsonl and
    engine_summary.json (the engine's view of the episodes: verdict, loop lag, client
    CPU). Episode ids are `<run_id>-<task_id>-<attempt>`. `t0_ns`: the run's
    perf_counter_ns origin (default: now).
    Raises ValueError when concurrency or attempts < 1 or there are no tasks."""
    from benchmaker.engine.config import BenchConfig, Timeouts
    from benchmaker.engine.runner import BenchRunner

    if concurrency < 1 or attempts < 1:
        raise ValueError(f"concurrency, attempts: expected >= 1 (got {concurrency}, {attempts})")
    if not tasks:
        raise ValueError("tasks: expected at least one task (got [])")
    out_dir.mkdir(parents=True, exist_ok=True)
    kwargs = dict(
        model=model,
        sandbox_factory=sandbox_factory,
        api_key=api_key,
        system=system,
        max_turns=max_turns,
        stream=stream,
        send_status_fields=send_status_fields,
        extra_body=extra_body,
    )
    wl = _LiveWorkload(tasks, base_url, out_dir, run_id, concurrency, kwargs, transport)
    staging = out_dir / "_engine"
    cfg = BenchConfig(
        load=f"closed:{concurrency}",
        max_requests=attempts * len(tasks),
        run_id=run_id,
        kind="live-agent",
        out_dir=staging,
        drain_s=7 * 24 * 3600.0,
        transport=transport,
        timeouts=Timeouts(connect_s=None, total_s=None),
    )
    runner = BenchRunner(cfg, workload=wl, samples_name="episode_samples.jsonl", start_at_ns=t0_ns)
    result = await runner.run()
    os.replace(result.bundle_dir / "episode_samples.jsonl", out_dir / "episode_samples.jsonl")
    os.replace(result.bundle_dir / "summary.json", out_dir / "engine_summary.json")
    shutil.rmtree(staging, ignore_errors=True)
    results = wl.results
    proof = concurrency_proof([(r.episode.started_ns, r.episode.ended_ns) for r in results], concurrency)
    files = dict(wl.files)
    files["samples"] = out_dir / "samples.jsonl"
    files["concurrency"] = out_dir / "concurrency.json"
    files["concurrency"].write_text(json.dumps(proof.to_dict(), indent=1) + "\n")
    return LiveRunResult(results, proof, out_dir, files)
