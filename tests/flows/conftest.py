"""One Prefect test harness for every flow test of the session (~10 s to start,
DESIGN §10), with flow heartbeats and analytics off."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        with prefect_test_harness(server_startup_timeout=90):
            yield

