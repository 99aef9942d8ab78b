"""`benchmaker retry FLOW_RUN` (id, name, bundle run id or directory): resume a failed swebench-replay / llm-sweep flow run
at the point that failed (flows/retry.py documents how)."""

from __future__ import annotations

from benchmaker.recipes.app import app


@app.command(name="retry")
def retry(flow_run: str, *, accept_changed: bool = False) -> int:
    """Resume a Failed, Crashed or Cancelled swebench-replay or llm-sweep flow run under
    the same id: finished sweep points come from the cache, measuring restarts at the
    point that failed. Prints the parameters it resumes with, and refuses (exit 2) a run
    whose parameters changed after it started (the hash its bundle stored) unless
    --accept-changed. A Running run whose process is gone (SIGKILL, OOM) is marked
    Crashed and resumed. Exit 0 when the resumed run completes with every point valid, 1
    otherwise, 2 for a reference that names no flow run; Ctrl-C stops it within seconds,
    leaves the flow run Cancelled and exits 130.

    Args:
        flow_run: The flow run: its id (UUID, printed when the CLI started it), its name, the
            run id of its bundle (swebench-replay-20261201T010203Z-6c0a4887) or the bundle
            directory (its manifest.json keeps flow_run_id).
        accept_changed: Resume even when the run's parameters are not the ones it started with.
    """
    from benchmaker.flows.retry import main
    from benchmaker.recipes.api_watch import exit_if_api_lost
    from benchmaker.recipes.prefect_server import use_local_server

    with (
        use_local_server() as api_url,
        exit_if_api_lost(api_url),
    ):  # the runs of earlier CLI calls live on the reused local server
        return main([flow_run, *(["--accept-changed"] if accept_changed else [])])
