"""The runner: sends requests on a load model's timeline, times them, writes samples.

    runner = BenchRunner(BenchConfig(load="poisson:50", duration_s=30), workload=wl)
    result = runner.run_sync()          # or: await runner.run()
    result.summary["run"]["ttft_ms"]["p99"], result.bundle_dir

Several lanes share one transport, one clock and one in-flight cap:

    BenchRunner(cfg, lanes=[Lane("chat", chat_wl, "poisson:5"),
                            Lane("rag", rag_wl, "stages:2,8@30s")])

Timing (docs/metrics.md): every stamp is `time.perf_counter_ns() - t0`. `sent_ns` is taken
after the workload built the request and the pre-request hooks ran, just before the
transport call; `end_ns` when the body ended. Post-response hooks run after `end_ns`.
Open loop: an arrival is dispatched at its intended offset whatever earlier requests
do; when `max_in_flight` is reached it waits for a slot (`overflow="late"`, the wait
shows as schedule lag) or is recorded as `dropped`. Closed loop: each worker sends its
next request when the previous one ended (intended = sent), after the model's think
time, or after the time a workload's optional `next_think_s(seq) -> float | None`
returns (None stops that worker): multi-turn sessions (workloads/trajectory_replay.py).

The run ends when sending stopped (duration, max_requests, end of schedule) and every
request finished, or at `duration + drain_s`, when stragglers are cancelled and
written as `cancelled`. Cancelling the run (Ctrl-C) does the same and writes a partial
summary. Single-request failures never raise: they become samples with an outcome.

A workload with an async `execute(seq, sample, t0_ns)` (benchmaker.engine.types.CallableWorkload:
a sandbox lifecycle, an agent episode) is called in place of the transport, timed the
same way (`sent_ns` just before the call, `end_ns` just after); its optional `start()`
and `aclose()` run before the clock starts and after the run.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from benchmaker.engine.bundle import SampleWriter, build_manifest, new_run_id, wall_ns, write_json_atomic
from benchmaker.engine.ceiling import calibration_for_manifest
from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError, ConnectTimeout, RunFailed
from benchmaker.engine.load_models import NS_PER_S, ClosedLoop, LoadModel, load_model_of
from benchmaker.engine.monitors import Monitor, MonitorRunner
from benchmaker.engine.records import Outcome, Phase, RequestSpec, Sample
from benchmaker.engine.request import Deadlines, RequestExchange
from benchmaker.engine.selfcheck import LoopLagMonitor, connect_timeout_cause
from benchmaker.engine.summary import build_summary
from benchmaker.engine.trace import TraceWriter, shard_trace_path
from benchmaker.engine.transport import make_transport
from benchmaker.engine.types import (
    CallableWorkload,
    PostResponseHook,
    PreRequestHook,
    StreamParser,
    Transport,
    Workload,
)

_WARMUP, _MEASURE, _COOLDOWN = Phase.WARMUP.value, Phase.MEASURE.value, Phase.COOLDOWN.value
_OK = Outcome.OK.value


@dataclass
class Lane:
    """A (workload, load model) pair sharing the run's endpoint, clock and cap.
    `load` is a rate spec or a LoadModel; None takes the config's `load`."""

    name: str
    workload: Workload | CallableWorkload
    load: str | LoadModel | None = None
    max_requests: int | None = None


@dataclass
class LiveStats:
    """Counters for a live display, updated as requests go: sent, finished, errors,
    in flight, and the latest E2E/TTFT values in ms (bounded deques)."""

    sent: int = 0
    finished: int = 0
    ok: int = 0
    errors: int = 0
    dropped: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    recent_e2e_ms: deque = field(default_factory=lambda: deque(maxlen=2000))
    recent_ttft_ms: deque = field(default_factory=lambda: deque(maxlen=2000))


@dataclass
class RunResult:
    """What a run produced: its id, bundle directory, summary (as in summary.json),
    and whether its verdict is valid."""

    run_id: str
    bundle_dir: Path
    summary: dict[str, Any]

    @property
    def valid(self) -> bool:
        return bool(self.summary["verdict"]["valid"])

    @property
    def samples_path(self) -> Path:
        return self.bundle_dir / "samples.jsonl"


