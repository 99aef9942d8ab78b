"""The agent harness: plays episodes of recorded trajectories against any
OpenAI-compatible endpoint (docs/replay-an-agent.md) and measures them.

    res = await run_episode(traj, "http://127.0.0.1:8000", mode="recorded", sample_sink=writer.write)
    res.calls[0].sample          # the engine Sample of the first model call

Many episodes run on the engine, an episode being its unit of work:
benchmaker.workloads.agent_episode.EpisodeWorkload, benchmaker.sweep.point_run.run_point.

Modes:
- `recorded`: every request carries the trajectory's recorded tool definitions
  (`Trajectory.tools`, chat shape) when it has any, as the agent sent them; it starts
  with the system prompt (when recorded), the first user message and the
  `user_before_turns` messages; each response is appended *as
  received*, then the recorded observations of that turn, then its `user_after`
  messages; the next turn is sent. A turn that carries a context edit
  (`Turn.context_edit`) is sent as the agent sent it, rebuilt by
  `benchmaker.trajectories.context.request_messages`, and grows from there.
- `execute`: the same, but the tool calls of the received response run in a Sandbox
  (pi bash/read/write/edit, or the text action of SWE-agent / mini-swe-agent
  trajectories, see benchmaker.agent.tools) and their results are sent instead; each result
  that differs from the recorded observation (content or is_error) is a divergence.
  Only calls the recording has an observation for run (an aborted pi turn's calls
  never ran in the recording either).
- `command`: an external agent command runs per task (see `run_command_episode`).

Observation messages have the shape the replay server pairs for its divergence check
(benchmaker.trajectories.context.history_messages; `send_status_fields=False` leaves
out the non-standard `is_error` for endpoints that reject it). Misses come from the replay
server's status codes (docs/replay-server.md): 404 → unknown_key, 409 → beyond_turns,
412 → diverged. A failed model call ends the episode with outcome "error" ("timeout"
when it timed out).

Per episode: turns, model time (ModelClient: time awaiting the stream only), tool
time, misses, divergences, the final workspace diff (sha256), usage totals only when
every model call carried usage (else None, `usage_complete` False), resolved
(verifier) or the carried recorded outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shlex
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from benchmaker.agent.episodes import Episode, TurnRecord
from benchmaker.agent.model_client import ChatResult, ChatStream, MessageLog, ModelClient
from benchmaker.agent.sandbox import PRIVATE_ENV, Sandbox, SandboxError
from benchmaker.agent.sandbox.local import LocalSandbox, LocalSandboxFactory
from benchmaker.agent.sandbox.spawner import InlineSpawner
from benchmaker.agent.tools import TextActionStyle, ToolOutcome, run_pi_tool, run_text_action
from benchmaker.agent.verifier import TaskSpec, Verdict, carried, task_id_of, verify
from benchmaker.agent.wire_calls import wire_call
from benchmaker.engine.records import Outcome, Sample
from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.trajectory import Observation, Response, Trajectory, Turn

MISS_BY_STATUS: dict[int, str] = {404: "unknown_key", 409: "beyond_turns", 412: "diverged"}
"""Replay server status codes of a miss (docs/replay-server.md)."""

STRAY_GRACE_S = 2.0
"""Command mode: seconds an agent whose request the replay server refused may take to
exit on its own before its process group is killed (run_episode `stray_grace_s`)."""

SandboxFactory = Callable[[TaskSpec | None], Awaitable[Sandbox]]
SampleSink = Callable[[Sample], None]
"""Called with the engine Sample of each model call of an episode as it finishes (run_id,
sweep_point, worker, lane "agent" and meta {episode_id, turn_index, miss_kind,
trajectory_id} set; the sink gives it its seq and writes it)."""


local_sandbox_factory = LocalSandboxFactory
"""A SandboxFactory making a LocalSandbox per episode (benchmaker.agent.sandbox.local)."""


@dataclass(slots=True, repr=False)
class EpisodeResult:
    """One played episode: its Episode record, its TurnRecords, the final workspace
    diff (None without a sandbox), the verifier's Verdict, each ChatResult (provider
    TTFT `first_token_ns` and first-visible `first_visible_ns` kept apart), the
    divergence descriptions (execute mode) and the count of responses the replay
    server served with an `x-replay-divergence` header.

    Its repr is a one-line summary, not every call: asyncio.run and uvloop.run (Python
    3.11) repr the finished main task, result included, twice as they put the SIGINT
    handler back, which cost ~31 ms of CPU per 453-turn episode played on its own loop
    (benchmaker.engine.runner.run_on_fresh_loop; 0.85 MB of text, cut to 30 characters)."""

    episode: Episode
    turns: list[TurnRecord]
    diff: str | None = None
    verdict: Verdict | None = None
    calls: list[ChatResult] = field(default_factory=list)
    divergence_details: list[str] = field(default_factory=list)
    server_divergences: int = 0

    def __repr__(self) -> str:
        ep = self.episode
        diff = "None" if self.diff is None else f"<{len(self.diff)} chars>"
        return (
            f"EpisodeResult(episode_id={ep.episode_id!r}, outcome={ep.outcome!r}, turns={len(self.turns)}, "
            f"calls={len(self.calls)}, diff={diff}, verdict={self.verdict!r}, "
            f"divergences={len(self.divergence_details)}, server_divergences={self.server_divergences})"
        )


def initial_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """[system (when recorded), first user (its content parts when it held an image:
    `first_user_parts`), each of user_before_turns] in OpenAI request shape."""
    msgs: list[dict[str, Any]] = []
    if trajectory.system is not None:
        msgs.append({"role": "system", "content": trajectory.system})
    first = trajectory.first_user if trajectory.first_user_parts is None else trajectory.first_user_parts
    msgs.append({"role": "user", "content": first})
    msgs.extend({"role": "user", "content": u} for u in trajectory.user_before_turns)
    return msgs


def observation_message(
    obs: Observation | ToolOutcome, tool_call_id: str | None, *, send_status_fields: bool = True
) -> dict[str, Any]:
    """The request message carrying one observation (module docstring); its content
    is a recorded observation's content parts when it has some (`Observation.parts`: a
    result with an image), else its text."""
    parts = obs.parts if isinstance(obs, Observation) else None
    content: str | list[dict[str, Any]] = obs.content if parts is None else parts
    if tool_call_id is None:
        return {"role": "user", "content": content}
    msg: dict[str, Any] = {"role": "tool", "tool_call_id": tool_call_id, "content": content}
    if send_status_fields:
        msg["is_error"] = obs.is_error
    return msg


def byte_equal(call: ChatResult, recorded: Response) -> bool:
    """True when the received response equals the recorded one: content exactly,
    reasoning (absent and "" alike: an empty reasoning cannot be streamed), and each
    tool call's id, name and raw argument string."""
    if call.content != recorded.content:
        return False
    if (call.reasoning or "") != (recorded.reasoning or ""):
        return False
    got, want = call.tool_calls, recorded.tool_calls
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):  # pairwise, without building two lists of tuples per turn
        if g.id != w.id or g.name != w.name or g.arguments != w.arguments_raw:
            return False
    return True


