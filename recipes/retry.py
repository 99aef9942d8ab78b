"""`benchmaker retry FLOW_RUN_ID`: resume a failed swebench-replay / llm-sweep flow run
at the point that failed (flows/retry.py documents how)."""

from __future__ import annotations

from recipes.app import app


@app.command(name="retry")
def retry(flow_run_id: str) -> int:
    """Resume a Failed, Crashed or Cancelled swebench-replay or llm-sweep flow run under
    the same id: finished sweep points come from the cache, measuring restarts at the
    point that failed. Exit 0 when the resumed run completes, 1 otherwise, 2 for a bad id.

    Parameters
    ----------
    flow_run_id: The flow run's id (UUID), as Prefect printed it.
    """
    from flows.retry import main
    from recipes.prefect_server import use_local_server

    with use_local_server():  # the runs of earlier CLI calls live on the reused local server
        return main([flow_run_id])
