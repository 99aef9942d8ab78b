"""A warm runner: flow commands started from the CLI without paying Prefect's import
(issue #15: on this 2-core host `import prefect` plus the flows cost 1.6-1.9 s of a
1-point sweep's 2.3-2.6 s of overhead beside its flow work).

After a flow command (benchmaker.recipes.app.WARM_COMMANDS) has run in the CLI's own process, the CLI starts one
warm runner in the background (`python -m benchmaker.recipes.warm_runner`, its own session, log
`$PREFECT_HOME/benchmaker-warm.log`): a process that imports the flow commands, Prefect
and the flows once (PRELOAD), then waits on a Unix socket. A later call of a flow
command connects, sends its argv, working directory and environment with its stdin,
stdout and stderr (SCM_RIGHTS), and the runner forks a child that runs the command
exactly as the console script would, on the caller's terminal; the caller forwards
SIGINT, SIGTERM and SIGHUP to the child and exits with the child's exit code (128 + N
for a child killed by signal N). Nothing of the run is measured differently: the child
is a fresh process of its own, with its own event loops and threads, and it starts the
replay server, the sandboxes and the clock exactly as an in-process run does.

A call is served warm only when it would behave the same as a cold one; otherwise it
runs in its own process as before, and says nothing:

- the runner's key is the caller's environment (every variable but VOLATILE_ENV, which
  neither we nor Prefect read), interpreter, installed `recipes` package, the Prefect
  settings files of its working directory (CWD_SETTINGS) and what a forked child takes
  from its parent instead of the caller (CPU affinity, nice, umask, resource limits):
  a caller with another key has another socket and its own runner (Prefect reads its
  settings and logging configuration from the environment and those files at import);
- a runner whose imported files changed since it started (an edited flow, an upgraded
  package: mtime or size of any module file it loaded, or the Prefect profiles file)
  refuses and exits, and the next command starts a fresh one;
- `BENCHMAKER_WARM_RUNNER=off` turns it off; `BENCHMAKER_PREFECT_SERVER=ephemeral` (the
  test suite) too; `--help` and non-flow commands never use it.

A runner exits after IDLE_S s without a request, when `benchmaker server stop` stops
it with the local Prefect server (SIGTERM: passed on to the commands it runs, which
end as they would on SIGTERM), or when its socket is gone; a stopping or stale runner
takes no new caller and exits once its children have ended. Each child writes its exit
code to its caller itself, so a caller gets it even when the runner died first. Sockets live in a
directory only the user can open (`$XDG_RUNTIME_DIR/benchmaker-warm`, else
`/tmp/benchmaker-warm-<uid>`, mode 0700), next to a JSON record of each runner (pid,
home, started_at, served). Limits: Ctrl-Z stops the caller, not the child (the child
runs in the runner's session, without the terminal); a runner holds ~200 MB of memory
while it waits.

Wire protocol (one connection per command, newline-delimited JSON): the caller sends
{"argv", "cwd", "env", "ignore", "fds"} with `fds` (which of 0, 1, 2 it passes)
attached as SCM_RIGHTS; the runner answers {"pid": N} (served) or {"refused": why},
then {"exit": CODE} when the child has ended ({"exit": 128 + N, "signal": N} when a
signal killed it: the caller then ends by the same signal, as a shell expects); the child
writes that line itself, and the caller answers "done" before it hangs up. A caller that
disconnects without "done" (killed) hangs its child up (SIGHUP), unless the caller
ignored SIGHUP (nohup).
"""

from __future__ import annotations

import array
import hashlib
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmaker.recipes.app import WARM_COMMANDS
from benchmaker.recipes.prefect_server import process_alive

WARM_ENV = "BENCHMAKER_WARM_RUNNER"
PRELOAD = ("benchmaker.recipes.cli", "benchmaker.recipes.swebench_replay", "benchmaker.recipes.display", "benchmaker.flows.swebench_replay",
           "benchmaker.flows.llm_sweep", "benchmaker.flows.outcome", "prefect.flow_engine", "prefect.task_engine",
           "prefect.client.orchestration", "prefect.logging.handlers", "benchmaker.progress", "benchmaker.sweep.plan",
           "benchmaker.tasks.serve", "benchmaker.tasks.sweep", "benchmaker.tasks.grade", "benchmaker.tasks.load", "benchmaker.tasks.report")
