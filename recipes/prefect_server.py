"""One local Prefect server that the CLI starts once and reuses (docs/architecture.md).

A flow run needs a Prefect API. Without `PREFECT_API_URL`, Prefect starts a temporary
server inside every CLI call and stops it at the end: 20-40 s of wall time per run here,
for seconds of flow work. Instead, when no API URL is configured (environment, Prefect
profile or a test harness), the CLI's flow commands call `use_local_server()`, which

- finds the server recorded in `$PREFECT_HOME/benchmaker-server.json` (pid, port, URL,
  log) and reuses it when its process is alive and `GET /api/health` answers `true`;
- else starts `prefect server start --host 127.0.0.1 --port P` (P a free loopback
  port) in its own session, in the background, logging to
  `$PREFECT_HOME/benchmaker-server.log`, waits until `/api/health` answers (90 s at
  most), records it, and says once what it started and why;
- points this process at it (`PREFECT_API_URL`, environment and Prefect settings).

The server requires authentication (Prefect's own HTTP Basic check:
`PREFECT_SERVER_API_AUTH_STRING` on the server, `PREFECT_API_AUTH_STRING` on its
clients). The secret, `benchmaker:<43 random URL-safe characters>`, is created once in
`$PREFECT_HOME/benchmaker-server.auth` (mode 0600) and used by every later command of
that user; PREFECT_HOME itself is kept 0700 (Prefect's database there holds every flow
run's parameters). Only `GET /api/health` and `/api/ready` answer without it (Prefect
lets probes through). A recorded server whose process, or whose listening socket,
belongs to another user is never reused (nor signalled); nothing is sent to a server
before its owner is checked.

A file lock (`benchmaker-server.lock`) makes concurrent CLI calls share one start. The
server keeps its state in Prefect's own database under `PREFECT_HOME` (Prefect's default
`~/.prefect`), so the runs stay visible in its UI between calls.

    benchmaker server status    # URL, pid, log, uptime; exit 1 when none is running
    benchmaker server start     # start (or find) it now
    benchmaker server stop      # SIGTERM its process group, SIGKILL after 10 s

`BENCHMAKER_PREFECT_SERVER=ephemeral` keeps Prefect's temporary per-call server (the
test suite sets it: tests must not leave a server running). A set `PREFECT_API_URL` is
used as is and nothing is started.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cyclopts import App

from benchmaker.engine.errors import BenchmakerError
from benchmaker.recipes.app import app

STATE_NAME = "benchmaker-server.json"
LOG_NAME = "benchmaker-server.log"
LOCK_NAME = "benchmaker-server.lock"
AUTH_NAME = "benchmaker-server.auth"
AUTH_USER = "benchmaker"
MODE_ENV = "BENCHMAKER_PREFECT_SERVER"
START_TIMEOUT_S = 90.0  # a first start migrates a fresh database: ~20-40 s on a busy 2-core host
SLOW_GRACE_S = 30.0  # a live server of ours that fails its 2 s health check gets this long to answer

_CHILDREN: list[Any] = []  # servers this process started (kept referenced; see start_server)

Health = Callable[[str], bool]
Say = Callable[[str], None]


class ServerError(BenchmakerError):
    """The local Prefect server did not start or did not become healthy; the message
    names its log file."""


@dataclass(frozen=True)
class ServerState:
    """A local Prefect server started by the CLI, as recorded in `$PREFECT_HOME/benchmaker-server.json`.

    ServerState(pid=4242, port=53011, url="http://127.0.0.1:53011/api",
                log="/root/.prefect/benchmaker-server.log", started_at="2026-12-01T01:20:00+00:00")
    `pid` leads the server's own process group (signals go to the group); `started_at`
    is the wall clock (UTC, ISO 8601) when it was started; `prefect_version` the Prefect
    it runs (a server of another version, e.g. after an upgrade, is replaced); `auth`
    whether it was started requiring the secret of `auth_secret` (a record without it,
    from before servers required authentication, is replaced).
    """

    pid: int
    port: int
    url: str
    log: str
    started_at: str
    prefect_version: str = ""
    auth: bool = False


def prefect_home() -> Path:
    """Prefect's home directory: $PREFECT_HOME (with ~ expanded), else ~/.prefect
    (Prefect's own default)."""
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()


def configured_api_url() -> str | None:
    """The Prefect API URL this process would use without us: $PREFECT_API_URL, else the
    active Prefect profile's or settings context's value (e.g. a test harness); None
    when Prefect would start a temporary server."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def http_health(url: str, timeout_s: float = 2.0) -> bool:
    """True when `GET {url}/health` answers 200 with the JSON body `true` within
    `timeout_s` s (Prefect's health endpoint); False on any error."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as resp:  # loopback URL we built
            return resp.status == 200 and json.loads(resp.read() or b"null") is True
    except (OSError, ValueError, urllib.error.URLError):
        return False


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, exited but not yet collected, counts as gone;
    a pid that is not a positive int is never alive)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :][:1] != "Z"


