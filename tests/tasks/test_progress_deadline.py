"""A lost or hung Prefect server never holds a sweep point: the progress artifact's API
calls get a deadline, and the observer is dropped after the first miss. The server is
a real socket on 127.0.0.1 that accepts connections and never answers."""

from __future__ import annotations

import asyncio
import socket
import time
import warnings

from benchmaker.progress import ProgressEvent, emit
from benchmaker.tasks.progress import ArtifactObserver


def _event(finished: bool) -> ProgressEvent:
    return ProgressEvent(
        point="c1",
        episodes_done=1,
        episodes_total=2,
        calls_done=3,
        calls_total=8,
        requests_in_flight=1,
        misses=0,
        elapsed_s=1.0,
        eta_s=2.0,
        calls_per_s=3.0,
        finished=finished,
    )


def test_a_hung_prefect_api_costs_one_deadline_then_no_more_calls(monkeypatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)  # the kernel accepts; nobody ever reads or answers
        url = f"http://127.0.0.1:{hung.getsockname()[1]}/api"
        monkeypatch.setenv("PREFECT_API_URL", url)
        # outside a task run Prefect warns that the artifact has no run to link to
        with temporary_settings({PREFECT_API_URL: url}), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obs = ArtifactObserver("run-1", "c1", min_interval_s=0.0, deadline_s=1.0)
            observers = [obs]
            t = time.monotonic()
            asyncio.run(emit(_event(False), observers))
            first_s = time.monotonic() - t
            t = time.monotonic()
            asyncio.run(emit(_event(True), observers))
            second_s = time.monotonic() - t
    assert 0.9 <= first_s < 10  # the deadline, not the client's minute of retries
    assert observers == [] and second_s < 0.5  # dropped: the last event waits on nothing