def lane_loads(config: BenchConfig, lanes: Sequence[Lane], base_dir: Path | None = None) -> dict[str, LoadModel]:
    """Each lane's load model by lane name, in lane order: the lane's own `load` (a spec
    or a LoadModel), else `config.load`; spec paths (trace files) relative to
    `base_dir`. Raises ConfigError for two lanes of one name or a bad spec."""
    names = [lane.name for lane in lanes]
    if len(set(names)) != len(names):
        raise ConfigError(f"lanes: names must be unique (got {names})")
    out: dict[str, LoadModel] = {}
    for lane in lanes:
        load = lane.load if lane.load is not None else config.load
        out[lane.name] = load_model_of(load, base_dir=base_dir)
    return out


class _Boxed:
    """The result of run_on_fresh_loop's main task, behind a constant repr (see there)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<result>"


async def _boxed(coro: Any) -> _Boxed:
    return _Boxed(await coro)


def run_on_fresh_loop(coro: Any) -> Any:
    """Run `coro` to completion on a new event loop: uvloop's when it is installed,
    else asyncio's. Returns its result; KeyboardInterrupt propagates.

    The main task returns the result in a box with a constant repr: in the main thread,
    asyncio.run and uvloop.run (Python 3.11) put the SIGINT handler back through
    signal.getsignal, whose enum lookup formats the repr of the handler, a partial
    holding the finished task, result included, twice: 28-41 ms for a 453-turn
    episode's result."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_boxed(coro)).value
    return uvloop.run(_boxed(coro)).value


async def run_on_own_loop(coro: Any) -> Any:
    """Await `coro` on a new event loop in a thread of its own (run_on_fresh_loop) and
    return its result.

    A measurement awaited inside a Prefect task shares that task's event loop with
    Prefect's own work (API calls, log shipping, progress artifacts), and each of those
    callbacks delays every token event and send queued behind it: event-loop lag that
    the verdict rightly counts against the run (docs/metrics.md "achieved").
    On its own loop the measurement shares only the GIL with the caller, which the
    interpreter hands over every `sys.getswitchinterval()` (5 ms) at most.

    Cancelling the awaiting task cancels `coro` on its loop, waits until it has finished
    (a run writes its partial bundle then), and raises CancelledError. Exceptions of
    `coro` propagate."""
    started = threading.Event()
    inner: dict[str, Any] = {}

    async def main() -> Any:
        inner["loop"], inner["task"] = asyncio.get_running_loop(), asyncio.current_task()
        started.set()
        return await coro

    done = asyncio.ensure_future(asyncio.to_thread(run_on_fresh_loop, main()))
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        if await asyncio.to_thread(started.wait, 5.0):  # its loop may not have started yet
            try:
                inner["loop"].call_soon_threadsafe(inner["task"].cancel)
            except RuntimeError:  # its loop already closed: `coro` finished
                pass
        try:
            await done
        except BaseException:  # the caller's cancellation is what propagates
            pass
        raise


async def _call_hook(hook: Any, *args: Any) -> Any:
    out = hook(*args)
    if inspect.isawaitable(out):
        out = await out
    return out