def _is_prefect_server(pid: int) -> bool:
    """True unless /proc says `pid` is some other program (a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return process_alive(pid)  # no /proc (macOS): trust the pid
    return b"prefect" in cmdline and b"server" in cmdline


def pid_owner(pid: int) -> int | None:
    """The uid owning process `pid` (the owner of /proc/PID), None when it is gone or
    there is no /proc."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def listener_owner(port: int) -> int | None:
    """The uid owning the socket listening on TCP `port` of 127.0.0.1 (or of every
    address), from /proc/net/tcp and /proc/net/tcp6 (column `uid`, state 0A = LISTEN);
    None when nothing listens there or there is no /proc."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] != "0A":
                continue
            addr, _, hex_port = fields[1].rpartition(":")
            if int(hex_port, 16) == port and addr in (
                "0100007F",
                "00000000",
                "0" * 32,
                "0000000000000000FFFF00000100007F",
            ):
                return int(fields[7])
    return None


def owned_by_me(state: ServerState) -> bool:
    """True when the recorded server's process and the socket listening on its port
    both belong to this effective user (either unknown, without /proc, counts as
    ours only when the other is). A server of another user is never reused or
    signalled: it could read the secret a client sends it."""
    me = os.geteuid()
    owners = {pid_owner(state.pid), listener_owner(state.port)} - {None}
    return owners == {me}


def _private_dir(path: Path) -> None:
    """Create `path` (mode 0700) or, when it exists and is ours, take group and other
    access away from it. Raises ServerError when it belongs to another user."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise ServerError(
            f"PREFECT_HOME {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); "
            f"set PREFECT_HOME to a directory of your own"
        )
    if st.st_mode & 0o077:
        path.chmod(stat.S_IMODE(st.st_mode) & 0o700)


def auth_secret(home: Path) -> str:
    """The `user:password` string of the local server of `home`: read from
    `home`/benchmaker-server.auth, created there once (mode 0600, 256 random bits from
    `secrets`) when missing. Raises ServerError when the file belongs to another user
    or can be read by group or others (the secret must be taken as known: delete the
    file and `benchmaker server stop`)."""
    path = home / AUTH_NAME
    _private_dir(home)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"{AUTH_USER}:{secrets.token_urlsafe(32)}\n")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ServerError(f"{path}: cannot read the local server's secret ({exc.strerror})") from None
    with os.fdopen(fd, encoding="utf-8") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ServerError(
                f"{path}: the local server's secret must be a regular file of yours with mode 0600 "
                f"(got uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); delete it and run "
                f"`benchmaker server stop` to make a new one"
            )
        secret = fh.read().strip()
    if not secret.startswith(f"{AUTH_USER}:") or len(secret) < len(AUTH_USER) + 33:
        raise ServerError(f"{path}: expected `{AUTH_USER}:<secret>` on one line; delete it to make a new one")
    return secret


