"""`benchmaker swebench-replay` and `benchmaker llm-sweep`: run the Prefect flows from
the command line (against PREFECT_API_URL, else a local Prefect server started once
and reused: recipes/prefect_server.py), print the sweep table and
where the run bundle, warehouse and report are.

    benchmaker swebench-replay --logs examples/recordings/tiny-task.pi.jsonl \\
        --concurrency 1,2,4 [--episodes-per-point N | --duration D] [--mode execute \\
        --task-dirs examples/tiny-task] --out-dir artifacts --warehouse warehouse.duckdb
    benchmaker llm-sweep --base-url http://127.0.0.1:8000 --model m --concurrency 1,8 --duration 30

Several load hosts from the command line, on a Dask cluster (no Prefect server: the
flows sharded, with prefect-dask, the `dask` extra):

    benchmaker swebench-replay --logs ... --concurrency 8,32 --shards 2 \
        --dask-address tcp://scheduler:8786 [--exchange s3://bucket/x] [--start-lead 10]

Without a Prefect server (PREFECT_API_URL) the Dask workers cannot reach this
process's ephemeral Prefect and start one of their own on their first shard (5-10 s);
the shards still start together, once all are ready (the readiness barrier,
benchmaker.engine.shared_start). (On a Prefect work pool: `prefect deployment run
swebench-replay/distributed`, docs/several-machines.md.)

Exit codes (`--exit-code verdict`, the default): 0 every point valid; 1 the run
finished but a point is invalid (event-loop lag over its limit, target concurrency never
reached, a shard failed); 2 bad parameters, named, before anything runs. With
`--exit-code pipeline` (`make demo`) the exit code follows the pipeline instead: 0 when
the flow ran (converted, replayed, graded, loaded, reported) and every point measured
something, however its verdict; 1 when a point measured nothing (no request succeeded),
no episode of a point succeeded (each failed or diverged), or the flow failed. Either way the last lines printed are the verdict of each point in
plain words, its key figures and how to get valid points
(benchmaker.sweep.verdicts).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from cyclopts import Parameter
from rich.console import Console
from rich.table import Table

from benchmaker.engine.errors import ConfigError
from benchmaker.engine.load_models import parse_duration_s
from benchmaker.recipes.api_watch import exit_if_api_lost
from benchmaker.recipes.app import app, within
from benchmaker.recipes.prefect_server import use_local_server


def _prefect_env() -> None:
    """Settings for an ephemeral Prefect run, unless the user set them."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


