"""Load models: when requests are sent (docs/benchmark-an-endpoint.md).

Open-loop models put arrivals on one absolute timeline: `arrivals()` yields
`(offset_ns, stage)` pairs, offsets in ns from the run's t0, non-decreasing, lazily (a
long run at 5,000 req/s never builds its whole schedule). The runner sends each arrival
at its offset whatever happened to earlier requests. Closed-loop models (`ClosedLoop`)
instead keep N workers busy, each sending its next request when the previous finished
(plus optional think time).

Every model can be split into `shards` (k6-style execution segments) so N worker
processes drive one schedule: `arrivals(shard=k, shards=N)` yields worker k's slice.
Deterministic models deal arrivals round-robin (arrival i goes to worker i mod N, so
the union is exactly the single-process timeline); Poisson and gamma processes are
thinned: each worker runs an independent process at rate/N with its own seed stream,
which is again a Poisson process of the full rate when merged (superposition). Closed
loop divides the concurrency.

Rate specs (`parse_rate_spec`, shared by CLI and YAML):

    constant:50            50 req/s, evenly spaced, first at t=0
    poisson:50             Poisson arrivals at 50 req/s (exponential gaps, seeded)
    gamma:50:0.5           gamma gaps at 50 req/s, burstiness 0.5 (shape; 1 = Poisson,
                           < 1 burstier); source: vLLM `benchmark_serving --burstiness`
    ramp:1..20@60s         rate rising linearly from 1 to 20 req/s over 60 s, then held
    stages:2,8,2@30s       constant rate per stage, each stage 30 s, stage labels s0..s2
    closed:8               8 workers, each sends when its previous request finished
    closed:8:0.5s          the same with 0.5 s think time after each request
    trace:FILE             send times from FILE (one offset in s per line, or JSONL
                           with a `timestamp` field, in s); `trace:FILE:2` runs 2x faster
    constant:inf           every request at t=0 (also poisson:inf, gamma:inf): as vLLM's
                           `--request-rate inf`; needs max_requests, and the in-flight cap
                           decides how many are sent at once

Bounds: rates are finite, in MIN_RATE_PER_S..MAX_RATE_PER_S (1e-6..1e6 req/s),
gamma burstiness in 1e-3..1e3, closed-loop
concurrency a whole number in 1..MAX_CONCURRENCY (1e6; the host's fd limit caps it
further, benchmaker.engine.config), durations finite, >= 0 and <= MAX_DURATION_S (30 days).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.errors import RateSpecError

NS_PER_S = 1_000_000_000
MAX_RATE_PER_S = 1e6
MIN_RATE_PER_S = 1e-6  # one request in ~11.6 days; below, gaps overflow to inf and NaN
BURSTINESS_RANGE = (1e-3, 1e3)  # gamma shape; outside it the draws underflow or overflow
MAX_CONCURRENCY = 1_000_000
MAX_DURATION_S = 30 * 86400.0

Arrival = tuple[int, "str | None"]


class LoadModel:
    """Base of every load model. `closed` tells the runner which loop to run; `spec` is
    the canonical rate-spec string (stored in manifests)."""

    closed: bool = False

    @property
    def spec(self) -> str:
        """The canonical rate-spec string, e.g. "poisson:5" (each model defines it)."""
        raise NotImplementedError

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        """Yield `(offset_ns, stage)` for this shard, offsets non-decreasing."""
        raise NotImplementedError

    def target_rate_per_s(self) -> float | None:
        """The nominal request rate in req/s (a constant-rate model's `rate_per_s`), None
        where it varies or is closed loop."""
        return getattr(self, "rate_per_s", None)


def _round_robin(it: Iterator[Arrival], shard: int, shards: int) -> Iterator[Arrival]:
    for i, arrival in enumerate(it):
        if i % shards == shard:
            yield arrival


def _check_rate(rate: float, what: str) -> float:
    if not (MIN_RATE_PER_S <= rate <= MAX_RATE_PER_S):
        raise RateSpecError(
            f"{what}: rate must be in {MIN_RATE_PER_S:g}..{MAX_RATE_PER_S:g} req/s, or inf (got {rate!r})"
        )
    return float(rate)


@dataclass(frozen=True)
class Burst(LoadModel):
    """Every arrival at t=0: an infinite request rate, as vLLM's `--request-rate inf`
    (every prompt sent at once). The run must bound it with max_requests; the in-flight
    cap decides how many go out together, the rest wait for a slot (schedule lag is not
    judged: every arrival is "due" at t=0). `kind` keeps the spec's model name."""

    kind: str = "constant"

    @property
    def spec(self) -> str:
        return f"{self.kind}:inf"

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        while True:
            yield 0, None


@dataclass(frozen=True)
class Constant(LoadModel):
    """Evenly spaced arrivals: arrival i at i / rate_per_s seconds."""

    rate_per_s: float

    def __post_init__(self) -> None:
        _check_rate(self.rate_per_s, "constant")

    @property
    def spec(self) -> str:
        return f"constant:{self.rate_per_s:g}"

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        period_ns = NS_PER_S / self.rate_per_s
        i = shard
        while True:
            yield round(i * period_ns), None
            i += shards


@dataclass(frozen=True)
class Poisson(LoadModel):
    """Poisson arrivals: exponential gaps with mean 1/rate, from `random.Random(seed)`.
    Shard k of N draws its own process at rate/N from seed stream (seed, k, N)."""

    rate_per_s: float

    def __post_init__(self) -> None:
        _check_rate(self.rate_per_s, "poisson")

    @property
    def spec(self) -> str:
        return f"poisson:{self.rate_per_s:g}"

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        rng = random.Random(f"poisson/{seed}/{shard}/{shards}")
        rate = self.rate_per_s / shards
        t = 0.0
        while True:
            yield round(t * NS_PER_S), None
            t += rng.expovariate(rate)


@dataclass(frozen=True)
class Gamma(LoadModel):
    """Gamma-distributed gaps with mean 1/rate and shape `burstiness` (scale =
    1/(rate*burstiness)); burstiness 1 is Poisson, below 1 burstier, above 1 more even.
    Source: vLLM benchmark_serving `--burstiness`. Shards thin like Poisson."""

    rate_per_s: float
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        _check_rate(self.rate_per_s, "gamma")
        lo, hi = BURSTINESS_RANGE
        if not (lo <= self.burstiness <= hi):
            raise RateSpecError(f"gamma: burstiness must be in {lo:g}..{hi:g} (got {self.burstiness!r})")

    @property
    def spec(self) -> str:
        return f"gamma:{self.rate_per_s:g}:{self.burstiness:g}"

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        rng = random.Random(f"gamma/{seed}/{shard}/{shards}")
        rate = self.rate_per_s / shards
        theta = 1.0 / (rate * self.burstiness)
        t = 0.0
        while True:
            yield round(t * NS_PER_S), None
            t += rng.gammavariate(self.burstiness, theta)


@dataclass(frozen=True)
class Ramp(LoadModel):
    """Rate rising linearly from `start_per_s` to `end_per_s` over `duration_s`, then
    held at `end_per_s`. Arrival i is at the time t where the expected count
    Λ(t) = start·t + (end-start)·t²/(2·duration) equals i (deterministic spacing)."""

    start_per_s: float
    end_per_s: float
    duration_s: float

    def __post_init__(self) -> None:
        if not (
            0 <= self.start_per_s <= MAX_RATE_PER_S
            and MIN_RATE_PER_S <= self.end_per_s <= MAX_RATE_PER_S
            and 0 < self.duration_s <= MAX_DURATION_S
        ):
            raise RateSpecError(
                "ramp: needs start >= 0, end > 0 req/s and a duration > 0 "
                f"(got {self.start_per_s:g}..{self.end_per_s:g}@{self.duration_s:g}s)"
            )

    @property
    def spec(self) -> str:
        return f"ramp:{self.start_per_s:g}..{self.end_per_s:g}@{self.duration_s:g}s"

    def _time_of(self, n: float) -> float:
        a, b, d = self.start_per_s, self.end_per_s, self.duration_s
        total = (a + b) / 2 * d  # expected arrivals during the ramp
        if n <= 0:
            return 0.0
        if n >= total:
            return d + (n - total) / b
        k = (b - a) / (2 * d)
        if k == 0:
            return n / a
        # k t^2 + a t - n = 0, positive root, written to avoid cancellation
        return 2 * n / (a + math.sqrt(a * a + 4 * k * n))

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        i = shard
        while True:
            yield round(self._time_of(i) * NS_PER_S), None
            i += shards


@dataclass(frozen=True)
class Stages(LoadModel):
    """Piecewise-constant rates: stage j runs at `rates_per_s[j]` for `stage_s` seconds,
    labelled `s<j>` (the label reaches every sample). After the last stage no arrivals."""

    rates_per_s: tuple[float, ...]
    stage_s: float
    labels: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.rates_per_s:
            raise RateSpecError("stages: needs at least one rate")
        for r in self.rates_per_s:
            _check_rate(r, "stages")
        if self.stage_s <= 0:
            raise RateSpecError(f"stages: stage duration must be > 0 s (got {self.stage_s:g})")
        if self.labels and len(self.labels) != len(self.rates_per_s):
            raise RateSpecError("stages: one label per stage")

    @property
    def spec(self) -> str:
        return "stages:" + ",".join(f"{r:g}" for r in self.rates_per_s) + f"@{self.stage_s:g}s"

    def _all(self) -> Iterator[Arrival]:
        stage_ns = round(self.stage_s * NS_PER_S)
        for j, rate in enumerate(self.rates_per_s):
            label = self.labels[j] if self.labels else f"s{j}"
            start = j * stage_ns
            period_ns = NS_PER_S / rate
            i = 0
            while (t := round(i * period_ns)) < stage_ns:
                yield start + t, label
                i += 1

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        return _round_robin(self._all(), shard, shards)


@dataclass(frozen=True)
class Trace(LoadModel):
    """Send times read from a file: offsets in s (first arrival moved to t=0), divided by
    `speedup`. Lines are plain numbers or JSON objects with `timestamp` (s)."""

    offsets_s: tuple[float, ...]
    source: str = ""
    speedup: float = 1.0

    @property
    def spec(self) -> str:
        return f"trace:{self.source}" + (f":{self.speedup:g}" if self.speedup != 1 else "")

    @classmethod
    def from_file(cls, path: Path, speedup: float = 1.0) -> Trace:
        """Read a trace. Raises RateSpecError naming `path:line` on a bad line."""
        if not (0 < speedup < math.inf):
            raise RateSpecError(f"trace: speedup must be finite and > 0 (got {speedup:g})")
        from benchmaker.engine.files import not_regular

        problem = not_regular(path)
        if problem is not None:
            raise RateSpecError(f"trace: {path} {problem}")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RateSpecError(f"trace: cannot read {path}: {exc.strerror}") from exc
        offsets = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            try:
                value = orjson.loads(line)
                if isinstance(value, dict):
                    value = value["timestamp"]
                offsets.append(float(value))
                if not math.isfinite(offsets[-1]):
                    raise ValueError("not finite")
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise RateSpecError(
                    f"{path}:{lineno}: timestamp: expected a number of seconds (got {line[:60]!r})"
                ) from exc
        if not offsets:
            raise RateSpecError(f"{path}: trace has no timestamps")
        offsets.sort()
        base = offsets[0]
        return cls(tuple((o - base) / speedup for o in offsets), source=str(path), speedup=speedup)

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        return _round_robin(((round(o * NS_PER_S), None) for o in self.offsets_s), shard, shards)


@dataclass(frozen=True)
class ClosedLoop(LoadModel):
    """`concurrency` workers, each sending its next request as soon as the previous one
    finished, then waiting `think_s` seconds. Shard k of N runs its share of workers
    (the first concurrency mod N shards get one more)."""

    concurrency: int
    think_s: float = 0.0
    closed = True

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise RateSpecError(
                f"closed: concurrency must be a whole number in 1..{MAX_CONCURRENCY} (got {self.concurrency})"
            )
        if self.think_s < 0:
            raise RateSpecError(f"closed: think time must be >= 0 s (got {self.think_s:g})")

    @property
    def spec(self) -> str:
        return f"closed:{self.concurrency}" + (f":{self.think_s:g}s" if self.think_s else "")

    def workers_for(self, shard: int = 0, shards: int = 1) -> int:
        """Number of closed-loop workers shard `shard` of `shards` runs."""
        base, extra = divmod(self.concurrency, shards)
        return base + (1 if shard < extra else 0)

    def arrivals(self, *, seed: int = 0, shard: int = 0, shards: int = 1) -> Iterator[Arrival]:
        raise TypeError("a closed-loop model has no arrival schedule")


_FORMS = (
    "constant:RATE, poisson:RATE, gamma:RATE:BURSTINESS, ramp:FROM..TO@DURATION, "
    "stages:R1,R2,...@DURATION, closed:N[:THINK], trace:FILE[:SPEEDUP]"
)
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*$")


def parse_duration_s(text: str | float | int, what: str = "duration") -> float:
    """Parse `500ms`, `10s`, `2m`, `1h` or a bare number of seconds into seconds, in
    0..MAX_DURATION_S (30 days). Raises RateSpecError naming `what` on anything else
    (bool, NaN, inf, negative, too long, text that is not a duration)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _DURATION.match(str(text))
        if not m:
            raise RateSpecError(f"{what}: expected a duration like 500ms, 10s, 2m (got {text!r})")
        value = float(m.group(1)) * {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]
    if not 0 <= value <= MAX_DURATION_S:
        raise RateSpecError(f"{what}: expected a duration in 0..{MAX_DURATION_S:.0f} s (30 days) (got {text!r})")
    return value


def _number(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RateSpecError(f"rate spec {spec!r}: {text!r} is not a number (expected {_FORMS})") from None
    if math.isnan(value):
        raise RateSpecError(f"rate spec {spec!r}: NaN is not a number (expected {_FORMS})")
    return value


class ParsedRateSpec(str):
    """A rate-spec string that keeps the LoadModel it was parsed into (`model`), so the
    code after the edge where a spec enters (benchmaker.engine.config.RateSpec: CLI flag, YAML
    field) reads the model instead of parsing the string again. It
    is equal to, hashes and serialises as the plain string (manifests keep the spec
    users wrote); string methods return plain strings.

        ParsedRateSpec("poisson:5", parse_rate_spec("poisson:5")).model  # Poisson(rate=5.0)
    """

    model: LoadModel

    def __new__(cls, spec: str, model: LoadModel) -> ParsedRateSpec:
        self = super().__new__(cls, spec)
        self.model = model
        return self

    def __reduce__(self) -> tuple[type, tuple[str, LoadModel]]:
        return (ParsedRateSpec, (str(self), self.model))

    @classmethod
    def of(cls, spec: str) -> ParsedRateSpec:
        """`spec` itself when already a ParsedRateSpec (no second parse), else the spec
        parsed now (a trace file relative to the working directory). Raises
        RateSpecError for a bad spec."""
        return spec if isinstance(spec, ParsedRateSpec) else cls(spec, parse_rate_spec(spec))

    @classmethod
    def of_model(cls, model: LoadModel) -> ParsedRateSpec:
        """The ParsedRateSpec of a model built in code (e.g. ClosedLoop(8) for a
        concurrency sweep point): its canonical `spec` string, nothing parsed."""
        return cls(model.spec, model)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Pydantic: a field annotated `ParsedRateSpec` is the edge where a spec enters
        (a flow's parameters model). It takes a rate-spec string and parses it once
        (a bad one is an error of type `rate_spec` whose message is the RateSpecError's,
        naming the spec), takes a ParsedRateSpec as it is (a value the CLI already
        parsed crosses Prefect's parameter validation without a second parse), and
        serialises to JSON as the plain string (JSON schema `string`: deployment
        schemas, flow-run parameters, Prefect's task cache keys and manifests keep the
        spec as written)."""
        from pydantic_core import PydanticCustomError, core_schema

        def validate(value: Any, as_str: Any) -> ParsedRateSpec:
            if isinstance(value, ParsedRateSpec):
                return value
            text = as_str(value)
            try:
                return cls(text, parse_rate_spec(text))
            except RateSpecError as exc:
                raise PydanticCustomError("rate_spec", "{error}", {"error": str(exc)}) from None

        return core_schema.no_info_wrap_validator_function(
            validate,
            core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="json"),
        )


