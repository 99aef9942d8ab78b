"""`benchmaker sandbox`: command latency in a sandbox, or the create -> exec -> delete
lifecycle with each phase timed (workloads/sandbox.py).

    benchmaker sandbox --command 'echo hi' --concurrency 4 --duration 10s          # local exec
    benchmaker sandbox --command 'echo hi' --mode lifecycle --max-requests 50       # local lifecycle
    benchmaker sandbox --target flash --url http://127.0.0.1:8080 --sandbox-id sb-1 \\
        --command 'python3 -c 1' --rate poisson:5 --duration 30s
    benchmaker sandbox --target flash --url URL --image alpine:3 --mode lifecycle --max-requests 20

Exit codes as `benchmaker run`: 0 valid, 1 invalid run, 2 bad input, 130 interrupted.
Per-phase times are in each sample's meta (create_ms, exec_ms, delete_ms); E2E is the
whole exec or lifecycle. A non-zero exit code is a `graded_wrong` sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from benchmaker.engine.config import check_http_url
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.runner import BenchRunner
from benchmaker.recipes.app import ON_BY_DEFAULT, app, within
from benchmaker.recipes.bench import EngineFlags, execute_run, load_of, resolve_api_key
from benchmaker.recipes.swebench_replay import check_sandbox_flag
from benchmaker.workloads.sandbox import SandboxWorkload

DEFAULT_SAMPLES = 10  # samples of a run given neither --duration nor --max-requests


@app.command(name="sandbox")
def sandbox(
    *,
    command: str,
    target: Literal["local", "flash"] = "local",
    sandbox: Literal["local", "none"] = "local",
    mode: Literal["exec", "lifecycle"] = "exec",
    url: str | None = None,
    sandbox_id: str | None = None,
    image: str | None = None,
    sandbox_type: str = "",
    template: str | None = None,
    memory_mb: Annotated[int, within(1, 1 << 20)] = 512,
    cpu_cores: Annotated[float, within(above=0, high=1024)] = 1.0,
    repo: Path | None = None,
    timeout: Annotated[float, within(above=0, high=2_592_000)] = 60.0,
    api_key_env: str | None = None,
    concurrency: int | None = None,
    rate: str | None = None,
    duration: str | None = None,
    max_requests: int | None = None,
    out_dir: Path = Path("runs"),
    max_in_flight: int | None = None,
    total_timeout: str | None = None,
    max_error_rate: float | None = None,
    max_loop_lag_ms: float | None = None,
    max_schedule_lag_ms: float | None = None,
    seed: int = 0,
    label: str | None = None,
    progress: Annotated[bool | None, ON_BY_DEFAULT] = None,
) -> int:
    """Benchmark a command in a sandbox: exec latency, or the create/exec/delete lifecycle.

    Args:
        command: Shell command run in the sandbox per sample (exit code 0 = ok).
        target: local (temp workspace + bash subprocess, embedded) or flash (Flash Sandbox coordinator).
        sandbox: Target local: local (commands confined by bubblewrap; refused up front where bwrap cannot run) or none (unconfined: warned).
        mode: exec (on one sandbox) or lifecycle (create -> exec -> delete per sample).
        url: Flash coordinator base URL (target flash).
        sandbox_id: Existing Flash sandbox for exec mode (default: one is created before the run).
        image: Image of created Flash sandboxes.
        sandbox_type: Flash sandbox `type` field.
        template: Flash sandbox template.
        memory_mb: Memory of created Flash sandboxes (MB).
        cpu_cores: CPU cores of created Flash sandboxes.
        repo: Directory copied into each local workspace.
        timeout: The command's deadline in seconds (a timeout is a `timeout` sample).
        api_key_env: Environment variable holding the Flash API key (never written to the bundle).
        concurrency: Commands in flight (closed loop; default 1; the same as --rate closed:N).
        rate: Open-loop arrivals instead of --concurrency (rate specs: `benchmaker llm --help`).
        duration: Stop sending after this long.
        max_requests: Stop after this many samples (default 10 when no --duration is given).
        out_dir: Folder for run bundles.
        max_in_flight: Cap on samples in flight.
        total_timeout: Deadline for a whole sample (exec or lifecycle).
        max_error_rate: The run is invalid (exit 1) when more than this fraction of requests failed (0..1; default 0.1; 1 turns it off).
        max_loop_lag_ms: The run is invalid (exit 1) when the client's event-loop lag p99 exceeds this, in ms (default 10, or BENCHMAKER_MAX_LOOP_LAG_MS; raise it on a loaded host).
        max_schedule_lag_ms: An open-loop run is invalid (exit 1, client-saturated) when its schedule lag p99 (sent - intended) exceeds this, in ms (default 10, or BENCHMAKER_MAX_SCHEDULE_LAG_MS).
        seed: Seed of random arrivals.
        label: Run label.
        progress: Live progress display.
    """
    load = load_of(rate, concurrency)
    if duration is None and max_requests is None and load.split(":", 1)[0].strip().lower() not in ("stages", "trace"):
        max_requests = DEFAULT_SAMPLES  # `benchmaker sandbox --command 'echo hi'` runs as written
    cfg = EngineFlags(
        concurrency=concurrency,
        rate=rate,
        duration=duration,
        max_requests=max_requests,
        out_dir=out_dir,
        max_in_flight=max_in_flight,
        total_timeout=total_timeout,
        max_error_rate=max_error_rate,
        max_loop_lag_ms=max_loop_lag_ms,
        max_schedule_lag_ms=max_schedule_lag_ms,
        seed=seed,
        label=label,
    ).config("sandbox")
    if url is not None:
        check_http_url(url, "--url")
    if repo is not None and not repo.is_dir():
        raise ConfigError(f"--repo: not a directory (got {str(repo)!r})")
    if target == "local":  # the flags are right; before any work: no bundle for a run that cannot start
        check_sandbox_flag(sandbox, "command")
    try:
        workload = SandboxWorkload(
            command,
            target=target,
            mode=mode,
            url=url,
            sandbox_id=sandbox_id,
            image=image,
            sandbox_type=sandbox_type,
            template=template,
            memory_mb=memory_mb,
            cpu_cores=cpu_cores,
            api_key=resolve_api_key(None, api_key_env),
            timeout_s=timeout,
            repo=repo,
            confined=sandbox == "local",
        )
    except ValueError as exc:
        raise ConfigError(f"--{exc}") from None
    extra = {"workload": workload.describe()}
    return execute_run(BenchRunner(cfg, workload=workload, manifest_extra=extra), progress)
