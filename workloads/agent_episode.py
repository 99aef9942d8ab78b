"""Agent episodes of recorded trajectories as an engine workload.

One instrument: an episode is the engine's unit of work. `EpisodeWorkload` is a
CallableWorkload (benchmaker.engine.types): the runner's load model decides when episode `seq`
starts (`closed:C` = C episodes in flight; `poisson:R`, `constant:R`, `trace:FILE`
start episodes at a rate) and stamps it like a request (intended, sent = just before
the episode, end = just after); `execute` plays one episode with
benchmaker.agent.harness.run_episode.

    wl = EpisodeWorkload(plan, "http://127.0.0.1:8000", point_dir, run_id="r1", sweep_point="c8")
    runner = BenchRunner(BenchConfig(load="closed:8", max_requests=len(plan), ...), workload=wl,
                         samples_name="episode_samples.jsonl")

Files in `out_dir`, each line written as its call or episode finishes and handed to the
OS at most `FLUSH_S` later (a flush task, as the engine's samples; no write syscall per
episode on the measuring loop), and at `aclose()`:

    samples.jsonl    one engine Sample per model call (the requests): parsed by the
                     engine's OpenAI parser (benchmaker.agent.model_client), with finish_reason,
                     bytes, token event stamps; lane "agent", seq = call order in this
                     workload, phase/stage of its episode, meta {episode_id, turn_index,
                     miss_kind, trajectory_id}
    episodes.jsonl   benchmaker.agent.episodes.Episode: what only an episode has (tool time, misses,
                     divergences, diff, verdict)
    turns.jsonl      benchmaker.agent.episodes.TurnRecord: per turn, tool time, byte equality, miss

The runner's own sample of an episode (the unit of work; its `samples_name` file) has:
outcome ok when the episode ended ok, timeout when it timed out, else the failing
call's outcome (protocol_error when no call failed, e.g. a sandbox error) with the
episode's error; `first_token_ns` of its first call; usage sums only when every call
carried usage; bytes summed over its calls; meta {episode_id, trajectory_id, task_id,
slot, n_turns, n_requests, misses, model_time_ms, tool_time_ms}.

Episode `seq` plays `plan[(index_start + seq * index_step) mod len(plan)]` with id
`<episode_prefix>-<index>` (a shard k of N takes k, k + N, ... of one cycle). Its
`worker` is its slot: the lowest slot number not held by an episode in flight (closed
loop: 0 .. C-1, as the point's workers were numbered).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from benchmaker.agent.harness import STRAY_GRACE_S, EpisodeResult, SandboxFactory, run_episode, served
from benchmaker.agent.model_client import ModelClient
from benchmaker.agent.verifier import TaskSpec, task_id_of
from benchmaker.engine.bundle import SampleWriter
from benchmaker.engine.records import Outcome, Sample
from benchmaker.trajectories.trajectory import Trajectory
from benchmaker.workloads.agent import start_model_transport

__all__ = ["EpisodeWorkload", "FLUSH_S"]

FLUSH_S = 0.2
"""Seconds between flushes of a workload's files (benchmaker.engine.runner flushes samples so)."""

_OUTCOME = {"ok": Outcome.OK.value, "timeout": Outcome.TIMEOUT.value, "cancelled": Outcome.CANCELLED.value}


