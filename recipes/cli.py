"""Entry point of the `benchmaker` console script: registers every command LAZILY on
`benchmaker.recipes.app.app` (cyclopts import paths, COMMANDS) and runs the app. A command imports
only its own recipe module when it runs or shows its help; `benchmaker --help` imports
none (`benchmaker sql` must not pay for Prefect, Dask or plotly).

Exit codes: 0 ok; 1 the run finished but is invalid or crossed a threshold; 2 bad
input (config, rate spec, arguments), reported in one line without a traceback.
"""

from __future__ import annotations

import atexit
import os
import sys

from cyclopts import Group

from benchmaker.recipes.app import app

# Every command: CLI name -> "module:attribute" (a function, or the App of a command group).
# A recipe module's `@app.command` decorators are no-ops for these names (benchmaker.recipes.app);
# a command missing here is missing from the CLI (tests/recipes/test_lazy_cli.py checks).
COMMANDS = {
    "llm": "benchmaker.recipes.bench:llm",
    "http": "benchmaker.recipes.bench:http",
    "run": "benchmaker.recipes.bench:run",
    "retry": "benchmaker.recipes.retry:retry",
    "serve-replay": "benchmaker.recipes.serve_replay:serve_replay",
    "convert": "benchmaker.recipes.convert:convert",
    "episode": "benchmaker.recipes.episode:episode",
    "sql": "benchmaker.recipes.warehouse_cli:sql",
    "runs": "benchmaker.recipes.warehouse_cli:runs",
    "compare": "benchmaker.recipes.warehouse_cli:compare",
    "export": "benchmaker.recipes.warehouse_cli:export",
    "load": "benchmaker.recipes.warehouse_cli:load",
    "report": "benchmaker.recipes.report:report",
    "swebench-replay": "benchmaker.recipes.swebench_replay:swebench_replay",
    "llm-sweep": "benchmaker.recipes.swebench_replay:llm_sweep",
    "sandbox": "benchmaker.recipes.sandbox:sandbox",
    "swebench": "benchmaker.recipes.swebench:swebench",
    "trajectory-replay": "benchmaker.recipes.trajectory_replay:trajectory_replay",
    "calibrate": "benchmaker.recipes.calibrate:calibrate",
    "record": "benchmaker.recipes.record:record",
    "sglang": "benchmaker.recipes.sglang:sglang",
    "server": "benchmaker.recipes.prefect_server:server_app",
}

# `benchmaker --help` lists the commands by job, in this order (the main job first)
GROUPS = {
    "Replay agent runs": (
        "swebench-replay",
        "convert",
        "serve-replay",
        "episode",
        "trajectory-replay",
        "record",
        "swebench",
        "retry",
    ),
    "Benchmark an endpoint": ("llm", "llm-sweep", "http", "run", "sglang", "sandbox", "calibrate"),
    "Warehouse and results": ("runs", "sql", "compare", "report", "load", "export"),
    "Prefect server": ("server",),
}
_PANELS = [Group(title, sort_key=rank) for rank, title in enumerate(GROUPS)]
_GROUP_OF = {name: panel for panel in _PANELS for name in GROUPS[panel.name]}

for _name, _path in COMMANDS.items():
    if _name not in app:  # a recipe module imported before this one registered it already
        app.command(_path, name=_name, group=_GROUP_OF[_name])


_exit_code: int | None = None  # what main() returned, for _fast_exit


def _fast_exit() -> None:
    """The console script's last atexit handler (registered before any other, so every
    other one, Prefect's log and event drains, benchmaker.tasks.serve's server stop, logging's
    flush, has run): flush stdout/stderr and end the process with main()'s exit code,
    skipping the interpreter's teardown of every module and object, which took 2-3 s of
    wall time after a flow run on this busy host (benchmarks/flow_overhead.py). Nothing
    is skipped when main() did not return (an exception: the usual teardown, with its
    traceback)."""
    if _exit_code is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: closed when the process started
                stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more to write anyway
            pass
    os._exit(_exit_code)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with `argv` (default sys.argv[1:]); returns the exit code. Called
    without `argv` (the console script), the process ends through _fast_exit, unless an
    atexit handler was registered before (e.g. a coverage tool's: it must still run)."""
    global _exit_code
    if argv is None and atexit._ncallbacks() == 0:  # first: every other handler runs before it
        atexit.register(_fast_exit)
    _exit_code = code = _run(argv)
    return code


def _run(argv: list[str] | None) -> int:
    from cyclopts import CycloptsError
    from pydantic import ValidationError

    from benchmaker.engine.errors import BenchmakerError, RunFailed

    try:
        result = app(
            argv if argv is not None else sys.argv[1:],
            result_action="return_value",
            print_error=False,
            exit_on_error=False,
        )
    except RunFailed as exc:  # a run that stopped with what it wrote kept: a failed run, not bad input
        print(f"benchmaker: error: {exc}", file=sys.stderr)
        return 1
    except BenchmakerError as exc:
        print(f"benchmaker: error: {exc}", file=sys.stderr)
        return 2
    except CycloptsError as exc:  # a flag cyclopts could not parse: one line too, no panel
        print(f"benchmaker: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # a model a recipe built without naming the flag: still no dump
        from benchmaker.engine.config_file import format_validation_error

        print(f"benchmaker: error: {format_validation_error(exc, None)}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except BaseException as exc:
        httpx = sys.modules.get("httpx")
        if httpx is not None and isinstance(exc, httpx.ConnectError):
            # a server the command needs (the Prefect API of PREFECT_API_URL, a .env or a
            # profile; a sandbox coordinator) does not answer: one line, no traceback
            try:
                where = f" {exc.request.url}"
            except RuntimeError:  # no request attached
                where = ""
            print(f"benchmaker: error: cannot reach{where}: {exc}", file=sys.stderr)
            return 1
        # SIGTERM during a flow run: Prefect's handler marks the run Crashed and raises
        # TerminationSignal through the flow; a stop signal, not a crash: one line, 128 + N
        prefect_exceptions = sys.modules.get("prefect.exceptions")
        if prefect_exceptions is None or not isinstance(exc, prefect_exceptions.TerminationSignal):
            raise
        import signal

        try:
            name = signal.Signals(exc.signal).name
        except ValueError:  # not a signal number this platform names
            name = str(exc.signal)
        print(
            f"benchmaker: stopped by {name}: the flow run ended Crashed; what it wrote so far is kept", file=sys.stderr
        )
        return 128 + int(exc.signal)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
