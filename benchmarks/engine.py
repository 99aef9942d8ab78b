"""Engine benchmarks, from one run on this machine (not part of CI).

    .venv/bin/python benchmarks/engine.py [--pairs 9] [--pair-seconds 1.5] [--seconds 5]
        [--figures 1,2,2a,2i,3,4,profile] [--profile-top 25] [--callgrind-streams 128]
        [--sse-chunks 200,800] [--no-pin] [--keep DIR]

A loopback server (benchmarks/_servers.py: raw asyncio protocol on uvloop, pre-built
responses) runs in a separate process. For figures 1-2 and the profile it is pinned to
CPU 1 and the client to CPU 0 when the machine has two or more CPUs (`--no-pin` leaves
both unpinned); for 3-4 both are unpinned again. Per-CPU figures move 2-3x with the
machine's load, so 1-2 are ratios of runs alternated in the same process: `--pairs`
rounds of `--pair-seconds` runs, the figure the median of the per-round ratios.

1. Non-streaming, concurrency 64, GET /json (27-byte JSON body): a bare aiohttp loop
   (one ClientSession, 64 tasks, `get` + `read`), then BenchRunner with `closed:64` +
   HttpWorkload on each engine transport (`raw`: benchmaker/engine/http1.py, `aiohttp`), in
   rounds. req/s = ok requests / wall time from the first send until the last worker
   stopped (engine: self_checks.wall_s); per client CPU second = ok requests /
   process_time (engine: self_checks.client_cpu_s). Targets, judged on `raw`: median
   of the per-round ratios engine / bare aiohttp >= 0.85 by wall time, >= 0.95 per CPU
   second. Printed beside it: the engine's own CPU per request with no I/O (an
   in-memory transport; its bare loop subtracted), and bare / (bare + own), the ratio
   it implies for an engine on aiohttp.
2. Streaming events per CPU s, once per stream length n of `--sse-chunks` (default 200
   and 800): BenchRunner `closed:64` + OpenAIChatWorkload against POST /sse/n (n
   one-token content chunks per response, sent as 4 HTTP chunks at once) on each engine
   transport, in rounds with the same workload on the null reference: NullTransport-like,
   no I/O, the same n-chunk stream in 4 reads, run like
   the real ones: `closed:64`, one wait on the event loop per request (a 1 ns sleep: a
   socket client waits at least once per request) and each request the next of 128
   distinct copies of the 4 reads, allocated before the run (as over a socket, no
   stream parses bytes that an earlier stream just parsed, and 64 streams in flight
   hold ~2 MB of body bytes). events per CPU s = token events of ok samples /
   self_checks.client_cpu_s. Each real-I/O run sits between two reference runs (ref,
   raw, ref, aiohttp, ref; the transports swap places every other round) and its
   reference is their geometric mean, so a load change during the round moves both
   sides. Targets, judged on `raw`: real I/O >= 60,000; median of the per-round ratios
   real I/O / reference >= 0.95 (total client CPU: user and kernel) at the shortest
   length (200 by default: a real agent's turns are that short, e.g. the 453 turns of the
   real pi session in ../shared/data/real have a median of 101 output tokens, mean 184).
   The longer length shows how much of the gap is a cost per stream rather than per
   event: the client's CPU per stream c(n) = per_stream + n * per_event is fitted from
   the two lengths for the reference, each transport and its bare read, and printed
   with the per-event ratio reference / real (the parser's per-read path, timestamps
   and records on real I/O against none) and the per-stream difference real -
   reference beside the bare read's own per-stream cost. Measured on a quiet host
   (load ~1, seven rounds of 1.5 s at 800 events): raw / reference 0.961 with a bound of
   0.968, against 0.914 with a bound of 0.946 at 200 in the same hour: the engine keeps
   to the bound at both lengths, and at 200 the bound itself is below the target on
   this VM. With a neighbour busy on the other CPU single rounds at 800 events swing
   0.89-1.09 and the fit is not readable.
   Why this reference: the one used before ran `closed:1` without a wait on
   the same 4 bytes objects every stream (one hot stream, in cache; since a null
   request never suspends, a `closed:64` null run without a wait is one stream at a time
   too), while the real run interleaves 64 streams of fresh bytes. That old reference
   is still run once per round and printed beside (`null one hot stream`), with the
   real / old ratio. Measured: the reference executes +0.4% user-space instructions per
   stream over the old one (figure 2i) and took the same CPU within noise (old / new
   1.004 and 1.086 in two runs of 9 rounds at load 2-3): the old reference was not
   what kept the ratio low. Those two runs gave raw / reference 0.921 and 0.923 beside
   a bound of the bare read alone of 0.925 and 0.918 (the engine beyond null + bare
   read +28 and -18 us per stream): what stands between the engine and 0.95 on this
   VM is the socket I/O itself, not the engine's code.
   Beside the total-CPU ratio: the client's user and system CPU us per stream of each
   run (getrusage RUSAGE_SELF deltas at the runner's two clock reads; the kernel splits
   a process's exact run time into user and system by sampled ticks, so the split is
   an estimate), and the same ratio on user CPU only (user us per stream of the
   reference / of the real run): where the gap is.
   Each round also times a bare loop per transport (closed 64, POST of the same body
   and headers, read of the same /sse stream, no parsing): the CPU s per stream that
   the I/O alone costs on it, so null / (null + bare read) bounds the ratio any engine
   on that client can reach, and real - null - bare read (us per stream) is what the
   engine itself adds on real I/O. NullTransport with one event per read (`closed:1`)
   is printed beside them (the per-read cost). A last run on `raw` with counting
   connections prints the socket reads, loop waits and request writes per stream (with
   this server 1, 1 and 1: the whole response in one read) and the CPU the request's
   write costs (CLOCK_THREAD_CPUTIME_ID, exact, around each transport.write, minus what
   an empty interval shows): on loopback the kernel runs the server's TCP receive path
   and the wake-up of its sleeping event loop (sock_def_readable, try_to_wake_up: an
   IPI to the server's CPU, a VM exit on a VM) inside the client's write, so they are
   charged to the client's CPU; over a network they would run on the server's host.
   It is printed beside the total-CPU ratio, never subtracted from it. perf (cpu-clock
   samples, 10 kHz, on the client during a raw run; kernel 5.5% of its samples, ~63 us
   per stream at ~1,150 us per stream, load 3.4) split the kernel time as: the write's
   own TCP send ~15 us, the server's receive path in it ~12 us, the server's wake-up
   ~10 us, the 31 KB read ~8 us, timer interrupts ~9 us, samples.jsonl writes ~4 us,
   epoll ~1 us. callgrind (figure 2i) puts the engine's user-space instructions on `raw`
   at +1.3% over the reference (+62,000 per stream, of which ~35,000 in memcpy: uvloop
   copies each read into a bytes object, llhttp each body piece, and the pieces of a
   read are joined): the user-time gap beyond that is memory and cache stalls (each
   loop pass reads 64 streams' 31 KB before any task parses its stream).
   Earlier measurements (busy 2-core VM, load 2-6, against the old reference): the
   engine on `raw` at closed:1, 8 and 64 gave 0.80, 0.78 and 0.76 of the null run, so
   it is neither concurrency nor the batch of reads per loop pass. Yielding a read's
   pieces unjoined did not help (0.92 of joined, noise).
   Every measured run of 1-2 starts after gc.collect(): garbage left by the previous
   run (its summary, its samples read back) otherwise triggers a full collection
   inside the next run, which only the real-I/O runs, allocating more, hit. A warm-up
   run per transport and a null run come first, not counted: the first real-I/O run
   of a process grows its heap (page faults no later run pays).
2a. Streaming events per client CPU s by wire API, in the same run: BenchRunner
   `closed:64` on `raw` with the chat, Responses and Messages workloads against the
   server's /sse/n, /responses/n and /messages/n (n = 200 one-token deltas; the
   Responses and Messages streams have the event shapes and fields vLLM 0.32.0 sends,
   captured from its endpoints: ~245 and ~125 bytes per token event against chat's
   ~160). Rounds of chat, responses, chat, messages, chat (the two swap every other
   round); each API run's ratio is taken to the geometric mean of the chat runs around
   it, the figure is the median of the per-round ratios. Target: responses and messages
   >= 0.9 of chat's events per cpu s. Measured (7 rounds of 1.5 s, load average 19-30
   from other jobs): responses 0.909 (rounds 0.70-1.14), messages 1.051 (0.73-1.15) of
   chat's ~190,000. The same streams on a null transport (no socket, closed:1, 400
   streams, best of 3) gave responses 1.11 and messages 0.84 of chat, and the parsers
   alone 0.95-1.14: the Responses parser is not the slower one, its 1.5x bytes per token
   on the socket are what the real-I/O figure pays.
2i. User-space instructions per stream, counted, not timed (when valgrind and
   callgrind_control are on PATH; else skipped with the reason printed): the reference,
   the old one-hot-stream null and `raw` (closed:64), each in its own process under
   `valgrind --tool=callgrind --instr-atstart=no` (PYTHONHASHSEED=0): a warm-up run of
   `--callgrind-streams` streams uninstrumented, then callgrind_control switches the
   instrumentation on and a measured run of as many streams follows; the runner's
   clock calls os.getppid() right after its first read and os.getpgrp() right before
   its last, and callgrind zeroes its counters at the one (--zero-before) and dumps
   them at the other (--dump-before), so the count is exactly the span behind
   client_cpu_s. Instructions per ok stream = the dump's `totals:` / ok streams;
   printed with the ratio reference / raw. User space only: no kernel work, no cache
   or memory stall is counted. The run summary's SQL is skipped in those processes
   (after the span; it takes minutes under valgrind). Repeated runs agree within ~0.3%
   (how many sockets each loop pass finds ready varies); the load does not move it.
   About 90 s.
   profile: cProfile (timer time.thread_time: CPU, not wall) of one engine run of 1 and
   one of 2 on `raw`; the top `--profile-top` functions by own time (the run summary's
   SQL, after the run, included).
3. Constant 1,000 req/s (`constant:1000`, `--seconds` + 1 s warm-up left out of the
   summary) against GET /json: summary.json's E2E p99 and schedule lag p99 (ms).
   Targets <= 2 ms each. First the machine's noise floor (an idle event loop's lag for
   2 s), then twice: a bare aiohttp open loop (sleep to each intended time, one task per
   request; same server, rate and windows) and the engine. The table shows the lower
   p99 of the two runs (outside noise only adds latency); both runs are printed.
4. Memory per in-flight stream: BenchRunner `closed:2000` + OpenAIChatWorkload against
   /hold (headers, role chunk and one content chunk, then the stream stays open). Client
   VmRSS (/proc/self/status) sampled every 0.25 s; baseline just before the run (after a
   100-stream warm-up run in the same process), plateau = the largest sample taken while
   2,000 requests were in flight and at least 2 s into the run. KB/stream =
   (plateau - baseline) / 2000 (1 KB = 1,024 bytes). Target <= 32 KB.

Prints every figure and a final table (figure, value, target, pass/fail); exit code 1
when a target fails. Figures 3-4 and the profile run the engine on `raw`. Runtime about
12 minutes with the defaults (figure 2 runs once per length).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvloop

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _servers import api_body, split_even, sse_body, sse_events, start_server  # noqa: E402

from benchmaker import BenchConfig, BenchRunner, HttpWorkload, NullTransport, OpenAIChatWorkload, StaticDataset  # noqa: E402
from benchmaker.engine.http1 import RawTransport, _Conn  # noqa: E402
from benchmaker.engine.records import RequestSpec  # noqa: E402
from benchmaker.workloads.anthropic_messages import AnthropicMessagesWorkload  # noqa: E402
from benchmaker.workloads.openai_responses import OpenAIResponsesWorkload  # noqa: E402

SSE_CHUNKS = 200  # content chunks per stream of figures 2i and the profile, and figure 2's first length
SSE_LENGTHS = (200, 800)  # figure 2's stream lengths (content chunks per stream), `--sse-chunks`
TRANSPORTS = ("raw", "aiohttp")  # the engine's transports measured in figures 1-2; targets judge the first
HOLD_STREAMS = 2000
NULL_COPIES = 128  # distinct copies of the stream the null reference cycles through (~3.9 MB)


def _rss_kb() -> int:
    """VmRSS of this process in KiB (from /proc/self/status)."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("/proc/self/status: VmRSS: missing")