def _ints(text: str, name: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{name}: expected comma-separated integers such as 1,5,25 (got {text!r})") from None


def _concurrency(concurrency: str | None, old_spelling: str | None) -> str | None:
    """The sweep's closed-loop points as given by --concurrency, or by its earlier
    spelling --concurrency-sweep (hidden, kept for scripts); ConfigError when both are."""
    if concurrency is not None and old_spelling is not None:
        raise ConfigError("--concurrency and --concurrency-sweep: give one (--concurrency-sweep is its old name)")
    return concurrency if concurrency is not None else old_spelling


def _workers(value: str) -> int:
    """`--workers N|auto` as a number of worker processes (auto: the CPUs this process
    may use); ConfigError naming the flag otherwise."""
    from benchmaker.engine.workers import resolve_workers

    try:
        return resolve_workers(value)
    except ConfigError as exc:
        raise ConfigError(f"--{exc}") from None


def _floats(text: str, name: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{name}: expected comma-separated numbers such as 2,5.5 (got {text!r})") from None


def _distributed(
    shards: int, dask_address: str | None, exchange: str | None, start_lead: float | None, shard_timeout: float | None
) -> dict[str, Any] | None:
    """The distributed flows' extra parameters from the CLI options, or None for a
    single-process run (--shards 1 and no --dask-address). --start-lead None: the
    flows' default (benchmaker.tasks.shard_runs.DEFAULT_LEAD_S). Raises ConfigError,
    before anything runs, when --shards > 1 comes without --dask-address, the exchange
    is refused (benchmaker.flows.common.checked_exchange) or the
    Dask scheduler does not answer within 5 s."""
    if dask_address is None:
        if shards > 1 or exchange or start_lead is not None or shard_timeout is not None:
            raise ConfigError(
                "--shards/--exchange/--start-lead/--shard-timeout: need --dask-address (a Dask "
                "scheduler); on a Prefect work pool run the `distributed` deployment instead"
            )
        return None
    from benchmaker.flows.common import ParameterError, checked_exchange
    from benchmaker.tasks.shard_runs import DaskMissing, dask_task_runner

    try:
        exchange = checked_exchange(exchange)
        dask_task_runner(dask_address)
    except (ParameterError, DaskMissing) as exc:
        raise ConfigError(str(exc)) from None
    _check_scheduler(dask_address)
    return dict(
        shards=shards,
        dask_address=dask_address,
        exchange=exchange,
        start_lead_s=start_lead,
        shard_timeout_s=shard_timeout,
    )


def _check_scheduler(address: str, timeout_s: float = 5.0) -> None:
    """Raises ConfigError unless a TCP connection to the Dask scheduler at `address`
    (tcp://host:port) opens within `timeout_s` s."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if parts.scheme not in ("tcp", "tls") or not host or not port:
        raise ConfigError(f"--dask-address: expected tcp://HOST:PORT of a Dask scheduler (got {address!r})")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"--dask-address: no Dask scheduler answers at {address} ({exc})") from None


# the v_sweep_summary columns the hint after a sweep selects: what a user reads first
HINT_COLUMNS = (
    "sweep_point",
    "valid",
    "n_requests",
    "n_ok",
    "request_throughput_per_s",
    "p50_e2e_ms",
    "p99_e2e_ms",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "misses_total",
    "invalid_reason",
)


def sql_hint(run_id: str, warehouse: Path) -> str:
    """The `benchmaker sql` command line that shows a sweep run's points from the
    warehouse (HINT_COLUMNS of v_sweep_summary, in sweep order), with `--warehouse`
    when `warehouse` is not the default one (benchmaker.warehouse.connection.default_warehouse);
    shell-quoted."""
    import shlex

    from benchmaker.warehouse.connection import default_warehouse

    query = (
        f"SELECT {', '.join(HINT_COLUMNS)} FROM v_sweep_summary WHERE run_id = '{run_id}' "
        "ORDER BY target_concurrency NULLS LAST, target_rate_per_s NULLS LAST, sweep_point"
    )
    # double quotes read best around the single-quoted run id; shlex.quote when they cannot hold it
    quoted = f'"{query}"' if not set(query) & set('"$`\\!') else shlex.quote(query)
    line = f"benchmaker sql {quoted}"
    if Path(warehouse).resolve() != default_warehouse().resolve():
        line += f" --warehouse {shlex.quote(str(warehouse))}"
    return line


def print_sweep(out: dict[str, Any], title: str, console: Console | None = None) -> None:
    """Print the sweep table (benchmaker.sweep.sweep.TABLE_COLUMNS), invalid points with their
    reason, and where the run bundle, warehouse and HTML report are."""
    from benchmaker.sweep.sweep import sweep_table_rows

    console = console or Console()
    if not console.is_terminal:
        console.width = max(console.width, 240)  # piped/logged output: no column squeezing
    headers, cells = sweep_table_rows(out["points"])
    split = headers.index("requests") + 2  # concurrency/volume columns, then latency/outcome
    for part, (lo, hi) in enumerate(((0, split), (split, len(headers)))):
        table = Table(title=f"{title} {out['run_id']}" if part == 0 else None)
        cols = ([0] if lo else []) + list(range(lo, hi))
        for i in cols:
            table.add_column(headers[i], justify="left" if i == 0 else "right", no_wrap=True)
        for row, c in zip(out["points"], cells, strict=True):
            table.add_row(*(c[i] for i in cols), style=None if row["valid"] else "red")
        console.print(table)
    console.print(
        "in flight = episodes in flight (requests for engine points; SQL: achieved_max/mean_concurrency, "
        "max/mean_episodes_in_flight, max/mean_requests_in_flight); counts are episodes, turns, requests; "
        "times in ms (E2E/TTFT linear percentiles; model/tool mean per episode); "
        "rec. errors = calls that failed in the recording, served as recorded (SQL: n_recorded_error, "
        "not in error_rate); aborted = responses ended with finish reason abort/error/cancelled "
        "(n_aborted); resolved ver./car. = rate among re-verified / carried outcomes"
    )
    for row in out["points"]:
        if not row["valid"]:
            console.print(
                f"{row['sweep_point']} invalid (as recorded): {row['invalid_reason']}",
                style="red",
                highlight=False,
                markup=False,
            )
    run_dir = Path(out["run_dir"])
    console.print(f"run bundle: {run_dir}")
    console.print(f"warehouse:  {out['warehouse']}", highlight=False, markup=False)
    console.print(f"  {sql_hint(out['run_id'], Path(out['warehouse']))}", highlight=False, markup=False, soft_wrap=True)
    report = run_dir / "report.html"
    console.print(f"report:     {report if report.is_file() else '(not written)'}")


def check_sandbox_flag(sandbox: str, mode: str) -> None:
    """--sandbox of an execute- or command-mode run, before anything runs
    (benchmaker.agent.sandbox.confine.check_sandbox_choice): prints the warning line of
    an unconfined choice to stderr; raises ConfigError (one line naming the install
    step) where the confined default cannot run. Recorded mode runs nothing: no check."""
    if mode == "recorded":
        return
    from benchmaker.agent.sandbox.confine import ConfinementError, check_sandbox_choice

    try:
        warning = check_sandbox_choice(sandbox)
    except ConfinementError as exc:
        raise ConfigError(f"--sandbox {sandbox}: {exc}") from None
    if warning:
        print(warning, file=sys.stderr)


def _run_flow(flow: Any, params: dict[str, Any], title: str, dist: dict[str, Any] | None) -> dict[str, Any] | None:
    """Run the sweep `flow` with `params` (sharded with `dist`, the _distributed
    parameters, unless None) against the Prefect API (use_local_server; the
    command ends when that server is lost: exit_if_api_lost), with live progress on a
    terminal only (benchmaker/progress.py), then print the sweep table under `title`
    (print_sweep). Returns the flow's output, also when a point is invalid; None after
    printing a failed flow run's one-line reason (benchmaker.flows.outcome.FlowRunFailed:
    its final state, the reason, how to resume) on stderr."""
    from benchmaker.flows.outcome import FlowRunFailed, run_sweep_flow
    from benchmaker.recipes.display import SweepProgressView

    if dist is not None:
        params = {**params, **dist, "sharded": True}
    with (
        use_local_server() as api_url,
        exit_if_api_lost(api_url),
        SweepProgressView(),
    ):
        try:
            out = asyncio.run(run_sweep_flow(flow, params))  # prints the flow run id first
        except FlowRunFailed as exc:
            failed: FlowRunFailed | None = exc  # printed once the live view is gone
        else:
            failed = None
    if failed is not None:
        print(f"benchmaker: error: {failed}", file=sys.stderr, flush=True)
        return None
    print_sweep(out, title)
    return out


ExitPolicy = Literal["verdict", "pipeline"]

# The options swebench-replay and llm-sweep share, their help stated once here.
WarehouseOpt = Annotated[
    Path | None, Parameter(help="DuckDB file (default: $BENCHMAKER_WAREHOUSE or ./warehouse.duckdb).")
]
LabelOpt = Annotated[str | None, Parameter(help="Run label stored with every point's run (e.g. nightly).")]
DaskAddressOpt = Annotated[
    str | None, Parameter(help="Dask scheduler (tcp://host:8786) whose workers run the shards (`dask` extra).")
]
ExchangeOpt = Annotated[
    str | None, Parameter(help="Path or fsspec URL every host reaches, when --out-dir is not shared.")
]
StartLeadOpt = Annotated[
    float | None,
    within(above=0, high=2_592_000),
    Parameter(
        help="Seconds from a point's submission to its earliest start (default 1); the shards start "
        "together once all are ready, however long their pickup takes."
    ),
]
ShardTimeoutOpt = Annotated[
    float | None,
    within(above=0, high=2_592_000),
    Parameter(help="Seconds to wait for a point's shards (default 3 h)."),
]
MaxLoopLagOpt = Annotated[
    float | None,
    Parameter(
        help="A point is invalid (exit 1) when the client's event-loop lag p99 exceeds this, in ms "
        "(default 10, or BENCHMAKER_MAX_LOOP_LAG_MS; raise it on a loaded host)."
    ),
]
ExitCodeOpt = Annotated[
    ExitPolicy,
    Parameter(
        help="verdict: exit 1 when a point is invalid; pipeline: exit 0 whenever the pipeline ran and "
        "every point measured something, invalid points still marked (`make demo`)."
    ),
]


def print_verdicts(out: dict[str, Any], exit_code: ExitPolicy = "verdict", console: Console | None = None) -> int:
    """Print the sweep's answer, meant as the last screen of a sweep command: a heading
    with how many points are valid, per point its verdict in plain words and its key
    figures (benchmaker.sweep.verdicts), how to get valid points when some are invalid,
    and what the exit code means. Returns the exit code under `exit_code`: "verdict"
    0 when every point is valid, else 1; "pipeline" 0 when every point measured
    something (benchmaker.sweep.verdicts.pipeline_failures is empty), else 1."""
    from benchmaker.sweep.verdicts import advice, key_figures, pipeline_failures, verdict_line

    console = console or Console()
    # piped or logged: one line per verdict, however long
    say = partial(console.print, highlight=False, markup=False, soft_wrap=not console.is_terminal)
    points = out["points"]
    n_valid = sum(1 for r in points if r.get("valid"))
    console.print()
    say(f"Verdict of run {out['run_id']}: {n_valid} of {len(points)} points valid", style="bold")
    for row in points:
        say(f"  {verdict_line(row)}", style=None if row.get("valid") else "red")
        say(f"      {key_figures(row)}")
    for line in advice(points):
        say(line)
    failed = pipeline_failures(points)
    if exit_code == "pipeline":
        if failed:
            say(f"exit 1: the pipeline measured nothing at {', '.join(failed)}", soft_wrap=False)
            return 1
        if n_valid < len(points):
            say(
                "exit 0: the pipeline ran (converted, replayed, graded, loaded, reported); the invalid "
                "points stay marked invalid in the warehouse and the report (--exit-code verdict: "
                "exit 1 for them)"
            )
        return 0
    if n_valid < len(points):
        say("exit 1: a point is invalid (--exit-code pipeline: exit 0 whenever the pipeline ran)")
        return 1
    return 0


def _check_sweep_options(
    *,
    concurrency: list[int],
    duration: float | None,
    out_dir: Path,
    warehouse: Path | None,
    urls: dict[str, str | None],
    rates: Sequence[float] = (),
    max_requests: int | None = None,
    counts: dict[str, int | None] | None = None,
    lag_ms: tuple[float | None, float | None] = (None, None),
) -> None:
    """Bounds the flows' parameter models leave to the host, checked before Prefect
    starts (benchmaker.engine.config): concurrency within what this host can hold in flight,
    durations and rates finite and in range, the lag limits `lag_ms` (--max-loop-lag-ms,
    --max-schedule-lag-ms) finite and > 0, URLs http(s), output paths writable, an
    existing warehouse a DuckDB file this DuckDB opens (not found only after the sweep).
    Raises ConfigError naming the flag."""
    from benchmaker.engine.config import (
        check_http_url,
        check_lag_limits,
        check_output_dir,
        check_output_file,
        host_in_flight_limit,
    )
    from benchmaker.engine.load_models import MAX_DURATION_S, MAX_RATE_PER_S
    from benchmaker.warehouse.connection import default_warehouse

    limit, why = host_in_flight_limit()
    for c in concurrency:
        if c > limit:
            raise ConfigError(f"--concurrency: {c} in flight is more than this host can hold ({limit}: {why})")
    if duration is not None and not 0 < duration <= MAX_DURATION_S:  # NaN fails too
        raise ConfigError(f"--duration: expected seconds in (0, {MAX_DURATION_S:.0f}] (got {duration:g})")
    for r in rates:
        if not 0 < r <= MAX_RATE_PER_S:
            raise ConfigError(f"--rate-sweep: expected requests/s in (0, {MAX_RATE_PER_S:g}] (got {r:g})")
    if max_requests is not None and not 1 <= max_requests <= 1_000_000_000:
        raise ConfigError(f"--max-requests: expected 1..1000000000 (got {max_requests})")
    for flag, n in (counts or {}).items():
        if n is not None and not 1 <= n <= 10_000_000:
            raise ConfigError(f"{flag}: expected 1..10000000 (got {n})")
    check_lag_limits(*lag_ms)
    for flag, url in urls.items():
        if url is not None:
            check_http_url(url, flag)
    check_output_dir(out_dir, "--out-dir")
    wh = Path(warehouse if warehouse is not None else default_warehouse())
    check_output_file(wh, "--warehouse")
    if wh.exists():
        from benchmaker.warehouse.connection import open_readonly
        from benchmaker.warehouse.errors import WarehouseError, WarehouseLocked

        try:
            open_readonly(wh, wait_s=5.0).close()
        except WarehouseLocked:
            pass  # a load holds it: a warehouse
        except WarehouseError as exc:
            raise ConfigError(f"--warehouse: {exc}") from None


# the sweep flows' parameter fields whose flag is not --field-with-dashes
_FIELD_FLAGS = {
    "rates": "--rate",
    "loads": "--rate",
    "duration_s": "--duration",
    "log_format": "--format",
    "concurrency_sweep": "--concurrency",
    "stray_grace_s": "--stray-grace",
    "prompt_words": "--input-words",
}


def _flag_error(exc: Exception) -> ConfigError:
    """A flow's ParameterError ("invalid <flow> parameters:" and one `field[i]: problem`
    line each) as one line naming the flags: each field becomes its flag (_FIELD_FLAGS,
    else --field-with-dashes), the problems joined by "; ", e.g. `--rate: unknown load
    model 'posson' in rate spec 'posson:1' (...) (got 'posson:1')`."""
    import re

    def flag(m: re.Match[str]) -> str:
        return _FIELD_FLAGS.get(m.group(1), "--" + m.group(1).replace("_", "-")) + ":"

    lines = str(exc).splitlines()[1:] or [str(exc)]
    return ConfigError("; ".join(re.sub(r"^([a-z_]+)(?:\[\d+\])?(?:\.\S+)?:", flag, line) for line in lines))


def _check_engine_loads(specs: Sequence[str], duration: float | None, max_requests: int | None) -> None:
    """Each point's engine config validates (the host's in-flight limit for closed:N,
    an inf rate's max_requests); ConfigError naming the point otherwise."""
    from pydantic import ValidationError

    from benchmaker.engine.config import BenchConfig
    from benchmaker.engine.config_file import format_validation_error

    for spec in specs:
        try:
            BenchConfig(load=spec, duration_s=duration, max_requests=max_requests)
        except ValidationError as exc:
            raise ConfigError(
                format_validation_error(exc, None, names={("load",): f"point {spec}", (): f"point {spec}"})
            ) from None