def task_diff(diff: str) -> str:
    """The sections of a `git diff` (the sandbox's, against the task's baseline commit)
    that touch the task's files: a file of the baseline changed, deleted or renamed.
    A section with a `new file mode` header (a file the episode created) is left out:
    an agent drops its own files in the workspace (its config, its trajectory, caches)
    and they would make equal patches hash apart. Sections keep their bytes and order;
    a section starts at a line beginning with "diff --git " (a hunk line starts with
    " ", "+", "-" or "\\", so it never does). Format: git-diff(1), "generating
    patch text with -p"."""
    kept: list[str] = []
    section: list[str] = []
    new_file = False
    for line in _LINES.findall(diff):  # split after LF only: a hunk line may hold U+2028 or a CR
        if line.startswith("diff --git "):
            if not new_file:
                kept.extend(section)
            section, new_file = [line], False
        else:
            section.append(line)
            new_file = new_file or line.startswith("new file mode ")  # a header line only
    if not new_file:
        kept.extend(section)
    return "".join(kept)


_LINES = re.compile(r"[^\n]*\n|[^\n]+")
"""A text's lines, each with its LF (the last one without, when the text ends without)."""


class _Episode:
    """Book-keeping of one episode `ep` while it runs (stamps from `t0_ns`)."""

    def __init__(self, ep: Episode, t0_ns: int, sample_sink: SampleSink | None):
        self.t0 = t0_ns
        self.sink = sample_sink
        self.ep = ep
        self.turns: list[TurnRecord] = []
        self.calls: list[ChatResult] = []
        self.result = EpisodeResult(self.ep, self.turns)
        # sums over the calls so far; None once a call lacks the figure
        self._ttft_sum: int | None = 0
        self._prompt_sum: int | None = 0
        self._output_sum: int | None = 0

    def add_call(self, call: ChatResult, turn_index: int, recorded: Turn | None) -> TurnRecord:
        """Count `call` on the episode, make its TurnRecord, stamp its Sample (run, point,
        worker, lane, meta) and hand it to the sink. Per turn: the call's fields are read
        from its Sample once, and the episode's usage and TTFT sums are kept as calls
        come (finish() does not walk the calls again)."""
        ep = self.ep
        s = call.sample
        outcome = s.outcome
        ep.n_requests += 1
        ep.model_time_ns += call.model_time_ns
        self.calls.append(call)
        miss = MISS_BY_STATUS.get(s.http_status or 0) if outcome == _HTTP_ERROR else None
        if miss is not None:
            setattr(ep, f"misses_{miss}", getattr(ep, f"misses_{miss}") + 1)
        served = outcome in SERVED_OUTCOMES
        if served:
            ep.n_turns += 1
        if call.t0_ns != self.t0:  # a client on another origin: the sample takes the episode's
            rebase_sample(s, call.t0_ns - self.t0)
            call.t0_ns = self.t0
        if self._ttft_sum is not None:
            self._ttft_sum = (
                None
                if s.first_token_ns is None or s.sent_ns is None
                else self._ttft_sum + (s.first_token_ns - s.sent_ns)
            )
        if self._prompt_sum is not None and self._output_sum is not None:
            if s.prompt_tokens is None or s.output_tokens is None:
                self._prompt_sum = self._output_sum = None
            else:
                self._prompt_sum += s.prompt_tokens
                self._output_sum += s.output_tokens
        # what only the turn has (the call's figures are in its Sample), by position:
        # run_id, sweep_point, episode_id, turn_index, miss_kind, tool_time_ns, n_tool_calls, byte_equal
        rec = TurnRecord(
            ep.run_id,
            ep.sweep_point,
            ep.episode_id,
            turn_index,
            miss,
            0,
            len(call.tool_calls),
            byte_equal(call, recorded.response) if (served and recorded is not None) else None,
        )
        self.turns.append(rec)
        s.run_id, s.sweep_point, s.worker, s.lane = ep.run_id, ep.sweep_point, ep.worker, "agent"
        s.meta = {
            "episode_id": ep.episode_id,
            "turn_index": turn_index,
            "miss_kind": miss,
            "trajectory_id": ep.trajectory_id,
        }
        if self.sink is not None:
            self.sink(s)
        return rec

    def finish(self, diff: str | None, verdict: Verdict | None) -> EpisodeResult:
        ep = self.ep
        calls = self.calls
        if calls and self._ttft_sum is not None:
            ep.first_token_ns_sum = self._ttft_sum
        complete = bool(calls) and self._prompt_sum is not None
        ep.usage_complete = complete
        if complete:
            ep.prompt_tokens, ep.output_tokens = self._prompt_sum, self._output_sum
        if diff is not None:
            ep.diff_sha256 = hashlib.sha256(task_diff(diff).encode("utf-8")).hexdigest()
        if verdict is not None:
            ep.resolved, ep.reverified = verdict.resolved, verdict.reverified
        ep.ended_ns = time.perf_counter_ns() - self.t0
        self.result.diff = diff
        self.result.verdict = verdict
        self.result.calls = calls
        return self.result