"""What a runner imports before it waits: the commands, Prefect, the flows and what a
flow run imports on its way (each module the child would otherwise import itself)."""
VOLATILE_ENV = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES", "SSH_CLIENT", "SSH_CONNECTION",
                          "SSH_TTY", "TMUX_PANE", "WINDOWID", "TERM_SESSION_ID", "MAKEFLAGS", "MFLAGS", "MAKELEVEL",
                          "MAKE_TERMOUT", "MAKE_TERMERR"})
"""Variables that differ between shells, logins or make levels and that neither we nor
Prefect read at import: left out of the runner's key (the child gets the caller's values
all the same)."""
CWD_SETTINGS = (".env", "prefect.toml", "pyproject.toml")
"""Files of the working directory Prefect reads its settings from at import: their
contents are part of the runner's key (a runner starts in its first caller's directory)."""
IDLE_S = 3600.0
LOG_NAME = "benchmaker-warm.log"
_STDIO = (0, 1, 2)
_STARTED: list[subprocess.Popen[bytes]] = []  # runners this process started, held (a collected running Popen warns)
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def key_of(env: dict[str, str], cwd: str) -> str:
    """The runner key (16 hex digits) of this process as a caller with environment `env`
    in directory `cwd`: a hash of this interpreter, the installed `recipes` package, `env`
    without VOLATILE_ENV, the contents of CWD_SETTINGS in `cwd` and this process's
    settings that a forked child keeps from the runner (process_settings). A caller whose
    key differs gets another runner; the runner itself inherited all of them from the
    caller that started it."""
    import benchmaker.recipes as recipes

    items = sorted((k, v) for k, v in env.items() if k not in VOLATILE_ENV)
    files = []
    for name in CWD_SETTINGS:
        try:
            files.append(hashlib.sha256(Path(cwd, name).read_bytes()).hexdigest())
        except OSError:
            files.append(None)
    blob = json.dumps([sys.executable, os.path.dirname(recipes.__file__), items, files, process_settings()]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def process_settings() -> list[Any]:
    """What a process passes to its children and a forked child would take from the
    runner instead of the caller: CPU affinity, nice value, umask and every resource
    limit (soft, hard)."""
    import resource

    mask = os.umask(0o022)
    os.umask(mask)
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    limits = [(name, resource.getrlimit(getattr(resource, name))) for name in sorted(dir(resource))
              if name.startswith("RLIMIT_")]
    return [affinity, os.getpriority(os.PRIO_PROCESS, 0), mask, limits]


def runtime_dir() -> Path:
    """The directory of the runners' sockets and records, created mode 0700. Raises
    OSError when it exists but belongs to another user or others may open it."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "benchmaker-warm" if base and os.path.isdir(base) else \
        Path("/tmp") / f"benchmaker-warm-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{path}: not a private directory of this user (mode {st.st_mode & 0o777:o})")
    return path


def prefect_home(env: dict[str, str]) -> Path:
    """$PREFECT_HOME of `env` (~ expanded), else ~/.prefect (Prefect's default)."""
    return Path(env.get("PREFECT_HOME") or "~/.prefect").expanduser()


def wanted(argv: list[str], env: dict[str, str]) -> bool:
    """True when a call with `argv` (the command first) and `env` may be served warm."""
    return (bool(argv) and argv[0] in WARM_COMMANDS and not any(a in ("--help", "-h") for a in argv)
            and env.get(WARM_ENV, "on") != "off" and env.get("BENCHMAKER_PREFECT_SERVER", "reuse") == "reuse")


# --- the caller's side -----------------------------------------------------------------

def run_warm(argv: list[str], env: dict[str, str]) -> int | None:
    """Run the CLI command `argv` (without the program name) in this user's warm runner
    for `env` (the environment the CLI process started with) and return its exit code,
    or None when no runner served it (none running, refused, not wanted): the caller
    then runs the command itself. Forwards SIGINT/SIGTERM/SIGHUP to the child while it
    runs (those the caller ignores stay ignored in the child)."""
    if not wanted(argv, env):
        return None
    fds = [fd for fd in _STDIO if _valid_fd(fd)]  # before the socket takes a free one of them
    try:
        cwd = os.getcwd()
        key = key_of(env, cwd)
        sock = _connect(runtime_dir(), key)
    except OSError:  # a removed working directory, no private runtime directory: run cold
        return None
    if sock is None:
        return None
    with sock:
        ignore = [int(s) for s in _SIGNALS if signal.getsignal(s) is signal.SIG_IGN]
        request = {"argv": [sys.argv[0], *argv], "cwd": cwd, "env": env, "key": key, "ignore": ignore, "fds": fds}
        try:
            socket.send_fds(sock, [json.dumps(request).encode() + b"\n"], fds)
            reader = sock.makefile("rb")
            answer = json.loads(reader.readline() or b"{}")
        except (OSError, ValueError):
            return None
        pid = answer.get("pid")
        if not isinstance(pid, int):
            return None  # refused (stale, another key): run cold
        previous = {s: signal.signal(s, _forward_to(pid)) for s in _SIGNALS if int(s) not in ignore}
        line = b""
        try:
            line = reader.readline()
            if line:  # tell the runner the child's exit code arrived (not a caller gone)
                sock.sendall(b"done\n")
        except OSError:
            pass
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    try:
        answer = json.loads(line) if line else {}
    except ValueError:
        answer = {}
    code, sig = answer.get("exit"), answer.get("signal")
    if not isinstance(code, int):
        print(f"benchmaker: the warm runner ended without the command's exit code (child pid {pid})",
              file=sys.stderr)
        return 1
    if isinstance(sig, int) and sig in (int(s) for s in _SIGNALS):  # end as the child ended: by that signal
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return code


def _connect(rdir: Path, key: str, wait_s: float = 10.0) -> socket.socket | None:
    """A connection to the runner of `key`, or None when none runs. A runner still
    importing (record "starting", process alive) is waited for up to `wait_s` s: it is
    ready sooner than this process would be after the same imports."""
    deadline = time.monotonic() + wait_s
    while True:
        sock = _socket_above_stdio()
        try:
            sock.connect(str(rdir / f"{key}.sock"))
            return sock
        except OSError:
            sock.close()
        record = _read_record(rdir / f"{key}.json")
        if not record or record.get("state") != "starting" or not process_alive(record.get("pid", 0)) \
                or time.monotonic() > deadline:
            return None
        time.sleep(0.02)


def _socket_above_stdio() -> socket.socket:
    """A Unix stream socket whose descriptor is not 0, 1 or 2 (with stdout closed, a new
    socket would take fd 1 and be passed to the child as its stdout)."""
    import fcntl

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if sock.fileno() > 2:
        return sock
    fd = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, 3)
    sock.close()
    return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)


