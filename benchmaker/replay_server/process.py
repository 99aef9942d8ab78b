"""Run the replay server in its own process and wait until it is ready.

    with start_replay_server(Path("trajectories.jsonl"), latency="fixed:200:20") as srv:
        srv.url        # "http://127.0.0.1:41873" (base URL; the API is at srv.url + "/v1")
        srv.stats()    # the server's /stats JSON as a dict

The child is `python -m benchmaker.replay_server.server TRAJ ...` (same interpreter). Its first stdout
line is the bound URL; stdout and stderr go to temporary files (no pipe to fill up).
A bearer token is handed over through the child's environment, never its argv.

The child dies with its parent: on Linux it asks the kernel for SIGTERM when the parent
goes away (`prctl(PR_SET_PDEATHSIG, SIGTERM)` in the child before exec, via ctypes), so
a flow process that is SIGKILLed (no `finally`, no atexit) leaves no orphaned server.
The kernel ties that signal to the *thread* that forked the child, so every server is
spawned from one long-lived daemon thread (`_spawner`), never from a short-lived worker
thread whose exit would stop the server early. Elsewhere (macOS, BSD, Windows) there is
no such call: a SIGKILLed parent leaves its server running until it is killed by pid
(`parent_death_signal_supported()` says which case applies).
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

__all__ = ["ReplayServerError", "ReplayServerHandle", "parent_death_signal_supported", "start_replay_server"]

_TOKEN_ENV = "BENCHMAKER_REPLAY_TOKEN"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()


def parent_death_signal_supported() -> bool:
    """True when a replay server started here gets SIGTERM if this process dies (Linux
    prctl PR_SET_PDEATHSIG available); False elsewhere, where a SIGKILLed parent
    leaves the server running."""
    return _PRCTL is not None


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A subprocess `preexec_fn` (runs in the child between fork and exec) asking for
    SIGTERM when the parent dies, or None when the platform has no such call."""
    prctl = _PRCTL
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the call: nobody would signal
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class _Spawner:
    """One daemon thread that lives as long as the process and runs every Popen, so
    PR_SET_PDEATHSIG (bound to the forking thread) fires only when the process dies."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue[tuple[bool, Any]]]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            fn, reply = self._jobs.get()
            try:
                reply.put((True, fn()))
            except BaseException as exc:  # handed back to the caller's thread
                reply.put((False, exc))

    def run(self, fn: Callable[[], Any]) -> Any:
        """fn() on the spawner thread; returns its value or raises its exception."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="replay-server-spawner", daemon=True)
                self._thread.start()
        reply: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self._jobs.put((fn, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value


_spawner = _Spawner()


class ReplayServerError(RuntimeError):
    """The replay server process did not become ready: it exited (the message carries
    the tail of its stderr) or did not answer /health within the timeout."""


class ReplayServerHandle:
    """A running replay server process. `url` is its base URL (no trailing slash),
    `token` the bearer token it requires on every endpoint but /health (None: none);
    `stop()` terminates it (SIGTERM, then SIGKILL after `grace_s`); usable as a context
    manager (stops on exit)."""

    def __init__(self, proc: subprocess.Popen, url: str, token: str | None, stdout_path: Path, stderr_path: Path):
        self.proc = proc
        self.url = url
        self.token = token
        self._stdout_path = stdout_path
        self._stderr_path = stderr_path

    @property
    def pid(self) -> int:
        """Process id of the server."""
        return self.proc.pid

    def _stats(self, method: str, path: str, timeout_s: float) -> dict[str, Any]:
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        r = httpx.request(method, self.url + path, headers=headers, timeout=timeout_s)
        r.raise_for_status()
        return r.json()

    def stats(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """GET /stats (shape: benchmaker.replay_server.server.ReplayStats.snapshot). Raises httpx errors."""
        return self._stats("GET", "/stats", timeout_s)

    def reset_stats(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """POST /stats/reset; returns the zeroed stats."""
        return self._stats("POST", "/stats/reset", timeout_s)

    def stderr_tail(self, max_lines: int = 20) -> str:
        """The last `max_lines` lines the server wrote to stderr."""
        return _tail(self._stderr_path, max_lines)

    def stop(self, grace_s: float = 5.0) -> int | None:
        """Stop the server: SIGTERM, wait `grace_s`, then SIGKILL. Returns the exit code:
        -15 after a graceful shutdown (uvicorn re-raises SIGTERM once it has shut
        down), -9 when it had to be killed, None if it could not be reaped.
        Idempotent; removes the temp log files."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:
                    self.proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    return None
        for path in (self._stdout_path, self._stderr_path):
            path.unlink(missing_ok=True)
        return self.proc.returncode

    def __enter__(self) -> ReplayServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tail(path: Path, max_lines: int) -> str:
    try:
        lines = path.read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-max_lines:])


def start_replay_server(
    trajectories: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    latency: str = "instant",
    token: str | None = None,
    divergence: str = "off",
    tokenizer: Path | None = None,
    startup_timeout_s: float = 30.0,
    python: str | None = None,
) -> ReplayServerHandle:
    """Start `python -m benchmaker.replay_server.server trajectories ...` and wait until GET /health
    answers 200 (polled every 20 ms, up to `startup_timeout_s` seconds in all,
    including loading the store). `token`: the bearer token itself (None: no auth).

    The child gets SIGTERM when this process dies (Linux; see the module docstring).

    Returns a ReplayServerHandle. Raises ReplayServerError when the child exits first
    (with its exit code and stderr tail: a bad trajectories line, latency spec or bind
    error shows up there) or the timeout passes (the child is killed).
    """
    out_fd, out_name = tempfile.mkstemp(prefix="replay-server-", suffix=".out")
    err_fd, err_name = tempfile.mkstemp(prefix="replay-server-", suffix=".err")
    stdout_path, stderr_path = Path(out_name), Path(err_name)
    cmd = [
        python or sys.executable,
        "-m",
        "benchmaker.replay_server.server",
        str(trajectories),
        "--host",
        host,
        "--port",
        str(port),
        "--latency",
        latency,
        "--divergence",
        divergence,
    ]
    env = dict(os.environ)
    env.pop(_TOKEN_ENV, None)
    if token:
        env[_TOKEN_ENV] = token
        cmd += ["--token", _TOKEN_ENV]
    if tokenizer is not None:
        cmd += ["--tokenizer", str(tokenizer)]
    repo_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
    preexec = _die_with_parent(os.getpid())
    try:
        proc = _spawner.run(
            lambda: subprocess.Popen(
                cmd, stdout=out_fd, stderr=err_fd, stdin=subprocess.DEVNULL, env=env, close_fds=True, preexec_fn=preexec
            )
        )
    finally:
        os.close(out_fd)
        os.close(err_fd)
    handle = ReplayServerHandle(proc, "", token, stdout_path, stderr_path)
    deadline = time.monotonic() + startup_timeout_s
    try:
        handle.url = _wait_url(handle, deadline)
        _wait_health(handle, deadline)
    except BaseException:
        handle.stop(grace_s=2.0)
        raise
    return handle


def _died(handle: ReplayServerHandle) -> ReplayServerError:
    return ReplayServerError(
        f"replay server exited with code {handle.proc.returncode} before it was ready; "
        f"stderr tail:\n{handle.stderr_tail()}"
    )


def _wait_url(handle: ReplayServerHandle, deadline: float) -> str:
    while True:
        text = handle._stdout_path.read_text("utf-8", errors="replace")
        if "\n" in text:
            line = text.split("\n", 1)[0].strip()
            if line.startswith("http://"):
                return line
            raise ReplayServerError(f"replay server printed {line!r} instead of its URL")
        if handle.proc.poll() is not None:
            raise _died(handle)
        if time.monotonic() > deadline:
            raise ReplayServerError(f"replay server printed no URL in time; stderr tail:\n{handle.stderr_tail()}")
        time.sleep(0.02)


def _wait_health(handle: ReplayServerHandle, deadline: float) -> None:
    with httpx.Client(timeout=1.0) as client:
        while True:
            try:
                if client.get(handle.url + "/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if handle.proc.poll() is not None:
                raise _died(handle)
            if time.monotonic() > deadline:
                raise ReplayServerError(
                    f"replay server at {handle.url} did not answer /health in time; "
                    f"stderr tail:\n{handle.stderr_tail()}"
                )
            time.sleep(0.02)