def rebase_sample(s: Sample, delta_ns: int) -> None:
    """Shift every stamp of `s` by `delta_ns` (from one perf_counter_ns origin to another)."""
    for name in ("intended_ns", "sent_ns", "first_byte_ns", "first_token_ns", "first_content_ns", "end_ns"):
        v = getattr(s, name)
        if v is not None:
            setattr(s, name, v + delta_ns)
    if s.token_event_ns is not None:
        s.token_event_ns = [t + delta_ns for t in s.token_event_ns]


_HTTP_ERROR = Outcome.HTTP_ERROR.value
# response header of the replay server on side traffic (benchmaker/replay_server/side.py)
_SIDE_HEADER = "x-replay-side"
# request headers the command-mode proxy does not pass on (hop-by-hop, the body's own
# framing, compression it would have to undo, the agent's keys: replaced by the run's)
_NOT_FORWARDED = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "accept-encoding",
        "authorization",
        "x-api-key",
        "x-goog-api-key",
    }
)


SERVED_OUTCOMES = frozenset(
    {Outcome.OK.value, Outcome.EMPTY_OUTPUT.value, Outcome.ABORTED.value, Outcome.RECORDED_ERROR.value}
)
"""Outcomes of a complete 2xx response, which the conversation goes on from: ok, and
what a recording holds as such and the replay serves back faithfully: recorded_error
(a turn that failed in the original run, flagged by the replay server), and from
servers that do not flag it, empty_output (an aborted turn without text) and aborted
(a recorded `finish_reason: aborted`)."""