def _valid_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _forward_to(pid: int) -> Any:
    def forward(signum: int, frame: Any) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    return forward


def start_in_background(env: dict[str, str]) -> int | None:
    """Start a warm runner for `env` unless one runs (or starts) for it already; returns
    the new runner's pid, else None. Never raises: a runner that cannot start leaves the
    next call cold (its log says why)."""
    if env.get(WARM_ENV, "on") == "off" or env.get("BENCHMAKER_PREFECT_SERVER", "reuse") != "reuse":
        return None
    try:
        key = key_of(env, os.getcwd())
        rdir = runtime_dir()
        record = _read_record(rdir / f"{key}.json")
        if record and process_alive(record.get("pid", 0)):
            return None
        home = prefect_home(env)
        home.mkdir(parents=True, exist_ok=True)
        with open(home / LOG_NAME, "ab") as log:  # in this directory: Prefect reads CWD_SETTINGS from it
            proc = subprocess.Popen([sys.executable, "-m", "benchmaker.recipes.warm_runner", key], env=env, cwd=os.getcwd(),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        _STARTED.append(proc)
        _write_record(rdir / f"{key}.json", {"pid": proc.pid, "home": str(home), "state": "starting",
                                             "started_at": _now(), "served": 0})
        return proc.pid
    except OSError:
        return None


def _records(home: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(record path, record) of every warm runner recorded for Prefect home `home`."""
    try:
        rdir = runtime_dir()
    except OSError:
        return []
    found = []
    for rec_path in sorted(rdir.glob("*.json")):
        record = _read_record(rec_path)
        if record and Path(record.get("home", "")) == home:
            found.append((rec_path, record))
    return found


def stop_runners(home: Path, grace_s: float = 15.0) -> list[int]:
    """SIGTERM every warm runner of Prefect home `home` (SIGKILL after `grace_s` s) and
    remove its socket and record; returns their pids. A runner passes SIGTERM on to the
    commands it runs and exits once their callers have their exit codes."""
    stopped = []
    for rec_path, record in _records(home):
        pid = record.get("pid", 0)
        if process_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
            stopped.append(pid)
        rec_path.unlink(missing_ok=True)
        rec_path.with_suffix(".sock").unlink(missing_ok=True)
    return stopped


def runners(home: Path) -> list[dict[str, Any]]:
    """The live warm runners of Prefect home `home`: their records (pid, state
    "starting"/"ready", started_at, served)."""
    return [record for _, record in _records(home) if process_alive(record.get("pid", 0))]


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_record(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
    tmp.replace(path)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- the runner's side ------------------------------------------------------------------

def module_files() -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of every file a loaded module came from, and of the Prefect
    profiles file, by path: what a runner compares before it serves."""
    files: dict[str, tuple[int, int]] = {}
    paths = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    paths.append(str(prefect_home(dict(os.environ)) / "profiles.toml"))
    for path in paths:
        if not path or path in files:
            continue
        try:
            st = os.stat(path)
        except OSError:
            files[path] = (-1, -1)
            continue
        files[path] = (st.st_mtime_ns, st.st_size)
    return files


def changed(files: dict[str, tuple[int, int]]) -> str | None:
    """The first file of `files` (module_files) whose mtime or size differs now, else None."""
    for path, seen in files.items():
        try:
            st = os.stat(path)
            now = (st.st_mtime_ns, st.st_size)
        except OSError:
            now = (-1, -1)
        if now != seen:
            return path
    return None


class Runner:
    """The runner process (module docstring): `serve()` until idle, stopped or stale."""

    def __init__(self, key: str, idle_s: float = IDLE_S):
        self.key = key
        self.idle_s = idle_s
        self.rdir = runtime_dir()
        self.sock_path = self.rdir / f"{key}.sock"
        self.rec_path = self.rdir / f"{key}.json"
        self.home = prefect_home(dict(os.environ))
        self.children: dict[int, socket.socket] = {}  # child pid -> its caller's connection
        self.ignored_hup: set[int] = set()
        self.served = 0
        self.started_at = _now()
        self.draining = False  # no new callers; exit once every child has ended

    def log(self, message: str) -> None:
        print(f"{_now()} warm runner {os.getpid()}: {message}", flush=True)

    def serve(self) -> int:
        for name in PRELOAD:
            importlib.import_module(name)
        import threading

        if threading.active_count() != 1:  # fork() copies one thread: nothing may hold a lock
            self.log(f"{threading.active_count()} threads after the imports; not serving")
            return 1
        self.files = module_files()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock_path.unlink(missing_ok=True)
        listener.bind(str(self.sock_path))
        os.chmod(self.sock_path, 0o600)
        listener.listen(16)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_term)
        self._record("ready")
        self.log(f"ready: key {self.key}, {len(self.files)} module files, socket {self.sock_path}")
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ, "accept")
        sel.register(wake_r, selectors.EVENT_READ, "wake")
        last = time.monotonic()
        self.listener, self.sel = listener, sel
        try:
            while not (self.draining and not self.children):
                if self.draining and listener.fileno() >= 0:
                    self._stop_accepting()
                for sk, _ in sel.select(timeout=5.0):
                    if sk.data == "accept":
                        conn, _ = listener.accept()
                        last = time.monotonic()
                        self._handle(conn, listener, sel, wake_r, wake_w)
                    elif sk.data == "wake":
                        os.read(wake_r, 4096)
                    else:  # a caller's connection: readable means it went away
                        self._caller_gone(sk.data, sel)
                self._reap(sel)
                if not self.draining and (not self.sock_path.exists()
                                          or (not self.children and time.monotonic() - last > self.idle_s)):
                    self.log("socket removed; exiting" if not self.sock_path.exists() else "idle; exiting")
                    self.draining = True
        finally:
            if self.rec_path.exists() and (_read_record(self.rec_path) or {}).get("pid") == os.getpid():
                self.rec_path.unlink(missing_ok=True)
                self.sock_path.unlink(missing_ok=True)
        return 0

    def _on_term(self, signum: int, frame: Any) -> None:
        """SIGTERM (`server stop`): take no new callers, pass SIGTERM on to the commands
        that run (each ends as a cold one does on SIGTERM), exit when they have ended."""
        self.draining = True
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _stop_accepting(self) -> None:
        """Close the socket and drop the record (a new caller runs cold and starts a new
        runner) while the children of this one finish."""
        self.sel.unregister(self.listener)
        self.listener.close()
        if (_read_record(self.rec_path) or {}).get("pid") == os.getpid():
            self.rec_path.unlink(missing_ok=True)
            self.sock_path.unlink(missing_ok=True)
        self.log(f"draining: {len(self.children)} command(s) still running")

    def _record(self, state: str) -> None:
        _write_record(self.rec_path, {"pid": os.getpid(), "home": str(self.home), "state": state,
                                      "started_at": self.started_at, "served": self.served})

    def _handle(self, conn: socket.socket, listener: socket.socket, sel: selectors.BaseSelector,
                wake_r: int, wake_w: int) -> None:
        fds: list[int] = []
        try:
            conn.settimeout(10.0)
            data, fds = _recv_request(conn)
            request = json.loads(data)
            why = self._refusal(request, fds)
            if why:
                self.log(f"refused: {why}")
                conn.sendall(json.dumps({"refused": why}).encode() + b"\n")
                conn.close()
                if why.startswith("changed"):
                    self.draining = True
                return
            # the stop signals stay blocked across fork() until the child runs the command: one
            # that arrives sooner is delivered then, to the command, not to the runner's handlers
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            pid = os.fork()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.log(f"bad request: {exc!r}")
            conn.close()
            for fd in fds:
                os.close(fd)
            return
        if pid == 0:  # the child: never returns
            others = [c.fileno() for c in self.children.values()]
            _child(request, fds, close=[listener.fileno(), wake_r, wake_w, sel.fileno(), *others], mask=mask,
                   report=conn.fileno())
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in fds:
            os.close(fd)
        self.served += 1
        self.children[pid] = conn
        if int(signal.SIGHUP) in request["ignore"]:
            self.ignored_hup.add(pid)
        conn.setblocking(True)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        sel.register(conn, selectors.EVENT_READ, pid)
        self._record("ready")
        self.log(f"served pid {pid}: {' '.join(request['argv'][1:])}")

    def _refusal(self, request: dict[str, Any], fds: list[int]) -> str | None:
        if request["key"] != self.key:
            return "another key"
        if len(fds) != len(request["fds"]) or not set(request["fds"]) <= set(_STDIO):
            return "stdio not passed"
        path = changed(self.files)
        return f"changed since the runner started: {path}" if path else None

    def _caller_gone(self, pid: int, sel: selectors.BaseSelector) -> None:
        """A caller's connection became readable: it hung up, or said "done" (it has the
        exit code its child wrote it, and the child is ending: reaped as it ends, not hung
        up nor logged as a caller that went away)."""
        conn = self.children.get(pid)
        if conn is None:
            return
        try:
            said = conn.recv(64)
        except OSError:
            said = b""
        if said.startswith(b"done"):  # it has its exit code: the child is ending, reaped soon
            sel.unregister(conn)
            return
        sel.unregister(conn)
        if pid not in self.ignored_hup:
            try:
                os.kill(pid, signal.SIGHUP)
            except ProcessLookupError:
                pass
        self.log(f"caller of pid {pid} went away")

    def _reap(self, sel: selectors.BaseSelector) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            self.ignored_hup.discard(pid)
            if conn is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            answer = {"exit": 128 - code, "signal": -code} if code < 0 else {"exit": code}
            code = answer["exit"]
            try:
                sel.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                conn.sendall(json.dumps(answer).encode() + b"\n")
            except OSError:
                pass
            conn.close()
            self.log(f"pid {pid} exited with {code}")


