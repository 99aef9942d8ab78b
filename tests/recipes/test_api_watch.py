"""A Prefect server lost mid-command (recipes/api_watch.py): what counts as lost (a
refused connect, never a slow server), the fail-fast settings, the one line; and, slow,
a real CLI run whose real Prefect server is killed mid-run exits 1 promptly with its
results kept."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmaker.recipes import api_watch as aw

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def shared_settings():
    """The settings that threads without a settings context see (Prefect's event and log
    workers), and the logger level, that fail_fast changes: restored after the test."""
    from prefect.settings import get_current_settings

    box: list = []
    seer = threading.Thread(target=lambda: box.append(get_current_settings()))
    seer.start()
    seer.join()
    shared = box[0]
    saved = (shared.client.max_retries, shared.logging.to_api.enabled, shared.internal.logging_level)
    level = logging.getLogger("prefect.events.clients").level
    yield shared
    shared.client.max_retries, shared.logging.to_api.enabled, shared.internal.logging_level = saved
    logging.getLogger("prefect.events.clients").setLevel(level)


def test_refused_only_when_nothing_listens() -> None:
    port = _free_port()
    assert aw.refused("127.0.0.1", port) is True
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        assert aw.refused("127.0.0.1", port) is False
        # a slow server: it listens but never accepts; the kernel completes the connect
        assert aw.refused("127.0.0.1", port) is False


def _wait_lost(watch: aw.ApiWatch, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while watch.lost_at is None and time.monotonic() < deadline:
        time.sleep(0.01)


def test_lost_after_consecutive_refusals_only() -> None:
    # refused before it was ever there (not lost: a wrong URL), there, one miss, there, two
    answers = iter([True, True, True, False, True, False, True, True, True])
    lost: list[int] = []
    watch = aw.ApiWatch(
        "http://127.0.0.1:1/api",
        poll_s=0.001,
        misses=2,
        on_lost=lambda: lost.append(1),
        probe=lambda h, p: next(answers),
    ).start()
    _wait_lost(watch)
    watch.stop()
    assert lost == [1] and watch.lost_at is not None  # the 7th and 8th answers, once
    assert next(answers) is True  # the 9th was never asked: the watch ended when it called on_lost
    assert (watch.host, watch.port) == ("127.0.0.1", 1)
    with pytest.raises(ValueError, match="no host to watch"):
        aw.ApiWatch("unix:///tmp/x")


def test_fail_fast_makes_one_attempt_and_sends_no_logs(shared_settings) -> None:
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, get_current_settings, temporary_settings

    with temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 5}):
        settings = get_current_settings()
        assert settings is not shared_settings
        act = threading.Thread(target=aw.fail_fast(settings))  # on a thread of its own, as the watch's
        act.start()
        act.join()
        assert PREFECT_CLIENT_MAX_RETRIES.value() == 0 and settings.logging.to_api.enabled is False
        assert settings.internal.logging_level == "CRITICAL"
    assert shared_settings.client.max_retries == 0 and shared_settings.internal.logging_level == "CRITICAL"
    assert logging.getLogger("prefect.events.clients").level == logging.CRITICAL


def test_a_server_killed_during_the_body_ends_it_through_exit_lost(shared_settings, monkeypatch) -> None:
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    from benchmaker.flows import outcome

    # this process ran no flow run (an earlier flow test in the same worker may have)
    monkeypatch.setattr(outcome, "recorded_run_dirs", lambda: [])

    port = _free_port()
    exits: list[aw.ApiWatch] = []
    server = socket.socket()
    server.bind(("127.0.0.1", port))
    server.listen(8)
    with temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 5}):
        with aw.exit_if_api_lost(f"http://127.0.0.1:{port}/api", poll_s=0.05, exit_lost=exits.append) as watch:
            time.sleep(0.3)
            assert watch is not None and watch.lost_at is None  # listening: not lost
            server.close()
            for _ in range(200):
                if watch.lost_at is not None:
                    break
                time.sleep(0.05)
            assert PREFECT_CLIENT_MAX_RETRIES.value() == 0  # later calls fail at once
        assert exits == [watch]
        line = aw.lost_message(watch)
    assert re.fullmatch(
        rf"benchmaker: error: lost the Prefect server at http://127\.0\.0\.1:{port}/api \(nothing listens there "
        r"since \d\d:\d\d:\d\d UTC: stopped or killed\); what was measured is none \(the run had not started\); "
        r"the flow run stays Running there: `benchmaker retry <flow run id>` resumes it once the server runs again",
        line,
    )


def test_a_server_that_is_back_when_the_body_ends_changes_nothing(shared_settings) -> None:
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    exits: list[aw.ApiWatch] = []
    answers = [False, True, True]  # there, refused twice (lost), then back
    with temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 5}):
        probe = lambda h, p: answers.pop(0) if answers else False  # noqa: E731
        with aw.exit_if_api_lost("http://127.0.0.1:1/api", poll_s=0.001, probe=probe, exit_lost=exits.append) as watch:
            assert watch is not None
            _wait_lost(watch)
            assert watch.lost_at is not None
        assert exits == []
    with aw.exit_if_api_lost(None) as nothing:
        assert nothing is None


@dataclass
class LocalServer:
    """A real local Prefect server under a temporary PREFECT_HOME, and the environment of
    a CLI process that reuses it."""

    home: Path
    env: dict[str, str]
    state: Any

    def replay(self, out: Path, sweep: str, latency: str, *more: str, tmp: Path | None = None) -> subprocess.Popen:
        """`benchmaker swebench-replay` of the bundled example, started in the background
        (`more`: further flags; `tmp`: its TMPDIR)."""
        args = ["--concurrency", sweep, "--latency", latency, "--warehouse", str(out / "w.duckdb"), *more]
        return subprocess.Popen(
            [sys.executable, "-m", "benchmaker.recipes.cli", "swebench-replay", "--logs", str(EXAMPLE), *args]
            + ["--out-dir", str(out / "art")],
            cwd=ROOT,
            env=self.env if tmp is None else {**self.env, "TMPDIR": str(tmp)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PREFECT_HOME for this file's servers: its database is migrated by the first
    start only (20-40 s, more when busy); each test finds its own flow run by id."""
    return tmp_path_factory.mktemp("api-watch") / "prefect-home"