def served(call: ChatResult) -> bool:
    """Whether `call` got a complete response the episode goes on from (SERVED_OUTCOMES)."""
    return call.outcome in SERVED_OUTCOMES


def _fail_outcome(call: ChatResult) -> str:
    return "timeout" if call.outcome == Outcome.TIMEOUT.value else "error"


async def _execute_observations(
    sb: Sandbox,
    trajectory: Trajectory,
    call: ChatResult,
    recorded: Turn,
    st: _Episode,
    send_status_fields: bool,
) -> tuple[list[dict[str, Any]], int]:
    """Run the received response's tool calls (or text action) in `sb`; returns the
    observation messages and the tool time in ns; counts divergences on `st`."""
    msgs: list[dict[str, Any]] = []
    tool_ns = 0
    recorded_by_id = {o.tool_call_id: o for o in recorded.observations if o.tool_call_id is not None}
    if call.tool_calls:
        for tc in call.tool_calls:
            rec = recorded_by_id.get(tc.id) if tc.id is not None else None
            if rec is None:
                continue  # the recorded agent never ran it (aborted turn)
            try:
                args = json.loads(tc.arguments) if tc.arguments else {}
            except ValueError:
                args = None
            out = await run_pi_tool(sb, tc.name, args if isinstance(args, dict) else None)
            tool_ns += out.duration_ns
            _compare(st, recorded.index, tc.id, out, rec)
            msgs.append(observation_message(out, tc.id, send_status_fields=send_status_fields))
        return msgs, tool_ns
    text_obs = [o for o in recorded.observations if o.tool_call_id is None]
    if not text_obs:
        return msgs, tool_ns
    # mini-swe-agent's action format for trajectories converted from its logs
    style: TextActionStyle = "mini-swe-agent" if "mini" in trajectory.source.format else "swe-agent"
    acted = await run_text_action(sb, call.content, style)
    if acted is None:  # no parsable action: send the recorded observations, count it
        st.ep.divergences += 1
        st.result.divergence_details.append(f"turn {recorded.index}: no action to execute")
        return [observation_message(o, None) for o in text_obs], tool_ns
    tool_ns += acted.duration_ns
    _compare(st, recorded.index, None, acted, text_obs[0])
    msgs.append(observation_message(acted, None))
    return msgs, tool_ns


def _compare(st: _Episode, turn: int, call_id: str | None, out: ToolOutcome, rec: Observation) -> None:
    what = []
    if out.content != rec.content:
        what.append("content")
    if call_id is not None and out.is_error != rec.is_error:
        what.append(f"is_error {out.is_error} != recorded {rec.is_error}")
    if what:
        st.ep.divergences += 1
        st.result.divergence_details.append(f"turn {turn} call {call_id}: {', '.join(what)}")


