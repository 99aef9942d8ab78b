"""One Prefect test harness for every flow test of the session (~10 s to start,
DESIGN §10), with flow heartbeats and analytics off; one Dask LocalCluster for the
distributed tests that run shards through prefect-dask."""

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

    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        with prefect_test_harness(server_startup_timeout=90):
            yield


@pytest.fixture(scope="session")
def local_cluster():
    """A distributed.LocalCluster of two worker processes with one thread each (each
    shard gets a process, and a core, of its own). Skips without the `dask` extra."""
    pytest.importorskip("prefect_dask", reason="prefect-dask (the `dask` extra) is not installed")
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster
    # The DaskTaskRunner's clients leave sockets for the garbage collector; collect them
    # here, where their ResourceWarnings are not errors, rather than at interpreter exit.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