def _recv_request(conn: socket.socket) -> tuple[bytes, list[int]]:
    data = b""
    fds: list[int] = []
    while not data.endswith(b"\n"):
        chunk, more, _flags, _addr = socket.recv_fds(conn, 65536, len(_STDIO))
        fds.extend(more)
        if not chunk:
            raise ValueError("connection closed before the request ended")
        data += chunk
        if len(data) > 16 * 2**20:
            raise ValueError("request over 16 MiB")
    return data, fds


def _child(request: dict[str, Any], fds: list[int], close: list[int], mask: Any, report: int) -> None:
    """The forked child: take the caller's stdio, directory, environment, argv and
    signal dispositions, run the command as the console script does, tell the caller
    its exit code itself on `report` (the caller's connection: it arrives even when the
    runner is gone) and exit with it (an uncaught KeyboardInterrupt: its traceback, then
    death by SIGINT, as CPython ends). The stop signals are blocked until the command
    starts (`mask`: the mask to restore). Never returns."""
    code = 1
    interrupted = False
    try:
        signal.set_wakeup_fd(-1)
        for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for s in request["ignore"]:
            signal.signal(s, signal.SIG_IGN)
        for fd in close:
            os.close(fd)
        passed = dict(zip(request["fds"], fds, strict=True))
        for target in _STDIO:
            source = passed.get(target)
            if source is None:  # closed in the caller: closed here too
                os.close(target)
                continue
            os.dup2(source, target)
            os.close(source)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        _rebind_stdio()
        import atexit

        from benchmaker.recipes import cli

        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        code = cli._run(sys.argv[1:])
        atexit._run_exitfuncs()  # Prefect's log and event drains, as at a normal exit
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a child must never return into the runner's loop
        import traceback

        traceback.print_exc()
        interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
    finally:
        try:
            _report(report, code, interrupted)
        finally:
            os._exit(130 if interrupted else code)  # whatever happened above: never back into the runner's loop


