"""One Prefect test harness for every flow test of the session (~10 s to start; one per
pytest-xdist worker), with flow heartbeats and analytics off."""

from __future__ import annotations

import gc
import os
import warnings

import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    # the harness's server migrates a new SQLite database as it starts: 10-20 s on a quiet
    # host, over 150 s seen at load 30 with two xdist workers starting theirs at once
    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        with prefect_test_harness(server_startup_timeout=300):
            yield


@pytest.fixture(autouse=True)
def _collect_prefect_client_sockets():
    """Collect, right after each flow test, the sockets that Prefect's and Dask's clients
    leave to the garbage collector, ignoring their ResourceWarnings here. Otherwise the
    collector runs them in whatever later test it happens to, and that unrelated test
    fails on an unraisable ResourceWarning (seen twice in full runs on a busy host, both
    times in tests/flows/test_params.py after the pool and sweep flow tests)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