async def run_episode(
    trajectory: Trajectory,
    base_url: str,
    *,
    mode: str = "recorded",
    sandbox: Sandbox | SandboxFactory | None = None,
    task: TaskSpec | None = None,
    run_id: str = "run",
    sweep_point: str | None = None,
    concurrency: int | None = None,
    episode_id: str | None = None,
    worker: int = 0,
    t0_ns: int | None = None,
    client: ModelClient | None = None,
    api_key: str | None = None,
    stream: bool = True,
    send_status_fields: bool = True,
    command: list[str] | None = None,
    command_timeout_s: float = 3600.0,
    stray_grace_s: float = STRAY_GRACE_S,
    sample_sink: SampleSink | None = None,
) -> EpisodeResult:
    """Play one episode of `trajectory` against `base_url` (module docstring).

    `sandbox`: a Sandbox (used, not closed) or a SandboxFactory (called with `task`,
    closed at the end); required for `execute` and `command`, optional for
    `recorded` (then the final diff is of the untouched workspace). `task` gives the
    verifier's test command (verified when a sandbox exists and the mode is execute
    or command; else the recorded outcome is carried, `reverified` False).
    `command_timeout_s`: the agent command's deadline in command mode (s);
    `stray_grace_s`: how long (s) an agent whose request the replay server refused
    (a miss: it strayed from the recording) may take to exit on its own before it is
    stopped; the episode's outcome is then "diverged" (`_command_episode`).
    `t0_ns`: the run's perf_counter_ns origin (default: now). `sample_sink` gets each
    model call's engine Sample as the call finishes (SampleSink). Model-call failures and
    sandbox failures never raise: they end the episode with outcome "error"/"timeout"
    and `error` set. Raises ValueError for an unknown mode or a missing sandbox/command.
    """
    if mode not in ("recorded", "execute", "command"):
        raise ValueError(f"mode: unknown mode {mode!r} (expected recorded, execute, command)")
    if mode in ("execute", "command") and sandbox is None:
        raise ValueError(f"mode {mode} needs a sandbox")
    if mode == "command" and not command:
        raise ValueError("mode command needs a command")
    t0 = time.perf_counter_ns() if t0_ns is None else t0_ns
    ep = Episode(
        run_id=run_id,
        sweep_point=sweep_point,
        concurrency=concurrency,
        episode_id=episode_id or uuid.uuid4().hex[:16],
        trajectory_id=trajectory.trajectory_id,
        task_id=task_id_of(trajectory),
        mode=mode,
        worker=worker,
        started_ns=time.perf_counter_ns() - t0,
        ended_ns=0,
    )
    st = _Episode(ep, t0, sample_sink)
    own_client = client is None
    client = client or ModelClient(base_url, api_key=api_key, model=trajectory.model, t0_ns=st.t0)
    sb: Sandbox | None = None
    own_sb = False
    diff: str | None = None
    verdict: Verdict | None = None
    try:
        if sandbox is not None:
            if isinstance(sandbox, Sandbox):
                sb = sandbox
            else:
                sb, own_sb = await sandbox(task), True
        if mode == "command":
            assert sb is not None and command is not None
            await _command_episode(st, trajectory, base_url, sb, command, api_key, command_timeout_s, stray_grace_s)
        else:
            await _play(st, trajectory, client, mode, sb, stream, send_status_fields)
        if sb is not None:
            diff = await sb.diff()
            if mode in ("execute", "command") and task is not None and task.test_command:
                verdict = await verify(sb, task)
        if verdict is None:
            verdict = carried(trajectory)
    except SandboxError as exc:
        st.ep.outcome, st.ep.error = "error", f"sandbox: {exc}"
    except asyncio.CancelledError:
        st.ep.outcome, st.ep.error = "cancelled", "cancelled"
        raise
    finally:
        if own_client:
            await client.aclose()
        if own_sb and sb is not None:
            try:
                await asyncio.shield(sb.close())
            except (SandboxError, asyncio.CancelledError):
                pass
        result = st.finish(diff, verdict)
    return result


async def _play(
    st: _Episode,
    trajectory: Trajectory,
    client: ModelClient,
    mode: str,
    sb: Sandbox | None,
    stream: bool,
    send_status_fields: bool,
) -> None:
    # One MessageLog grows by each turn's block as the agent's context did; a turn that
    # carries a context edit (a pi compaction) rebuilds it with benchmaker.trajectories.context's rule
    # (summary + the history from keep_from), then it grows again. Rebuilding only at
    # edits, and keeping each message's JSON bytes as it is appended, makes the cost per
    # turn that of the new block plus one copy of the history's bytes, not a
    # serialisation of the whole history.
    messages = MessageLog(initial_messages(trajectory))
    responses: list[dict[str, Any]] = []
    observations: list[list[dict[str, Any]]] = []
    last = len(trajectory.turns) - 1
    for i, recorded in enumerate(trajectory.turns):
        if recorded.context_edit is not None:
            messages = MessageLog(
                request_messages(trajectory, i, responses, observations, send_status_fields=send_status_fields)
            )
        call = await _chat(st, client, messages, stream, i, recorded, trajectory.tools)
        rec = st.add_call(call, i, recorded)
        status = call.sample.http_status
        if status is not None and status < 400 and call.headers.get("x-replay-divergence"):
            st.result.server_divergences += 1
        if call.sample.outcome not in SERVED_OUTCOMES:  # served(call)
            st.ep.outcome = _fail_outcome(call)
            st.ep.error = (
                f"turn {i}: {call.outcome}"
                + (f" {call.status}" if call.status else "")
                + (f": {call.error}" if call.error else "")
            )
            return
        response = call.message()
        messages.append(response)
        responses.append(response)
        if i == last:
            return
        if mode == "execute":
            assert sb is not None
            obs_msgs, tool_ns = await _execute_observations(sb, trajectory, call, recorded, st, send_status_fields)
            rec.tool_time_ns = tool_ns
            st.ep.tool_time_ns += tool_ns
        else:
            obs_msgs = [
                observation_message(o, o.tool_call_id, send_status_fields=send_status_fields)
                for o in recorded.observations
            ]
        observations.append(obs_msgs)
        messages.extend(obs_msgs)
        if recorded.user_after:
            messages.extend({"role": "user", "content": u} for u in recorded.user_after)