@pytest.fixture
def local_server(prefect_home: Path) -> Iterator[LocalServer]:
    """A server of its own for each test (the tests kill it), on the module's database."""
    from benchmaker.recipes import prefect_server as ps

    home = prefect_home
    drop = ("PREFECT_API_URL", "BENCHMAKER_PREFECT_SERVER", "PREFECT_API_AUTH_STRING")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PREFECT_HOME=str(home), PYTHONPATH=str(ROOT))
    # a long start timeout: a first start migrates a fresh database (over 90 s when busy)
    state = ps.ensure_server(home, say=lambda m: None, start=lambda h: ps.start_server(h, timeout_s=400))
    try:
        yield LocalServer(home, env, state)
    finally:
        ps.stop_server(home, grace_s=5)


def _wait_for(run: subprocess.Popen, pattern: str, under: Path) -> Path:
    """The first file matching `pattern` under `under`, waiting while `run` runs (300 s at most)."""
    deadline = time.monotonic() + 300  # a busy host starts Python and converts slowly
    while not (found := list(under.glob(pattern))):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.2)
    return found[0]


@pytest.mark.slow  # a real `prefect server start` (10-40 s), killed during a CLI flow run
@pytest.mark.prefect
def test_a_run_whose_server_is_killed_exits_1_promptly_with_its_results(
    tmp_path: Path, local_server: LocalServer
) -> None:
    state, art = local_server.state, tmp_path / "art"
    run = local_server.replay(tmp_path, "1,2", "fixed:2000:0")
    try:
        _wait_for(run, "swebench-replay-*/flow_process.json", art)
        os.killpg(state.pid, signal.SIGKILL)  # the server and its children, at once
        _, err = run.communicate(timeout=400)
        exited = time.time()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    (run_dir,) = art.glob("swebench-replay-*")
    assert run.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"benchmaker: error: lost the Prefect server at {state.url} (nothing listens there since ")
    flow_run_id = json.loads((run_dir / "manifest.json").read_text())["flow_run_id"]
    assert last.endswith(
        f"what was measured is kept in {run_dir}; the flow run stays Running there: "
        f"`benchmaker retry {flow_run_id}` resumes it once the server runs again"
    )
    # measured on without the API: both points' summaries, the sweep's points and the report
    for name in ("points/c1/point_summary.json", "points/c2/point_summary.json", "sweep_points.jsonl"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "points/c2/point_summary.json").read_text())["episodes"] == 2
    # and it ended within seconds of its last file (it hung ~2-4 min on Prefect's retries and drains)
    last_write = max(p.stat().st_mtime for p in run_dir.rglob("*") if p.is_file())
    assert exited - last_write < 30, exited - last_write