def _report(report: int, code: int, interrupted: bool) -> None:
    """The child's last steps: flush its output, tell the caller its exit code on
    `report`, and die by SIGINT after an uncaught KeyboardInterrupt."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: closed when the process started
                stream.flush()
        except (OSError, ValueError):
            pass
    answer = {"exit": 130, "signal": int(signal.SIGINT)} if interrupted else {"exit": code}
    # once the caller has its code it exits, and the runner hangs up a child whose caller
    # went away: the stop signals stay blocked from here to the exit
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        os.write(report, json.dumps(answer).encode() + b"\n")
    except OSError:  # the caller is gone
        pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def _rebind_stdio() -> None:
    """New sys.stdin/stdout/stderr on the caller's descriptors (line-buffered on a
    terminal, as Python makes them at start-up), rich consoles that decided colour and
    terminal at import redecided, and Prefect's logging set up again on the new stderr."""
    def reopen(fd: int, mode: str, old: Any) -> Any:
        if not _valid_fd(fd):  # closed in the caller: None, as Python makes it at start-up
            return None
        line = fd == 2 or os.isatty(fd)
        return open(fd, mode, buffering=1 if line and mode == "w" else -1, closefd=False,  # noqa: SIM115
                    encoding=getattr(old, "encoding", None) or "utf-8",
                    errors=getattr(old, "errors", None) or "strict")

    sys.stdin = sys.__stdin__ = reopen(0, "r", sys.__stdin__)
    sys.stdout = sys.__stdout__ = reopen(1, "w", sys.__stdout__)
    sys.stderr = sys.__stderr__ = reopen(2, "w", sys.__stderr__)
    from rich.console import Console

    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in ("recipes", "replay", "flows", "tasks", "benchmaker", "warehouse"):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Console) and value._file is None:
                value.__init__()  # a default Console: the same object (others hold it), redecided
    from prefect.logging.configuration import setup_logging

    setup_logging(incremental=False)


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmaker.recipes.warm_runner KEY`: serve as the runner of KEY (key_of of this
    process's environment); exits 2 when KEY does not match it."""
    args = sys.argv[1:] if argv is None else argv
    key = key_of(dict(os.environ), os.getcwd())
    if len(args) != 1 or args[0] != key:
        print(f"usage: python -m benchmaker.recipes.warm_runner KEY (the key of this process here, {key})", file=sys.stderr)
        return 2
    return Runner(args[0]).serve()


if __name__ == "__main__":
    sys.exit(main())
