"""The warm runner (recipes/warm_runner.py): a flow command served by a real runner
process prints and exits as the same command run cold, signals reach the child, a
runner whose files changed refuses and is replaced, `server stop` stops it. Each test
uses its own PREFECT_HOME and runtime directory (short: a Unix socket path has at most
107 bytes), so no runner of a user or of another test is touched. The flow run through
a runner against a real Prefect server is in test_prefect_server.py."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from benchmaker.recipes import warm_runner as wr
from tests.recipes.test_prefect_server import _gone

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"
BENCHMAKER = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "benchmaker"


@pytest.fixture
def env(tmp_path: Path):
    """A caller's environment with the reused-server mode (the suite's default,
    ephemeral, turns the runner off), its own PREFECT_HOME and runtime directory; the
    runners started under it are stopped at the end."""
    run_dir = tempfile.mkdtemp(prefix="bmw-", dir="/tmp")
    env = {k: v for k, v in os.environ.items()
           if k not in ("BENCHMAKER_PREFECT_SERVER", "PREFECT_API_URL", wr.WARM_ENV)}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), XDG_RUNTIME_DIR=run_dir)
    yield env
    pids = [r["pid"] for r in _with_env(env, wr.runners, Path(env["PREFECT_HOME"]))]
    _with_env(env, wr.stop_runners, Path(env["PREFECT_HOME"]))
    for pid in pids:
        assert _gone(pid)
    shutil.rmtree(run_dir, ignore_errors=True)


def _with_env(env: dict[str, str], fn, *args):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return fn(*args)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _ready_runner(env: dict[str, str], timeout_s: float = 120.0) -> dict:
    """Start a runner for `env` and wait until it serves (imports take 2-5 s here)."""
    pid = _with_env(env, wr.start_in_background, env)
    assert isinstance(pid, int)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        (record,) = _with_env(env, wr.runners, Path(env["PREFECT_HOME"])) or [{}]
        if record.get("state") == "ready":
            assert record["pid"] == pid
            return record
        assert wr.process_alive(pid), (Path(env["PREFECT_HOME"]) / wr.LOG_NAME).read_text()
        time.sleep(0.05)
    raise AssertionError("the runner never became ready")


def _cli(args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(BENCHMAKER), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, **kw)


def _log(env: dict[str, str]) -> str:
    return (Path(env["PREFECT_HOME"]) / wr.LOG_NAME).read_text()


DRY_RUN = ["swebench-replay", "--logs", str(EXAMPLE), "--concurrency-sweep", "1,2", "--dry-run"]


def test_the_key_ignores_only_volatile_variables(tmp_path: Path):
    base = {"HOME": "/h", "PATH": "/bin", "PWD": "/a", "SHLVL": "1"}
    cwd = str(tmp_path)
    assert wr.key_of(base, cwd) == wr.key_of({**base, "PWD": "/b", "SHLVL": "3", "_": "/bin/x", "COLUMNS": "80",
                                              "SSH_CLIENT": "10.0.0.1 5 22", "MAKELEVEL": "1"}, cwd)
    assert wr.key_of(base, cwd) != wr.key_of({**base, "PREFECT_PROFILE": "other"}, cwd)
    assert wr.key_of(base, cwd) != wr.key_of({**base, "HOME": "/g"}, cwd)
    other = tmp_path / "other"
    other.mkdir()
    assert wr.key_of(base, cwd) == wr.key_of(base, str(other))  # same (absent) settings files: one runner
    (other / ".env").write_text("PREFECT_LOGGING_LEVEL=WARNING\n")  # Prefect reads it at import
    assert wr.key_of(base, cwd) != wr.key_of(base, str(other))


def test_the_key_covers_what_a_forked_child_would_take_from_the_runner(tmp_path: Path):
    """umask, nice, CPU affinity and resource limits are inherited by fork, not sent:
    a caller with other ones gets another runner (started with its own)."""
    import resource

    base, cwd = {"PATH": "/bin"}, str(tmp_path)
    key = wr.key_of(base, cwd)
    old = os.umask(0o077)
    try:
        assert wr.key_of(base, cwd) != key
    finally:
        os.umask(old)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, soft), hard))
    try:
        assert wr.key_of(base, cwd) != key
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert wr.key_of(base, cwd) == key


def test_only_flow_commands_in_the_reused_server_mode_are_served_warm():
    assert wr.wanted(["swebench-replay", "--logs", "x"], {})
    assert wr.wanted(["llm-sweep"], {"BENCHMAKER_PREFECT_SERVER": "reuse"})
    assert not wr.wanted(["swebench-replay", "--help"], {})
    assert not wr.wanted(["sql", "SELECT 1"], {})
    assert not wr.wanted([], {})
    assert not wr.wanted(["swebench-replay"], {"BENCHMAKER_PREFECT_SERVER": "ephemeral"})
    assert not wr.wanted(["swebench-replay"], {wr.WARM_ENV: "off"})


def test_changed_names_the_first_file_that_changed(tmp_path: Path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    files = {str(a): (a.stat().st_mtime_ns, 6), str(b): (-1, -1)}
    assert wr.changed(files) is None
    b.write_text("")
    assert wr.changed(files) == str(b)
    b.unlink()
    a.write_text("x = 22\n")
    assert wr.changed(files) == str(a)


@pytest.mark.slow  # a real runner: Prefect and the flows imported once (2-5 s here)
def test_a_warm_call_prints_and_exits_as_a_cold_one(env: dict[str, str]):
    record = _ready_runner(env)
    cold_env = {**env, wr.WARM_ENV: "off"}
    warm, cold = _cli(DRY_RUN, env), _cli(DRY_RUN, cold_env)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm.returncode == 0 and warm.stdout.startswith("plan: 2 sweep point(s) x 1 trajectory(ies)")
    bad = ["swebench-replay", "--logs", str(EXAMPLE), "--concurrency-sweep", "0", "--dry-run"]
    warm_bad, cold_bad = _cli(bad, env), _cli(bad, cold_env)
    assert warm_bad.returncode == cold_bad.returncode == 2
    assert warm_bad.stderr == cold_bad.stderr and warm_bad.stderr.count("\n") == 1
    served = [line for line in _log(env).splitlines() if ": served pid " in line]
    assert [line.split(": served pid ")[1].split(": ", 1)[1] for line in served] == [
        " ".join(DRY_RUN), " ".join(bad)]
    (after,) = _with_env(env, wr.runners, Path(env["PREFECT_HOME"]))
    assert (after["pid"], after["served"]) == (record["pid"], 2)
    # each caller had its exit code from the child and said so: reaped, never "went away"
    deadline = time.monotonic() + 30
    while _log(env).count(" exited with ") < 2:
        assert time.monotonic() < deadline, _log(env)
        time.sleep(0.05)
    assert [line.split(" exited with ")[1] for line in _log(env).splitlines() if " exited with " in line] == ["0", "2"]
    assert "went away" not in _log(env)


@pytest.mark.slow
def test_a_runner_whose_files_changed_refuses_exits_and_is_replaced(env: dict[str, str]):
    first = _ready_runner(env)
    # the Prefect profiles file is among what a runner watches (Prefect reads it at import)
    (Path(env["PREFECT_HOME"]) / "profiles.toml").write_text('active = "local"\n\n[profiles.local]\n')
    run = _cli(DRY_RUN, env)  # refused, then run cold in the caller's process, which starts a new runner
    assert run.returncode == 0 and run.stdout.startswith("plan: 2 sweep point(s)")
    assert _gone(first["pid"])
    assert f"refused: changed since the runner started: {env['PREFECT_HOME']}/profiles.toml" in _log(env)
    second = _ready_runner_again(env, first["pid"])
    assert second["pid"] != first["pid"]


def _ready_runner_again(env: dict[str, str], old_pid: int, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for record in _with_env(env, wr.runners, Path(env["PREFECT_HOME"])):
            if record["pid"] != old_pid and record["state"] == "ready":
                return record
        time.sleep(0.05)
    raise AssertionError(f"no new runner: {_log(env)}")


class SilentApi:
    """A TCP listener on 127.0.0.1 that accepts connections and never answers: a
    Prefect API a flow command blocks on (its first request) until a signal ends it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/api"
        self.conns: list[socket.socket] = []

    def wait_for_a_client(self, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
        self.sock.settimeout(0.05)
        deadline = time.monotonic() + timeout_s
        while not self.conns:
            try:
                self.conns.append(self.sock.accept()[0])
            except TimeoutError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()

    def drop_clients(self) -> None:
        for c in self.conns:
            c.close()
        self.conns = []

    def close(self) -> None:
        self.drop_clients()
        self.sock.close()


def _flow_command(tmp_path: Path, name: str) -> list[str]:
    return ["swebench-replay", "--logs", str(EXAMPLE), "--concurrency-sweep", "1", "--out-dir",
            str(tmp_path / name), "--warehouse", str(tmp_path / f"{name}.duckdb")]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_a_warm_command_as_it_ends_a_cold_one(env: dict[str, str], tmp_path: Path,
                                                                 sig: signal.Signals):
    """The flow command blocks on its Prefect API (a server that never answers); the
    caller's signal is forwarded to the child, and the caller ends as the cold command
    does: killed by SIGTERM (no flow run yet: no handler of Prefect's), exit 130 without
    a traceback on SIGINT."""
    api = SilentApi()
    env["PREFECT_API_URL"] = api.url
    try:
        _ready_runner(env)
        ends = {}
        for warm in (True, False):
            proc = subprocess.Popen([str(BENCHMAKER), *_flow_command(tmp_path, f"warm-{warm}")], cwd=ROOT,
                                    env=env if warm else {**env, wr.WARM_ENV: "off"}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            api.wait_for_a_client(proc)
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
            api.drop_clients()
            ends[warm] = (proc.returncode, "Traceback" in err, out.startswith("plan: 1 sweep point(s)"))
    finally:
        api.close()
    assert ends[True] == ends[False] == ((-sig, False, True) if sig == signal.SIGTERM else (130, False, True))
    child = _served_child(env)
    assert f"pid {child} exited with {128 + sig}" in _log(env)


@pytest.mark.slow
def test_a_caller_that_dies_hangs_its_child_up(env: dict[str, str], tmp_path: Path):
    """The flow command blocks on a Prefect API that never answers; its caller is
    killed (SIGKILL: nothing forwarded), and the runner hangs the child up."""
    api = SilentApi()
    env["PREFECT_API_URL"] = api.url
    try:
        _ready_runner(env)
        proc = subprocess.Popen([str(BENCHMAKER), *_flow_command(tmp_path, "killed")], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        api.wait_for_a_client(proc)
        child = _served_child(env)
        proc.kill()
        proc.wait(timeout=30)
        assert _gone(child)
    finally:
        api.close()
    deadline = time.monotonic() + 15
    while f"pid {child} exited with 129" not in _log(env):
        assert time.monotonic() < deadline, _log(env)
        time.sleep(0.05)
    assert f"caller of pid {child} went away" in _log(env)


def _served_child(env: dict[str, str], timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in _log(env).splitlines():
            if ": served pid " in line:
                return int(line.split(": served pid ")[1].split(":")[0])
        time.sleep(0.02)
    raise AssertionError(_log(env))


@pytest.mark.slow
@pytest.mark.parametrize("closed", ["1", "2"])
def test_a_closed_stdout_or_stderr_stays_closed_and_the_command_runs(env: dict[str, str], closed: str):
    """With fd 1 (or 2) closed, the caller's socket must not take its place and be
    passed to the child as its output: the command runs, as a cold one does."""
    _ready_runner(env)
    other = "2" if closed == "1" else "1"
    script = f'"$0" "$@" {closed}>&- {other}>/dev/null; echo "rc=$?" >&3'
    runs = {}
    for warm in (True, False):
        run = subprocess.run(["bash", "-c", f"exec 3>&1; {script}", str(BENCHMAKER), *DRY_RUN], cwd=ROOT,
                             env=env if warm else {**env, wr.WARM_ENV: "off"}, capture_output=True, text=True,
                             timeout=120)
        runs[warm] = run.stdout
    assert runs[True] == runs[False]
    assert runs[True] == "rc=0\n"  # the socket was not handed to the child as its output
    assert ": served pid " in _log(env) and " exited with 0" in _log(env)


@pytest.mark.slow
def test_stopping_the_runner_mid_command_ends_the_command_as_sigterm_does(env: dict[str, str], tmp_path: Path):
    """`server stop` (SIGTERM to the runner) while a warm command runs: the runner
    passes SIGTERM on, the caller ends as a cold command does on SIGTERM, and the runner
    exits after the caller has its code."""
    api = SilentApi()
    env["PREFECT_API_URL"] = api.url
    try:
        record = _ready_runner(env)
        proc = subprocess.Popen([str(BENCHMAKER), *_flow_command(tmp_path, "stopped")], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        api.wait_for_a_client(proc)
        child = _served_child(env)
        stopped = _with_env(env, wr.stop_runners, Path(env["PREFECT_HOME"]))
        proc.communicate(timeout=60)
    finally:
        api.close()
    assert stopped == [record["pid"]] and proc.returncode == -signal.SIGTERM
    assert _gone(child) and _gone(record["pid"])
    assert f"pid {child} exited with 143" in _log(env) and "draining: 1 command(s) still running" in _log(env)


@pytest.mark.slow
def test_server_stop_and_status_cover_the_runner(env: dict[str, str]):
    record = _ready_runner(env)
    status = _cli(["server", "status"], env)
    assert status.returncode == 1  # no Prefect server; the runner is not one
    assert f"warm runner: pid {record['pid']}, ready, since {record['started_at']}, 0 command(s) served" \
        in status.stdout
    stop = _cli(["server", "stop"], env)
    assert stop.returncode == 0 and f"stopped the warm runner (pid {record['pid']})" in stop.stdout
    assert _gone(record["pid"])
    rdir = Path(env["XDG_RUNTIME_DIR"]) / "benchmaker-warm"
    assert sorted(p.name for p in rdir.iterdir()) == []
    assert _with_env(env, wr.runners, Path(env["PREFECT_HOME"])) == []
