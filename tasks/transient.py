"""Which failures are transient, for Prefect `retry_condition_fn` (docs/architecture.md):
retries cover transient faults only, never bad input or bugs.

Transient (anywhere in the exception's __cause__/__context__ chain):
    ConnectionError (refused, reset, aborted), aiohttp.ClientConnectionError,
    httpx.TransportError                  the network to a local server failed
    ReplayServerDied                      the replay server process exited mid-point
    benchmaker.replay_server.process.ReplayServerError      the replay server did not come up
    benchmaker.warehouse.errors.WarehouseLocked, a DuckDB "Could not set lock" IOException
                                          another process held the warehouse file
Everything else (ValueError, ConvertError, BundleError, ...) is final.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx

from benchmaker.replay_server.process import ReplayServerError
from benchmaker.warehouse.connection import is_lock_error
from benchmaker.warehouse.errors import WarehouseLocked

__all__ = ["ReplayServerDied", "is_transient", "retry_on_transient"]


class ReplayServerDied(RuntimeError):
    """The replay server process was found dead during or after a sweep point; the
    point's measurements are discarded and the point is retried on a restarted server."""


_TRANSIENT = (
    ConnectionError,
    aiohttp.ClientConnectionError,
    httpx.TransportError,
    ReplayServerDied,
    ReplayServerError,
    WarehouseLocked,
)


def is_transient(exc: BaseException | None) -> bool:
    """True when `exc` or an exception it was raised from / during is transient (see
    the module docstring)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, _TRANSIENT) or is_lock_error(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def retry_on_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn(task, task_run, state)`: retry only when the failed
    state's exception (`state.data`, set by Prefect's task engine) is transient."""
    data = getattr(state, "data", None)
    return isinstance(data, BaseException) and is_transient(data)