def _processes_naming(piece: str) -> list[str]:
    """The command lines of live processes (zombies aside) whose command line holds `piece`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):  # ended meanwhile, or not a process
            continue
        if piece in cmdline and state != "Z" and proc.name != str(os.getpid()):
            found.append(cmdline)
    return found


@pytest.mark.slow  # a real `prefect server start`, killed during a CLI flow run in execute mode
@pytest.mark.prefect
def test_a_run_whose_server_is_killed_leaves_no_temp_root_and_no_replay_server(
    tmp_path: Path, local_server: LocalServer
) -> None:
    """The lost-server exit skips the interpreter's exit: the confined sandbox's staged
    /etc root (made in TMPDIR) and the replay servers must still go with the process."""
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("execute mode's sandbox needs bwrap (make install-sandbox)")
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o755)
    state, art = local_server.state, tmp_path / "art"
    execute = ("--mode", "execute", "--task-dirs", str(ROOT / "examples" / "tiny-task"))
    run = local_server.replay(tmp_path, "1,2", "fixed:2000:0", *execute, tmp=tmp)
    try:
        _wait_for(run, "swebench-replay-*/points/c1/point_summary.json", art)  # the sandbox ran, c2 measures
        assert [p.name for p in tmp.glob("bm-sandbox-etc-*")], "no staged /etc root: not confined?"
        assert _processes_naming("benchmaker.replay_server.server"), "no replay server running"
        os.killpg(state.pid, signal.SIGKILL)
        _, err = run.communicate(timeout=400)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 1, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(f"benchmaker: error: lost the Prefect server at {state.url} ")
    assert sorted(p.name for p in tmp.iterdir()) == []
    assert [c for c in _processes_naming(str(tmp_path)) if "prefect" not in c] == []


def _states(url: str, secret: str, flow_run_id: str) -> list[str]:
    """The names of the flow run's states on the server, oldest first (Prefect's REST API)."""
    import base64
    import urllib.request

    req = urllib.request.Request(
        f"{url}/flow_run_states/?flow_run_id={flow_run_id}",
        headers={"Authorization": "Basic " + base64.b64encode(secret.encode()).decode()},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        states = json.loads(resp.read())
    return [s["name"] for s in sorted(states, key=lambda s: s["timestamp"])]


@pytest.mark.slow  # a real `prefect server start`, a CLI flow run SIGKILLed, then `benchmaker retry`
@pytest.mark.prefect
def test_a_sigkilled_cli_run_is_marked_crashed_and_resumed_by_retry(tmp_path: Path, local_server: LocalServer) -> None:
    from benchmaker.recipes import prefect_server as ps

    state, art, env = local_server.state, tmp_path / "art", local_server.env
    # 2 s a turn: c2's 4 turns take 8 s, time enough to kill the run while c2 measures
    run = local_server.replay(tmp_path, "1,2", "fixed:2000:0")
    try:
        _wait_for(run, "swebench-replay-*/points/c1/point_summary.json", art)  # killed while c2 measures
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=60)
        (run_dir,) = art.glob("swebench-replay-*")
        flow_run_id = json.loads((run_dir / "manifest.json").read_text())["flow_run_id"]
        secret = ps.auth_secret(local_server.home)
        assert _states(state.url, secret, flow_run_id)[-1] == "Running"  # nobody told the server
        retry = subprocess.run(
            [sys.executable, "-m", "benchmaker.recipes.cli", "retry", flow_run_id],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        # 1: resumed and finished, its point judged invalid (event-loop lag on a busy host)
        assert retry.returncode in (0, 1), retry.stdout[-3000:] + retry.stderr[-3000:]
        assert re.search(rf"^flow run {flow_run_id}: (Completed|Invalid)", retry.stdout, re.M), retry.stdout
        history = _states(state.url, secret, flow_run_id)
        assert "Crashed" in history and history[-1] in ("Completed", "Invalid"), history
        assert (run_dir / "points/c2/point_summary.json").is_file()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
