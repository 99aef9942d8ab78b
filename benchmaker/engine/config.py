"""Engine configuration (pydantic): what the runner does, not what it sends.

    BenchConfig(load="poisson:50", duration_s=30)          # 30 s of Poisson at 50 req/s
    BenchConfig(load="closed:8", max_requests=1000)         # 8 workers, 1,000 requests
    BenchConfig(load="constant:10", duration_s=60, warmup_s=5,
                timeouts=Timeouts(ttft_s=2.0, total_s=30.0), slo=SLO(ttft_ms=500))

Durations accept numbers (s) or strings such as "500ms", "10s", "2m". Unknown keys are
rejected naming the key (`extra="forbid"`). YAML files are read by
`benchmaker.engine.config_file`, which maps errors to file lines.

Bounds (one place for the CLI, YAML and flow parameters; each error names the field):
every number finite (NaN and inf refused, `allow_inf_nan=False`) and in its range:
durations in 0..30 days (`duration_s` and timeouts > 0), rates in 1e-6..1e6 req/s or
`inf` (every request at t=0, as vLLM's `--request-rate inf`; needs max_requests),
max_error_rate in 0..1 (default 0.1; 1 turns the check off), SLOs > 0. Requests in
flight per process (closed-loop concurrency, max_in_flight) are capped by what the host
can hold, `host_in_flight_limit()`: the file-descriptor limit (one socket per request)
and a memory budget; the error says which and how to raise it. Run ids, kinds, sweep
points and lane names use SAFE_NAME (letters, digits, `.`, `_`, `-`; no path
separators, so a bundle never lands outside out_dir). Output paths are checked before
any work (`check_output_dir`, `check_output_file`).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WrapValidator,
    field_validator,
    model_validator,
)

from benchmaker.engine.errors import ConfigError, RateSpecError
from benchmaker.engine.files import not_regular
from benchmaker.engine.load_models import (
    MAX_DURATION_S,
    Burst,
    ClosedLoop,
    LoadModel,
    ParsedRateSpec,
    load_model_of,
    parse_duration_s,
)
from benchmaker.engine.selfcheck import ENV_MAX_LOOP_LAG_MS, ENV_MAX_SCHEDULE_LAG_MS, env_limit_ms

# Letters, digits, '.', '_', '-', starting with a letter or digit, at most 128: safe as a
# file name on every OS (no '/', '\\', '..' prefix, NUL or shell metacharacters).
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
FD_RESERVE = 64  # descriptors kept free for files, pipes, the event loop, DNS
BYTES_PER_IN_FLIGHT = 256 * 1024  # memory budget per in-flight request (task, buffers, socket)
MAX_WORKERS = 256  # worker processes per host
# default open-loop cap per usable CPU: one event loop past ~1,000 concurrent
# connections spends its time opening them and the endpoint sees none (
# poisson:2000 held 19,304 in flight, 0 of 20,012 ok); --max-in-flight raises it
IN_FLIGHT_PER_CPU = 1024


def _duration(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    try:
        return parse_duration_s(value)
    except RateSpecError as exc:
        raise ValueError(str(exc).removeprefix("duration: ")) from None


# A duration in s: a number or "500ms"/"10s"/"2m", finite, in 0..30 days.
Seconds = Annotated[float, BeforeValidator(_duration), Field(ge=0, le=MAX_DURATION_S)]
# The same, > 0 (a run length, a deadline).
PositiveSeconds = Annotated[float, BeforeValidator(_duration), Field(gt=0, le=MAX_DURATION_S)]


def _safe_name(value: str) -> str:
    if not SAFE_NAME.fullmatch(value):
        raise ValueError(
            f"use letters, digits, '.', '_', '-' (start with a letter or digit, at most 128) (got {value!r})"
        )
    return value


# A run id, kind, sweep point or lane name (SAFE_NAME).
SafeName = Annotated[str, AfterValidator(_safe_name)]


def _label(value: str) -> str:
    if len(value) > 200 or not value.isprintable():
        raise ValueError("expected printable text of at most 200 characters")
    return value


Label = Annotated[str, AfterValidator(_label)]


def check_http_url(value: str, what: str = "url") -> str:
    """`value` if it is an absolute http(s) URL with a host and a port in 1..65535 (when
    given); else ConfigError naming `what`, e.g. `--url: expected an http:// or https://
    URL (got 'ftp://x')`."""
    try:
        parts = urlsplit(value)
        port = parts.port  # ValueError when out of 0..65535 or not a number
    except (ValueError, TypeError, AttributeError):
        raise ConfigError(f"{what}: not a valid URL, or its port is not in 1..65535 (got {value!r})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what}: expected an http:// or https:// URL with a host (got {value!r})")
    if any(c.isspace() or not c.isprintable() for c in parts.netloc):
        raise ConfigError(f"{what}: a space or control character in the host (got {value!r})")
    if port == 0:
        raise ConfigError(f"{what}: port must be in 1..65535 (got {value!r})")
    return value


def _http_url(value: str) -> str:
    try:
        return check_http_url(value, "url")
    except ConfigError as exc:
        raise ValueError(str(exc).removeprefix("url: ")) from None


# An absolute http(s) URL (checked at load, not per request).
HttpUrlText = Annotated[str, AfterValidator(_http_url)]
# The same or None; "" (e.g. an unset `${FLASH_URL:-}`) is None.
OptionalHttpUrl = Annotated[HttpUrlText | None, BeforeValidator(lambda v: None if v == "" else v)]


def host_in_flight_limit() -> tuple[int, str]:
    """(requests this process can hold in flight, why): the smaller of the file-descriptor
    limit minus FD_RESERVE (each in-flight request holds one socket) and half the
    memory available (/proc/meminfo MemAvailable) over BYTES_PER_IN_FLIGHT. The reason
    says which bound it is and how to raise it."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fd_limit = soft if soft != resource.RLIM_INFINITY else 1 << 20
    fd_cap = max(1, fd_limit - FD_RESERVE)
    mem_cap = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    mem_cap = max(1, int(line.split()[1]) * 1024 // 2 // BYTES_PER_IN_FLIGHT)
                    break
    except (OSError, ValueError):
        pass
    if mem_cap is not None and mem_cap < fd_cap:
        return mem_cap, (
            f"half the available memory at {BYTES_PER_IN_FLIGHT // 1024} KiB per in-flight request ({mem_cap})"
        )
    return fd_cap, (
        f"the file-descriptor limit {fd_limit} (ulimit -n) minus {FD_RESERVE} reserved; raise it with `ulimit -n`"
    )


def usable_cpus() -> int:
    """The CPUs this process may run on (os.sched_getaffinity; os.cpu_count off Linux), >= 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _nearest_existing(path: Path, what: str) -> Path:
    """The nearest of `path` and its parents that exists. Raises ConfigError naming
    `what` at a symbolic link that loops or points nowhere (no folder can be made there)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():
            raise ConfigError(f"{what}: {path}: {probe} is a symbolic link that loops or points nowhere")
        probe = probe.parent
    return probe


def check_output_dir(path: Path, what: str = "out_dir") -> Path:
    """Check, before any work, that `path` is or can be made a writable directory.
    Raises ConfigError naming `what`: a path under a regular file, an existing
    non-directory, a place this user cannot write. Creates nothing."""
    path = Path(path)
    base = _nearest_existing(path.absolute(), what)
    if not base.is_dir():
        where = "is" if base == path.absolute() else "is under"
        raise ConfigError(f"{what}: {path} {where} a file ({base}), not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {path}: cannot write in {base} (permission denied)")
    return path


def check_output_file(path: Path, what: str = "output") -> Path:
    """Check, before any work, that a file can be written at `path`: not a directory,
    its folder is or can be made a writable directory (check_output_dir), an existing
    file writable and regular (not a FIFO or device). Raises ConfigError naming `what`.
    Creates nothing."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what}: {path} is a directory; give a file name")
    problem = not_regular(path)
    if problem is not None:  # a FIFO would block the writer until someone reads it
        raise ConfigError(f"{what}: {path} {problem}")
    base = _nearest_existing(path.absolute().parent, what)
    if not base.is_dir():
        raise ConfigError(f"{what}: {path} is under a file ({base}), not a directory")
    check_output_dir(path.absolute().parent, what)
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{what}: {path}: cannot write (permission denied)")
    return path


def _rate_spec(value: Any, as_str: Any) -> str:
    # parsed once, here: the ParsedRateSpec carries its model to the runner (load_model_of);
    # a ParsedRateSpec (parsed at an earlier edge: a flow's parameters) is taken as it is;
    # trace specs name a file, read when the runner is built (relative to the config)
    if isinstance(value, ParsedRateSpec):
        return value
    value = as_str(value)
    if value.split(":", 1)[0].strip().lower() == "trace":
        return value
    try:
        return ParsedRateSpec.of(value)
    except RateSpecError as exc:
        raise ValueError(str(exc)) from None


# A rate-spec string (benchmaker.engine.load_models), parsed when the model is validated: the
# value is a ParsedRateSpec (a str carrying its LoadModel) except for trace specs given
# as plain strings.
RateSpec = Annotated[str, WrapValidator(_rate_spec)]

# A lag threshold in ms: finite, > 0 (SelfCheckLimits; the flows' max_*_lag_ms).
LagLimitMs = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """A bool given for a field that takes a number but no bool (YAML `max_requests:
        true`) is refused: pydantic's lax mode would read it as 1."""
        if isinstance(value, bool) and info.field_name in cls.model_fields:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = set(get_args(annotation)) or {annotation}
            if kinds & {int, float} and bool not in kinds:
                raise ValueError(f"expected a number, not a boolean (got {str(value).lower()})")
        return value


class Timeouts(_Strict):
    """Per-request deadlines in s, each None for none.

    connect_s  until the TCP (and TLS) connection is made
    ttft_s     from send until the first token-bearing event
    idle_s     longest wait for the body's next bytes: from the send, then from each
               read (benchmaker.engine.request)
    total_s    from send until the response ended

    A watchdog task enforces them, checking every min(timeouts)/20 s (clamped to
    1..50 ms), so a timed-out request ends within that period after its deadline; the
    sample's `end_ns` is when it was cancelled.
    """

    connect_s: PositiveSeconds | None = 10.0
    ttft_s: PositiveSeconds | None = None
    idle_s: PositiveSeconds | None = None
    total_s: PositiveSeconds | None = 600.0


class SLO(_Strict):
    """Service-level objectives for goodput, in ms; a request is good when it succeeded
    and meets every declared bound (a bound on a metric the request lacks, e.g. TPOT of
    a one-token answer, is not held against it)."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)


DEFAULT_MAX_ERROR_RATE = 0.1


class SelfCheckLimits(_Strict):
    """Thresholds that make a run invalid (docs/metrics.md: a run that could not measure what
    it claims says so). Lags in ms (> 0), error rate as a fraction in 0..1: a run where
    more than max_error_rate of the requests failed (default 0.1: a target that died)
    is invalid with that reason; 1 (or None) turns the check off. The two lag limits
    default to 10 ms, or to BENCHMAKER_MAX_SCHEDULE_LAG_MS / BENCHMAKER_MAX_LOOP_LAG_MS
    when set (a loaded host; benchmaker.engine.selfcheck.env_limit_ms, ConfigError when bad).

        SelfCheckLimits(max_loop_lag_p99_ms=200)  # tolerate 200 ms of loop lag at p99"""

    max_schedule_lag_p99_ms: LagLimitMs = Field(default_factory=lambda: env_limit_ms(ENV_MAX_SCHEDULE_LAG_MS))
    max_loop_lag_p99_ms: LagLimitMs = Field(default_factory=lambda: env_limit_ms(ENV_MAX_LOOP_LAG_MS))
    max_error_rate: float | None = Field(default=DEFAULT_MAX_ERROR_RATE, ge=0, le=1)


LAG_FLAGS = {("max_loop_lag_p99_ms",): "--max-loop-lag-ms", ("max_schedule_lag_p99_ms",): "--max-schedule-lag-ms"}


def check_lag_limits(max_loop_lag_ms: float | None, max_schedule_lag_ms: float | None) -> SelfCheckLimits:
    """The SelfCheckLimits of the `--max-loop-lag-ms` / `--max-schedule-lag-ms` flags
    (None: the environment's value, else 10 ms). Raises ConfigError naming the flag
    (e.g. `--max-loop-lag-ms: Input should be greater than 0 (got -1.0)`) for a value
    that is not finite and > 0, or naming the variable for a bad environment value."""
    from pydantic import ValidationError

    from benchmaker.engine.config_file import format_validation_error

    given = {
        k: v
        for k, v in (("max_loop_lag_p99_ms", max_loop_lag_ms), ("max_schedule_lag_p99_ms", max_schedule_lag_ms))
        if v is not None
    }
    try:
        return SelfCheckLimits.model_validate(given)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, None, names=LAG_FLAGS).replace("\n", "; ")) from None