async def _chat(
    st: _Episode,
    client: ModelClient,
    messages: MessageLog,
    stream: bool,
    turn_index: int,
    recorded: Turn | None,
    tools: list[dict[str, Any]] | None = None,
) -> ChatResult:
    """One model call of the episode, carrying `tools` (the trajectory's recorded tool
    definitions) when there are any; when the episode is cancelled during it (run
    deadline, Ctrl-C), the call still becomes a turn and a `cancelled` sample before
    the cancellation goes on, as the engine counts a request cancelled in flight."""
    s = client.stream(messages, stream=stream, tools=tools) if tools else client.stream(messages, stream=stream)
    try:
        async for _ in s:
            pass
    except asyncio.CancelledError:
        st.add_call(s.result, turn_index, recorded)
        raise
    return s.result


async def _command_episode(
    st: _Episode,
    trajectory: Trajectory,
    base_url: str,
    sb: Sandbox,
    command: list[str],
    api_key: str | None,
    timeout_s: float,
    stray_grace_s: float = STRAY_GRACE_S,
) -> None:
    """Command mode: run the agent command in the sandbox workspace with its base URL
    pointed at a measuring proxy in front of `base_url` (`_MeasuringProxy`). The
    command is an argv list whose items may use {prompt_file} (JSON with system,
    first_user, user_before_turns, model), {workdir}, {base_url} and {python}; it also
    gets OPENAI_BASE_URL, OPENAI_API_KEY, BENCHMAKER_PROMPT_FILE and TMPDIR (a folder
    of its own, removed with everything in it when the episode ends, so an agent's
    temporary files never outlive it) in its environment and runs in the sandbox
    workdir. In a confined LocalSandbox (LocalSandbox.run_agent) it
    runs under bubblewrap with only the proxy reachable (its 127.0.0.1 port relayed to
    the proxy's Unix socket) and the prompt file in the sandbox's agent directory;
    otherwise on this host (so it reaches the proxy on 127.0.0.1), with this process's
    environment less PRIVATE_ENV (the Prefect server's secret and API key, a replay
    server token): an agent never gets them.

    An agent that strays: the first request the replay server refuses (a miss:
    unknown_key, beyond_turns or diverged; the refusal is relayed to the agent) starts
    a grace of `stray_grace_s` s for the agent to exit on its own; then its process
    group is killed (an agent retrying the refused request would otherwise retry for
    minutes). Either way the episode's outcome is "diverged" and its error names the
    turn, the miss kind and the status."""
    ipc = sb.agent_dir() if isinstance(sb, LocalSandbox) and sb.confinement is not None else None
    async with _MeasuringProxy(base_url, st, api_key, unix_dir=ipc) as proxy:
        with tempfile.TemporaryDirectory(prefix="bm-agent-", dir=ipc) as tmp:
            prompt = Path(tmp) / "prompt.json"
            prompt.write_text(
                json.dumps(
                    {
                        "system": trajectory.system,
                        "first_user": trajectory.first_user,
                        "user_before_turns": trajectory.user_before_turns,
                        "model": trajectory.model,
                    }
                )
            )
            agent_tmp = Path(tmp) / "tmp"
            agent_tmp.mkdir(mode=0o700)
            if ipc is not None:  # the sandbox's user reads the prompt and writes in its tmp
                os.chmod(tmp, 0o755)
                os.chmod(prompt, 0o644)
                os.chmod(agent_tmp, 0o1777)
            subst = {
                "prompt_file": str(prompt),
                "workdir": sb.workdir,
                "base_url": proxy.url + "/v1",
                "python": sys.executable,
            }
            argv = [a.format(**subst) for a in command]
            agent_env = {
                "OPENAI_BASE_URL": proxy.url + "/v1",
                "OPENAI_API_KEY": api_key or "replay",
                "BENCHMAKER_PROMPT_FILE": str(prompt),
                "TMPDIR": str(agent_tmp),
            }
            t0 = time.perf_counter_ns()
            script = " ".join(shlex.quote(a) for a in argv)
            # spawned by the sandbox's spawner (off the measuring loop when it is a started
            # factory's helper, benchmaker.agent.sandbox.spawner); its process group is killed
            # at the timeout, on cancellation and when it exits
            if isinstance(sb, LocalSandbox):
                agent = sb.run_agent(
                    argv, env=agent_env, timeout_s=timeout_s, proxy_port=proxy.port, proxy_socket=proxy.unix_path
                )
            else:  # a remote sandbox: the agent runs on this host, beside the proxy
                spawner = getattr(sb, "spawner", None) or InlineSpawner()
                inherited = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
                agent = spawner.run(argv, cwd=sb.workdir, env={**inherited, **agent_env}, timeout_s=timeout_s)
            res = await _until_strayed(asyncio.ensure_future(agent), proxy.strayed, stray_grace_s)
            wall = time.perf_counter_ns() - t0
            # tool time: the agent's wall time not spent awaiting the model
            st.ep.tool_time_ns = max(0, wall - st.ep.model_time_ns)
            if proxy.stray is not None:
                how = (
                    f"stopped {stray_grace_s:g} s later"
                    if res is None
                    else f"it exited with code {res.exit_code} after it"
                )
                st.ep.outcome, st.ep.error = "diverged", f"{proxy.stray}; {how}"
            elif res is None or res.timed_out:
                st.ep.outcome, st.ep.error = "timeout", f"agent command timed out after {timeout_s:g} s: {script}"
            elif res.exit_code != 0:
                st.ep.outcome = "error"
                st.ep.error = f"agent exited with code {res.exit_code}: {res.stdout[-500:].decode(errors='replace')}"
            elif any(not served(c) for c in st.calls):
                bad = next(c for c in st.calls if not served(c))
                st.ep.outcome = _fail_outcome(bad)
                st.ep.error = f"model call failed: {bad.outcome} {bad.status or ''}"