def read_state(home: Path) -> ServerState | None:
    """The recorded server of `home`, or None when there is no (readable) record."""
    try:
        data = json.loads((home / STATE_NAME).read_text(encoding="utf-8"))
        return ServerState(
            **{k: data[k] for k in ("pid", "port", "url", "log", "started_at")},
            prefect_version=str(data.get("prefect_version") or ""),
            auth=data.get("auth") is True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def find_server(home: Path, health: Health = http_health) -> ServerState | None:
    """The recorded server of `home` when its process is alive, ours (owned_by_me),
    requires authentication, healthy and runs this Prefect version, else None. A
    record whose process is gone, or belongs to another user, is deleted; a live but
    unhealthy, unauthenticated or other-version one is left for `ensure_server` to
    replace."""
    state = read_state(home)
    if state is None:
        return None
    if not (process_alive(state.pid) and _is_prefect_server(state.pid) and owned_by_me(state)):
        (home / STATE_NAME).unlink(missing_ok=True)
        return None
    if (state.prefect_version and state.prefect_version != prefect_version()) or not state.auth:
        return None
    return state if health(state.url) else None


def prefect_version() -> str:
    """The installed Prefect's version (package metadata; no import of prefect)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prefect")
    except PackageNotFoundError:
        return ""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (bound to port 0 and closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(port: int) -> list[str]:
    """The command line of the server: this interpreter's Prefect, loopback only."""
    return [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]


def start_server(
    home: Path,
    *,
    port: int | None = None,
    health: Health = http_health,
    popen: Callable[..., Any] = subprocess.Popen,
    timeout_s: float = START_TIMEOUT_S,
    poll_s: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ServerState:
    """Start a Prefect server on 127.0.0.1:`port` (default: a free port) in its own
    session, stdout/stderr appended to `home`/benchmaker-server.log, and wait until it
    is healthy; records and returns it. The server requires `auth_secret(home)`.
    Raises ServerError (with the log's last lines)
    when the process exits or is not healthy after `timeout_s` s (it is then killed)."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}/api"
    log = home / LOG_NAME
    # CSRF tokens are not needed: every API request carries the secret (a browser's
    # cross-site request cannot)
    env = dict(
        os.environ,
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_CSRF_PROTECTION_ENABLED="false",
        PREFECT_SERVER_API_AUTH_STRING=auth_secret(home),
    )
    env.pop("PREFECT_API_URL", None)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as fh:
        fh.write(f"--- {datetime.now(UTC).isoformat()} benchmaker starts: {' '.join(server_command(port))}\n".encode())
        fh.flush()
        proc = popen(
            server_command(port),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN.append(proc)  # held: a collected running Popen warns (ResourceWarning)
    state = ServerState(
        pid=proc.pid,
        port=port,
        url=url,
        log=str(log),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        prefect_version=prefect_version(),
        auth=True,
    )
    deadline = clock() + timeout_s
    while not health(url):
        if proc.poll() is not None:
            raise ServerError(
                f"the Prefect server exited with code {proc.returncode} before it was healthy (log: {log}){_tail(log)}"
            )
        if clock() >= deadline:
            _kill_group(proc.pid, grace_s=5.0)
            raise ServerError(
                f"the Prefect server at {url} was not healthy after {timeout_s:g} s; stopped it "
                f"(log: {log}){_tail(log)}"
            )
        sleep(poll_s)
    tmp = home / (STATE_NAME + ".tmp")
    tmp.unlink(missing_ok=True)
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
    tmp.replace(home / STATE_NAME)
    return state


def _tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\n" + "\n".join(text) if text else ""


@contextmanager
def _locked(home: Path) -> Iterator[None]:
    _private_dir(home)
    with open(home / LOCK_NAME, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _kill_group(pid: int, grace_s: float = 10.0, sleep: Callable[[float], None] = time.sleep) -> None:
    """SIGTERM the process group led by `pid`, SIGKILL it after `grace_s` s."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        for _ in range(int(wait_s / 0.1)):
            for proc in _CHILDREN:
                if proc.pid == pid:
                    proc.poll()  # collect our own child
            if not process_alive(pid):
                return
            sleep(0.1)


def ensure_server(
    home: Path | None = None,
    *,
    say: Say = print,
    health: Health = http_health,
    start: Callable[[Path], ServerState] = start_server,
    grace_s: float = SLOW_GRACE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ServerState:
    """The local server of `home` (default `prefect_home()`): found and reused, or
    started (saying what and why through `say`). A live server of ours that requires
    no authentication or runs another Prefect is stopped and replaced; one that only
    fails its health check is slow, not dead (other runs may depend on it): it gets
    `grace_s` s more to answer and is never killed here. One of another user is left
    alone and not reused. Concurrent callers share one start (file lock).
    Raises ServerError when a start fails, or naming the slow server when it does not
    answer within `grace_s` s (`benchmaker server stop` restarts it)."""
    home = home or prefect_home()
    with _locked(home):
        state = find_server(home, health)
        if state is not None:
            return state
        stale = read_state(home)
        if (
            stale is not None
            and stale.auth
            and stale.prefect_version in ("", prefect_version())
            and process_alive(stale.pid)
            and _is_prefect_server(stale.pid)
            and owned_by_me(stale)
        ):
            say(
                f"benchmaker: the local Prefect server (pid {stale.pid}, {stale.url}) is slow to answer its "
                f"health check; waiting up to {grace_s:g} s (it is not restarted: other runs may use it)"
            )
            deadline = clock() + grace_s
            while clock() < deadline:
                sleep(1.0)
                if health(stale.url):
                    return stale
            raise ServerError(
                f"the local Prefect server (pid {stale.pid}, {stale.url}) is alive but did not answer "
                f"/health within {grace_s:g} s; it was left running (other runs may use it). Retry "
                f"later, or `benchmaker server stop` to restart it (log: {stale.log})"
            )
        if stale is not None:
            why = (
                f"runs Prefect {stale.prefect_version}, this is {prefect_version()}"
                if stale.prefect_version and stale.prefect_version != prefect_version()
                else "requires no authentication"
            )
            say(
                f"benchmaker: the local Prefect server (pid {stale.pid}, {stale.url}) {why}; restarting it "
                f"(log: {stale.log})"
            )
            _kill_group(stale.pid)
        say(
            f"benchmaker: no PREFECT_API_URL is set, so starting a local Prefect server in the background "
            f"(loopback, data in {home}, log: {home / LOG_NAME}); later runs reuse it instead of paying "
            f"20-40 s for a temporary one each time. `benchmaker server status|stop` manage it."
        )
        state = start(home)
        say(
            f"benchmaker: Prefect server ready at {state.url} (pid {state.pid}; UI at {state.url.removesuffix('/api')})"
        )
        return state


def stop_server(home: Path | None = None, grace_s: float = 10.0) -> ServerState | None:
    """Stop the recorded server of `home` (its whole process group: SIGTERM, SIGKILL
    after `grace_s` s) and delete the record. Returns what was stopped, or None when no
    server of ours was running."""
    home = home or prefect_home()
    with _locked(home):
        state = read_state(home)
        (home / STATE_NAME).unlink(missing_ok=True)
        if state is None or not (process_alive(state.pid) and _is_prefect_server(state.pid) and owned_by_me(state)):
            return None
        _kill_group(state.pid, grace_s)
        return state


@contextmanager
def use_local_server(say: Say | None = None) -> Iterator[str | None]:
    """Run the body against a Prefect API: the configured one as is, else the reused
    local server (started when needed), set as PREFECT_API_URL in the environment (so
    child processes inherit it) and in Prefect's settings. Yields the URL, or None when
    BENCHMAKER_PREFECT_SERVER=ephemeral asks for Prefect's temporary server. With the
    local server, PREFECT_API_AUTH_STRING is set to its secret (environment, so child
    processes inherit it, and settings), and the Prefect client asks for no CSRF token
    (the server enforces none) unless PREFECT_CLIENT_CSRF_SUPPORT_ENABLED says otherwise.
    Raises ServerError when the server cannot be started, and BenchmakerError for an
    unknown BENCHMAKER_PREFECT_SERVER value."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    mode = os.environ.get(MODE_ENV, "reuse")
    if mode not in ("reuse", "ephemeral"):
        raise BenchmakerError(f"{MODE_ENV}: expected reuse or ephemeral (got {mode!r})")
    configured = configured_api_url()
    if configured or mode == "ephemeral":
        if not configured:
            os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
        yield configured
        return
    state = ensure_server(say=say or _stderr)
    secret = auth_secret(prefect_home())
    os.environ["PREFECT_API_URL"] = state.url
    os.environ["PREFECT_API_AUTH_STRING"] = secret
    # our server, on loopback, enforces no CSRF tokens (start_server): a client that asks
    # for one first makes a round trip per client for nothing (3 per CLI flow run)
    os.environ.setdefault("PREFECT_CLIENT_CSRF_SUPPORT_ENABLED", "false")
    from prefect.settings import (
        PREFECT_API_AUTH_STRING,
        PREFECT_API_URL,
        PREFECT_CLIENT_CSRF_SUPPORT_ENABLED,
        temporary_settings,
    )

    csrf = os.environ["PREFECT_CLIENT_CSRF_SUPPORT_ENABLED"].strip().lower() not in ("false", "0", "no", "off")
    with temporary_settings(
        {PREFECT_API_URL: state.url, PREFECT_CLIENT_CSRF_SUPPORT_ENABLED: csrf, PREFECT_API_AUTH_STRING: secret}
    ):
        yield state.url


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _uptime(started_at: str) -> str:
    try:
        s = int((datetime.now(UTC) - datetime.fromisoformat(started_at)).total_seconds())
    except ValueError:
        return "?"
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


server_app = App(name="server", help="The local Prefect server the CLI reuses when PREFECT_API_URL is unset.")
app.command(server_app)


@server_app.command(name="status")
def server_status() -> int:
    """Print the local Prefect server's URL, pid, uptime and log; exit 0 when the server
    runs and answers its health check, 1 otherwise."""
    return _print_server_status(prefect_home())


def _print_server_status(home: Path) -> int:
    if os.environ.get("PREFECT_API_URL"):
        print(f"PREFECT_API_URL is set ({os.environ['PREFECT_API_URL']}): flows use that server, not a local one")
    state = read_state(home)
    if state is None:
        print(f"no local Prefect server recorded in {home} (the next flow run starts one)")
        return 1
    if not (process_alive(state.pid) and _is_prefect_server(state.pid)):
        print(f"the local Prefect server (pid {state.pid}) is gone (log: {state.log}); the next flow run starts one")
        return 1
    healthy = http_health(state.url)
    print(
        f"local Prefect server: {state.url} ({'healthy' if healthy else 'NOT answering /health'})\n"
        f"  UI:      {state.url.removesuffix('/api')}\n  pid:     {state.pid}\n"
        f"  up:      {_uptime(state.started_at)} (since {state.started_at})\n  log:     {state.log}\n"
        f"  home:    {home}\n"
        f"  auth:    {'required; secret in ' + str(home / AUTH_NAME) if state.auth else 'NONE (restarted by the next flow run)'}"
    )
    return 0 if healthy else 1


@server_app.command(name="start")
def server_start() -> int:
    """Start the local Prefect server now (or find the running one) and print its URL."""
    state = ensure_server(say=_stderr)
    print(state.url)
    return 0


@server_app.command(name="stop")
def server_stop() -> int:
    """Stop the local Prefect server (exit 0 also when none was running)."""
    state = stop_server()
    print(
        f"stopped the local Prefect server (pid {state.pid}, {state.url})"
        if state
        else f"no local Prefect server running (home {prefect_home()})"
    )
    return 0
