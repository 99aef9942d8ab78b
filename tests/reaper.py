"""Process groups that die with the test session, however it ends.

A fixture's `finally` never runs when the pytest process is SIGKILLed (a CI timeout, a
session's end): the servers and workers the suite starts in sessions of their own (a
Prefect server per xdist worker, the distributed pool's stack) would stay and poll. A
`Reaper` is a small process of its own session that watches this one: when this process
is gone, or closes the reaper's stdin, it sends SIGTERM to every process group it was
told about, then SIGKILL after `GRACE_S` s to those still there.

    reaper = Reaper()            # one per test process (tests/conftest.py: `process_reaper`)
    reaper.watch(proc.pid)       # a process started with start_new_session=True
    reaper.forget(proc.pid)      # stopped by the test itself: not signalled later

Run as a script: `python tests/reaper.py PID` reads `+PGID` / `-PGID` lines on stdin.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

GRACE_S = 5.0  # SIGTERM, then SIGKILL: a Prefect server closes its SQLite database in < 1 s


class Reaper:
    """A reaper process for this process (above). `watch`/`forget` take the id of a process
    group (the pid of a process started with start_new_session=True). Raises OSError when
    the reaper cannot be started or has died."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the test session's group leaves it alive
        )

    @property
    def pid(self) -> int:
        """The reaper process's id."""
        return self._proc.pid

    def _send(self, line: str) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(line.encode() + b"\n")
        self._proc.stdin.flush()

    def watch(self, pgid: int) -> None:
        """Kill process group `pgid` when this process ends."""
        self._send(f"+{pgid}")

    def forget(self, pgid: int) -> None:
        """Leave process group `pgid` alone (it was stopped, and its id may be reused)."""
        self._send(f"-{pgid}")

    def close(self, timeout_s: float = 2 * GRACE_S + 5) -> None:
        """Close the reaper now: it kills the groups still watched and exits; waits for it
        up to `timeout_s` s."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=timeout_s)


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # its id was reused by another user's group: not ours
        return True
    return False


def kill_groups(pgids: set[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM every group of `pgids`, then SIGKILL those still there after `grace_s` s."""
    for pgid in pgids:
        if not _gone(pgid):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(not _gone(p) for p in pgids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pgid in pgids:
        if not _gone(pgid):
            os.killpg(pgid, signal.SIGKILL)


def main(watched: int) -> None:
    """Collect the `+PGID`/`-PGID` lines of stdin until `watched` exits or stdin closes,
    then kill the groups still watched."""
    groups: set[int] = set()
    pending = b""

    def read_lines() -> bool:  # the lines written so far; True at end of file
        nonlocal pending
        while True:
            try:
                chunk = os.read(0, 4096)
            except BlockingIOError:
                return False
            if not chunk:
                return True
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                (groups.add if line.startswith(b"+") else groups.discard)(int(line[1:]))

    os.set_blocking(0, False)
    try:
        pidfd = os.pidfd_open(watched)
    except ProcessLookupError:
        pidfd = -1
    while pidfd >= 0:
        ready, _, _ = select.select([pidfd, 0], [], [])
        if read_lines() or pidfd in ready:
            break
    read_lines()
    kill_groups(groups)


if __name__ == "__main__":
    main(int(sys.argv[1]))
