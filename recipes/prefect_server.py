"""The local Prefect server that the CLI's flow commands start once and reuse: a thin
wrapper over Prefect's own `prefect server start` (docs/shared-host.md).

Without a configured Prefect API (PREFECT_API_URL, a Prefect profile or a settings
context), Prefect starts a temporary server inside every CLI call (20-40 s here).
`use_local_server()` instead reuses the server recorded in
`$PREFECT_HOME/benchmaker-server.json`, or starts `prefect server start --host 127.0.0.1
--port P` in its own session (log: `$PREFECT_HOME/benchmaker-server.log`), waits for
`GET /api/health`, records it and says so once. A file lock makes concurrent commands
share one start; the runs stay in Prefect's database under PREFECT_HOME.

Authentication is Prefect's own HTTP Basic check (PREFECT_SERVER_API_AUTH_STRING on the
server, PREFECT_API_AUTH_STRING on its clients) with `benchmaker:<43 random characters>`,
made once in `$PREFECT_HOME/benchmaker-server.auth` (mode 0600; PREFECT_HOME kept 0700).
A recorded server is reused only when its process and its listening socket belong to
this user (checked before anything, the secret included, is sent to it), it runs this
Prefect with authentication, and it answers. One that is alive but slow is waited for
and never killed: other runs may use it.

    benchmaker server status | start | stop     # stop: SIGTERM its group, SIGKILL after 10 s
    benchmaker server exec -- prefect worker start ...   # a command against the same server

`BENCHMAKER_PREFECT_SERVER=ephemeral` keeps Prefect's temporary server (the test suite).
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
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from cyclopts import App, Parameter

from benchmaker.engine.errors import BenchmakerError
from benchmaker.recipes.app import app

STATE_NAME, LOG_NAME, LOCK_NAME, AUTH_NAME = (f"benchmaker-server.{x}" for x in ("json", "log", "lock", "auth"))
AUTH_USER = "benchmaker"
MODE_ENV = "BENCHMAKER_PREFECT_SERVER"
START_TIMEOUT_S = 300.0  # a first start migrates a fresh database: 20-40 s, over 90 s on a busy 2-core host
SLOW_GRACE_S = 30.0  # a live server of ours that fails its 2 s health check gets this long to answer
LOOPBACK = ("0100007F", "00000000", "0" * 32, "0000000000000000FFFF00000100007F")  # /proc/net/tcp{,6}

_CHILDREN: list[Any] = []  # servers this process started, held so that none is collected running

Health = Callable[[str], bool]
Say = Callable[[str], None]


class ServerError(BenchmakerError):
    """The local Prefect server did not start or did not answer; the message names its log."""


@dataclass(frozen=True)
class ServerState:
    """A server the CLI started, as recorded in `$PREFECT_HOME/benchmaker-server.json`:
    `pid` leads its process group, `url` is its API (`http://127.0.0.1:PORT/api`),
    `started_at` the UTC wall clock (ISO 8601), `prefect_version` the Prefect it runs and
    `auth` whether it requires the secret (a record of another version or without
    authentication is replaced)."""

    pid: int
    port: int
    url: str
    log: str
    started_at: str
    prefect_version: str = ""
    auth: bool = False


def prefect_home() -> Path:
    """$PREFECT_HOME (~ expanded), else Prefect's default ~/.prefect."""
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()


def prefect_version() -> str:
    """The installed Prefect's version from package metadata ("" when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prefect")
    except PackageNotFoundError:
        return ""


def configured_api_url() -> str | None:
    """$PREFECT_API_URL, else the Prefect profile's or settings context's API URL; None
    when Prefect would start a temporary server."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def http_health(url: str, timeout_s: float = 2.0) -> bool:
    """True when `GET {url}/health` (Prefect's probe, open without the secret) answers
    200 with the JSON body `true` within `timeout_s` s; False on any error."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as resp:  # a loopback URL we built
            return resp.status == 200 and json.loads(resp.read() or b"null") is True
    except (OSError, ValueError):
        return False


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, exited but not yet collected, counts as gone)."""
    try:
        proc_stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return proc_stat[proc_stat.rindex(")") + 2 :][:1] != "Z"