class BenchConfig(_Strict):
    """Everything the runner needs besides the workload(s).

    load           rate spec of the single lane (see benchmaker.engine.load_models)
    duration_s     stop sending new requests after this many s (None: until max_requests
                   or the end of a finite schedule such as stages or a trace)
    max_requests   stop after this many requests (across lanes)
    warmup_s / cooldown_s  requests intended in the first / last seconds are sent but
                   left out of the summary (phase warmup / cooldown)
    max_in_flight  cap on requests in flight; open-loop arrivals that meet the cap are
                   sent late (`overflow="late"`, lateness recorded) or dropped and counted
                   (`overflow="drop"`)
    drain_s        after sending stops, how long in-flight requests may finish before
                   they are cancelled and counted (default: timeouts.total_s, else 60 s)
    """

    load: RateSpec = Field(default="closed:1", validate_default=True)  # validated: parsed once
    duration_s: PositiveSeconds | None = None
    max_requests: int | None = Field(default=None, ge=1, le=1_000_000_000)
    warmup_s: Seconds = 0.0
    cooldown_s: Seconds = 0.0
    max_in_flight: int | None = Field(default=None, ge=1)
    overflow: Literal["late", "drop"] = "late"
    drain_s: Seconds | None = None
    timeouts: Timeouts = Field(default_factory=Timeouts)
    slo: SLO | None = None
    checks: SelfCheckLimits = Field(default_factory=SelfCheckLimits)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    run_id: SafeName | None = None
    label: Label | None = None
    kind: SafeName = "bench"
    sweep_point: SafeName | None = None
    out_dir: Path = Path("runs")
    transport: Literal["aiohttp", "raw", "httpx", "null"] = "raw"
    # worker processes for `benchmaker.engine.workers.run_sharded`; "auto" = usable CPUs
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | Literal["auto"] = 1

    @model_validator(mode="after")
    def _has_an_end(self) -> BenchConfig:
        kind = self.load.split(":", 1)[0].strip().lower()
        if self.duration_s is None and self.max_requests is None and kind not in ("stages", "trace"):
            raise ValueError("give duration_s or max_requests (the load never ends otherwise)")
        if self.duration_s is not None and self.warmup_s + self.cooldown_s >= self.duration_s > 0:
            raise ValueError(
                f"warmup_s + cooldown_s ({self.warmup_s:g} + {self.cooldown_s:g}) must be shorter "
                f"than duration_s ({self.duration_s:g})"
            )
        if self.max_requests is None and kind != "trace" and isinstance(self.load_model(), Burst):
            raise ValueError(f"an infinite rate ({self.load}: every request at t=0) needs max_requests")
        self.check_in_flight()
        return self

    def check_in_flight(self, extra_concurrency: list[int] | None = None) -> None:
        """Raise ValueError when requests in flight per process could pass
        host_in_flight_limit(): max_in_flight, or a closed-loop concurrency (this
        config's load and `extra_concurrency`, e.g. a run file's lanes) divided over the
        worker processes."""
        limit, why = host_in_flight_limit()
        if self.max_in_flight is not None and self.max_in_flight > limit:
            raise ValueError(
                f"max_in_flight {self.max_in_flight} is more than this host can hold in flight ({limit}: {why})"
            )
        conc = list(extra_concurrency or [])
        model = self.load_model() if self.load.split(":", 1)[0].strip().lower() == "closed" else None
        if isinstance(model, ClosedLoop):
            conc.append(int(model.concurrency))
        n = 1 if self.workers == "auto" else self.workers
        per_process = math.ceil(sum(conc) / n) if conc else 0
        if per_process > limit:
            raise ValueError(
                f"closed-loop concurrency {sum(conc)} over {n} worker process(es) is "
                f"{per_process} in flight per process, more than this host can hold ({limit}: {why})"
            )

    def in_flight_cap(self) -> tuple[int, str]:
        """(cap on requests in flight per process in open loop, where it comes from):
        max_in_flight when given, else the smaller of host_in_flight_limit() and
        IN_FLIGHT_PER_CPU per usable CPU (docs/benchmark-an-endpoint.md: the client protects itself;
        arrivals beyond the cap are sent late or dropped per `overflow`, and the
        verdict notes name the cap)."""
        if self.max_in_flight is not None:
            return self.max_in_flight, "max_in_flight"
        limit, why = host_in_flight_limit()
        cpus = usable_cpus()
        if IN_FLIGHT_PER_CPU * cpus < limit:
            return IN_FLIGHT_PER_CPU * cpus, (
                f"default {IN_FLIGHT_PER_CPU} per usable CPU x {cpus}; raise it with --max-in-flight / max_in_flight"
            )
        return limit, f"host limit: {why}"

    def load_model(self, base_dir: Path | None = None) -> LoadModel:
        """The load model of `load`: the one parsed when `load` was validated, or (trace
        specs, whose file is relative to `base_dir`) parsed now. Raises RateSpecError."""
        return load_model_of(self.load, base_dir=base_dir)

    def effective_drain_s(self) -> float:
        if self.drain_s is not None:
            return self.drain_s
        return self.timeouts.total_s if self.timeouts.total_s is not None else 60.0