class EpisodeWorkload:
    """Plays one episode per `execute` call (module docstring); a CallableWorkload.

    `plan`: the trajectories, in order (benchmaker.sweep.sweep.episode_plan); `base_url`: the
    OpenAI-compatible endpoint (e.g. the replay server's); `out_dir`: where samples,
    episodes and turns files go (created by `start()`, appended to). `concurrency` is
    recorded on each episode line (the point's target; None for open loop). `mode`,
    `sandbox_factory`, `tasks` (task id -> TaskSpec), `command`, `stray_grace_s` (s), `api_key`,
    `stream`, `send_status_fields`: as benchmaker.agent.harness.run_episode. `transport`: the engine
    transport the model calls go on, one per workload (per point, or per engine worker
    process), shared by its episodes (`raw` default: the engine's HTTP/1.1 client;
    `aiohttp` selectable; benchmaker.workloads.agent.start_model_transport). `keep_results`: keep every
    EpisodeResult in `results` (finish order); `intervals` always holds each finished
    episode's (started_ns, ended_ns). Raises ValueError for an empty plan.
    """

    def __init__(
        self,
        plan: Sequence[Trajectory],
        base_url: str,
        out_dir: Path,
        *,
        run_id: str,
        sweep_point: str | None,
        concurrency: int | None = None,
        mode: str = "recorded",
        sandbox_factory: SandboxFactory | None = None,
        tasks: dict[str, TaskSpec] | None = None,
        command: list[str] | None = None,
        stray_grace_s: float = STRAY_GRACE_S,
        api_key: str | None = None,
        stream: bool = True,
        send_status_fields: bool = True,
        episode_prefix: str | None = None,
        index_start: int = 0,
        index_step: int = 1,
        keep_results: bool = False,
        per_worker_files: bool = False,
        transport: str = "raw",
    ) -> None:
        if not plan:
            raise ValueError("plan: expected at least one trajectory (got none)")
        self.name = "agent-episode"
        self.plan = list(plan)
        self.base_url = base_url
        self.out_dir = Path(out_dir)
        self.run_id = run_id
        self.sweep_point = sweep_point
        self.concurrency = concurrency
        self.mode = mode
        self.sandbox_factory = sandbox_factory
        self.tasks = tasks or {}
        self.command = command
        self.stray_grace_s = stray_grace_s
        self.stream = stream
        self.send_status_fields = send_status_fields
        self.prefix = episode_prefix or sweep_point or run_id
        self.index_start = index_start
        self.index_step = index_step
        self.keep_results = keep_results
        self.per_worker_files = per_worker_files
        self.transport = transport
        self.results: list[EpisodeResult] = []
        self.intervals: list[tuple[int, int]] = []  # (started_ns, ended_ns) of each finished episode
        self._api_key = api_key
        self._transport: Any = None
        self._flusher: asyncio.Task[None] | None = None
        self._writer: SampleWriter | None = None
        self._episodes: Any = None
        self._turns: Any = None
        self._n_calls = 0
        self._free_slots: list[int] = []
        self._next_slot = 0

    def describe(self) -> dict[str, Any]:
        """The manifest's description of this workload (no secrets)."""
        return {
            "type": "agent-episode",
            "url": self.base_url,
            "mode": self.mode,
            "transport": self.transport,
            "episodes_in_plan": len(self.plan),
            "trajectories": sorted({t.trajectory_id for t in self.plan})[:20],
        }

    async def start(self) -> None:
        """Open the files and the transport shared by every episode's client, on this
        loop before the clock (no connection cap: C episodes in flight need C
        connections). With
        `per_worker_files` (one workload per engine worker process, benchmaker.engine.workers)
        the files are `samples-w<k>.jsonl`, `episodes-w<k>.jsonl`, `turns-w<k>.jsonl`,
        k being the worker of the first episode's sample, opened when it starts."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if not self.per_worker_files:
            self._open("")
        self._transport = await start_model_transport(self.transport)
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        # a sandbox factory with a start() (benchmaker.agent.sandbox.LocalSandboxFactory) starts its
        # process spawner now, before the clock, so no episode forks from this loop
        start = getattr(self.sandbox_factory, "start", None) if self.mode != "recorded" else None
        if start is not None:
            await start()

    async def aclose(self) -> None:
        """Close the transport, the sandbox factory (when it has aclose()) and the files
        (everything written is flushed)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None
        aclose = getattr(self.sandbox_factory, "aclose", None)
        if aclose is not None:
            await aclose()
        for f in (self._episodes, self._turns):
            if f is not None and not f.closed:
                f.close()
        if self._writer is not None:
            self._writer.close()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            self._flush()

    def _flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._episodes.flush()
            self._turns.flush()

    def _open(self, suffix: str) -> None:
        self._writer = SampleWriter(self.out_dir / f"samples{suffix}.jsonl")
        self._episodes = open(self.out_dir / f"episodes{suffix}.jsonl", "ab")
        self._turns = open(self.out_dir / f"turns{suffix}.jsonl", "ab")

    @property
    def n_calls(self) -> int:
        """Model calls written to samples.jsonl so far."""
        return self._n_calls

    def _take_slot(self) -> int:
        if self._free_slots:
            return heapq.heappop(self._free_slots)
        self._next_slot += 1
        return self._next_slot - 1

    async def execute(self, seq: int, sample: Sample, t0_ns: int) -> str | None:
        """Play episode `seq` (module docstring) and fill the runner's `sample` of it."""
        if self._writer is None:
            if not self.per_worker_files or self._transport is None:
                raise RuntimeError("EpisodeWorkload.start() was not awaited")
            self._open(f"-w{sample.worker}")
        index = self.index_start + seq * self.index_step
        traj = self.plan[index % len(self.plan)]
        tid = task_id_of(traj)
        writer = self._writer
        assert writer is not None, "opened above"
        phase, stage = sample.phase, sample.stage

        def sink(s: Sample) -> None:
            s.seq = self._n_calls
            self._n_calls += 1
            s.phase, s.stage = phase, stage
            writer.write(s)

        slot = self._take_slot()
        client = ModelClient(
            self.base_url, api_key=self._api_key, model=traj.model, transport=self._transport, t0_ns=t0_ns
        )
        try:
            res = await run_episode(
                traj,
                self.base_url,
                mode=self.mode,
                sandbox=self.sandbox_factory,
                task=self.tasks.get(tid) if tid else None,
                run_id=self.run_id,
                sweep_point=self.sweep_point,
                concurrency=self.concurrency,
                episode_id=f"{self.prefix}-{index}",
                worker=slot,
                t0_ns=t0_ns,
                client=client,
                api_key=self._api_key,
                stream=self.stream,
                send_status_fields=self.send_status_fields,
                command=self.command,
                stray_grace_s=self.stray_grace_s,
                sample_sink=sink,
            )
        finally:
            heapq.heappush(self._free_slots, slot)
        # orjson writes the dataclasses as their asdict() would, ~10x faster
        self._episodes.write(orjson.dumps(res.episode, option=orjson.OPT_APPEND_NEWLINE))
        self._turns.write(b"".join(orjson.dumps(t, option=orjson.OPT_APPEND_NEWLINE) for t in res.turns))
        self.intervals.append((res.episode.started_ns, res.episode.ended_ns))
        if self.keep_results:
            self.results.append(res)
        _fill_episode_sample(sample, res, slot)
        return None