def pid_owner(pid: int) -> int | None:
    """The uid owning process `pid` (the owner of /proc/PID); None when it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def listener_owner(port: int) -> int | None:
    """The uid owning the socket listening on loopback (or every address) TCP `port`, from
    /proc/net/tcp and /proc/net/tcp6 (state 0A = LISTEN, column 7 = uid); None when none."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = [line.split() for line in Path(table).read_text().splitlines()[1:]]
        except OSError:
            continue
        for f in rows:
            addr, _, hex_port = f[1].rpartition(":")
            if f[3] == "0A" and int(hex_port, 16) == port and addr in LOOPBACK:
                return int(f[7])
    return None


def owned_by_me(state: ServerState) -> bool:
    """True when the recorded process is alive, a `prefect server` (not a recycled pid),
    and it and the socket listening on its port (when one does) belong to this effective
    user. A server of another user is never reused or signalled: it would read the secret."""
    try:
        cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes()
    except OSError:
        return False
    owners = {pid_owner(state.pid), listener_owner(state.port)} - {None}
    return _alive(state.pid) and b"prefect" in cmdline and b"server" in cmdline and owners == {os.geteuid()}


def _private_dir(path: Path) -> None:
    """Create `path` (0700) or take group/other access away from it; ServerError when it
    is another user's."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise ServerError(f"PREFECT_HOME {path} belongs to uid {st.st_uid}, not to you: set PREFECT_HOME to your own")
    if st.st_mode & 0o077:
        path.chmod(stat.S_IMODE(st.st_mode) & 0o700)


def auth_secret(home: Path) -> str:
    """`benchmaker:<secret>` from `home`/benchmaker-server.auth, made there once (mode 0600,
    256 random bits from `secrets`). Raises ServerError when the file is not a regular
    file of this user's with mode 0600 (the secret must be taken as known) or malformed."""
    path = home / AUTH_NAME
    _private_dir(home)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow, 0o600), "w") as fh:
            fh.write(f"{AUTH_USER}:{secrets.token_urlsafe(32)}\n")
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | nofollow)
    except OSError as exc:
        raise ServerError(f"{path}: cannot read the local server's secret ({exc.strerror})") from None
    with os.fdopen(fd, encoding="utf-8") as fh:
        st = os.fstat(fd)
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
    """The server recorded in `home`, or None when there is no readable record."""
    try:
        data = json.loads((home / STATE_NAME).read_text(encoding="utf-8"))
        return ServerState(
            **{k: data[k] for k in ("pid", "port", "url", "log", "started_at")},
            prefect_version=str(data.get("prefect_version") or ""),
            auth=data.get("auth") is True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _current(state: ServerState) -> bool:
    return state.auth and state.prefect_version in ("", prefect_version())


def find_server(home: Path, health: Health = http_health) -> ServerState | None:
    """The recorded server of `home` when it is ours (owned_by_me), current (this Prefect,
    authentication) and healthy, else None. A record whose process is gone or another
    user's is deleted; a live one of ours is left for `ensure_server`."""
    state = read_state(home)
    if state is not None and not owned_by_me(state):
        (home / STATE_NAME).unlink(missing_ok=True)
        return None
    return state if state is not None and _current(state) and health(state.url) else None


def start_server(
    home: Path,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    health: Health = http_health,
    popen: Callable[..., Any] = subprocess.Popen,
    timeout_s: float = START_TIMEOUT_S,
    poll_s: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ServerState:
    """Run `prefect server start --host HOST --port PORT` (default: a free loopback port)
    requiring `auth_secret(home)`, in its own session, output appended to `home`/
    benchmaker-server.log; wait until healthy, then record and return it. Raises
    ServerError with the log's last lines when it exits first or is not healthy after
    `timeout_s` s (it is then killed)."""
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
    url, log = f"http://127.0.0.1:{port}/api", home / LOG_NAME
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)]
    env = dict(
        os.environ,
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # every request carries the secret, which a browser's cross-site request cannot
        PREFECT_SERVER_CSRF_PROTECTION_ENABLED="false",
        PREFECT_SERVER_API_AUTH_STRING=auth_secret(home),
    )
    env.pop("PREFECT_API_URL", None)
    with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as fh:
        fh.write(f"--- {datetime.now(UTC).isoformat()} benchmaker starts: {' '.join(cmd)}\n".encode())
        fh.flush()
        kw: dict[str, Any] = dict(stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, close_fds=True)
        proc = popen(cmd, env=env, start_new_session=True, **kw)
    _CHILDREN.append(proc)
    deadline = clock() + timeout_s
    while not health(url):
        if proc.poll() is not None:
            raise ServerError(
                f"the Prefect server exited with code {proc.returncode} before it was healthy{_tail(log)}"
            )
        if clock() >= deadline:
            _kill_group(proc.pid, grace_s=5.0)
            raise ServerError(
                f"the Prefect server at {url} was not healthy after {timeout_s:g} s; stopped it{_tail(log)}"
            )
        sleep(poll_s)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    state = ServerState(proc.pid, port, url, str(log), started, prefect_version(), auth=True)
    tmp = home / (STATE_NAME + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
    tmp.replace(home / STATE_NAME)
    return state


def _tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        text = []
    return "\n".join([f" (log: {log})", *text])


@contextmanager
def _locked(home: Path) -> Iterator[None]:
    _private_dir(home)
    with open(home / LOCK_NAME, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        yield


def _kill_group(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the process group led by `pid`, SIGKILL it after `grace_s` s."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for proc in _CHILDREN:
                if proc.pid == pid:
                    proc.poll()  # collect our own child
            if not _alive(pid):
                return
            time.sleep(0.1)


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
    """The local server of `home` (default `prefect_home()`): found and reused, or started
    (saying what and why through `say`). A live server of ours of another Prefect or
    without authentication is replaced; a current one that fails its health check is
    slow, not dead: it gets `grace_s` s more and is never killed here. Raises ServerError
    when a start fails, or naming the slow server when it still does not answer."""
    home = home or prefect_home()
    with _locked(home):
        state = find_server(home, health)
        if state is not None:
            return state
        old = read_state(home)
        if old is not None and _current(old):  # ours and alive: find_server deleted the rest
            say(
                f"benchmaker: the local Prefect server (pid {old.pid}, {old.url}) is slow to answer its health "
                f"check; waiting up to {grace_s:g} s (it is not restarted: other runs may use it)"
            )
            deadline = clock() + grace_s
            while clock() < deadline:
                sleep(1.0)
                if health(old.url):
                    return old
            raise ServerError(
                f"the local Prefect server (pid {old.pid}, {old.url}) is alive but did not answer /health within "
                f"{grace_s:g} s; it was left running (other runs may use it). Retry later, or `benchmaker server "
                f"stop` to restart it (log: {old.log})"
            )
        if old is not None:
            why = "requires no authentication"
            if old.prefect_version not in ("", prefect_version()):
                why = f"runs Prefect {old.prefect_version}, this is {prefect_version()}"
            say(
                f"benchmaker: the local Prefect server (pid {old.pid}, {old.url}) {why}; restarting it (log: {old.log})"
            )
            _kill_group(old.pid)
        say(
            f"benchmaker: no PREFECT_API_URL is set, so starting a local Prefect server in the background "
            f"(data in {home}, log: {home / LOG_NAME}); later runs reuse it instead of paying "
            f"20-40 s for a temporary one each time. `benchmaker server status|stop` manage it."
        )
        state = start(home)
        say(f"benchmaker: Prefect server ready at {state.url} (pid {state.pid}; UI at {state.url[:-4]})")
        return state


def stop_server(home: Path | None = None, grace_s: float = 10.0) -> ServerState | None:
    """Stop the recorded server of `home` if it is ours (its process group: SIGTERM, SIGKILL
    after `grace_s` s) and delete the record; returns what was stopped, else None."""
    home = home or prefect_home()
    with _locked(home):
        state = read_state(home)
        (home / STATE_NAME).unlink(missing_ok=True)
        if state is None or not owned_by_me(state):
            return None
        _kill_group(state.pid, grace_s)
        return state


@contextmanager
def use_local_server(say: Say | None = None) -> Iterator[str | None]:
    """Run the body against a Prefect API and yield its URL: the configured one as is; None
    (Prefect's temporary server) when BENCHMAKER_PREFECT_SERVER=ephemeral; else the
    local server (ensure_server), set with its secret as PREFECT_API_URL and
    PREFECT_API_AUTH_STRING in the environment (child processes inherit them) and in
    Prefect's settings. Raises ServerError when the server cannot be started,
    BenchmakerError for another BENCHMAKER_PREFECT_SERVER value and ConfigError for a
    configured URL that is no http(s) URL with a host."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    mode = os.environ.get(MODE_ENV, "reuse")
    if mode not in ("reuse", "ephemeral"):
        raise BenchmakerError(f"{MODE_ENV}: expected reuse or ephemeral (got {mode!r})")
    configured = configured_api_url()
    if configured:
        from benchmaker.engine.config import check_http_url

        check_http_url(configured, "PREFECT_API_URL")  # a ConfigError (one line, exit 2), before any work
    if configured or mode == "ephemeral":
        if not configured:
            os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
        yield configured
        return
    state = ensure_server(say=say or _stderr)
    from prefect.settings import (
        PREFECT_API_AUTH_STRING,
        PREFECT_API_URL,
        PREFECT_CLIENT_CSRF_SUPPORT_ENABLED,
        temporary_settings,
    )

    secret = auth_secret(prefect_home())
    # the server enforces no CSRF tokens: a client asking for one pays a round trip for nothing
    csrf = os.environ.setdefault("PREFECT_CLIENT_CSRF_SUPPORT_ENABLED", "false").strip().lower()
    os.environ.update(PREFECT_API_URL=state.url, PREFECT_API_AUTH_STRING=secret)
    with temporary_settings(
        {
            PREFECT_API_URL: state.url,
            PREFECT_API_AUTH_STRING: secret,
            PREFECT_CLIENT_CSRF_SUPPORT_ENABLED: csrf not in ("false", "0", "no", "off"),
        }
    ):
        yield state.url


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


server_app = App(name="server", help="The local Prefect server the CLI reuses when PREFECT_API_URL is unset.")
app.command(server_app)


@server_app.command(name="status")
def server_status() -> int:
    """Print the local Prefect server's URL, pid, start time, log and where its secret is;
    exit 0 when it runs and answers its health check, 1 otherwise."""
    home = prefect_home()
    if os.environ.get("PREFECT_API_URL"):
        print(f"PREFECT_API_URL is set ({os.environ['PREFECT_API_URL']}): flows use that server, not a local one")
    state = read_state(home)
    if state is None or not owned_by_me(state):
        gone = "" if state is None else f" (pid {state.pid} is gone; log: {state.log})"
        print(f"no local Prefect server running in {home}{gone}; the next flow run starts one")
        return 1
    healthy = http_health(state.url)
    auth = f"required; secret in {home / AUTH_NAME}" if state.auth else "NONE (restarted by the next flow run)"
    print(
        f"local Prefect server: {state.url} ({'healthy' if healthy else 'NOT answering /health'})\n"
        f"  UI:      {state.url[:-4]}\n  pid:     {state.pid}\n  since:   {state.started_at}\n"
        f"  log:     {state.log}\n  home:    {home}\n  auth:    {auth}"
    )
    return 0 if healthy else 1


@server_app.command(name="start")
def server_start(
    *,
    port: Annotated[int | None, Parameter(help="Port for a new server (default: a free one).")] = None,
    host: Annotated[
        str, Parameter(help="Address a new server binds: 0.0.0.0 lets load hosts reach it (with the secret).")
    ] = "127.0.0.1",
) -> int:
    """Start the local Prefect server now (or find the running one) and print its API URL."""
    state = ensure_server(say=_stderr, start=lambda home: start_server(home, port=port, host=host))
    print(state.url)
    return 0


@server_app.command(name="stop")
def server_stop() -> int:
    """Stop the local Prefect server (exit 0 also when none was running)."""
    state = stop_server()
    print(
        f"stopped the local Prefect server (pid {state.pid}, {state.url})"
        if state
        else "no local Prefect server running"
    )
    return 0


@server_app.command(name="exec")
def server_exec(*command: str) -> int:
    """Run COMMAND against the same Prefect API as the flow commands (PREFECT_API_URL as set,
    else the local server, started when needed, with its URL and secret in COMMAND's
    environment); exit with COMMAND's code."""
    if not command:
        raise BenchmakerError("server exec: give the command to run, e.g. `benchmaker server exec -- prefect ...`")
    with use_local_server():
        return subprocess.call(list(command))
