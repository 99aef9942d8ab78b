"""One shard of a distributed engine sweep point (docs/several-machines.md).

A distributed sweep point runs `N` shards, each on its own load host (a Prefect worker
of a work pool, or a Dask worker), all writing into one staging bundle on a path every
host reaches (mounted at the same absolute path everywhere: an NFS/SMB share), or,
with `exchange` set (a path or fsspec URL, benchmaker.engine.exchange), each writing into a
local temporary bundle and uploading its two files under
`<exchange>/<run_id>/points/<point>/_shards/a<T>/<run_id>/` when done (the orchestrator
downloads them into the staging bundle before merge_point, `fetch_shards`):

    staging = shard_staging_dir(run_dir, "closed-8", T)  # <run_dir>/points/closed-8/_shards/a<T>
    await run_shard_point(ShardPoint(...worker=k, shards=N, start_wall_ns=T...))
    row = merge_point(point, exit_codes=[0, 0])          # one point row, files in place

Time: `start_wall_ns` (WALL-CLOCK ns since the epoch) is
the attempt's earliest start; the shared start is fixed by a readiness barrier
(benchmaker.engine.shared_start.await_shared_start): once its transport is open and its
workload built, each shard writes `ready-w<k>.json` beside the attempt's bundle
(`_shards/a<T>/`, or the exchange's same key) and waits for all N records; the start is
max(earliest, last ready + MIN_START_LEAD_S), the same on every shard. Each shard
converts it once to its own monotonic clock
(`start_at_ns = perf_counter_ns() + (start_wall_ns - time_ns())`) and stamps every
sample on that clock, so no duration spans two hosts. Each shard's report keeps its
wall clock against the shared storage's clock (`self_checks.clock`, run_shard_point):
hosts whose `clock.wall_offset_ns` differ by D started about D apart in real time.

While it runs, each shard writes its live progress (requests finished of its share of
`max_requests`, in flight, errors; benchmaker.progress.watch_engine with a ProgressWriter) to
`<run_dir>/points/<point>/_shards/a<T>/progress-w<k>.json` (the exchange's same key), which
the coordinator merges into the point's progress (benchmaker.tasks.progress.shard_progress).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from prefect import task
from prefect.cache_policies import NO_CACHE

from benchmaker.engine.bundle import write_json_atomic
from benchmaker.engine.config import BenchConfig
from benchmaker.engine.exchange import Exchange, shards_key
from benchmaker.engine.load_models import ClosedLoop, load_model_of
from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.shared_start import LATE_START_LIMIT_MS, ReadyBoard, StartBarrier, measure_clock_offset
from benchmaker.engine.workers import merge_shards
from benchmaker.progress import ProgressWriter, watch_engine
from benchmaker.sweep.point import LlmPoint
from benchmaker.sweep.shard import progress_name, write_atomic
from benchmaker.sweep.sweep import engine_point_row, point_dir, write_point_summary
from benchmaker.workloads.anthropic_messages import AnthropicMessagesWorkload
from benchmaker.workloads.datasets import SyntheticDataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from benchmaker.workloads.openai_responses import OpenAIResponsesWorkload

__all__ = [
    "ShardPoint",
    "endpoint_url",
    "fetch_shards",
    "merge_point",
    "point_config",
    "point_workload",
    "run_shard_point",
    "run_shard_point_task",
    "shard_staging_dir",
    "shards_for_load",
]


@dataclass(frozen=True)
class ShardPoint:
    """What one shard of one llm-sweep point needs (all JSON-able: it is a flow/task
    parameter): the whole point's spec `point` (benchmaker.sweep.point.LlmPoint; its
    load, max_requests and `shards` are the WHOLE point's), where the run is, the run's
    `label`, and which shard of which attempt this is. `run_dir` must be the same
    absolute path on every host. `start_wall_ns` is the attempt's earliest start
    (module docstring); `ready_timeout_s`: how long after it the shards wait for each
    other's ready records (None: DEFAULT_READY_TIMEOUT_S)."""

    point: LlmPoint
    run_dir: str
    run_id: str
    label: str | None
    worker: int
    start_wall_ns: int
    exchange: str | None = None
    ready_timeout_s: float | None = None

    @property
    def sweep_point(self) -> str:
        """The point's label ("closed-8", LlmPoint.name)."""
        return self.point.name

    @property
    def shards(self) -> int:
        """The number of shards of the point."""
        return self.point.shards

    def as_params(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (flow-run parameters)."""
        return {**asdict(self), "point": self.point.model_dump(mode="json")}


def shards_for_load(load: str, shards: int) -> int:
    """How many shards a point of rate spec `load` runs on `shards` hosts: `shards`,
    except a closed loop of C < shards workers, which runs on C (a shard owns at least
    one worker; none sits idle). A ParsedRateSpec's model is used as it is. Raises
    RateSpecError for a bad spec."""
    model = load_model_of(load)
    return min(shards, model.concurrency) if isinstance(model, ClosedLoop) else shards


def endpoint_url(base_url: str, api: str = "chat") -> str:
    """`base_url` (with or without /v1, or already the full URL) -> the endpoint of
    `api`: .../v1/chat/completions (chat), .../v1/responses (responses) or
    .../v1/messages (messages)."""
    path = {"chat": "/chat/completions", "messages": "/messages"}.get(api, "/responses")
    url = base_url.rstrip("/")
    if url.endswith(path):
        return url
    return (url if url.endswith("/v1") else url + "/v1") + path


def shard_staging_dir(run_dir: Path, sweep_point: str, attempt: int | None = None) -> Path:
    """`<run_dir>/points/<sweep_point>/_shards/a<attempt>`: the shards' common engine
    out_dir for one attempt of the point (`attempt` = its shared start,
    `start_wall_ns`, so a straggler of an earlier attempt never mixes in; the bundle
    itself is `<that>/<run_id>/`); without `attempt`, the `_shards` directory of every
    attempt, removed by merge_point."""
    base = point_dir(Path(run_dir), sweep_point) / "_shards"
    return base if attempt is None else base / f"a{attempt}"


def point_config(point: LlmPoint, run_id: str, label: str | None, **more: Any) -> BenchConfig:
    """The engine config of the llm-sweep point `point` in run `run_id` (`more`: further
    BenchConfig fields, e.g. a shard's `workers` and `out_dir`). Raises pydantic's
    ValidationError for a bad field of `more`."""
    return BenchConfig(
        load=point.load,
        duration_s=point.duration_s,
        max_requests=point.max_requests,
        run_id=run_id,
        sweep_point=point.name,
        kind="llm-sweep",
        label=label,
        checks=point.checks(),
        **more,
    )


def point_workload(point: LlmPoint) -> OpenAIChatWorkload:
    """The workload of the llm-sweep point `point`: streamed requests of its `api` (chat,
    responses or messages) at endpoint_url(base_url, api) over a synthetic dataset of
    `prompt_words` words, with `"ignore_eos": true` in each body when `ignore_eos` (vLLM
    and SGLang then generate `max_tokens` tokens every time), its API key read from the
    environment variable `point.api_key_env` (None when unset)."""
    cls = {"responses": OpenAIResponsesWorkload, "messages": AnthropicMessagesWorkload}.get(
        point.api, OpenAIChatWorkload
    )
    return cls(
        endpoint_url(point.base_url, point.api),
        point.model,
        SyntheticDataset(point.prompt_words, count=1000),
        max_tokens=point.max_tokens,
        api_key=os.environ.get(point.api_key_env) if point.api_key_env else None,
        ignore_eos=point.ignore_eos,
    )


def _config(p: ShardPoint, shards: int) -> BenchConfig:
    out_dir = shard_staging_dir(Path(p.run_dir), p.sweep_point, p.start_wall_ns)
    return point_config(p.point, p.run_id, p.label, workers=shards, out_dir=out_dir)


async def run_shard_point(p: ShardPoint) -> dict[str, Any]:
    """Run shard `p.worker` of `p.shards` of one sweep point: the engine's slice k of N
    of `p.point.load` (benchmaker.engine.load_models), started at the shared start the readiness
    barrier gives (not before `p.start_wall_ns`; module docstring), writing
    `samples-w<k>.jsonl` and `worker-<k>.json` into the staging bundle. Adds to the
    report's self_checks: `clock` (measure_clock_offset: the wall clock against the mtime
    the shared storage gives a file it just wrote, measured just before the start), `hostname`, `start_wall_ns`
    (the shared start), `barrier` (benchmaker.engine.shared_start.SharedStart.as_dict) and
    `start_late_ns`. Returns those self_checks.

    Raises ValueError when not 0 <= worker < shards;
    benchmaker.engine.shared_start.ShardsNotReady naming the missing shards when they are not
    ready `p.ready_timeout_s` after `p.start_wall_ns`, ShardLate when this shard saw
    the last ready record only after the shared start (nothing is sent then).
    Single-request failures are samples, never exceptions."""
    if not 0 <= p.worker < p.shards:
        raise ValueError(f"worker: expected 0 <= worker < shards={p.shards} (got {p.worker})")
    attempt_dir = shard_staging_dir(Path(p.run_dir), p.sweep_point, p.start_wall_ns)
    attempt_key = shards_key(p.run_id, p.sweep_point, p.start_wall_ns)
    config = _config(p, p.shards)
    exchange = Exchange(p.exchange) if p.exchange else None
    local = Path(tempfile.mkdtemp(prefix="benchmaker-shard-")) if exchange else None
    if local is not None:
        config = config.model_copy(update={"out_dir": local})
    staging = Path(config.out_dir) / p.run_id
    barrier = StartBarrier(
        ReadyBoard.in_exchange(exchange, attempt_key) if exchange else ReadyBoard.in_dir(attempt_dir),
        worker=p.worker,
        shards=p.shards,
        earliest_wall_ns=p.start_wall_ns,
        timeout_s=p.ready_timeout_s,
        what=f"shard {p.worker}/{p.shards} of {p.sweep_point}",
    )
    try:
        clock = exchange.clock_offset(attempt_key) if exchange else measure_clock_offset(staging)
        runner = BenchRunner(  # the barrier once it is set up
            config,
            ready=barrier,
            workload=point_workload(p.point),
            worker=p.worker,
            shards=p.shards,
            samples_name=f"samples-w{p.worker}.jsonl",
        )
        progress = progress_name(p.worker)
        put = (
            partial(exchange.put_bytes, f"{attempt_key}/{progress}")
            if exchange
            else partial(write_atomic, attempt_dir / progress)
        )
        mr = p.point.max_requests
        share = None if mr is None else mr // p.shards + (1 if p.worker < mr % p.shards else 0)  # runner's share
        async with watch_engine(
            p.sweep_point, runner.live, calls_total=share, duration_s=p.point.duration_s, sink=ProgressWriter(put)
        ):
            result = await runner.run()
        checks = dict(result.summary["self_checks"])
        shared = barrier.shared
        assert shared is not None, "set by the barrier the run awaited"
        checks.update(
            clock=clock,
            hostname=clock["hostname"],
            start_wall_ns=shared.start_wall_ns,
            barrier=shared.as_dict(),
            start_late_ns=checks["t0_wall_ns"] - shared.start_wall_ns,
        )
        report = staging / f"worker-{p.worker}.json"
        if p.shards == 1 and not report.is_file():
            # a point on one shard (shards_for_load: closed:1 on two hosts): the engine ran
            # it as a whole run and wrote summary.json, not a shard's report; merge_point
            # reads the report, so it is written here from the same self-checks
            summary = result.summary
            write_json_atomic(
                report,
                {
                    "self_checks": summary["self_checks"],
                    "interrupted": bool(summary.get("partial")),
                    "interrupted_by": summary.get("interrupted_by"),
                },
            )
        rep = orjson.loads(report.read_bytes())
        rep["self_checks"] = checks
        write_json_atomic(report, rep)
        if exchange is not None:
            key = f"{attempt_key}/{p.run_id}"
            for name in (f"samples-w{p.worker}.jsonl", f"worker-{p.worker}.json"):
                exchange.put_file(staging / name, f"{key}/{name}")
    finally:
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)
    return checks


def fetch_shards(p: ShardPoint) -> list[Path]:
    """Download the shards' files of the attempt `p` describes (`p.start_wall_ns`) from
    `p.exchange` into its staging directory (shard_staging_dir), then delete the
    point's shard files there (of every attempt); returns the local paths. Nothing to
    do (returns []) when `p.exchange` is None."""
    if not p.exchange:
        return []
    staging = shard_staging_dir(Path(p.run_dir), p.sweep_point, p.start_wall_ns)
    (staging / p.run_id).mkdir(parents=True, exist_ok=True)  # merge_point reads the bundle there
    return Exchange(p.exchange).fetch_attempt(p.run_id, p.sweep_point, p.start_wall_ns, staging)


run_shard_point_task = task(name="run-llm-sweep-shard", cache_policy=NO_CACHE)(run_shard_point)
"""run_shard_point as a Prefect task (for a DaskTaskRunner: one task per shard, never
cached or retried: a retried shard would miss the shared start)."""


def merge_point(
    p: ShardPoint, exit_codes: list[int | None], shard_info: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Merge the `len(exit_codes)` shards of the point `p` describes (any `worker`;
    `start_wall_ns`: the attempt whose files are merged) with
    benchmaker.engine.workers.merge_shards: exit code 0 = the
    shard completed; anything else (or a missing report) is a verdict reason
    "worker k died (exit code C)", and its samples, if any, still count. A shard that
    started more than LATE_START_LIMIT_MS late is a verdict reason too.

    Files: samples-w<k>.jsonl and worker-<k>.json go to `<run_dir>/points/<point>/`
    (the warehouse loader gives each row `shard = k`), the merged summary (with `shards`: `shard_info`, e.g. flow run ids and states) to
    `engine_summary.json` and the row to `point_summary.json`; the staging directory
    is removed. Returns the point's row (keys of benchmaker.sweep.sweep.run_engine_point's row,
    plus `shards`)."""
    n = len(exit_codes)
    config = _config(p, n)
    bundle_dir = Path(config.out_dir) / p.run_id
    summary = merge_shards(bundle_dir, config, {"default": config.load_model()}, n, list(exit_codes))
    late = [
        (w["worker"], w["start_late_ns"] / 1e6)
        for w in summary["self_checks"]["workers"]
        if w.get("start_late_ns") is not None and w["start_late_ns"] / 1e6 > LATE_START_LIMIT_MS
    ]
    for k, ms in late:
        summary["verdict"]["reasons"].append(
            f"worker {k} started {ms:.1f} ms after the shared start (limit {LATE_START_LIMIT_MS:g} ms)"
        )
        summary["verdict"]["valid"] = False
    summary["shards"] = shard_info or []
    pdir = point_dir(Path(p.run_dir), p.sweep_point)
    for f in sorted(bundle_dir.glob("samples-w*.jsonl")) + sorted(bundle_dir.glob("worker-*.json")):
        os.replace(f, pdir / f.name)
    write_json_atomic(pdir / "engine_summary.json", summary)
    shutil.rmtree(shard_staging_dir(Path(p.run_dir), p.sweep_point))  # every attempt's
    row = engine_point_row(pdir, summary, p.sweep_point, p.point.duration_s, shards=n)
    write_point_summary(pdir, row)
    return row