def _fill_episode_sample(sample: Sample, res: EpisodeResult, slot: int) -> None:
    ep = res.episode
    calls = res.calls
    sample.meta = {
        "episode_id": ep.episode_id,
        "trajectory_id": ep.trajectory_id,
        "task_id": ep.task_id,
        "slot": slot,
        "n_turns": ep.n_turns,
        "n_requests": ep.n_requests,
        "misses": ep.misses_unknown_key + ep.misses_beyond_turns + ep.misses_diverged,
        "model_time_ms": ep.model_time_ns / 1e6,
        "tool_time_ms": ep.tool_time_ns / 1e6,
    }
    if calls:
        first = calls[0].sample
        sample.first_byte_ns = first.first_byte_ns
        sample.first_token_ns = first.first_token_ns
        sample.first_content_ns = first.first_content_ns
        sample.http_status = calls[-1].sample.http_status
        sample.bytes_sent = sum(c.sample.bytes_sent for c in calls)
        sample.bytes_received = sum(c.sample.bytes_received for c in calls)
        sample.finish_reason = calls[-1].sample.finish_reason
    if ep.usage_complete:
        sample.usage_present = True
        sample.prompt_tokens, sample.output_tokens = ep.prompt_tokens, ep.output_tokens
    outcome = _OUTCOME.get(ep.outcome)
    if outcome is None:  # "error": the failing call's outcome, else (sandbox, agent command) protocol_error
        failed = next((c for c in calls if not served(c)), None)
        outcome = failed.outcome if failed is not None else Outcome.PROTOCOL_ERROR.value
    sample.outcome = outcome
    if outcome != Outcome.OK.value:
        sample.error = ep.error or ep.outcome
