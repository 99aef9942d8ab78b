"""Monitors: time series sampled on an interval during a run, on the run's clock.

    mons = [PrometheusMonitor("http://127.0.0.1:8000/metrics", interval_s=1.0,   # every 1 s
                              metrics=["vllm:*"]),
            FunctionMonitor(lambda: {"gpu_mem_gb": read_gpu_mem()}, interval_s=5.0)]
    BenchRunner(cfg, workload=wl, monitors=mons)   # writes <bundle>/monitor.jsonl

Each monitor is sampled once when the run's clock starts, then every `interval_s`,
and once more when the run stops (so a run shorter than the interval still gets a
counter rate). Every row is stamped `t_ns = time.perf_counter_ns() - t0` of the
sample's start, the run's clock (docs/metrics.md), so rows align with samples.jsonl. Rows of
`monitor.jsonl` (read by benchmaker.warehouse.loader into `monitor_samples`):

    {"name": str, "labels": {str: str}, "t_ns": int, "value": float}

Prometheus text (`PrometheusMonitor`, parsed with prometheus_client's
`text_string_to_metric_families`), per metric family type:

    gauge, untyped   name = the sample name, value as scraped
    counter          name = "<sample name>:rate_per_s" (e.g. vllm:prompt_tokens_total:
                     rate_per_s), value = increase / elapsed s between this scrape and
                     the previous one; a decrease is a counter reset and the increase
                     is the new value (Prometheus `rate()` reset handling). The first
                     scrape has no previous one, so no row (unknown, not 0).
    histogram        name = "<family>:p<q*100>" (e.g. vllm:time_to_first_token_seconds
                     :p99), value = the quantile of the observations made between the
                     two scrapes: `histogram_quantile(q, increase(<family>_bucket))` per
                     label set; no row when no observation was made in the interval.
                     Also "<family>_count:rate_per_s" (observations per s).
    summary          quantile samples as gauges (their `quantile` label kept),
                     `_count`/`_sum` as counters (rates)

Label values are kept as parsed (quotes, backslashes, `}` unescaped by the parser);
a label `instance` = host:port of the URL is added unless scraped, as Prometheus does
for its targets. NaN and infinite values are skipped (JSON has no such numbers).
`_created` samples (OpenMetrics creation stamps of counters/histograms) are skipped.

A failed sample (connection refused, HTTP >= 400, bad text, a raising function) never
stops the run: it is counted with its last error in `MonitorRunner.report()`, which the
runner puts in the summary's `self_checks.monitors`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import math
import pkgutil
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol
from urllib.parse import urlsplit

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from benchmaker.engine.bundle import JsonlAppender
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.load_models import parse_duration_s

__all__ = [
    "FunctionMonitor",
    "FunctionMonitorSpec",
    "Monitor",
    "MonitorRunner",
    "MonitorSpec",
    "PrometheusMonitor",
    "PrometheusMonitorSpec",
    "PrometheusRates",
    "build_monitors",
    "histogram_quantile",
]

MonitorRow = dict[str, Any]
"""One row of monitor.jsonl: {"name", "labels", "t_ns", "value"} (module docstring)."""

NS_PER_S = 1_000_000_000
STOP_GRACE_S = 1.0  # MonitorRunner.stop: how long a sample in flight may take to finish
MAX_METRICS_BYTES = 16 << 20  # a /metrics body, decoded: more is a failed sample


class Monitor(Protocol):
    """A source of monitor rows. `collect(t_ns)` takes one sample stamped `t_ns` (ns on
    the run's clock) and returns its rows; it may raise (the runner counts the error).
    `aclose()` releases resources (connections)."""

    name: str
    interval_s: float

    async def collect(self, t_ns: int) -> list[MonitorRow]: ...

    async def aclose(self) -> None: ...


# -- histogram quantiles ----------------------------------------------------------------


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The q-quantile (0 <= q <= 1) of a histogram given as (upper bound `le`,
    cumulative count) pairs, by linear interpolation inside the bucket holding rank
    q * total, as Prometheus' `histogram_quantile` (promql/quantile.go `bucketQuantile`,
    https://github.com/prometheus/prometheus/blob/main/promql/quantile.go; docs:
    https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile):

    - buckets are sorted by bound; the highest must be +Inf, else None (Prometheus: NaN);
    - cumulative counts that decrease are raised to the previous count (monotonicity fix);
    - no observations: None (Prometheus: NaN);
    - rank in the +Inf bucket: the second highest bound;
    - rank in the lowest bucket: interpolated from 0 when its bound is > 0, else its bound;
    - else lower + (upper - lower) * (rank - count below) / (count in the bucket).

    Returns -inf for q < 0 and +inf for q > 1, as Prometheus does.
    """
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bs = sorted((float(le), float(c)) for le, c in buckets)
    if len(bs) < 2 or not math.isinf(bs[-1][0]):
        return None
    fixed: list[tuple[float, float]] = []
    for le, c in bs:
        if fixed and c < fixed[-1][1]:
            c = fixed[-1][1]
        fixed.append((le, c))
    total = fixed[-1][1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, (_, c) in enumerate(fixed) if c >= rank)
    if b == len(fixed) - 1:
        return fixed[-2][0]
    if b == 0 and fixed[0][0] <= 0:
        return fixed[0][0]
    start, end, count = 0.0, fixed[b][0], fixed[b][1]
    if b > 0:
        start = fixed[b - 1][0]
        count -= fixed[b - 1][1]
        rank -= fixed[b - 1][1]
    return start + (end - start) * (rank / count)


# -- Prometheus text to rows --------------------------------------------------------------


def _key(name: str, labels: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def _finite(v: float) -> bool:
    return not (math.isnan(v) or math.isinf(v))


class PrometheusRates:
    """Turns successive Prometheus text scrapes into monitor rows (module docstring).

        conv = PrometheusRates(metrics=["vllm:*"], quantiles=(0.5, 0.99))
        rows = conv.rows(text, t_ns)     # call once per scrape, t_ns non-decreasing

    `metrics`: fnmatch patterns matched against the family name and the sample name
    (None: keep all). `extra_labels` are added to every row unless the scrape has that
    label. Keeps the previous scrape's counters and buckets (one float per series).
    Raises ValueError when the text does not parse (prometheus_client's error).
    """

    def __init__(
        self,
        metrics: Sequence[str] | None = None,
        quantiles: Sequence[float] = (0.5, 0.9, 0.99),
        extra_labels: Mapping[str, str] | None = None,
    ) -> None:
        for q in quantiles:
            if not 0 <= q <= 1:
                raise ConfigError(f"quantiles: expected values in 0..1 (got {q!r})")
        self.metrics = list(metrics) if metrics else None
        self.quantiles = tuple(quantiles)
        self.extra_labels = dict(extra_labels or {})
        self._prev_t_ns: int | None = None
        self._counters: dict[Any, float] = {}
        self._buckets: dict[Any, dict[float, float]] = {}

    def _wanted(self, *names: str) -> bool:
        return self.metrics is None or any(fnmatch.fnmatchcase(n, p) for n in names for p in self.metrics)

    def _labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        out = dict(labels)
        for k, v in self.extra_labels.items():
            out.setdefault(k, v)
        return out

    def rows(self, text: str, t_ns: int) -> list[MonitorRow]:
        """Rows of one scrape of `text` taken at `t_ns` (ns on the run's clock)."""
        from prometheus_client.parser import text_string_to_metric_families

        families = list(text_string_to_metric_families(text))  # raises ValueError on bad text
        dt_s = (t_ns - self._prev_t_ns) / NS_PER_S if self._prev_t_ns is not None else None
        typed = {f.name for f in families if f.type in ("counter", "histogram", "summary", "gaugehistogram")}
        out: list[MonitorRow] = []
        counters: dict[Any, float] = {}
        buckets: dict[Any, dict[float, float]] = {}

        def rate(name: str, labels: Mapping[str, str], value: float) -> None:
            key = _key(name, labels)
            counters[key] = value
            prev = self._counters.get(key)
            if prev is None or not dt_s or dt_s <= 0:
                return
            increase = value - prev if value >= prev else value  # reset: counted from 0
            out.append(self._row(f"{name}:rate_per_s", labels, t_ns, increase / dt_s))

        for fam in families:
            kind = fam.type
            for s in fam.samples:
                if s.name.endswith("_created") and s.name[: -len("_created")] in typed:
                    continue
                if not self._wanted(fam.name, s.name) or not _finite(float(s.value)):
                    continue
                value = float(s.value)
                if kind == "counter" or (kind in ("summary", "histogram") and s.name.endswith(("_count", "_sum"))):
                    if kind == "histogram" and s.name.endswith("_sum"):
                        continue  # quantiles and the observation rate describe it
                    rate(s.name, s.labels, value)
                elif kind == "histogram":
                    if s.name.endswith("_bucket") and "le" in s.labels:
                        rest = {k: v for k, v in s.labels.items() if k != "le"}
                        buckets.setdefault(_key(fam.name, rest), {})[float(s.labels["le"])] = value
                else:  # gauge, untyped/unknown, summary quantiles, info, stateset
                    out.append(self._row(s.name, s.labels, t_ns, value))
        if dt_s:
            for key, now in buckets.items():
                prev = self._buckets.get(key)
                if prev is None:
                    continue
                reset = now.get(math.inf, 0.0) < prev.get(math.inf, 0.0)
                delta = [(le, c if reset else c - prev.get(le, 0.0)) for le, c in now.items()]
                fam_name, labels = key[0], dict(key[1])
                for q in self.quantiles:
                    v = histogram_quantile(q, delta)
                    if v is not None and _finite(v):
                        out.append(self._row(f"{fam_name}:p{q * 100:g}", labels, t_ns, v))
        self._prev_t_ns = t_ns
        self._counters = counters
        self._buckets = buckets
        return out

    def _row(self, name: str, labels: Mapping[str, str], t_ns: int, value: float) -> MonitorRow:
        return {"name": name, "labels": self._labels(labels), "t_ns": t_ns, "value": value}


# -- monitors ---------------------------------------------------------------------------


class PrometheusMonitor:
    """Scrapes a Prometheus text endpoint (vLLM, SGLang `/metrics`) with httpx.

        PrometheusMonitor("http://127.0.0.1:8000/metrics")                  # every 1 s
        PrometheusMonitor(url, interval_s=5, metrics=["vllm:num_requests_*",
                          "vllm:time_to_first_token_seconds"], quantiles=(0.5, 0.99))

    `timeout_s` bounds each whole scrape, body included (default: min(interval_s, 10)
    s: a body that never ends is a failed sample, and the run's final sample cannot
    hold its end). A body over MAX_METRICS_BYTES (16 MiB) decoded is refused, decoded
    from gzip/deflate at most that far (a compression bomb never reaches memory).
    `headers` are sent with each scrape (e.g. a bearer token; never written anywhere).
    Rows: see PrometheusRates. Raises (from collect) httpx errors, RuntimeError on HTTP
    >= 400 or past the deadline, ValueError on a body too large, in another coding or
    not parsing.
    """

    def __init__(
        self,
        url: str,
        *,
        interval_s: float = 1.0,
        metrics: Sequence[str] | None = None,
        quantiles: Sequence[float] = (0.5, 0.9, 0.99),
        timeout_s: float | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"monitors: interval_s must be > 0 (got {interval_s!r})")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"monitors: url: expected an http(s) URL (got {url!r})")
        self.url = url
        self.interval_s = float(interval_s)
        self.name = name or f"prometheus:{parts.netloc}"
        self.timeout_s = timeout_s if timeout_s is not None else min(self.interval_s, 10.0)
        self.headers = dict(headers or {})
        self.rates = PrometheusRates(metrics, quantiles, {"instance": parts.netloc})
        self._client: Any = None
        import httpx  # imported here, before the run's clock starts, not at the first scrape

        self._httpx = httpx

    async def collect(self, t_ns: int) -> list[MonitorRow]:
        """One scrape stamped `t_ns`; see the class docstring for errors."""
        if self._client is None:
            self._client = self._httpx.AsyncClient(
                timeout=self.timeout_s, headers={"accept-encoding": "gzip, deflate", **self.headers}
            )
        try:
            async with asyncio.timeout(self.timeout_s):
                body, status = await self._scrape()
        except TimeoutError:
            raise RuntimeError(
                f"GET {self.url}: no whole answer within the scrape deadline ({self.timeout_s:g} s)"
            ) from None
        if status >= 400:
            raise RuntimeError(f"GET {self.url}: HTTP {status}: {body[:200].decode('utf-8', 'replace')}")
        return self.rates.rows(body.decode("utf-8", "replace"), t_ns)

    async def _scrape(self) -> tuple[bytes, int]:
        """(decoded body, status) of one GET, at most MAX_METRICS_BYTES decoded."""
        async with self._client.stream("GET", self.url) as resp:
            coding = resp.headers.get("content-encoding", "identity").strip().lower()
            if coding in ("gzip", "x-gzip"):
                decoder: Any = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif coding == "deflate":
                decoder = zlib.decompressobj()
            elif coding in ("identity", ""):
                decoder = None
            else:
                raise ValueError(f"GET {self.url}: Content-Encoding {coding!r}: expected gzip, deflate or none")
            parts: list[bytes] = []
            size = 0
            async for raw in resp.aiter_raw():
                data = raw if decoder is None else decoder.decompress(raw, MAX_METRICS_BYTES - size + 1)
                size += len(data)
                if size > MAX_METRICS_BYTES:
                    raise ValueError(
                        f"GET {self.url}: body over {MAX_METRICS_BYTES} bytes decoded (Content-Encoding "
                        f"{coding}){': a compression bomb?' if decoder is not None else ''}"
                    )
                parts.append(data)
            return b"".join(parts), resp.status_code

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class FunctionMonitor:
    """Calls a Python function on an interval; it returns {name: number}.

        FunctionMonitor(lambda: {"queue_depth": q.qsize()}, interval_s=0.5)
        FunctionMonitor(async_probe, labels={"host": "gpu-1"})        # async def works too

    A sync function runs in a worker thread (`asyncio.to_thread`) so a slow one never
    stalls the event loop that sends requests; an async one is awaited. Each item is one
    row with `labels`; a value that is not a finite number is skipped. Raises (from
    collect) whatever the function raises, or TypeError when it returns no mapping.
    """

    def __init__(
        self,
        fn: Callable[[], Mapping[str, float] | Awaitable[Mapping[str, float]]],
        *,
        interval_s: float = 1.0,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"monitors: interval_s must be > 0 (got {interval_s!r})")
        self.fn = fn
        self.interval_s = float(interval_s)
        self.labels = dict(labels or {})
        self.name = name or f"function:{getattr(fn, '__qualname__', type(fn).__name__)}"

    async def collect(self, t_ns: int) -> list[MonitorRow]:
        if inspect.iscoroutinefunction(self.fn):
            out = await self.fn()
        else:
            out = await asyncio.to_thread(self.fn)
            if inspect.isawaitable(out):
                out = await out
        if not isinstance(out, Mapping):
            raise TypeError(f"{self.name}: expected a mapping of name -> number (got {type(out).__name__})")
        rows = []
        for name, value in out.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(float(value)):
                continue
            rows.append({"name": str(name), "labels": dict(self.labels), "t_ns": t_ns, "value": float(value)})
        return rows

    async def aclose(self) -> None:
        return None


# -- running them during a run --------------------------------------------------------------


class MonitorRunner:
    """Runs monitors during a run and appends their rows to `path` (monitor.jsonl).

        mr = MonitorRunner(monitors, bundle_dir / "monitor.jsonl", t0_ns)
        mr.start()          # inside the running loop, after t0 was taken
        ...
        await mr.stop()     # one final sample of each monitor, then close
        mr.report()         # {monitor name: {"samples", "errors", "rows", "last_error"}}
                            # (a repeated name is reported as "name#2", ...)

    Samples of one monitor never overlap: the next is due `interval_s` after the
    previous was due (absolute schedule, no drift); a sample that took longer than
    the interval makes the due ones collapse into one. Rows are flushed to the OS
    after every sample. A write that fails (a full disk) stops no monitor and raises
    nothing: the file keeps the whole rows of the last good flush and `error` holds the
    OSError (`benchmaker.engine.bundle.JsonlAppender`; `loss()` says it in one line).
    """

    def __init__(self, monitors: Sequence[Monitor], path: Path, t0_ns: int) -> None:
        self.monitors = list(monitors)
        self.path = Path(path)
        self.t0_ns = t0_ns
        self._tasks: list[asyncio.Task[None]] = []
        self._out: JsonlAppender | None = None
        self._names: list[str] = []
        for m in self.monitors:  # unique report keys: a repeated name gets "#2", "#3"
            name, k = m.name, 2
            while name in self._names:
                name, k = f"{m.name}#{k}", k + 1
            self._names.append(name)
        self._stats: dict[str, dict[str, Any]] = {
            n: {"samples": 0, "errors": 0, "rows": 0, "last_error": None} for n in self._names
        }
        self._locks: list[asyncio.Lock] = []

    def start(self) -> None:
        """Open the file and start one task per monitor on the running loop."""
        self._out = JsonlAppender(self.path)
        loop = asyncio.get_running_loop()
        self._locks = [asyncio.Lock() for _ in self.monitors]
        self._tasks = [loop.create_task(self._loop(i)) for i in range(len(self.monitors))]

    async def _sample(self, i: int) -> None:
        m = self.monitors[i]
        async with self._locks[i]:
            stats = self._stats[self._names[i]]
            t_ns = time.perf_counter_ns() - self.t0_ns
            stats["samples"] += 1
            try:
                rows = await m.collect(t_ns)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a monitor never stops the run
                stats["errors"] += 1
                stats["last_error"] = f"{type(exc).__name__}: {exc}"[:500]
                return
            if rows and self._out is not None:
                for r in rows:
                    self._out.write_line(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE))
                self._out.flush()
                stats["rows"] += len(rows)

    async def _loop(self, i: int) -> None:
        period_ns = round(self.monitors[i].interval_s * NS_PER_S)
        due = time.perf_counter_ns()
        while True:
            await self._sample(i)
            due += period_ns
            now = time.perf_counter_ns()
            if due < now:  # late: skip the missed slots
                due += ((now - due) // period_ns + 1) * period_ns
            await asyncio.sleep((due - now) / NS_PER_S)

    async def stop(self) -> None:
        """Cancel the loops, take one final sample of each monitor, close monitors and
        the file (fsync'd). A sample in flight gets up to STOP_GRACE_S to finish:
        cancelled, its endpoint would have answered a scrape that left no row."""
        for lock, t in zip(self._locks, self._tasks, strict=True):
            try:
                await asyncio.wait_for(lock.acquire(), STOP_GRACE_S)
            except TimeoutError:  # a slower sample is cancelled (its row is lost)
                t.cancel()
                continue
            t.cancel()
            lock.release()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await asyncio.gather(*(self._sample(i) for i in range(len(self.monitors))))
        finally:
            for m in self.monitors:
                try:
                    await m.aclose()
                except Exception:  # closing must not hide the run's result
                    pass
            if self._out is not None:
                self._out.close()

    @property
    def error(self) -> OSError | None:
        """The OSError of the write to `path` that failed, None while every write went through."""
        return self._out.error if self._out is not None else None

    def loss(self) -> str:
        """The failed write in one line: the file, why, the rows kept and dropped."""
        return self._out.loss("monitor rows", "rows") if self._out is not None else f"{self.path}: not opened"

    def report(self) -> dict[str, dict[str, Any]]:
        """Per monitor name: samples taken, errors, rows written, last error text."""
        return {k: dict(v) for k, v in self._stats.items()}


# -- YAML specs ---------------------------------------------------------------------------


def _seconds(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return parse_duration_s(value, "interval_s")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
    return value


_Interval = Annotated[float, BeforeValidator(_seconds), Field(gt=0)]


class PrometheusMonitorSpec(BaseModel):
    """YAML: `{type: prometheus, url, interval_s: 1s, metrics: [vllm:*], quantiles:
    [0.5, 0.9, 0.99], timeout_s, headers}`."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["prometheus"]
    url: str
    interval_s: _Interval = 1.0
    metrics: list[str] | None = None
    quantiles: list[float] = Field(default_factory=lambda: [0.5, 0.9, 0.99])
    timeout_s: float | None = Field(default=None, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)


class FunctionMonitorSpec(BaseModel):
    """YAML: `{type: python, function: "package.module:callable", interval_s: 1s,
    labels: {...}}`; the callable takes no argument and returns {name: number}."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["python"]
    function: str
    interval_s: _Interval = 1.0
    labels: dict[str, str] = Field(default_factory=dict)


MonitorSpec = Annotated[PrometheusMonitorSpec | FunctionMonitorSpec, Field(discriminator="type")]


def _import_callable(ref: str, where: str) -> Callable[..., Any]:
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{where}.function: expected 'package.module:callable' (got {ref!r})")
    try:
        obj = pkgutil.resolve_name(ref)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{where}.function: cannot import {ref!r}: {exc}") from exc
    if not callable(obj):
        raise ConfigError(f"{where}.function: {ref!r} is not callable")
    return obj


def build_monitors(specs: Sequence[Any]) -> list[Monitor]:
    """Monitor objects of validated specs (PrometheusMonitorSpec, FunctionMonitorSpec).
    Raises ConfigError naming `monitors[i]` for a bad URL, quantile or import."""
    out: list[Monitor] = []
    for i, spec in enumerate(specs):
        where = f"monitors[{i}]"
        try:
            if isinstance(spec, PrometheusMonitorSpec):
                out.append(
                    PrometheusMonitor(
                        spec.url,
                        interval_s=spec.interval_s,
                        metrics=spec.metrics,
                        quantiles=spec.quantiles,
                        timeout_s=spec.timeout_s,
                        headers=spec.headers,
                    )
                )
            else:
                out.append(
                    FunctionMonitor(
                        _import_callable(spec.function, where),
                        interval_s=spec.interval_s,
                        labels=spec.labels,
                        name=spec.function,
                    )
                )
        except ConfigError as exc:
            msg = str(exc)
            raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg.removeprefix('monitors: ')}") from None
    return out
