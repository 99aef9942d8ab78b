"""benchmaker.tasks.transient: only transient faults are retried."""

from __future__ import annotations

import duckdb
from prefect.states import Failed

from benchmaker.tasks.transient import ReplayServerDied, is_transient, retry_on_transient
from benchmaker.warehouse.errors import BundleError, WarehouseLocked


def _raised_from(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as exc:
        return exc


def test_network_server_and_lock_faults_are_transient() -> None:
    assert is_transient(ConnectionRefusedError(111, "Connection refused"))
    assert is_transient(ConnectionResetError(104, "Connection reset by peer"))
    assert is_transient(ReplayServerDied("exited"))
    assert is_transient(WarehouseLocked("locked"))
    assert is_transient(duckdb.IOException('Could not set lock on file "w.duckdb": Conflicting lock'))
    # found in the cause chain
    assert is_transient(_raised_from(RuntimeError("point failed"), ConnectionResetError()))


def test_bad_input_and_bugs_are_not_transient() -> None:
    assert not is_transient(ValueError("concurrency: expected >= 1"))
    assert not is_transient(BundleError("manifest.json: missing"))
    assert not is_transient(duckdb.IOException("No such file"))
    assert not is_transient(KeyError("x"))
    assert not is_transient(None)


def test_retry_condition_reads_the_failed_state_exception() -> None:
    assert retry_on_transient(None, None, Failed(data=ConnectionRefusedError())) is True
    assert retry_on_transient(None, None, Failed(data=ValueError("bad"))) is False