def _raise_fd_limit(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def _ok_token_events(result: Any) -> tuple[int, int]:
    """(ok samples, token events over ok samples) read from the run's samples.jsonl."""
    n_ok = events = 0
    with open(result.samples_path, "rb") as f:
        for line in f:
            s = orjson.loads(line)
            if s["outcome"] == "ok":
                n_ok += 1
                events += s["n_token_events"]
    return n_ok, events


def _run(runner: BenchRunner) -> Any:
    return runner.run_sync()


# -- 1. non-streaming throughput -----------------------------------------------------


async def _bare_loop(
    url: str, concurrency: int, seconds: float, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, float]:
    """(ok responses, wall s) of `concurrency` tasks doing GET url + read for `seconds`
    (POST `body` with `headers` when given)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def worker() -> None:
            nonlocal n
            while time.perf_counter() < deadline:
                async with session.get(url) if body is None else session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status == 200:
                        n += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n, time.perf_counter() - t0


def bench_throughput(base: str, out: Path, seconds: float, pairs: int) -> dict[str, Any]:
    url = base + "/json"
    bare_rates, bare_cpu = [], []
    rates: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    cpus: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    for rnd in range(1, pairs + 1):
        _settled()
        cpu0 = time.process_time()
        n, wall = uvloop.run(_bare_loop(url, 64, seconds))
        cpu = time.process_time() - cpu0
        bare_rates.append(n / wall)
        bare_cpu.append(n / cpu)
        line = [
            f"  round {rnd}: bare aiohttp {bare_rates[-1]:>7,.0f} req/s {bare_cpu[-1]:>7,.0f} per cpu s"
            f" ({1e6 / bare_cpu[-1]:.1f} us, util {cpu / wall:.2f})"
        ]
        for t in TRANSPORTS:
            _settled()
            cfg = BenchConfig(load="closed:64", duration_s=seconds, out_dir=out, transport=t)
            res = _run(BenchRunner(cfg, workload=HttpWorkload(url)))
            sc = res.summary["self_checks"]
            n_ok = res.summary["run"]["n_ok"]
            rates[t].append(n_ok / sc["wall_s"])
            cpus[t].append(n_ok / sc["client_cpu_s"])
            line.append(
                f"engine on {t} {rates[t][-1]:>7,.0f} req/s {cpus[t][-1]:>7,.0f} per cpu s"
                f" ({1e6 / cpus[t][-1]:.1f} us, util {sc['client_cpu_util']:.2f}, ok {n_ok:,} of"
                f" {res.summary['run']['n_samples']:,}, conns {sc['connections_opened']},"
                f" ratio {cpus[t][-1] / bare_cpu[-1]:.3f})"
            )
        print(";  ".join(line))
    got: dict[str, Any] = {}
    for t in TRANSPORTS:
        got[f"ratio_{t}"] = statistics.median(e / b for e, b in zip(rates[t], bare_rates, strict=False))
        got[f"cpu_ratio_{t}"] = statistics.median(e / b for e, b in zip(cpus[t], bare_cpu, strict=False))
        print(
            f"  median of {pairs} rounds, engine on {t} / bare aiohttp: {got[f'ratio_{t}']:.3f} by wall time,"
            f" {got[f'cpu_ratio_{t}']:.3f} per client cpu s (engine {statistics.median(cpus[t]):,.0f},"
            f" bare {statistics.median(bare_cpu):,.0f} req per cpu s)"
        )
    own_us = _engine_own_us(out, seconds)
    bare_us = 1e6 / statistics.median(bare_cpu)
    print(
        f"  the engine's own cpu per request (in-memory transport, no I/O; minus a bare loop over the same"
        f" transport): {own_us:.1f} us beside bare aiohttp's {bare_us:.1f} us: ratio on aiohttp at most"
        f" {bare_us / (bare_us + own_us):.3f}"
    )
    got["own_us"] = own_us
    return got


class _MemoryResponse:
    """A 200 with the /json body, no I/O (one loop pass on entering, as a socket read)."""

    __slots__ = ("status", "headers", "_done")

    def __init__(self) -> None:
        self.status = 200
        self.headers: dict[str, str] = {}
        self._done = False

    async def __aenter__(self) -> _MemoryResponse:
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def chunks(self) -> _MemoryResponse:
        return self

    def __aiter__(self) -> _MemoryResponse:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        self._done = True
        return b'{"ok":true,"n":1,"v":"abc"}'

    async def read(self) -> bytes:
        return b'{"ok":true,"n":1,"v":"abc"}'


class _MemoryTransport:
    connections_opened = 0

    def stream(self, spec: Any) -> _MemoryResponse:
        return _MemoryResponse()

    async def aclose(self) -> None:
        return None


def _engine_own_us(out: Path, seconds: float, rounds: int = 3) -> float:
    """Median over `rounds` of: engine cpu us per request on _MemoryTransport (closed:64,
    HttpWorkload) minus a bare 64-task loop's cpu us per exchange on the same transport."""

    async def bare(n: int) -> float:
        t0 = time.process_time()

        async def worker() -> None:
            for _ in range(n // 64):
                async with _MemoryResponse() as resp:
                    async for _ in resp.chunks():
                        pass

        await asyncio.gather(*(worker() for _ in range(64)))
        return (time.process_time() - t0) / (n // 64 * 64) * 1e6

    diffs = []
    for _ in range(rounds):
        runner = BenchRunner(
            BenchConfig(load="closed:64", duration_s=seconds, out_dir=out),
            workload=HttpWorkload("http://memory/json"),
            transport=_MemoryTransport(),
        )
        res = _run(runner)
        engine_us = res.summary["self_checks"]["client_cpu_s"] / res.summary["run"]["n_ok"] * 1e6
        diffs.append(engine_us - uvloop.run(bare(64_000)))
    return statistics.median(diffs)


# -- 2. streaming events/s -----------------------------------------------------------


def _chat(url: str, chunks: int = SSE_CHUNKS) -> OpenAIChatWorkload:
    return OpenAIChatWorkload(url, "m", StaticDataset(["Say something long."]), max_tokens=chunks)


async def _bare_raw_loop(url: str, concurrency: int, seconds: float, body: bytes, headers: dict[str, str]) -> int:
    """Streams read in `seconds` by `concurrency` tasks doing POST url + reading the body
    through RawTransport (no parsing)."""
    tr = RawTransport()
    spec = RequestSpec("POST", url, headers=headers, body=body)
    n = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal n
        while time.perf_counter() < deadline:
            async with tr.stream(spec) as resp:
                async for _ in resp.chunks():
                    pass
                if resp.status == 200:
                    n += 1

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await tr.aclose()
    return n


class _RunnerClock(types.ModuleType):
    """Stands in for the `time` module inside benchmaker.engine.runner while installed: its
    `process_time()` (which the runner calls exactly twice, at the start and at the end
    of the measured span behind self_checks.client_cpu_s) also records
    getrusage(RUSAGE_SELF) user and system seconds at both calls, and can call `on_start`
    after the first and `on_end` before the second (the callgrind markers of figure 2i).
    Every other attribute is the real module's."""

    def __init__(self) -> None:
        super().__init__("time")
        self.marks: list[tuple[float, float]] = []
        self.on_start: Any = None
        self.on_end: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def process_time(self) -> float:
        starting = len(self.marks) % 2 == 0
        if not starting and self.on_end is not None:
            self.on_end()
        r = resource.getrusage(resource.RUSAGE_SELF)
        self.marks.append((r.ru_utime, r.ru_stime))
        value = time.process_time()
        if starting and self.on_start is not None:
            self.on_start()
        return value

    def split(self) -> tuple[float, float]:
        """(user s, system s) of the last measured span."""
        (u0, s0), (u1, s1) = self.marks[-2:]
        return u1 - u0, s1 - s0


_CLOCK = _RunnerClock()


def _install_clock() -> None:
    """Route benchmaker.engine.runner's clock through _CLOCK (this process only)."""
    import benchmaker.engine.runner as runner_mod

    runner_mod.time = _CLOCK


class _PoolNullTransport(NullTransport):
    """NullTransport whose requests get the same 4 reads as figure 2's real streams, but
    each request the next of `copies` distinct copies of them (allocated before the run,
    so no copy is timed): as over a socket, no stream parses bytes an earlier stream
    just parsed (a hot cache), while 64 streams in flight touch ~2 MB of body bytes per
    loop pass, as the real ones do."""

    def __init__(self, chunks: tuple[bytes, ...], copies: int, delay_s: float) -> None:
        self._pool = [tuple(bytes(bytearray(c)) for c in chunks) for _ in range(copies)]
        self._next = 0
        super().__init__(chunks=chunks, delay_s=delay_s)

    @property
    def _chunks(self) -> tuple[bytes, ...]:  # read once per request by NullTransport.stream
        chunks = self._pool[self._next]
        self._next = (self._next + 1) % len(self._pool)
        return chunks

    @_chunks.setter
    def _chunks(self, value: tuple[bytes, ...]) -> None:
        pass  # NullTransport.__init__ sets it; the copies above stand in for it


def _settled() -> None:
    """Collect the garbage of earlier runs (run summaries, samples read back) before a
    measured run, so that no full collection of it lands inside the next run's CPU time:
    measured here, a gen-2 collection left over from the previous run cost one real-I/O
    run ~40 us per stream (the null runs, which allocate little, never triggered one)."""
    gc.collect()


_THREAD_CPU = time.CLOCK_THREAD_CPUTIME_ID


class _TimedWrites:
    """A transport proxy that adds the thread CPU time (clock_gettime
    CLOCK_THREAD_CPUTIME_ID: user + kernel, exact, not sampled) of each `write` and
    `writelines` to _CountingConn.write_ns; everything else goes to the real transport."""

    __slots__ = ("_t",)

    def __init__(self, transport: Any) -> None:
        self._t = transport

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)

    def write(self, data: bytes) -> None:
        t0 = time.clock_gettime_ns(_THREAD_CPU)
        self._t.write(data)
        _CountingConn.write_ns += time.clock_gettime_ns(_THREAD_CPU) - t0
        _CountingConn.writes += 1

    def writelines(self, parts: Any) -> None:
        t0 = time.clock_gettime_ns(_THREAD_CPU)
        self._t.writelines(parts)
        _CountingConn.write_ns += time.clock_gettime_ns(_THREAD_CPU) - t0
        _CountingConn.writes += 1


class _CountingConn(_Conn):
    """A RawTransport connection that counts socket reads and waits, and times its
    request writes (figure 2's check of what the real path does per stream; not used in
    measured runs)."""

    __slots__ = ()
    reads = 0
    waits = 0
    writes = 0
    write_ns = 0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(_TimedWrites(transport))

    def data_received(self, data: bytes) -> None:
        _CountingConn.reads += 1
        super().data_received(data)

    async def wait(self) -> None:
        _CountingConn.waits += 1
        await super().wait()


def _clock_pair_ns(n: int = 20_000) -> float:
    """CPU ns that an empty interval between two CLOCK_THREAD_CPUTIME_ID reads shows (what
    each timed write's interval holds besides the write; subtracted from it): the
    median over `n` back-to-back pairs."""
    clock = time.clock_gettime_ns
    return float(statistics.median(-clock(_THREAD_CPU) + clock(_THREAD_CPU) for _ in range(n)))


def _reads_per_stream(base: str, out: Path, seconds: float, chunks: int) -> dict[str, float]:
    """One engine run on `raw` with counting connections: per ok stream, socket reads,
    loop waits, request writes and the CPU us those writes cost (the write syscall: the
    client's TCP send and, on loopback, the server's receive path and wake-up that the
    kernel runs in the sender's syscall; the clock reads' own cost subtracted)."""
    import benchmaker.engine.http1 as http1

    _CountingConn.reads = _CountingConn.waits = _CountingConn.writes = _CountingConn.write_ns = 0
    http1._Conn = _CountingConn  # RawTransport._connect builds its connections from the module name
    try:
        cfg = BenchConfig(load="closed:64", duration_s=seconds, out_dir=out, transport="raw")
        res = _run(BenchRunner(cfg, workload=_chat(f"{base}/sse/{chunks}", chunks)))
    finally:
        http1._Conn = _Conn
    n = res.summary["run"]["n_ok"]
    pair = _clock_pair_ns()
    return {
        "reads": _CountingConn.reads / n,
        "waits": _CountingConn.waits / n,
        "writes": _CountingConn.writes / n,
        "write_us": (_CountingConn.write_ns - pair * _CountingConn.writes) / n / 1e3,
        "streams": n,
        "clock_pair_us": pair / 1e3,
    }


def _loadavg() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _measured(runner: BenchRunner) -> dict[str, float]:
    """One run: token events per client cpu s and per wall s, ok streams, and the
    client's user and system CPU us per ok stream (getrusage over the runner's measured
    span, see _RunnerClock)."""
    res = _run(runner)
    sc = res.summary["self_checks"]
    n_ok, events = _ok_token_events(res)
    user_s, sys_s = _CLOCK.split()
    return {
        "per_cpu": events / sc["client_cpu_s"],
        "per_wall": events / sc["wall_s"],
        "n_ok": n_ok,
        "user_us": user_s / n_ok * 1e6,
        "sys_us": sys_s / n_ok * 1e6,
    }


def _null_runner(
    kind: str,
    out: Path,
    seconds: float | None,
    max_requests: int | None = None,
    transport: Any = None,
    chunks: int = SSE_CHUNKS,
) -> BenchRunner:
    """The null-transport runs of figures 2 and 2i. `ref`: the reference, as the real
    runs (closed:64, one wait on the loop per request, each stream the next of
    NULL_COPIES distinct copies of the 4 reads; pass the transport to reuse its copies);
    `hot`: the reference used before (closed:1, no wait, the same 4 bytes objects every
    stream); `1ev`: as `hot` with one event per read."""
    if kind == "ref":
        load = "closed:64"
        transport = transport or _PoolNullTransport(tuple(split_even(sse_body(chunks), 4)), NULL_COPIES, 1e-9)
    else:
        load = "closed:1"
        reads = split_even(sse_body(chunks), 4) if kind == "hot" else sse_events(chunks)
        transport = NullTransport(chunks=tuple(reads))
    cfg = BenchConfig(load=load, duration_s=seconds, max_requests=max_requests, out_dir=out)
    return BenchRunner(cfg, workload=_chat("http://null/v1/chat/completions", chunks), transport=transport)


def _geo(a: float, b: float) -> float:
    return (a * b) ** 0.5


# -- 2a. streaming events per CPU s by wire API ---------------------------------------

APIS = ("chat", "responses", "messages")  # figure 2a; the server's routes /sse/n, /responses/n, /messages/n


def _api_workload(api: str, base: str, chunks: int) -> OpenAIChatWorkload:
    """Figure 2a's workload of `api` against the server's n-delta stream of that API."""
    ds = StaticDataset(["Say something long."])
    if api == "responses":
        return OpenAIResponsesWorkload(f"{base}/responses/{chunks}", "m", ds, max_tokens=chunks)
    if api == "messages":
        return AnthropicMessagesWorkload(f"{base}/messages/{chunks}", "m", ds, max_tokens=chunks)
    return _chat(f"{base}/sse/{chunks}", chunks)


def bench_apis(base: str, out: Path, seconds: float, pairs: int, chunks: int) -> dict[str, Any]:
    """Figure 2a: token events per client CPU s of each API's stream at `chunks` deltas
    per stream, on `raw`, closed:64; per round chat, responses, chat, messages, chat
    (responses and messages swap places every other round), each API run's ratio taken
    to the geometric mean of the chat runs around it; the figure is the median of the
    per-round ratios. Returns {"per_cpu_<api>": median events per cpu s, "ratio_<api>":
    median ratio to chat, "bytes_<api>": stream bytes per token event}."""
    _install_clock()

    def run(api: str, dur: float) -> dict[str, float]:
        _settled()
        cfg = BenchConfig(load="closed:64", duration_s=dur, out_dir=out, transport="raw")
        return _measured(BenchRunner(cfg, workload=_api_workload(api, base, chunks)))

    print(f"  {_loadavg()} at the start")
    for api in APIS:  # warm-up, not counted (the first real-I/O run grows the heap)
        run(api, min(seconds, 0.5))
    per_cpu: dict[str, list[float]] = {a: [] for a in APIS}
    ratios: dict[str, list[float]] = {a: [] for a in APIS[1:]}
    for rnd in range(1, pairs + 1):
        others = APIS[1:] if rnd % 2 else APIS[:0:-1]
        chats = [run("chat", seconds)]
        got = {}
        for api in others:
            got[api] = run(api, seconds)
            chats.append(run("chat", seconds))
        per_cpu["chat"] += [c["per_cpu"] for c in chats]
        line = [f"  round {rnd}: chat " + " / ".join(f"{c['per_cpu']:,.0f}" for c in chats)]
        for i, api in enumerate(others):
            per_cpu[api].append(got[api]["per_cpu"])
            ratios[api].append(got[api]["per_cpu"] / _geo(chats[i]["per_cpu"], chats[i + 1]["per_cpu"]))
            line.append(f"{api} {got[api]['per_cpu']:,.0f} ({ratios[api][-1]:.3f} of chat)")
        print(";  ".join(line) + " events per cpu s")
    res: dict[str, Any] = {f"per_cpu_{a}": statistics.median(v) for a, v in per_cpu.items()}
    res.update({f"ratio_{a}": statistics.median(v) for a, v in ratios.items()})
    res.update({f"bytes_{a}": len(api_body(a, chunks)) / chunks for a in APIS})
    print(f"  {_loadavg()} at the end")
    return res


def bench_streaming(base: str, out: Path, seconds: float, pairs: int, chunks: int) -> dict[str, Any]:
    """Figure 2 at `chunks` content chunks per stream (the server's /sse/<chunks>)."""
    _install_clock()
    ref_tr = _PoolNullTransport(tuple(split_even(sse_body(chunks), 4)), NULL_COPIES, 1e-9)
    url = f"{base}/sse/{chunks}"

    def ref_run() -> dict[str, float]:
        _settled()
        return _measured(_null_runner("ref", out, seconds, transport=ref_tr, chunks=chunks))

    def real_runner(t: str, dur: float) -> BenchRunner:
        cfg = BenchConfig(load="closed:64", duration_s=dur, out_dir=out, transport=t)
        return BenchRunner(cfg, workload=_chat(url, chunks))

    print(f"  {_loadavg()} at the start")
    # warm-up, not counted: the first real-I/O run of a process grows the heap (measured:
    # 7.5 page faults per stream in the first raw run, 0.2-0.3 in every later one, 0.01
    # in null runs), a one-time cost the null runs never pay
    for t in TRANSPORTS:
        _settled()
        _run(real_runner(t, min(seconds, 0.5)))
    _run(_null_runner("ref", out, min(seconds, 0.5), transport=ref_tr, chunks=chunks))
    _run(_null_runner("hot", out, min(seconds, 0.5), chunks=chunks))
    real: dict[str, list[dict[str, float]]] = {t: [] for t in TRANSPORTS}
    refs: dict[str, list[tuple[dict[str, float], dict[str, float]]]] = {t: [] for t in TRANSPORTS}
    ref_all: list[dict[str, float]] = []
    hot: list[dict[str, float]] = []
    hot_over_ref: list[float] = []
    bounds: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    extra: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    io: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    request = _chat(url, chunks).request(0)
    for rnd in range(1, pairs + 1):
        line = [f"  round {rnd}:"]
        # each real-I/O run sits between two reference runs (ref, raw, ref, aiohttp,
        # ref), which follow the machine's load through the round; the transports swap
        # places every other round
        order = TRANSPORTS if rnd % 2 else TRANSPORTS[::-1]
        nulls = [ref_run()]
        for t in order:
            _settled()
            got = _measured(real_runner(t, seconds))
            nulls.append(ref_run())
            real[t].append(got)
            refs[t].append((nulls[-2], nulls[-1]))
            line.append(
                f"{t} {got['per_cpu']:>9,.0f} events per cpu s ({got['per_wall']:,.0f} per wall s,"
                f" {got['n_ok']:,} streams, user {got['user_us']:.0f} + sys {got['sys_us']:.0f} us per"
                f" stream; null around it {nulls[-2]['per_cpu']:,.0f} / {nulls[-1]['per_cpu']:,.0f})"
            )
        ref_all.extend(nulls)
        _settled()
        hot.append(_measured(_null_runner("hot", out, seconds, chunks=chunks)))
        round_ref = statistics.median(n["per_cpu"] for n in nulls)
        hot_over_ref.append(hot[-1]["per_cpu"] / round_ref)
        line.append(
            f"null one hot stream (the old reference) {hot[-1]['per_cpu']:>9,.0f}"
            f" ({hot_over_ref[-1]:.3f} of the round's reference)"
        )
        # the I/O alone: POST /sse + read of the same stream, no parsing, on each client
        for t in TRANSPORTS:
            _settled()
            cpu0 = time.process_time()
            if t == "aiohttp":
                n, _ = uvloop.run(_bare_loop(url, 64, seconds, request.body, request.headers))
            else:
                n = uvloop.run(_bare_raw_loop(url, 64, seconds, request.body, request.headers))
            io_us = (time.process_time() - cpu0) / n * 1e6
            a, b = refs[t][-1]
            null_us = chunks / _geo(a["per_cpu"], b["per_cpu"]) * 1e6  # client cpu per stream, no I/O
            real_us = chunks / real[t][-1]["per_cpu"] * 1e6
            io[t].append(io_us)
            bounds[t].append(null_us / (null_us + io_us))
            extra[t].append(real_us - null_us - io_us)
            line.append(
                f"{t}: ratio {real[t][-1]['per_cpu'] / _geo(a['per_cpu'], b['per_cpu']):.3f}, bare read"
                f" {io_us:.0f} us per stream vs null's {null_us:.0f}: bound {bounds[t][-1]:.3f}; the engine"
                f" on it {real_us:.0f} us: beyond null + bare read {extra[t][-1]:+.0f} us"
            )
        print(";  ".join(line))
    _settled()
    null1 = _measured(_null_runner("1ev", out, seconds, chunks=chunks))["per_cpu"]
    got: dict[str, Any] = {
        "null_ref": statistics.median(n["per_cpu"] for n in ref_all),
        "null_hot": statistics.median(h["per_cpu"] for h in hot),
        "null_1 event/read": null1,
        "hot_over_ref": statistics.median(hot_over_ref),
    }
    ref_user = statistics.median(n["user_us"] for n in ref_all)
    ref_sys = statistics.median(n["sys_us"] for n in ref_all)
    print(
        f"  median of {pairs} rounds, null one hot stream (closed:1, the same bytes every stream: the reference"
        f" before) / the reference: {got['hot_over_ref']:.3f}"
    )
    print(
        f"  cpu per stream by getrusage (user / system; the kernel splits a process's exact runtime by"
        f" sampled ticks): null reference {ref_user:.0f} / {ref_sys:.0f} us;"
        f" null one hot stream {statistics.median(h['user_us'] for h in hot):.0f} /"
        f" {statistics.median(h['sys_us'] for h in hot):.0f} us"
    )
    for t in TRANSPORTS:
        pairs_ref = [_geo(a["per_cpu"], b["per_cpu"]) for a, b in refs[t]]
        got[f"ratio_{t}"] = statistics.median(r["per_cpu"] / n for r, n in zip(real[t], pairs_ref, strict=False))
        # the same ratio on user CPU only: null's user us per stream / the real run's
        got[f"user_ratio_{t}"] = statistics.median(
            _geo(a["user_us"], b["user_us"]) / r["user_us"] for r, (a, b) in zip(real[t], refs[t], strict=False)
        )
        got[f"hot_ratio_{t}"] = statistics.median(
            r["per_cpu"] / h["per_cpu"] for r, h in zip(real[t], hot, strict=False)
        )
        got[f"user_us_{t}"] = statistics.median(r["user_us"] for r in real[t])
        got[f"sys_us_{t}"] = statistics.median(r["sys_us"] for r in real[t])
        got[f"bound_{t}"] = statistics.median(bounds[t])
        got[f"extra_{t}"] = statistics.median(extra[t])
        got[f"io_us_{t}"] = statistics.median(io[t])
        got[f"per_cpu_{t}"] = statistics.median(r["per_cpu"] for r in real[t])
        got[f"per_wall_{t}"] = statistics.median(r["per_wall"] for r in real[t])
        print(
            f"  median of {pairs} rounds, real I/O on {t} / null reference, events per cpu s: {got[f'ratio_{t}']:.3f}"
            f" (per user cpu s only: {got[f'user_ratio_{t}']:.3f}; against the old one-hot-stream reference:"
            f" {got[f'hot_ratio_{t}']:.3f}); cpu per stream user {got[f'user_us_{t}']:.0f} + sys"
            f" {got[f'sys_us_{t}']:.0f} us (null: {ref_user:.0f} + {ref_sys:.0f}); the I/O's own bound"
            f" null / (null + bare {t} read): {got[f'bound_{t}']:.3f}; the engine's cost on it beyond null + bare"
            f" read: {got[f'extra_{t}']:+.0f} us per stream"
        )
    print(f"  NullTransport 1 event/read: {null1:,.0f} events per cpu s")
    c = _reads_per_stream(base, out, min(seconds, 1.0), chunks)
    got["reads_per_stream"] = c["reads"]
    got["write_us"] = c["write_us"]
    gap_us = statistics.median(
        chunks / r["per_cpu"] * 1e6 - chunks / _geo(a["per_cpu"], b["per_cpu"]) * 1e6
        for r, (a, b) in zip(real["raw"], refs["raw"], strict=False)
    )
    print(
        f"  what the raw path does per stream ({c['streams']:,} streams, counted in a separate run): {c['reads']:.2f}"
        f" socket reads, {c['waits']:.2f} waits on the loop, {c['writes']:.2f} request writes costing"
        f" {c['write_us']:.1f} us of cpu (CLOCK_THREAD_CPUTIME_ID around each write, minus {c['clock_pair_us']:.2f}"
        f" us that an empty interval shows; on loopback the kernel runs the server's receive path and its wake-up inside"
        f" this write) beside the gap raw - null reference of {gap_us:+.0f} us per stream (median of the rounds);"
        f" the null reference:"
        f" 4 reads, 1 wait, no write"
    )
    print(f"  {_loadavg()} at the end")
    return got


def _fit_stream_costs(st: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Figure 2's client CPU per stream split into a cost per token event and a fixed cost
    per stream: c(n) = per_stream + n * per_event (us), solved from the shortest (a) and
    longest (b) lengths of `st` (length -> bench_streaming's result) for the null
    reference (c = n / its median events per cpu s), each transport's real I/O (the
    null's c / the median real/null ratio: that ratio is taken within rounds, so a load
    change between the two lengths moves both sides alike) and each transport's bare
    read. Returns `null_event_us`, `null_stream_us` and, per transport t, `event_us_{t}`,
    `stream_us_{t}`, `io_event_us_{t}`, `io_stream_us_{t}` and `event_ratio_{t}` (null /
    real per event: the engine's per-event cost on real I/O against no I/O)."""
    a, b = min(st), max(st)

    def solve(ca: float, cb: float) -> tuple[float, float]:
        per_event = (cb - ca) / (b - a)
        return per_event, ca - a * per_event

    null = {n: n / st[n]["null_ref"] * 1e6 for n in (a, b)}
    fit: dict[str, float] = {}
    fit["null_event_us"], fit["null_stream_us"] = solve(null[a], null[b])
    for t in TRANSPORTS:
        fit[f"event_us_{t}"], fit[f"stream_us_{t}"] = solve(
            null[a] / st[a][f"ratio_{t}"], null[b] / st[b][f"ratio_{t}"]
        )
        fit[f"io_event_us_{t}"], fit[f"io_stream_us_{t}"] = solve(st[a][f"io_us_{t}"], st[b][f"io_us_{t}"])
        fit[f"event_ratio_{t}"] = fit["null_event_us"] / fit[f"event_us_{t}"]
    print(
        f"  cpu per stream = fixed + events x per event, fitted from {a} and {b} events per stream: null reference"
        f" {fit['null_stream_us']:.0f} + n x {fit['null_event_us']:.3f} us; "
        + "; ".join(
            f"real I/O on {t} {fit[f'stream_us_{t}']:.0f} + n x {fit[f'event_us_{t}']:.3f} us (per event"
            f" null / real {fit[f'event_ratio_{t}']:.3f}), its bare read {fit[f'io_stream_us_{t}']:.0f} +"
            f" n x {fit[f'io_event_us_{t}']:.3f} us"
            for t in TRANSPORTS
        )
    )
    return fit


# -- 2i. user-space instructions per stream (callgrind) -------------------------------


def _callgrind_child(kind: str, base: str, streams: int) -> None:
    """Figure 2i's measured process (run under callgrind by _callgrind_count): one warm-up
    run, then "READY" on stdout and a line awaited on stdin (the parent switches
    instrumentation on meanwhile), then the measured run with os.getppid() right after
    the runner's first clock read and os.getpgrp() right before its last (callgrind zeroes
    its counters at the one and dumps them at the other), then "RESULT ok_streams
    token_events". The run summary's SQL is skipped here (after the measured span; hours
    under valgrind)."""
    _install_clock()
    BenchRunner._summarize = lambda self, *a: {"run": {}, "self_checks": {}}
    out = Path(tempfile.mkdtemp(prefix="bench-engine-cg-"))

    def runner() -> BenchRunner:
        if kind == "raw":
            cfg = BenchConfig(load="closed:64", max_requests=streams, out_dir=out, transport="raw")
            return BenchRunner(cfg, workload=_chat(base + "/sse"))
        return _null_runner(kind, out, None, max_requests=streams)

    _run(runner())
    _settled()
    print("READY", flush=True)
    sys.stdin.readline()
    _CLOCK.on_start, _CLOCK.on_end = os.getppid, os.getpgrp
    res = _run(runner())
    _CLOCK.on_start = _CLOCK.on_end = None
    n_ok, events = _ok_token_events(res)
    print(f"RESULT {n_ok} {events}", flush=True)
    shutil.rmtree(out, ignore_errors=True)


def _callgrind_count(kind: str, base: str, streams: int) -> tuple[int, int, int]:
    """(user-space instructions of the measured span, ok streams, token events) of
    _callgrind_child(kind) under valgrind --tool=callgrind, instrumentation switched on
    by callgrind_control after the warm-up. Raises RuntimeError when a step fails."""
    with tempfile.TemporaryDirectory(prefix="bench-engine-cg-") as d:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={d}/cg.%p",
            "--zero-before=getppid",
            "--dump-before=getpgrp",
            sys.executable,
            str(Path(__file__).resolve()),
            "--callgrind-child",
            kind,
            "--callgrind-url",
            base,
            "--callgrind-streams",
            str(streams),
        ]
        env = dict(os.environ, PYTHONHASHSEED="0")  # the same dict and set orders in every run
        with open(f"{d}/valgrind.log", "w+") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
            try:
                line = proc.stdout.readline()
                if line.strip() != "READY":
                    raise RuntimeError(f"callgrind child ({kind}) did not start: {line!r}")
                ctl = subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], capture_output=True, text=True)
                if ctl.returncode != 0:
                    raise RuntimeError(f"callgrind_control failed: {ctl.stdout} {ctl.stderr}".strip())
                proc.stdin.write("go\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                proc.wait(timeout=600)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if not line.startswith("RESULT "):
                log.seek(0)
                raise RuntimeError(f"callgrind child ({kind}) failed: {line!r} {log.read()[-2000:]}")
        dumps = sorted(Path(d).glob(f"cg.{proc.pid}.*"))
        if len(dumps) != 1:
            raise RuntimeError(f"callgrind ({kind}): expected one dump of the measured span, got {dumps}")
        totals = next(ln for ln in dumps[0].read_text().splitlines() if ln.startswith("totals:"))
        n_ok, events = map(int, line.split()[1:3])
        return int(totals.split()[1]), n_ok, events


def bench_instructions(base: str, streams: int) -> dict[str, Any] | None:
    """Figure 2i: user-space instructions per ok stream, raw vs the null reference (and
    the old one-hot-stream reference), by callgrind; None when valgrind is missing."""
    missing = [t for t in ("valgrind", "callgrind_control") if shutil.which(t) is None]
    if missing:
        print(f"  skipped: {' and '.join(missing)} not on PATH")
        return None
    got: dict[str, Any] = {}
    for kind, name in (
        ("ref", "null reference (closed:64, 1 wait, distinct copies)"),
        ("hot", "null one hot stream (the old reference)"),
        ("raw", "raw closed:64"),
    ):
        t0 = time.perf_counter()
        instr, n_ok, events = _callgrind_count(kind, base, streams)
        got[kind] = instr / n_ok
        print(
            f"  {name}: {instr:,} instructions over {n_ok:,} ok streams ({events:,} token events):"
            f" {got[kind]:,.0f} per stream ({time.perf_counter() - t0:.0f} s under valgrind)"
        )
    got["ratio"] = got["ref"] / got["raw"]
    print(
        f"  user space only (no kernel, no cache or memory stalls): null reference / raw instructions per stream"
        f" {got['ratio']:.4f} (raw {got['raw'] - got['ref']:+,.0f} per stream); old reference / raw"
        f" {got['hot'] / got['raw']:.4f}"
    )
    return got


# -- profile -------------------------------------------------------------------------------


def profile_runs(base: str, out: Path, seconds: float, top: int) -> None:
    """cProfile one engine run of each kind (figure 1's non-streaming closed:64, figure
    2's streaming closed:64) and print the top `top` functions by own time."""
    import cProfile
    import io
    import pstats

    for name, workload in (
        ("non-streaming GET /json", HttpWorkload(base + "/json")),
        ("streaming POST /sse", _chat(base + "/sse")),
    ):
        cfg = BenchConfig(load="closed:64", duration_s=seconds, out_dir=out, transport=TRANSPORTS[0])
        runner = BenchRunner(cfg, workload=workload)
        prof = cProfile.Profile(time.thread_time)  # CPU time: preemption by other work is not counted
        prof.enable()
        res = _run(runner)
        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("tottime").print_stats(top)
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
        head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
        print(
            f"  {name}: {res.summary['run']['n_ok']:,} ok requests under cProfile; top {top} by own time"
            f" (the run summary's SQL after the run is included)"
        )
        for ln in lines[head : head + top + 1]:
            print("    " + ln.replace(str(REPO) + "/", "").replace(sys.prefix + "/", ""))


# -- 3. constant 1,000 req/s ---------------------------------------------------------


def _p99(xs: list[float]) -> float:
    xs = sorted(xs)
    pos = (len(xs) - 1) * 0.99  # linear interpolation, as DuckDB quantile_cont
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


async def _bare_constant(url: str, rate: float, seconds: float, warmup_s: float) -> tuple[list[float], list[float]]:
    """A bare aiohttp open loop at `rate` req/s: (E2E ms, send lag ms) of requests intended
    after `warmup_s`. Sleeps to each intended time, then starts a task (no spin)."""
    e2e: list[float] = []
    lag: list[float] = []
    pc = time.perf_counter_ns
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(intended: int) -> None:
            sent = pc()
            async with session.get(url) as resp:
                await resp.read()
            if intended >= t0 + warmup_s * 1e9:
                e2e.append((pc() - sent) / 1e6)
                lag.append((sent - intended) / 1e6)

        tasks = set()
        t0 = pc()
        step = 1e9 / rate
        for i in range(int((seconds + warmup_s) * rate)):
            intended = t0 + round(i * step)
            delay = intended - pc()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            task = asyncio.get_running_loop().create_task(one(intended))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
    return e2e, lag


async def _idle_loop_lag(seconds: float) -> dict[str, Any]:
    """Loop lag of an idle event loop (benchmaker's LoopLagMonitor, 10 ms ticks): the
    machine's scheduling noise floor at the moment."""
    from benchmaker.engine.selfcheck import LoopLagMonitor

    monitor = LoopLagMonitor()
    monitor.start()
    await asyncio.sleep(seconds)
    await monitor.stop()
    return monitor.stats()


def bench_constant(base: str, out: Path, seconds: float) -> dict[str, Any]:
    idle = uvloop.run(_idle_loop_lag(2.0))
    print(f"  noise floor, idle event loop lag ms: p50 {idle['p50']:.3f}  p99 {idle['p99']:.3f}  max {idle['max']:.3f}")
    got: dict[str, list[float]] = {"e2e_p99": [], "lag_p99": [], "bare_e2e_p99": [], "bare_lag_p99": []}
    for rnd in (1, 2):
        e2e_b, lag_b = uvloop.run(_bare_constant(base + "/json", 1000.0, seconds, 1.0))
        got["bare_e2e_p99"].append(_p99(e2e_b))
        got["bare_lag_p99"].append(_p99(lag_b))
        print(
            f"  round {rnd}: bare aiohttp open loop: E2E p99 {_p99(e2e_b):.3f} ms, send lag p99 {_p99(lag_b):.3f} ms"
            f" ({len(e2e_b):,} requests)"
        )
        cfg = BenchConfig(
            load="constant:1000", duration_s=seconds + 1.0, warmup_s=1.0, out_dir=out, transport=TRANSPORTS[0]
        )
        res = _run(BenchRunner(cfg, workload=HttpWorkload(base + "/json")))
        summary = orjson.loads((res.bundle_dir / "summary.json").read_bytes())
        run = summary["run"]
        e2e, lag = run["e2e_ms"], run["schedule_lag_ms"]
        got["e2e_p99"].append(e2e["p99"])
        got["lag_p99"].append(lag["p99"])
        ll = summary["self_checks"]["loop_lag_ms"]
        print(
            f"           engine: {run['n_ok']:,} ok of {run['n_samples']:,} (measured phase), offered "
            f"{run['offered_rate_per_s']:.1f}/s, achieved {run['request_throughput_per_s']:.1f}/s,"
            f" cpu util {summary['self_checks']['client_cpu_util']:.2f}"
        )
        print(
            f"           E2E ms          p50 {e2e['p50']:.3f}  p99 {e2e['p99']:.3f}  max {e2e['max']:.3f}"
            f"  (count {e2e['count']:,})"
        )
        print(
            f"           schedule lag ms p50 {lag['p50']:.3f}  p99 {lag['p99']:.3f}  max {lag['max']:.3f}"
            f"  (count {lag['count']:,})"
        )
        print(f"           loop lag ms     p50 {ll['p50']:.3f}  p99 {ll['p99']:.3f}  max {ll['max']:.3f}")
    # outside noise only ever adds latency, so the lower of two runs is the better
    # estimate of the engine's own tail; both runs are printed above
    best = {k: min(v) for k, v in got.items()}
    best["idle_lag_p99"] = idle["p99"]
    return best


# -- 4. memory per in-flight stream --------------------------------------------------


async def _run_sampled(runner: BenchRunner, period_s: float) -> tuple[Any, int, list[tuple[float, int, int]]]:
    """Run with a VmRSS sampler beside it; (result, baseline KiB, [(t s, in flight, KiB)])."""
    points: list[tuple[float, int, int]] = []
    base = _rss_kb()
    t0 = time.perf_counter()

    async def sample() -> None:
        while True:
            points.append((time.perf_counter() - t0, runner.live.in_flight, _rss_kb()))
            await asyncio.sleep(period_s)

    task = asyncio.get_running_loop().create_task(sample())
    try:
        res = await runner.run()
    finally:
        task.cancel()
    return res, base, points


def bench_memory(base: str, out: Path, seconds: float) -> dict[str, Any]:
    url = base + "/hold"

    def runner(n: int, dur: float) -> BenchRunner:
        cfg = BenchConfig(load=f"closed:{n}", duration_s=dur, drain_s=0.2, out_dir=out, transport=TRANSPORTS[0])
        return BenchRunner(cfg, workload=_chat(url))

    async def both() -> tuple[Any, int, list[tuple[float, int, int]]]:
        await runner(100, 1.0).run()  # warm-up: code paths, allocator arenas
        return await _run_sampled(runner(HOLD_STREAMS, max(seconds, 4.0)), 0.25)

    res, base_kb, points = uvloop.run(both())
    plateau = [kb for t, inflight, kb in points if inflight == HOLD_STREAMS and t >= 2.0]
    first_bytes = sum(1 for line in open(res.samples_path, "rb") if orjson.loads(line)["first_byte_ns"] is not None)
    if not plateau:
        print(f"  never {HOLD_STREAMS} in flight for 2 s (max in flight {res.summary['self_checks']['max_in_flight']})")
        return {"kb_per_stream": None}
    peak = max(plateau)
    per = (peak - base_kb) / HOLD_STREAMS
    print(
        f"  {HOLD_STREAMS:,} streams open ({first_bytes:,} got their first bytes), RSS baseline {base_kb / 1024:.1f} MiB,"
        f" plateau {peak / 1024:.1f} MiB ({len(plateau)} samples, min {min(plateau) / 1024:.1f} MiB)"
    )
    print(f"  {per:.1f} KB per in-flight stream")
    return {"kb_per_stream": per}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="length of figures 3-4's timed runs (default 5)")
    ap.add_argument(
        "--pair-seconds", type=float, default=1.5, help="length of each run of figures 1-2's pairs (default 1.5)"
    )
    ap.add_argument("--pairs", type=int, default=9, help="rounds of runs in figures 1-2 (default 9)")
    ap.add_argument(
        "--figures",
        default="1,2,2a,2i,3,4,profile",
        help="comma-separated figures to run (default all: 1,2,2a,2i,3,4,profile)",
    )
    ap.add_argument(
        "--callgrind-streams",
        type=int,
        default=128,
        help="streams of each measured run under callgrind in figure 2i (default 128)",
    )
    ap.add_argument("--callgrind-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--callgrind-url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile-top", type=int, default=25, help="profile entries printed per run (default 25)")
    ap.add_argument(
        "--sse-chunks",
        default=",".join(map(str, SSE_LENGTHS)),
        help="figure 2's stream lengths, content chunks per stream, comma-separated (default"
        f" {','.join(map(str, SSE_LENGTHS))}; the per-event and per-stream costs are fitted"
        " from the shortest and the longest)",
    )
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and client to separate CPUs")
    ap.add_argument("--keep", type=Path, default=None, help="write run bundles here (default: a temp dir, removed)")
    args = ap.parse_args()
    try:
        lengths = sorted({int(n) for n in args.sse_chunks.split(",")})
    except ValueError:
        ap.error(f"--sse-chunks: expected comma-separated numbers of chunks, got {args.sse_chunks!r}")
    if not lengths or lengths[0] < 1:
        ap.error(f"--sse-chunks: expected numbers >= 1, got {args.sse_chunks!r}")
    if args.callgrind_child is not None:  # figure 2i's process under valgrind
        _callgrind_child(args.callgrind_child, args.callgrind_url, args.callgrind_streams)
        return 0
    _raise_fd_limit(HOLD_STREAMS * 2 + 1024)
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    proc, port = start_server(cpu=cpus[1] if pin else None, sse_chunks=(SSE_CHUNKS, *lengths), sse_writes=4)
    if pin:
        os.sched_setaffinity(0, {cpus[0]})
    base = f"http://127.0.0.1:{port}"
    print(
        f"engine benchmarks: server pid {proc.pid} on {'CPU ' + str(cpus[1]) if pin else 'any CPU'}, client on "
        f"{'CPU ' + str(cpus[0]) if pin else 'any CPU'}, {args.seconds:g} s per run, python {sys.version.split()[0]},"
        f" aiohttp {aiohttp.__version__}, uvloop {uvloop.__version__}"
    )
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="bench-engine-")
    out = args.keep or Path(tmp.name)
    started = time.perf_counter()
    try:
        todo = set(args.figures.split(","))
        thr = st = fit = instr = const = mem = apis = None
        if "1" in todo:
            print(
                f"1. non-streaming throughput, concurrency 64, GET /json, {args.pairs} pairs of"
                f" {args.pair_seconds:g} s runs"
            )
            thr = bench_throughput(base, out, args.pair_seconds, args.pairs)
        if "2" in todo:
            st = {}
            for n in lengths:
                print(
                    f"2. streaming, {n} content chunks per response, {args.pairs} pairs of {args.pair_seconds:g} s runs"
                )
                st[n] = bench_streaming(base, out, args.pair_seconds, args.pairs, n)
            fit = _fit_stream_costs(st) if len(st) > 1 else None
        if "2a" in todo:
            print(
                f"2a. streaming events per cpu s by wire API, {SSE_CHUNKS} deltas per response, raw, {args.pairs}"
                f" rounds of {args.pair_seconds:g} s runs"
            )
            apis = bench_apis(base, out, args.pair_seconds, args.pairs, SSE_CHUNKS)
        if "2i" in todo:
            print(
                f"2i. user-space instructions per stream by callgrind (counted, not timed; {args.callgrind_streams}"
                f" streams per measured run)"
            )
            instr = bench_instructions(base, args.callgrind_streams)
        if "profile" in todo:
            print("profile (cProfile, client pinned as in 1-2)")
            profile_runs(base, out, args.pair_seconds, args.profile_top)
        if pin:  # latency and memory: let the scheduler place both (a pinned CPU shared
            # with other work stalls the server for a time slice)
            os.sched_setaffinity(0, set(cpus))
            os.sched_setaffinity(proc.pid, set(cpus))
        if "3" in todo:
            print("3. constant 1,000 req/s, GET /json, client and server unpinned")
            const = bench_constant(base, out, args.seconds)
        if "4" in todo:
            print(f"4. memory, {HOLD_STREAMS:,} open streams")
            mem = bench_memory(base, out, args.seconds)
    finally:
        proc.terminate()
        proc.wait()
        if tmp is not None:
            tmp.cleanup()
    rows = []
    if thr is not None:
        for t in TRANSPORTS:
            target = t == TRANSPORTS[0]
            rows += [
                (
                    f"non-streaming req/s / bare aiohttp ({t}), median",
                    thr[f"ratio_{t}"],
                    ">= 0.85" if target else "-",
                    thr[f"ratio_{t}"] >= 0.85 if target else None,
                    "{:.3f}",
                ),
                (
                    f"non-streaming per client cpu s / bare aiohttp ({t})",
                    thr[f"cpu_ratio_{t}"],
                    ">= 0.95" if target else "-",
                    thr[f"cpu_ratio_{t}"] >= 0.95 if target else None,
                    "{:.3f}",
                ),
            ]
        rows.append(("  engine's own cpu per request, no I/O (us)", thr["own_us"], "-", None, "{:.1f}"))
    if st is not None:
        shortest = min(st)
        for n, got in st.items():
            for t in TRANSPORTS:
                # the ratio target is judged on `raw` at the shortest stream (the default 200:
                # real agent turns are that short, docstring); longer ones show the per-stream share
                target = t == TRANSPORTS[0]
                judged = target and n == shortest
                rows += [
                    (
                        f"streaming events/s per core ({t}, {n} ev)",
                        got[f"per_cpu_{t}"],
                        ">= 60,000" if target else "-",
                        got[f"per_cpu_{t}"] >= 60_000 if target else None,
                        "{:,.0f}",
                    ),
                    (f"  per wall s ({t}, {n} ev)", got[f"per_wall_{t}"], "-", None, "{:,.0f}"),
                    (
                        f"  real I/O / null per core ({t}, {n} ev), median",
                        got[f"ratio_{t}"],
                        ">= 0.95" if judged else "-",
                        got[f"ratio_{t}"] >= 0.95 if judged else None,
                        "{:.3f}",
                    ),
                    (f"  bound: null / (null + bare read) ({t}, {n} ev)", got[f"bound_{t}"], "-", None, "{:.3f}"),
                    (f"  the same per user cpu s only ({t}, {n} ev)", got[f"user_ratio_{t}"], "-", None, "{:.3f}"),
                    (
                        f"  against the old one-hot-stream null ({t}, {n} ev)",
                        got[f"hot_ratio_{t}"],
                        "-",
                        None,
                        "{:.3f}",
                    ),
                    (
                        f"  cpu us/stream user / system ({t}, {n} ev)",
                        f"{got[f'user_us_{t}']:.0f} / {got[f'sys_us_{t}']:.0f}",
                        "-",
                        None,
                        "{}",
                    ),
                    (f"  beyond null + bare read, us/stream ({t}, {n} ev)", got[f"extra_{t}"], "-", None, "{:+.0f}"),
                ]
            rows += [
                (f"streaming events/s per core (null ref, {n} ev)", got["null_ref"], "-", None, "{:,.0f}"),
                (f"  null one hot stream (old ref) / ref ({n} ev)", got["hot_over_ref"], "-", None, "{:.3f}"),
                (f"  null, 1 event per read ({n} ev)", got["null_1 event/read"], "-", None, "{:,.0f}"),
                (f"  raw path: socket reads per stream ({n} ev)", got["reads_per_stream"], "-", None, "{:.2f}"),
                (f"  raw path: request write cpu us/stream ({n} ev)", got["write_us"], "-", None, "{:.1f}"),
            ]
        if fit is not None:
            for t in TRANSPORTS:
                rows += [
                    (f"per event: null / real I/O cpu ({t}, fitted)", fit[f"event_ratio_{t}"], "-", None, "{:.3f}"),
                    (
                        f"  per stream: real I/O - null, us ({t}, fitted)",
                        fit[f"stream_us_{t}"] - fit["null_stream_us"],
                        "-",
                        None,
                        "{:+.0f}",
                    ),
                    (f"  per stream: its bare read, us ({t}, fitted)", fit[f"io_stream_us_{t}"], "-", None, "{:.0f}"),
                ]
    if apis is not None:
        for api in APIS:
            rows.append(
                (f"events per cpu s, {api} ({SSE_CHUNKS} ev, raw)", apis[f"per_cpu_{api}"], "-", None, "{:,.0f}")
            )
            rows.append((f"  stream bytes per token event, {api}", apis[f"bytes_{api}"], "-", None, "{:.0f}"))
        for api in APIS[1:]:
            rows.append(
                (
                    f"  {api} / chat events per cpu s, median",
                    apis[f"ratio_{api}"],
                    ">= 0.9",
                    apis[f"ratio_{api}"] >= 0.9,
                    "{:.3f}",
                )
            )
    if instr is not None:
        rows += [
            ("user-space instructions/stream, raw (callgrind)", instr["raw"], "-", None, "{:,.0f}"),
            ("user-space instructions/stream, null reference", instr["ref"], "-", None, "{:,.0f}"),
            ("  user space only: null / raw instructions", instr["ratio"], "-", None, "{:.4f}"),
        ]
    if const is not None:
        rows += [
            ("idle event loop lag p99 (ms): noise floor", const["idle_lag_p99"], "-", None, "{:.3f}"),
            ("E2E p99 at 1,000 req/s (ms), best of 2", const["e2e_p99"], "<= 2", const["e2e_p99"] <= 2.0, "{:.3f}"),
            (
                "schedule lag p99 at 1,000 req/s (ms), best of 2",
                const["lag_p99"],
                "<= 2",
                const["lag_p99"] <= 2.0,
                "{:.3f}",
            ),
            ("  reference: bare aiohttp E2E p99, best of 2", const["bare_e2e_p99"], "-", None, "{:.3f}"),
            ("  reference: bare aiohttp send lag p99, best of 2", const["bare_lag_p99"], "-", None, "{:.3f}"),
        ]
    if mem is not None:
        rows.append(
            (
                "memory per in-flight stream (KB)",
                mem["kb_per_stream"],
                "<= 32",
                mem["kb_per_stream"] is not None and mem["kb_per_stream"] <= 32,
                "{:.1f}",
            )
        )
    print(f"\n{'figure':<50} {'value':>12} {'target':>10}  result")
    for name, value, target, ok, fmt in rows:
        shown = fmt.format(value) if value is not None else "n/a"
        print(f"{name:<50} {shown:>12} {target:>10}  {'' if ok is None else 'PASS' if ok else 'FAIL'}")
    print(f"(total {time.perf_counter() - started:.0f} s)")
    return 0 if all(ok is not False for *_, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
