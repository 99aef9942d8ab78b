"""A Prefect server lost during a flow command ends the command as a clear failure, promptly.

A flow command measures without waiting on the Prefect API, so a run goes on when its
server is stopped or killed. Prefect's client would then retry each later call for about
a minute (PREFECT_CLIENT_MAX_RETRIES = 5, backoff 2, 4, ... 32 s), and at exit drain its
queued events (each tries 11 websocket connects 1 s apart) and logs against nothing: the
command hung for minutes after the run's end.

`exit_if_api_lost(url)` watches the API while the command's body runs: the server is lost
when, after a connect that went through, a TCP connect to its host and port is refused
on `misses` polls in a row (nothing listens any more: stopped or killed; a URL where
nothing ever listened fails the command's first API call at once anyway). A slow
server still accepts connections (the kernel's listen backlog), so it is never taken as
lost; no request is sent to it and nothing is signalled. Once lost, Prefect's client makes
each later call once (max_retries 0), sends no more logs to the API and prints no error
per lost event. When the body ends and the server is still gone, the command prints one
line naming the server, when it was lost, where the run's results were kept and the
flow run to retry, runs this process's exit cleanups (benchmaker.engine.exit_cleanup: its
replay servers stopped, the sandbox's staged temp root removed) and exits 1 at once
(Prefect's drains skipped: they could only fail). A server that came back by then leaves the
command to end as usual.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

POLL_S = 1.0
MISSES = 2


def refused(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """True when a TCP connect to `host`:`port` is refused (nothing listens there); False
    when it connects, or fails otherwise (a timeout, an unreachable host: not known gone)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


class ApiWatch:
    """Polls the Prefect API of `url` every `poll_s` s from a daemon thread; `lost_at` (UTC)
    is set, and `on_lost()` called once, after `misses` refused connects in a row that
    follow a connect that was not refused.
    `gone()` checks again now. Raises ValueError for a URL without a host."""

    def __init__(
        self,
        url: str,
        *,
        poll_s: float = POLL_S,
        misses: int = MISSES,
        on_lost: Callable[[], None] = lambda: None,
        probe: Callable[[str, int], bool] = refused,
    ) -> None:
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"{url}: no host to watch")
        self.url, self.host = url, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.poll_s, self.misses, self.on_lost, self.probe = poll_s, misses, on_lost, probe
        self.lost_at: datetime | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prefect-api-watch", daemon=True)

    def start(self) -> ApiWatch:
        """Start polling; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and wait for the thread (at most one probe, 2 s)."""
        self._stop.set()
        self._thread.join()

    def gone(self) -> bool:
        """True when a connect to the API's host and port is refused now."""
        return self.probe(self.host, self.port)

    def _run(self) -> None:
        seen, missed = False, 0  # lost only once it was there: a wrong URL fails on its own, at once
        while not self._stop.wait(self.poll_s):
            gone = self.gone()
            seen = seen or not gone
            missed = missed + 1 if gone and seen else 0
            if missed >= self.misses:
                self.lost_at = datetime.now(UTC)
                self.on_lost()
                return


def fail_fast(settings: Any) -> Callable[[], None]:
    """What to do once the API is lost, for Prefect `settings` (the live Settings object the
    command's flow runs under) and the settings of threads without a context (Prefect's
    event and log workers: the global ones, as the caller's thread sees them): one attempt
    per client call, no logs sent to the API, and no per-event connect error printed
    (each names one lost event: all are lost)."""

    def act() -> None:
        from prefect.settings import get_current_settings

        for live in {id(x): x for x in (settings, get_current_settings())}.values():
            live.client.max_retries = 0
            live.logging.to_api.enabled = False
            live.internal.logging_level = "CRITICAL"
        logging.getLogger("prefect.events.clients").setLevel(logging.CRITICAL)

    return act


def lost_message(watch: ApiWatch) -> str:
    """The one line of a command whose Prefect server was lost: the server, when, the run
    folders this process recorded (benchmaker.flows.outcome.recorded_run_dirs) and how to
    resume the last one's flow run (its manifest.json's `flow_run_id`)."""
    from benchmaker.flows.outcome import recorded_run_dirs

    dirs = list(dict.fromkeys(recorded_run_dirs()))
    kept = f"kept in {', '.join(map(str, dirs))}" if dirs else "none (the run had not started)"
    try:
        run_id = str(json.loads((dirs[-1] / "manifest.json").read_text(encoding="utf-8"))["flow_run_id"])
    except (IndexError, OSError, ValueError, KeyError, TypeError):
        run_id = "<flow run id>"
    when = watch.lost_at.strftime("%H:%M:%S UTC") if watch.lost_at else "now"
    return (
        f"benchmaker: error: lost the Prefect server at {watch.url} (nothing listens there since {when}: "
        f"stopped or killed); what was measured is {kept}; the flow run stays Running there: "
        f"`benchmaker retry {run_id}` resumes it once the server runs again"
    )


def _exit_lost(watch: ApiWatch) -> None:
    from benchmaker.engine.exit_cleanup import exit_now

    print(lost_message(watch), file=sys.stderr)
    exit_now(1)  # this process's cleanups (replay servers, the sandbox's temp root) run first


@contextmanager
def exit_if_api_lost(
    url: str | None,
    *,
    poll_s: float = POLL_S,
    probe: Callable[[str, int], bool] = refused,
    exit_lost: Callable[[ApiWatch], None] = _exit_lost,
) -> Iterator[ApiWatch | None]:
    """Run the body with the Prefect API of `url` watched (ApiWatch, fail_fast once lost);
    when the body ends, by return or exception, with the server lost and still gone,
    call `exit_lost` (default: one line on stderr, exit cleanups run, exit 1 at once).
    `url` None (Prefect's temporary in-process server) watches nothing."""
    if url is None:
        yield None
        return
    from prefect.settings import get_current_settings

    watch = ApiWatch(url, poll_s=poll_s, probe=probe, on_lost=fail_fast(get_current_settings())).start()
    try:
        yield watch
    finally:
        watch.stop()
        if watch.lost_at is not None and watch.gone():
            exit_lost(watch)