def _converted(p: Any) -> Path:
    """The logs of the validated swebench-replay parameters `p`, converted once for the
    whole run into the content-addressed conversion cache (benchmaker.tasks.convert.
    ensure_converted: nothing is converted when a complete conversion is there); the
    flow is given this file. Bad logs raise ConfigError with the converter's one-line
    error (exit 2), before Prefect starts; a conversion that cannot be written (a full
    disk) raises RunFailed naming it (exit 1)."""
    from benchmaker.engine.errors import RunFailed
    from benchmaker.tasks.convert import cache_dir_of, ensure_converted
    from benchmaker.trajectories.errors import InputError, OutputWriteError

    try:
        return ensure_converted(p.logs, cache_dir_of(p.out_dir), fmt=p.log_format, lenient=p.lenient)[0]
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    except OutputWriteError as exc:
        raise RunFailed(str(exc)) from None


@app.command(name="swebench-replay")
def swebench_replay(
    *,
    logs: list[Path] | None = None,
    trajectories: Path | None = None,
    concurrency: str | None = None,
    rate: list[str] | None = None,
    episodes_per_point: int | None = None,
    duration: str | None = None,
    mode: Literal["recorded", "execute", "command"] = "recorded",
    sandbox: Literal["local", "none", "flash"] = "local",
    sandbox_url: str | None = None,
    sandbox_image: str | None = None,
    task_dirs: list[Path] | None = None,
    command: str | None = None,
    stray_grace: Annotated[float | None, within(above=0, high=3600)] = None,
    latency: str = "instant",
    divergence: Literal["off", "status", "content"] = "off",
    format: str | None = None,  # the CLI flag is --format
    lenient: bool = False,
    out_dir: Path = Path("artifacts"),
    warehouse: WarehouseOpt = None,
    label: LabelOpt = None,
    shards: Annotated[int, within(1, 4096)] = 1,
    dask_address: DaskAddressOpt = None,
    exchange: ExchangeOpt = None,
    start_lead: StartLeadOpt = None,
    shard_timeout: ShardTimeoutOpt = None,
    workers: str = "1",
    max_loop_lag_ms: MaxLoopLagOpt = None,
    max_schedule_lag_ms: float | None = None,
    exit_code: ExitCodeOpt = "verdict",
    dry_run: bool = False,
    concurrency_sweep: Annotated[str | None, Parameter(show=False)] = None,
) -> int:
    """Replay recorded agent runs at each concurrency of a sweep (the swebench-replay
    Prefect flow) and load the results into the warehouse.

    Parameters
    ----------
    logs
        Agent logs (files or directories); converted once and cached on their content.
    trajectories
        An already converted trajectories.jsonl (instead of --logs).
    concurrency
        Closed-loop points: episodes in flight per point, comma-separated, each >= 1
        (e.g. 1,5,25; default 1,5 without --rate).
    rate
        An open-loop point: episodes start at this rate spec (poisson:0.5, constant:2,
        trace:FILE), as agent sessions arrive; repeat for several. The table's row and
        the line under it give offered vs achieved episodes/s and the schedule lag.
    episodes_per_point
        Episodes per point (default: max(concurrency, number of trajectories)).
    duration
        Instead: keep starting episodes for this long per point (120, 120s, 2m).
    mode
        recorded (tool results from the recording), execute (tools run in the sandbox),
        command (an external agent, --command, per task).
    sandbox
        Where execute and command mode run tools and the verifier: local (a temp copy
        of the task per episode, every command confined by bubblewrap: no network, no
        file outside the copy, an unprivileged user under root; docs/execute-mode-sandbox.md),
        none (the same copy, unconfined: warned) or flash (a sandbox service at
        --sandbox-url: warned).
    sandbox_url
        Base URL of the flash sandbox service (execute mode, --sandbox flash).
    sandbox_image
        Container image the flash sandbox starts per episode.
    task_dirs
        Task directories with task.json, for the verifier in execute/command mode.
    command
        The agent command line of command mode (split on spaces).
    stray_grace
        Command mode: seconds an agent whose request the replay server refused (it
        strayed from the recording) may take to exit on its own before its process
        group is killed and the episode ends as diverged (default 2).
    latency
        Replay server latency: instant | fixed:TTFT_MS:ITL_MS | recorded.
    divergence
        Check the agent's observations against the recording: off (no check), status
        (count exit-status mismatches, serve normally) or content (a status or content
        mismatch gets 412 and counts as a diverged miss).
    format
        Force the log format instead of detecting it from the content (see `convert`).
    lenient
        Skip and count unreadable log files and records instead of refusing the run.
    out_dir
        Folder for artifacts: converted trajectories, run bundles, the report.
    shards
        Load hosts per point (> 1 needs --dask-address): each runs its share of the
        episode slots with its own replay server; merged into one run.
    workers
        Engine worker processes per point (recorded mode): N or auto (usable CPUs), as
        for engine runs.
    max_schedule_lag_ms
        An open-loop point is invalid (exit 1, client-saturated) when its episode
        schedule lag p99 (sent - intended) exceeds this, in ms (default 10, or
        BENCHMAKER_MAX_SCHEDULE_LAG_MS).
    dry_run
        Print the plan (points x episodes x model calls, estimated duration) and stop.
    """
    duration_s = None if duration is None else parse_duration_s(duration, "--duration")  # "120s" -> 120.0
    concurrency_sweep = _concurrency(concurrency, concurrency_sweep)
    if concurrency_sweep is None:
        concurrency_sweep = "" if rate else "1,5"
    conc = _ints(concurrency_sweep, "--concurrency")
    _check_sweep_options(
        concurrency=conc,
        duration=duration_s,
        out_dir=out_dir,
        warehouse=warehouse,
        urls={"--sandbox-url": sandbox_url},
        lag_ms=(max_loop_lag_ms, max_schedule_lag_ms),
    )
    if not dry_run:
        check_sandbox_flag(sandbox, mode)
    _prefect_env()
    from benchmaker.flows.swebench_replay import ParameterError, validate_params
    from benchmaker.warehouse.connection import default_warehouse

    params: dict[str, Any] = dict(
        logs=logs or [],
        trajectories=trajectories,
        concurrency_sweep=conc,
        rates=list(rate or []),
        workers=_workers(workers),
        episodes_per_point=episodes_per_point,
        duration_s=duration_s,
        mode=mode,
        sandbox=sandbox,
        sandbox_url=sandbox_url,
        sandbox_image=sandbox_image,
        task_dirs=task_dirs or [],
        command=command.split() if command else None,
        stray_grace_s=stray_grace,
        latency=latency,
        divergence=divergence,
        log_format=format,
        lenient=lenient,
        out_dir=out_dir,
        warehouse=warehouse or default_warehouse(),
        label=label,
        max_loop_lag_ms=max_loop_lag_ms,
        max_schedule_lag_ms=max_schedule_lag_ms,
    )
    try:
        p = validate_params(**params)  # refuse bad parameters before Prefect starts
    except ParameterError as exc:
        raise _flag_error(exc) from None
    # the flow gets what was validated here: rate specs parsed once (ParsedRateSpec, taken
    # as they are by the flow's parameters model), the lag limits this run uses
    params.update(rates=p.rates, max_loop_lag_ms=p.max_loop_lag_ms, max_schedule_lag_ms=p.max_schedule_lag_ms)
    from benchmaker.recipes.display import SweepProgressView, print_plan

    # the scale-out options (and the scheduler) checked before the conversion writes to --out-dir
    dist = None if dry_run else _distributed(shards, dask_address, exchange, start_lead, shard_timeout)
    with SweepProgressView():  # the conversion's progress per file on a terminal
        converted = bool(logs) and trajectories is None  # else validate_params refused it
        traj = _converted(p) if converted else trajectories
        assert traj is not None, "validate_params requires logs or trajectories"
        print_plan(params, traj, trusted=converted)  # points x episodes x model calls and an estimate
    if dry_run:
        return 0
    # the flow replays the conversion made here: the logs are read once per run
    params.update(logs=[], trajectories=traj)
    from benchmaker.flows.swebench_replay import swebench_replay as flow

    out = _run_flow(flow, params, "swebench-replay", dist)
    if out is None:
        return 1
    print_open_loop(out["points"])
    return print_verdicts(out, exit_code)


