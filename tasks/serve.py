"""The replay server stage: start it in its own process, find it again by key, restart
it when it died, stop it at the end of the flow (docs/architecture.md).

    key = start_replay_server(traj_path, latency="instant")     # Prefect task
    url = server_url(key)          # plain: the live server's base URL, restarted if dead
    server_warnings(key)           # plain: what it warned of at start (logged by the task)
    stop_replay_server(key)        # plain, idempotent; call it in the flow's `finally`

Handles live in this process's registry (`_SERVERS`), keyed by a string, so tasks
receive a hashable key instead of the handle (a non-hashable task input silently
disables caching). Every server still registered is stopped when the process
exits (benchmaker.engine.exit_cleanup: at interpreter exit and at a fast exit); Prefect turns a worker's SIGTERM into an exception in the flow, so the
flow's `finally` runs on cancellation too. A SIGKILLed flow process runs neither: on
Linux its servers then get SIGTERM from the kernel (benchmaker.replay_server.process, PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import secrets
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from benchmaker.engine.exit_cleanup import on_exit
from benchmaker.replay_server import process as _process
from benchmaker.tasks.transient import retry_on_transient

__all__ = [
    "launch_server",
    "new_token",
    "restart_if_dead",
    "running_servers",
    "server_handle",
    "server_url",
    "server_warnings",
    "start_replay_server",
    "stop_all_servers",
    "stop_replay_server",
]


@dataclass
class _Entry:
    handle: _process.ReplayServerHandle
    trajectories: Path
    options: dict[str, Any]


_SERVERS: dict[str, _Entry] = {}
_LOCK = threading.Lock()


def _start(trajectories: Path, options: dict[str, Any]) -> _process.ReplayServerHandle:
    return _process.start_replay_server(Path(trajectories), **options)


def new_token() -> str:
    """A fresh bearer token for a replay server: 256 random bits, URL-safe (43
    characters, `secrets.token_urlsafe`)."""
    return secrets.token_urlsafe(32)


def launch_server(
    trajectories: Path,
    *,
    latency: str = "instant",
    divergence: str = "off",
    token: str | None = None,
    startup_timeout_s: float = 60.0,
) -> str:
    """Start a replay server over `trajectories` on 127.0.0.1 (ephemeral port, waits
    for /health) and register it; returns its key. `token`: the bearer token it
    requires (None: none; a restart keeps it; `server_handle(key).token`). Raises ReplayServerError when it
    does not come up (its stderr tail in the message)."""
    options = dict(latency=latency, divergence=divergence, token=token, startup_timeout_s=startup_timeout_s)
    handle = _start(trajectories, options)
    key = f"replay-{uuid.uuid4().hex[:12]}"
    with _LOCK:
        _SERVERS[key] = _Entry(handle, Path(trajectories), options)
    return key


@task(
    name="start-replay-server",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=[1, 3],
    retry_condition_fn=retry_on_transient,
)
def start_replay_server(trajectories: Path, latency: str = "instant", divergence: str = "off") -> str:
    """Prefect shell over `launch_server` (never cached: a server is a live process),
    with a fresh bearer token (`new_token`): another local user can neither send it
    requests nor reset its /stats. Returns the registry key; the URL is
    `server_url(key)`, the token `server_handle(key).token`."""
    key = launch_server(trajectories, latency=latency, divergence=divergence, token=new_token())
    logger = get_run_logger()
    logger.info("replay server %s at %s (pid %d)", key, server_url(key), server_handle(key).pid)
    for line in server_warnings(key):  # e.g. latency recorded over logs without timings
        logger.warning("%s", line)
    return key


def server_warnings(key: str) -> list[str]:
    """The warnings the replay server registered under `key` printed at start (its
    stderr lines holding "warning:", e.g. `latency recorded` over turns whose log kept no
    timing, naming the trajectories), in order; [] when there are none. Raises KeyError
    naming the key."""
    return [line for line in server_handle(key).stderr_tail(200).splitlines() if " warning: " in line]


def server_handle(key: str) -> _process.ReplayServerHandle:
    """The handle registered under `key`. Raises KeyError naming the key."""
    with _LOCK:
        entry = _SERVERS.get(key)
    if entry is None:
        raise KeyError(f"replay server {key!r} is not running in this process")
    return entry.handle


def restart_if_dead(key: str) -> bool:
    """Start a new server process for `key` (same trajectories and options, a new
    port) when the registered one has exited; True when it restarted. Raises KeyError
    for an unknown key, ReplayServerError when the restart fails."""
    with _LOCK:
        entry = _SERVERS[key]
        if entry.handle.proc.poll() is None:
            return False
        entry.handle.stop(grace_s=1.0)
        entry.handle = _start(entry.trajectories, entry.options)
        return True


def server_url(key: str) -> str:
    """Base URL (`http://127.0.0.1:PORT`) of the live server registered under `key`,
    after restarting it when it died (restart_if_dead)."""
    restart_if_dead(key)
    return server_handle(key).url


def stop_replay_server(key: str | None) -> int | None:
    """Stop and unregister the server under `key` (None or unknown: nothing to do);
    returns its exit code. Idempotent; never raises for a dead process."""
    if key is None:
        return None
    with _LOCK:
        entry = _SERVERS.pop(key, None)
    return entry.handle.stop() if entry is not None else None


def running_servers() -> dict[str, tuple[int, str]]:
    """key -> (pid, base URL) of every server registered in this process (alive or not)."""
    with _LOCK:
        return {k: (e.handle.pid, e.handle.url) for k, e in _SERVERS.items()}


def stop_all_servers() -> None:
    """Stop every registered server (run when the process exits: module doc)."""
    with _LOCK:
        keys = list(_SERVERS)
    for key in keys:
        stop_replay_server(key)


on_exit(stop_all_servers)
