"""What a process made and must remove when it ends, by whichever way it ends.

    on_exit(shutil.rmtree, root, True)      # a temp root this process created
    on_exit(stop_all_servers)               # the replay servers it started
    exit_now(1)                             # cleanups run, then os._exit(1)

A cleanup registered with `on_exit` runs once: at the interpreter's exit (it is also an
atexit handler, so a normal exit or an uncaught exception runs it as before), or earlier
in `run_cleanups()`. `exit_now(code)` is the exit that skips the interpreter's own exit
(os._exit: Prefect's queued event and log drains, which can only fail or wait once its
server is gone, or its background threads that hold the exit for minutes) yet still runs
every cleanup first, so such an exit leaves no temp root and no child server behind.
A SIGKILLed process runs nothing; its replay servers end by PR_SET_PDEATHSIG
(benchmaker.replay_server.process).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["exit_now", "on_exit", "run_cleanups"]

_LOCK = threading.Lock()
_PENDING: list[_Cleanup] = []


class _Cleanup:
    """One registered call; `run()` makes it at most once (the first caller wins)."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args

    def run(self) -> None:
        with _LOCK:
            if self not in _PENDING:
                return
            _PENDING.remove(self)
        self.fn(*self.args)


def on_exit(fn: Callable[..., Any], *args: Any) -> None:
    """Call `fn(*args)` once when this process ends (module doc): at interpreter exit, in
    the reverse order of registration among atexit's handlers, or in run_cleanups()."""
    entry = _Cleanup(fn, args)
    with _LOCK:
        _PENDING.append(entry)
    atexit.register(entry.run)


def run_cleanups() -> None:
    """Run every cleanup not run yet, the last registered first. One that raises is
    reported in one line on stderr and the others still run."""
    while True:
        with _LOCK:
            if not _PENDING:
                return
            entry = _PENDING[-1]
        try:
            entry.run()
        except Exception as exc:  # a cleanup that fails must not keep the others from running
            print(
                f"benchmaker: warning: cleanup {getattr(entry.fn, '__name__', entry.fn)} failed: {exc}", file=sys.stderr
            )


def exit_now(code: int) -> NoReturn:
    """End this process with `code` at once (os._exit, module doc) after run_cleanups()
    and a flush of stdout and stderr (a closed or broken stream is skipped)."""
    run_cleanups()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more to write anyway
            pass
    os._exit(code)