def print_open_loop(points: list[dict[str, Any]], console: Console | None = None) -> None:
    """One line per open-loop point (a row with an offered episode rate): offered vs
    achieved episodes/s (the engine's: started episodes / window) and the episodes'
    schedule lag p50/p99 in ms (sent - intended: queueing)."""
    console = console or Console()
    for r in points:
        if r.get("offered_episode_rate_per_s") is None:
            continue

        def ms(v: Any) -> str:
            return "-" if v is None else f"{v:.1f} ms"

        achieved = r.get("achieved_episode_rate_per_s")
        console.print(
            f"{r['sweep_point']}: offered {r['offered_episode_rate_per_s']:g} episodes/s, achieved "
            f"{'-' if achieved is None else f'{achieved:.3g}'} episodes/s; episode schedule lag "
            f"p50 {ms(r.get('episode_schedule_lag_p50_ms'))}, p99 {ms(r.get('episode_schedule_lag_p99_ms'))}",
            highlight=False,
        )


@app.command(name="llm-sweep")
def llm_sweep(
    *,
    base_url: str,
    model: str,
    concurrency: str | None = None,
    rate: list[str] | None = None,
    duration: str = "30s",
    max_requests: int | None = None,
    input_words: int = 128,
    max_tokens: int | None = 128,
    ignore_eos: bool = False,
    api: str = "chat",
    api_key_env: str | None = None,
    out_dir: Path = Path("artifacts"),
    warehouse: WarehouseOpt = None,
    label: LabelOpt = None,
    shards: Annotated[int, within(1, 4096)] = 1,
    dask_address: DaskAddressOpt = None,
    exchange: ExchangeOpt = None,
    start_lead: StartLeadOpt = None,
    shard_timeout: ShardTimeoutOpt = None,
    max_loop_lag_ms: MaxLoopLagOpt = None,
    max_schedule_lag_ms: float | None = None,
    exit_code: ExitCodeOpt = "verdict",
    concurrency_sweep: Annotated[str | None, Parameter(show=False)] = None,
    rate_sweep: Annotated[str | None, Parameter(show=False)] = None,
    loads: Annotated[list[str] | None, Parameter(show=False)] = None,
    prompt_words: Annotated[int | None, Parameter(show=False)] = None,
) -> int:
    """Sweep an LLM endpoint (OpenAI chat, or Anthropic Messages with --api messages) over
    concurrencies or rates (the llm-sweep Prefect flow): one engine run per point, then
    load and report.

    Parameters
    ----------
    base_url
        The endpoint's base URL (e.g. http://127.0.0.1:8000); /v1/chat/completions (or
        /v1/responses with --api responses) is added.
    concurrency
        Closed-loop points: requests in flight per point, comma-separated (1,8,32 ->
        closed:1, closed:8, closed:32).
    rate
        An open-loop point as a rate spec (poisson:5, constant:10, stages:2,8@30s; see
        `benchmaker llm --help`); repeat for several.
    model
        Model name sent in the body.
    duration
        How long each point sends (30, 30s, 2m), as --duration of llm and swebench-replay.
    max_requests
        Stop each point after this many requests.
    input_words
        Synthetic prompt length in words (as --input-words of llm).
    max_tokens
        max_tokens sent with each request (max_output_tokens with --api responses).
    ignore_eos
        Send "ignore_eos": true (vLLM, SGLang; every --api, vLLM 0.32.0 ignores it on
        messages): generate past the end-of-sequence token up to --max-tokens, so every
        answer has the same length.
    api
        chat (/v1/chat/completions is added to --base-url), responses (/v1/responses) or
        messages (Anthropic /v1/messages; needs --max-tokens; one host: --shards 1).
    api_key_env
        Name of the environment variable holding the API key (never the key itself).
    out_dir
        Folder for run bundles and the report.
    shards
        Load hosts per point (> 1 needs --dask-address): shard k sends slice k of N of
        the point's load; merged into one run.
    max_schedule_lag_ms
        An open-loop point is invalid (exit 1, client-saturated) when its schedule lag
        p99 (sent - intended) exceeds this, in ms (default 10, or
        BENCHMAKER_MAX_SCHEDULE_LAG_MS).
    """
    _prefect_env()
    from benchmaker.flows.common import validated
    from benchmaker.flows.llm_sweep import LlmSweepParams
    from benchmaker.flows.swebench_replay import ParameterError
    from benchmaker.warehouse.connection import default_warehouse

    duration_s = parse_duration_s(duration, "--duration")  # "30s" -> 30.0
    concurrency_sweep = _concurrency(concurrency, concurrency_sweep)
    conc = _ints(concurrency_sweep, "--concurrency") if concurrency_sweep else None
    rates = _floats(rate_sweep, "--rate-sweep") if rate_sweep else None  # old spelling of --rate poisson:N,...
    specs = [*(rate or []), *(loads or [])] or None  # --loads: the old name of --rate
    words = input_words if prompt_words is None else prompt_words  # --prompt-words: the old name
    bad = [f"--concurrency: expected integers >= 1 (got {c})" for c in conc or [] if c < 1]
    bad += [f"--rate-sweep: expected numbers > 0 (got {r:g})" for r in rates or [] if r <= 0]
    if api not in ("chat", "responses", "messages"):
        bad.append(f"--api: expected chat, responses or messages (got {api!r})")
    elif api == "messages" and shards > 1:  # here too: shards join the parameters after their check
        bad.append(f"--api: {api} sweeps run on one host (got --shards {shards})")
    if bad:
        raise ConfigError("; ".join(bad))
    _check_sweep_options(
        concurrency=conc or [],
        duration=duration_s,
        out_dir=out_dir,
        warehouse=warehouse,
        urls={"--base-url": base_url},
        rates=rates or [],
        max_requests=max_requests,
        counts={"--input-words": words, "--max-tokens": max_tokens},
        lag_ms=(max_loop_lag_ms, max_schedule_lag_ms),
    )
    params: dict[str, Any] = dict(
        base_url=base_url,
        model=model,
        api=api,
        concurrency_sweep=conc,
        rate_sweep=rates,
        loads=specs,
        duration_s=duration_s,
        max_requests=max_requests,
        prompt_words=words,
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        api_key_env=api_key_env,
        out_dir=out_dir,
        warehouse=warehouse or default_warehouse(),
        label=label,
        max_loop_lag_ms=max_loop_lag_ms,
        max_schedule_lag_ms=max_schedule_lag_ms,
    )
    try:
        p = validated(LlmSweepParams, "llm-sweep", params)  # parses each --rate spec, once
    except ParameterError as exc:
        raise _flag_error(exc) from None
    _check_engine_loads([point.load for point in p.points()], duration_s, max_requests)
    # the flow gets what was validated here: the parsed specs (taken as they are by its
    # parameters model) and the lag limits this run uses
    params.update(loads=p.loads, max_loop_lag_ms=p.max_loop_lag_ms, max_schedule_lag_ms=p.max_schedule_lag_ms)
    dist = _distributed(shards, dask_address, exchange, start_lead, shard_timeout)
    from benchmaker.flows.llm_sweep import llm_sweep

    out = _run_flow(llm_sweep, params, "llm-sweep", dist)
    return 1 if out is None else print_verdicts(out, exit_code)
