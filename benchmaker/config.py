"""Engine configuration (pydantic): what the runner does, not what it sends.

    BenchConfig(load="poisson:50", duration_s=30)          # 30 s of Poisson at 50 req/s
    BenchConfig(load="closed:8", max_requests=1000)         # 8 workers, 1,000 requests
    BenchConfig(load="constant:10", duration_s=60, warmup_s=5,
                timeouts=Timeouts(ttft_s=2.0, total_s=30.0), slo=SLO(ttft_ms=500))

Durations accept numbers (s) or strings such as "500ms", "10s", "2m". Unknown keys are
rejected naming the key (`extra="forbid"`). YAML files are read by
`benchmaker.config_file`, which maps errors to file lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from benchmaker.errors import RateSpecError
from benchmaker.load_models import LoadModel, parse_duration_s, parse_rate_spec


def _duration(value: Any) -> Any:
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        return parse_duration_s(value)
    except RateSpecError as exc:
        raise ValueError(str(exc)) from None


Seconds = Annotated[float, BeforeValidator(_duration), Field(ge=0)]


def _rate_spec(value: str) -> str:
    # trace specs name a file, read when the runner is built (relative to the config)
    if value.split(":", 1)[0].strip().lower() != "trace":
        try:
            parse_rate_spec(value)
        except RateSpecError as exc:
            raise ValueError(str(exc)) from None
    return value


# A rate-spec string (benchmaker.load_models), checked when the model is validated.
RateSpec = Annotated[str, AfterValidator(_rate_spec)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Timeouts(_Strict):
    """Per-request deadlines in s, each None for none.

    connect_s  until the TCP (and TLS) connection is made
    ttft_s     from send until the first token-bearing event
    idle_s     longest gap between two reads of the response body
    total_s    from send until the response ended

    A watchdog task enforces them, checking every min(timeouts)/20 s (clamped to
    1..50 ms), so a timed-out request ends within that period after its deadline; the
    sample's `end_ns` is when it was cancelled.
    """

    connect_s: Seconds | None = 10.0
    ttft_s: Seconds | None = None
    idle_s: Seconds | None = None
    total_s: Seconds | None = 600.0


class SLO(_Strict):
    """Service-level objectives for goodput, in ms; a request is good when it succeeded
    and meets every declared bound (a bound on a metric the request lacks, e.g. TPOT of
    a one-token answer, is not held against it)."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)

    def declared(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2e_ms))


class SelfCheckLimits(_Strict):
    """Thresholds that make a run invalid (DESIGN §4: a run that could not measure what
    it claims says so). Lags in ms, error rate as a fraction."""

    max_schedule_lag_p99_ms: float = 10.0
    max_loop_lag_p99_ms: float = 10.0
    max_error_rate: float | None = None


class BenchConfig(_Strict):
    """Everything the runner needs besides the workload(s).

    load           rate spec of the single lane (see benchmaker.load_models)
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

    load: RateSpec = "closed:1"
    duration_s: Seconds | None = None
    max_requests: int | None = Field(default=None, ge=1)
    warmup_s: Seconds = 0.0
    cooldown_s: Seconds = 0.0
    max_in_flight: int | None = Field(default=None, ge=1)
    overflow: Literal["late", "drop"] = "late"
    drain_s: Seconds | None = None
    timeouts: Timeouts = Field(default_factory=Timeouts)
    slo: SLO | None = None
    checks: SelfCheckLimits = Field(default_factory=SelfCheckLimits)
    seed: int = 0
    run_id: str | None = None
    label: str | None = None
    kind: str = "bench"
    sweep_point: str | None = None
    out_dir: Path = Path("runs")
    transport: Literal["aiohttp", "httpx", "null"] = "aiohttp"
    # worker processes for `benchmaker.workers.run_sharded`; "auto" = usable CPUs
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = 1

    @model_validator(mode="after")
    def _has_an_end(self) -> "BenchConfig":
        kind = self.load.split(":", 1)[0].strip().lower()
        if self.duration_s is None and self.max_requests is None and kind not in ("stages", "trace"):
            raise ValueError("give duration_s or max_requests (the load never ends otherwise)")
        if self.duration_s is not None and self.warmup_s + self.cooldown_s >= self.duration_s > 0:
            raise ValueError(
                f"warmup_s + cooldown_s ({self.warmup_s:g} + {self.cooldown_s:g}) must be shorter "
                f"than duration_s ({self.duration_s:g})"
            )
        return self

    def load_model(self, base_dir: Path | None = None) -> LoadModel:
        """The parsed load model of `load`."""
        return parse_rate_spec(self.load, base_dir=base_dir)

    def effective_drain_s(self) -> float:
        if self.drain_s is not None:
            return self.drain_s
        return self.timeouts.total_s if self.timeouts.total_s is not None else 60.0