def load_model_of(load: str | LoadModel, *, base_dir: Path | None = None) -> LoadModel:
    """The LoadModel of `load`: itself when a LoadModel, the model a ParsedRateSpec
    carries, else parse_rate_spec(load, base_dir=base_dir) (a trace spec, whose file is
    read relative to `base_dir`, or a spec that never went through validation). Raises
    RateSpecError for a bad spec."""
    if isinstance(load, LoadModel):
        return load
    if isinstance(load, ParsedRateSpec):
        return load.model
    return parse_rate_spec(load, base_dir=base_dir)


def parse_rate_spec(spec: str, *, base_dir: Path | None = None) -> LoadModel:
    """Parse a rate-spec string (forms in the module docstring) into a LoadModel.

    Raises RateSpecError naming the spec and the valid forms, e.g.
    `unknown load model 'posson' (expected constant:RATE, poisson:RATE, ...)`.
    `base_dir` resolves a relative trace file.
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise RateSpecError(f"rate spec {spec!r}: expected one of {_FORMS}")
    kind, _, rest = spec.strip().partition(":")
    kind = kind.lower()
    if kind in ("constant", "poisson", "gamma"):
        rate_text, _, burst = rest.partition(":") if kind == "gamma" else (rest, "", "")
        rate = _number(rate_text, spec)  # inf: a burst
        if rate != math.inf:
            _check_rate(rate, f"rate spec {spec!r}")
        burstiness = _number(burst, spec) if burst else 1.0
        if rate == math.inf:
            return Burst(kind)
        if kind == "constant":
            return Constant(rate)
        return Poisson(rate) if kind == "poisson" else Gamma(rate, burstiness)
    if kind == "ramp":
        m = re.fullmatch(r"\s*([0-9.]+)\s*\.\.\s*([0-9.]+)\s*@\s*(\S+)\s*", rest)
        if not m:
            raise RateSpecError(f"rate spec {spec!r}: expected ramp:FROM..TO@DURATION, e.g. ramp:1..20@60s")
        return Ramp(
            _number(m.group(1), spec), _number(m.group(2), spec), parse_duration_s(m.group(3), f"rate spec {spec!r}")
        )
    if kind == "stages":
        rates, at, dur = rest.partition("@")
        if not at or not rates.strip():
            raise RateSpecError(f"rate spec {spec!r}: expected stages:R1,R2,...@DURATION, e.g. stages:2,8,2@30s")
        return Stages(tuple(_number(r, spec) for r in rates.split(",")), parse_duration_s(dur, f"rate spec {spec!r}"))
    if kind == "closed":
        n, _, think = rest.partition(":")
        value = _number(n, spec)
        if not (1 <= value <= MAX_CONCURRENCY) or value != int(value):
            raise RateSpecError(f"rate spec {spec!r}: concurrency must be a whole number in 1..{MAX_CONCURRENCY}")
        return ClosedLoop(int(value), parse_duration_s(think, f"rate spec {spec!r}") if think else 0.0)
    if kind == "trace":
        path_text, _, speed = rest.rpartition(":") if re.search(r":[0-9.]+$", rest) else (rest, "", "")
        path = Path(path_text)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        return Trace.from_file(path, _number(speed, spec) if speed else 1.0)
    raise RateSpecError(f"unknown load model {kind!r} in rate spec {spec!r} (expected {_FORMS})")