async def _until_strayed(agent: asyncio.Future[Any], strayed: asyncio.Event, grace_s: float) -> Any:
    """The agent run's result, or None when `strayed` was set and the agent had not
    finished `grace_s` s later (then it is cancelled: its process group is killed).
    Cancelled itself, it cancels the agent run too."""
    watch = asyncio.ensure_future(strayed.wait())
    try:
        await asyncio.wait({agent, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not agent.done():
            await asyncio.wait({agent}, timeout=grace_s)
        if agent.done():
            return agent.result()
        agent.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await agent
        return None
    finally:
        watch.cancel()
        if not agent.done():
            agent.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await agent


class _MeasuringProxy:
    """A loopback model endpoint in front of `base_url` for command mode: each agent
    request is forwarded with ModelClient (so model time, TTFT and usage are measured
    exactly as in the other modes and recorded as turns of the episode) and answered as
    it arrives. OpenAI chat completions (`/v1/chat/completions`) is re-sent as the chat
    client's body and answered as SSE chunks (re-serialised, same JSON objects) or one
    JSON body; OpenAI Responses, Anthropic Messages and Gemini (their standard paths,
    benchmaker.agent.wire_calls) are forwarded byte for byte with the agent's headers (its
    own key replaced by `api_key`) and relayed byte for byte. An upstream HTTP error is
    answered with its status and body; another path gets a 404 naming it. A request the
    replay server answers as side traffic (header `x-replay-side`: a title request, a
    router call) is relayed but is no turn of the episode. The first call the replay
    server refused as a miss sets `strayed` and describes itself in `stray`."""

    def __init__(self, base_url: str, st: _Episode, api_key: str | None, unix_dir: str | None = None):
        self.client = ModelClient(base_url, api_key=api_key, t0_ns=st.t0)
        self.api_key = api_key
        self.st = st
        self.url = ""
        self.port = 0
        self.strayed = asyncio.Event()
        self.stray: str | None = None
        # also served on a Unix socket in `unix_dir` (a confined agent's only way out)
        self.unix_path = os.path.join(unix_dir, "proxy.sock") if unix_dir is not None else None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "bad JSON"}}, status=400)
        messages = body.pop("messages", [])
        stream = bool(body.pop("stream", False))
        body.pop("stream_options", None)
        n_assistant = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        return await self._relay(request, self.client.stream(messages, stream=stream, **body), stream, n_assistant)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        payload = await request.read()
        try:
            call = wire_call(request.path, request.query_string, payload)
        except ValueError as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        if call is None:
            return web.json_response({"error": {"message": f"no model API at {request.path}"}}, status=404)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        # a Gemini client's `key=` query is its own key, as the headers above
        target = request.rel_url.with_query([(k, v) for k, v in request.rel_url.query.items() if k != "key"])
        s = self.client.forward(str(target), payload, stream=call.stream, headers=headers, parser=call.parser)
        return await self._relay(request, s, call.stream, call.turn_index)

    async def _relay(self, request: web.Request, s: ChatStream, stream: bool, turn_index: int) -> web.StreamResponse:
        resp: web.StreamResponse | None = None
        async for data in s:  # relayed byte for byte as they arrive
            if resp is None:
                resp = web.StreamResponse(
                    status=s.status or 200,
                    headers={"Content-Type": "text/event-stream" if stream else "application/json"},
                )
                await resp.prepare(request)
            await resp.write(data)
        call = s.result
        if _SIDE_HEADER not in call.headers:  # side traffic the replay server answered is no turn
            rec = self.st.add_call(call, turn_index, None)
            if rec.miss_kind is not None and self.stray is None:
                self.stray = f"turn {turn_index}: the replay server refused the agent's request ({rec.miss_kind}, HTTP {call.status})"
                self.strayed.set()
        if resp is None:
            if call.outcome == Outcome.HTTP_ERROR.value:
                return web.Response(status=call.status or 502, text=call.error or "", content_type="application/json")
            return web.json_response({"error": {"message": call.error or call.outcome}}, status=502)
        await resp.write_eof()
        return resp

    async def __aenter__(self) -> _MeasuringProxy:
        app = web.Application()
        for path in ("/v1/chat/completions", "/chat/completions"):
            app.router.add_post(path, self._handle)
        app.router.add_post("/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = socket.create_server(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        await web.SockSite(self._runner, sock).start()
        if self.unix_path is not None:
            await web.UnixSite(self._runner, self.unix_path).start()
            os.chmod(self.unix_path, 0o666)  # the sandbox's user connects; its directory is private
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
        await self.client.aclose()


# ---------------------------------------------------------------------------------
# Many episodes at concurrency C: the engine runs them (benchmaker.workloads.agent_episode,
# benchmaker.sweep.point_run); the proof below checks that C really ran together.


@dataclass(slots=True)
class ConcurrencyProof:
    """Whether C episodes really ran together: `max_in_flight` is
    the most episodes in flight at once; `all_started_before_first_finish` whether
    min(C, n_episodes) episodes had started before the first one finished. `valid`
    needs both; `reason` says why not. A serial executor has max_in_flight 1 and fails
    for C >= 2."""

    concurrency: int
    n_episodes: int
    max_in_flight: int
    all_started_before_first_finish: bool
    valid: bool
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def concurrency_proof(intervals: Iterable[tuple[int, int]], concurrency: int) -> ConcurrencyProof:
    """The ConcurrencyProof of episodes given as (started_ns, ended_ns) pairs. Ties:
    an episode ending at the instant another starts does not overlap it."""
    iv = list(intervals)
    events = sorted([(s, 1) for s, _ in iv] + [(e, -1) for _, e in iv], key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    target = min(concurrency, len(iv))
    first_end = min((e for _, e in iv), default=0)
    started_before = sum(1 for s, _ in iv if s < first_end)
    overlap = started_before >= target
    reasons = []
    if best < target:
        reasons.append(f"max episodes in flight {best} < target {target}")
    if not overlap:
        reasons.append(f"only {started_before} of {target} episodes started before the first finished")
    return ConcurrencyProof(
        concurrency,
        len(iv),
        best,
        overlap,
        not reasons and len(iv) > 0,
        "; ".join(reasons) if reasons else (None if iv else "no episodes"),
    )