class BenchRunner:
    """Runs one benchmark and writes its bundle (see module docstring).

    Raises ConfigError when neither `workload` nor `lanes` is given or a lane's load
    does not parse. `transport` overrides the config's transport (e.g. a NullTransport).
    `worker`/`shards` run shard `worker` of `shards` of the schedule (scale-out).
    `monitors` (benchmaker.engine.monitors) are sampled from t0 until sending and draining
    ended, into `monitor.jsonl` (shard 0 only). `record_trace` writes every request
    built, with its intended send time, to that file (benchmaker.engine.trace).
    `start_at_ns` is t0 on perf_counter_ns (a shared start); `ready`, when given, is
    awaited once the run is set up (transport open, workloads started, manifest built)
    and returns that instant instead (a shards' readiness barrier,
    benchmaker.engine.shared_start); what it raises is raised, the transport closed.
    """

    def __init__(
        self,
        config: BenchConfig,
        *,
        workload: Workload | CallableWorkload | None = None,
        lanes: Sequence[Lane] | None = None,
        transport: Transport | None = None,
        pre_hooks: Sequence[PreRequestHook] = (),
        post_hooks: Sequence[PostResponseHook] = (),
        worker: int = 0,
        shards: int = 1,
        samples_name: str = "samples.jsonl",
        base_dir: Path | None = None,
        manifest_extra: dict[str, Any] | None = None,
        monitors: Sequence[Monitor] = (),
        record_trace: Path | None = None,
        start_at_ns: int | None = None,
        ready: Callable[[], Awaitable[int]] | None = None,
    ):
        if lanes is None:
            if workload is None:
                raise ConfigError("give exactly one of workload= or lanes=")
            lanes = [Lane("default", workload)]
        elif workload is not None:
            raise ConfigError("give exactly one of workload= or lanes=")
        self.config = config
        self.lanes = list(lanes)
        self._models = list(lane_loads(config, self.lanes, base_dir).values())
        self._transport_override = transport
        self._pre_hooks = list(pre_hooks)
        self._post_hooks = list(post_hooks)
        self.worker = worker
        self.shards = shards
        self.run_id = config.run_id or new_run_id(config.kind)
        self.bundle_dir = Path(config.out_dir) / self.run_id
        self._samples_name = samples_name
        self._manifest_extra = manifest_extra
        self._calibration: dict[str, Any] | None = None  # this host's ceiling, read with the manifest
        self._start_at_ns = start_at_ns
        self._ready = ready
        self.live = LiveStats()
        self._seq = 0
        self._stop_sending = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()  # made anew by run(); binds to its loop on first wait
        self._t0 = 0
        self._writer: SampleWriter  # opened by run()
        self._transport: Any = None
        self.result: RunResult | None = None
        self._t0_wall: int | None = None
        to = config.timeouts
        self._timeouts_s = [t for t in (to.total_s, to.ttft_s, to.idle_s) if t is not None]
        self._deadlines: Deadlines | None = None  # made by run() when a deadline is set
        self._loop: Any = None  # the running loop, set by run()
        # phase boundaries in ns, computed once (the hot path compares ints)
        self._warmup_ns = config.warmup_s * NS_PER_S
        self._cooldown_from_ns = (
            (config.duration_s - config.cooldown_s) * NS_PER_S
            if config.duration_s is not None and config.cooldown_s
            else None
        )
        self._accepts = {lane.name: getattr(lane.workload, "accepts_status", None) for lane in self.lanes}
        self._executes = {lane.name: getattr(lane.workload, "execute", None) for lane in self.lanes}
        self._monitors = list(monitors) if worker == 0 else []
        self._monitor_runner: MonitorRunner | None = None
        self._record_trace = shard_trace_path(record_trace, worker, shards) if record_trace is not None else None
        self._trace: TraceWriter | None = None
        # open-loop in-flight cap: max_in_flight, else what this host can hold (docs/benchmark-an-endpoint.md)
        self._cap, self._cap_source = config.in_flight_cap()
        self._cap_waits = 0  # open-loop arrivals that waited for a slot under the cap
        self._loop_lag: LoopLagMonitor | None = None
        # the stop signal (SIGTERM, SIGHUP) that interrupted the run, None for Ctrl-C / cancel
        self.interrupted_by: str | None = None

    # -- public -------------------------------------------------------------------------

    def run_sync(self) -> RunResult:
        """Run on a fresh event loop (uvloop when installed) and return the result."""
        return run_on_fresh_loop(self.run())

    async def run(self) -> RunResult:
        """Run the benchmark; see the module docstring. Re-raises CancelledError after
        writing the partial bundle when the run itself is cancelled (Ctrl-C)."""
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        self.bundle_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SampleWriter(self.bundle_dir / self._samples_name)
        self._transport = self._transport_override or make_transport(
            cfg.transport, connect_timeout_s=cfg.timeouts.connect_s
        )
        self._slot_freed = asyncio.Event()
        if self._record_trace is not None:
            self._trace = TraceWriter(self._record_trace)
        start = getattr(self._transport, "start", None)
        if start is not None:
            await start()
        started: list[Any] = []
        try:
            started = await _start_workloads(self.lanes, self._executes)
            # everything slow (git, package versions, file writes) happens before the clock
            # starts; the wall-clock t0 is taken right beside the monotonic one
            manifest = self._manifest(0)
            if self._ready is not None:
                self._start_at_ns = await self._ready()
        except BaseException:
            self._writer.close()
            await self._transport.aclose()
            for wl in started:
                await wl.aclose()
            raise
        monitor = self._loop_lag = LoopLagMonitor()
        interrupted = False
        if self._start_at_ns is not None:  # shards of one run share one t0 (CLOCK_MONOTONIC)
            while (left_ns := self._start_at_ns - time.perf_counter_ns()) > 1_000_000:
                await asyncio.sleep((left_ns - 1_000_000) / NS_PER_S)
            while time.perf_counter_ns() < self._start_at_ns:
                await asyncio.sleep(0)
        t0_wall = self._t0_wall = wall_ns()
        self._t0 = self._start_at_ns if self._start_at_ns is not None else time.perf_counter_ns()
        manifest["t0_wall_ns"] = t0_wall
        manifest["created_at"] = datetime.fromtimestamp(t0_wall / 1e9, UTC).isoformat()
        if self.worker == 0:
            write_json_atomic(self.bundle_dir / "manifest.json", manifest)
        cpu0 = time.process_time()
        monitor.start()
        if self._monitors:
            self._monitor_runner = MonitorRunner(self._monitors, self.bundle_dir / "monitor.jsonl", self._t0)
            self._monitor_runner.start()
        flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        if self._timeouts_s:
            to = cfg.timeouts
            self._deadlines = Deadlines(total_s=to.total_s, ttft_s=to.ttft_s, idle_s=to.idle_s)
        lane_tasks = [
            asyncio.get_running_loop().create_task(self._drive_lane(lane, model))
            for lane, model in zip(self.lanes, self._models, strict=True)
        ]
        stop_signals = _install_stop_signals(self)
        try:
            await self._await_end(lane_tasks)
        except asyncio.CancelledError:
            interrupted = True
        finally:
            _restore_stop_signals(stop_signals)  # a second signal while the bundle is written acts as before
            for t in lane_tasks:
                t.cancel()
            await asyncio.gather(*lane_tasks, return_exceptions=True)
            await self._cancel_in_flight()
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            if self._deadlines is not None:
                await self._deadlines.aclose()
            await monitor.stop()
            if self._monitor_runner is not None:
                await self._monitor_runner.stop()
            if self._trace is not None:
                self._trace.close()
            wall_s = (time.perf_counter_ns() - self._t0) / NS_PER_S
            cpu_s = time.process_time() - cpu0
            self._writer.close()
            try:
                await self._transport.aclose()
            except Exception:  # closing must not hide the run's result
                pass
            for wl in started:
                try:
                    await wl.aclose()
                except Exception:
                    pass
        w = self._writer
        if w.error is not None:
            raise RunFailed(w.loss("samples", "samples") + " and no summary was written")
        summary = self._summarize(monitor, interrupted, wall_s, cpu_s)
        self.result = RunResult(self.run_id, self.bundle_dir, summary)
        _pass_on_stop_signal(stop_signals, self.interrupted_by)
        if interrupted:
            raise asyncio.CancelledError("run interrupted; partial bundle written")
        lost = [out.loss() for out in (self._trace, self._monitor_runner) if out is not None and out.error is not None]
        if lost:  # the samples and summary are whole: a failed run that says what it kept
            raise RunFailed(f"{'; '.join(lost)}; the samples and summary are complete in {self.bundle_dir}")
        return self.result

    # -- scheduling ---------------------------------------------------------------------

    def _deadline_ns(self) -> int | None:
        d = self.config.duration_s
        return round(d * NS_PER_S) if d is not None else None

    def _take_seq(self, lane: Lane, lane_count: list[int]) -> int | None:
        """Next sequence number, or None when max_requests (run or lane) is reached."""
        mr = self.config.max_requests
        if self._stop_sending or (mr is not None and self._seq >= self._share(mr)):
            self._stop_sending = True
            return None
        if lane.max_requests is not None and lane_count[0] >= lane.max_requests:
            return None
        lane_count[0] += 1
        seq = self._seq * self.shards + self.worker
        self._seq += 1
        return seq

    def _share(self, n: int) -> int:
        base, extra = divmod(n, self.shards)
        return base + (1 if self.worker < extra else 0)

    async def _drive_lane(self, lane: Lane, model: LoadModel) -> None:
        if isinstance(model, ClosedLoop):
            n = model.workers_for(self.worker, self.shards)
            await asyncio.gather(*(self._closed_worker(lane, model) for _ in range(n)))
        else:
            await self._open_lane(lane, model)

    async def _open_lane(self, lane: Lane, model: LoadModel) -> None:
        pc = time.perf_counter_ns
        t0 = self._t0
        deadline = self._deadline_ns()
        cap = self._cap
        drop = self.config.overflow == "drop"
        count = [0]
        loop = asyncio.get_running_loop()
        for intended_ns, stage in model.arrivals(seed=self.config.seed, shard=self.worker, shards=self.shards):
            if deadline is not None and intended_ns >= deadline:
                break
            delay_ns = intended_ns - (pc() - t0)
            if delay_ns > 0:
                # uvloop schedules timers from its cached, ms-granular clock, which runs
                # behind the real one: add that staleness so the timer does not fire
                # early, then yield for the sub-ms rest so no request is sent early
                stale_s = time.monotonic() - loop.time()
                await asyncio.sleep(delay_ns / NS_PER_S + (stale_s if stale_s > 0 else 0.0))
                while pc() - t0 < intended_ns:
                    await asyncio.sleep(0)
            seq = self._take_seq(lane, count)
            if seq is None:
                break
            if cap is not None and self.live.in_flight >= cap:
                if drop:
                    self._record_dropped(lane, seq, intended_ns, stage)
                    continue
                self._cap_waits += 1
                while self.live.in_flight >= cap:
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
            self._begin()
            task = loop.create_task(self._request(lane, seq, intended_ns, stage))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _closed_worker(self, lane: Lane, model: ClosedLoop) -> None:
        pc = time.perf_counter_ns
        deadline = self._deadline_ns()
        count = [0]
        # optional workload hook (sessions): the think time in s after request seq ended,
        # whatever its outcome, or None to stop this worker; else the model's think_s
        next_think = getattr(lane.workload, "next_think_s", None)
        while True:
            now = pc() - self._t0
            if deadline is not None and now >= deadline:
                return
            seq = self._take_seq(lane, count)
            if seq is None:
                return
            self._begin()
            await self._request(lane, seq, now, None)
            think_s = model.think_s if next_think is None else next_think(seq)
            if think_s is None:
                return
            if think_s:
                await asyncio.sleep(think_s)

    async def _await_end(self, lane_tasks: list[asyncio.Task[None]]) -> None:
        """Wait for sending to stop and in-flight requests to finish, up to the run
        deadline (duration + drain); stragglers are cancelled by the caller."""
        deadline = self._deadline_ns()
        drain_ns = round(self.config.effective_drain_s() * NS_PER_S)
        if deadline is None:
            await asyncio.gather(*lane_tasks)
            end_at = time.perf_counter_ns() - self._t0 + drain_ns
        else:
            end_at = deadline + drain_ns
            remaining = (end_at - (time.perf_counter_ns() - self._t0)) / NS_PER_S
            done, pending = await asyncio.wait(lane_tasks, timeout=max(remaining, 0))
            for t in done:
                t.result()  # surface a lane's own bug
            if pending:  # closed-loop workers still inside a request at the deadline
                return
        while self._tasks:
            remaining = (end_at - (time.perf_counter_ns() - self._t0)) / NS_PER_S
            if remaining <= 0:
                return
            await asyncio.wait(set(self._tasks), timeout=remaining)

    async def _cancel_in_flight(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            self._writer.flush()
            if self._trace is not None:
                self._trace.flush()

    # -- one request --------------------------------------------------------------------

    def _begin(self) -> None:
        live = self.live
        live.in_flight += 1
        live.sent += 1
        if live.in_flight > live.max_in_flight:
            live.max_in_flight = live.in_flight

    def _end(self) -> None:
        self.live.in_flight -= 1
        self._slot_freed.set()

    def _phase(self, intended_ns: int) -> str:
        if intended_ns < self._warmup_ns:
            return _WARMUP
        if self._cooldown_from_ns is not None and intended_ns >= self._cooldown_from_ns:
            return _COOLDOWN
        return _MEASURE

    def _new_sample(self, lane: Lane, seq: int, intended_ns: int, stage: str | None) -> Sample:
        return Sample(
            run_id=self.run_id,
            seq=seq,
            lane=lane.name,
            stage=stage,
            sweep_point=self.config.sweep_point,
            worker=self.worker,
            phase=self._phase(intended_ns),
            intended_ns=intended_ns,
        )

    def _record_dropped(self, lane: Lane, seq: int, intended_ns: int, stage: str | None) -> None:
        s = self._new_sample(lane, seq, intended_ns, stage)
        s.outcome = Outcome.DROPPED.value
        s.error = f"client-side: in-flight cap {self._cap} reached ({self._cap_source}); not sent"
        self.live.dropped += 1
        self._writer.write(s)

    async def _request(self, lane: Lane, seq: int, intended_ns: int, stage: str | None) -> None:
        pc = time.perf_counter_ns
        t0 = self._t0
        sample = self._new_sample(lane, seq, intended_ns, stage)
        execute = self._executes[lane.name]
        parser: StreamParser | _ExecuteText | None
        try:
            if execute is not None:
                spec, parser = RequestSpec("EXECUTE", lane.workload.name), None
            else:
                wl = cast(Workload, lane.workload)  # no `execute`: it builds requests
                spec = wl.request(seq)
                for hook in self._pre_hooks:
                    new = await _call_hook(hook, spec)
                    if new is not None:
                        spec = new
                parser = wl.parser(spec)
            if self._trace is not None and execute is None:  # a CallableWorkload sends no request
                self._trace.write(seq, lane.name, getattr(lane.workload, "name", None), intended_ns, spec)
            if spec.meta:  # the request's meta travels to its sample (records.RequestSpec)
                sample.meta = dict(spec.meta)
        except asyncio.CancelledError:
            self._end()
            raise
        except Exception as exc:  # a workload/hook bug becomes a sample
            sample.outcome = Outcome.PROTOCOL_ERROR.value
            sample.error = f"building the request failed: {type(exc).__name__}: {exc}"
            self._end()
            self._finish(sample)
            return
        body = spec.body
        sample.bytes_sent = (sum(map(len, body)) if type(body) is list else len(body)) if body else 0
        sample.in_flight_at_send = self.live.in_flight
        # the loop given: current_task() without it asks get_running_loop, which on
        # Python 3.11 makes a getpid system call (once per request otherwise)
        deadlines = self._deadlines
        ex = RequestExchange(sample, t0, deadlines, asyncio.current_task(self._loop) if deadlines else None)
        ex.start()
        try:
            if execute is None:
                await ex.run(self._transport, spec, parser, self._accepts[lane.name])
            else:
                parser = _ExecuteText(await execute(seq, sample, t0))
                sample.end_ns = sample.end_ns or pc() - t0
        except asyncio.CancelledError as exc:
            if not ex.record(exc):  # not a deadline: the run's deadline or an interrupt
                sample.end_ns = pc() - t0
                sample.outcome = Outcome.CANCELLED.value
                sample.error = "in flight at the run deadline or interrupt"
                ex.stop()
                self._end()
                self._finish(sample)
                raise
        except Exception as exc:  # a transport failure, a parser bug: a sample, never the run's end
            ex.record(exc)
            if isinstance(exc, ConnectTimeout):
                sample.timeout_kind, sample.error = self._connect_timeout_cause(str(exc))
        ex.stop()
        self._end()
        if self._post_hooks:
            text = getattr(parser, "text", "") or ""
            for post in self._post_hooks:
                try:
                    await _call_hook(post, spec, sample, text)
                except asyncio.CancelledError:  # run deadline or Ctrl-C while grading: keep the sample
                    sample.outcome = Outcome.GRADING_ERROR.value
                    sample.error = "post-response hook cancelled at the run deadline or interrupt"
                    self._finish(sample)
                    raise
                except Exception as exc:
                    sample.outcome = Outcome.GRADING_ERROR.value
                    sample.error = f"post-response hook failed: {type(exc).__name__}: {exc}"
        self._finish(sample)

    def _connect_timeout_cause(self, error: str) -> tuple[str, str]:
        lag_ms = self._loop_lag.current_lag_ms() if self._loop_lag is not None else 0.0
        return connect_timeout_cause(error, self.config.timeouts.connect_s or 10.0, lag_ms, self.live.in_flight)

    def _finish(self, sample: Sample) -> None:
        live = self.live
        live.finished += 1
        if sample.outcome == _OK:
            live.ok += 1
            sent = sample.sent_ns
            if sent is not None:
                if sample.end_ns is not None:
                    live.recent_e2e_ms.append((sample.end_ns - sent) / 1e6)
                if sample.first_token_ns is not None:
                    live.recent_ttft_ms.append((sample.first_token_ns - sent) / 1e6)
        else:
            live.errors += 1
        self._writer.write(sample)  # SLOs are judged by summary.sql (slo_met there), not here

    # -- bundle -------------------------------------------------------------------------

    def _manifest(self, t0_wall: int) -> dict[str, Any]:
        cfg = self.config
        config = cfg.model_dump(mode="json")
        config["lanes"] = [
            {"name": lane.name, "load": model.spec, "workload": _describe(lane.workload)}
            for lane, model in zip(self.lanes, self._models, strict=True)
        ]
        self._calibration = calibration_for_manifest()  # `benchmaker calibrate`'s latest, or None
        return build_manifest(
            run_id=self.run_id,
            kind=cfg.kind,
            label=cfg.label,
            config=config,
            seed=cfg.seed,
            t0_wall_ns=t0_wall,
            workers=self.shards,
            slo=cfg.slo.model_dump() if cfg.slo is not None else None,
            extra={"calibration": self._calibration, **(self._manifest_extra or {})},
        )

    def _summarize(self, monitor: LoopLagMonitor, interrupted: bool, wall_s: float, cpu_s: float) -> dict[str, Any]:
        self_checks: dict[str, Any] = {
            "loop_lag_ms": monitor.stats(),
            "client_cpu_util": cpu_s / wall_s if wall_s > 0 else None,
            "client_cpu_s": cpu_s,
            "wall_s": wall_s,
            "max_in_flight": self.live.max_in_flight,
            "in_flight_cap": self._cap,
            "in_flight_cap_source": self._cap_source,
            "cap_waits": self._cap_waits,
            "connections_opened": getattr(self._transport, "connections_opened", None),
            "worker": self.worker,
            "pid": os.getpid(),
            "t0_wall_ns": self._t0_wall,
        }
        if self._monitor_runner is not None:
            self_checks["monitors"] = self._monitor_runner.report()
        if self.shards > 1:  # a shard reports to its parent; the run's summary is merged there
            write_json_atomic(
                self.bundle_dir / f"worker-{self.worker}.json",
                {"self_checks": self_checks, "interrupted": interrupted, "interrupted_by": self.interrupted_by},
            )
            return {"run_id": self.run_id, "self_checks": self_checks, "partial": interrupted}
        loads = {lane.name: m for lane, m in zip(self.lanes, self._models, strict=True)}
        summary = build_summary(
            self.config,
            loads,
            [self.bundle_dir / self._samples_name],
            self_checks,
            self_checks["loop_lag_ms"],
            interrupted,
            run_id=self.run_id,
            calibration=self._calibration,
            interrupted_by=self.interrupted_by,
        )
        write_json_atomic(self.bundle_dir / "summary.json", summary)
        return summary


STOP_SIGNALS = ("SIGTERM", "SIGHUP")


def interrupt_exit_code(signal_name: str | None) -> int:
    """The exit code of a run stopped by `signal_name` (128 + its number, as a shell
    reports a process killed by it: SIGTERM 143, SIGHUP 129), 130 (SIGINT) for None."""
    return 128 + (signal.Signals[signal_name].value if signal_name else signal.SIGINT.value)


def _install_stop_signals(runner: BenchRunner) -> list[tuple[int, Any]]:
    """Make SIGTERM and SIGHUP stop the run as Ctrl-C does (the task running the run is
    cancelled: in-flight requests are recorded as `cancelled`, the partial bundle is
    written, `runner.interrupted_by` names the signal). Only possible in the main
    thread; elsewhere (a Prefect task thread) nothing is installed and the host's own
    handling stands. A signal the process ignores (SIG_IGN: started under nohup, or a shell's
    `trap '' HUP`) keeps being ignored. Returns (signal, previous handler) pairs for
    _restore_stop_signals."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    installed: list[tuple[int, Any]] = []

    def stop(name: str) -> None:
        if runner.interrupted_by is None and task is not None:
            runner.interrupted_by = name
            task.cancel()

    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        previous = signal.getsignal(sig)
        if previous is signal.SIG_IGN:  # ignored by whoever started us (nohup, `trap '' HUP`): it stays so
            continue
        try:
            loop.add_signal_handler(sig, stop, name)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
            continue
        installed.append((sig, previous))
    return installed


def _restore_stop_signals(installed: list[tuple[int, Any]]) -> None:
    """Put back the handlers _install_stop_signals replaced."""
    loop = asyncio.get_running_loop()
    for sig, previous in installed:
        loop.remove_signal_handler(sig)
        try:
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        except (ValueError, TypeError, OSError):
            continue


def _pass_on_stop_signal(installed: list[tuple[int, Any]], received: str | None) -> None:
    """After the partial bundle is written: when the stop signal `received` had a Python
    handler before the run (e.g. a Prefect worker's), raise it again so that handler
    learns of it too; default handlers are left to the caller's exit code."""
    for sig, previous in installed:
        if received == signal.Signals(sig).name and callable(previous):
            signal.raise_signal(sig)


class _ExecuteText:
    """What a CallableWorkload's `execute` returned, as the `text` post-response hooks see."""

    __slots__ = ("text",)

    def __init__(self, text: str | None):
        self.text = text or ""


async def _start_workloads(lanes: Sequence[Lane], executes: dict[str, Any]) -> list[Any]:
    """Call `start()` of each distinct callable workload that has one (before the
    clock starts); returns those that also have `aclose()`, to be closed after the run."""
    started: list[Any] = []
    seen: set[int] = set()
    try:
        for lane in lanes:
            wl = lane.workload
            if executes[lane.name] is None or id(wl) in seen:
                continue
            seen.add(id(wl))
            start = getattr(wl, "start", None)
            if start is not None:
                await start()
            if getattr(wl, "aclose", None) is not None:
                started.append(wl)
    except BaseException:
        for wl in started:
            await wl.aclose()
        raise
    return started


def _describe(workload: Any) -> dict[str, Any]:
    describe = getattr(workload, "describe", None)
    if callable(describe):
        return describe()
    return {"type": type(workload).__name__, "name": getattr(workload, "name", None)}
