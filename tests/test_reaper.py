"""The servers the suite starts die with the test process that started them, also when
it is SIGKILLed (tests/reaper.py): a real process group of `sleep`s, and a real pytest
session's local Prefect server (tests/conftest.py `prefect_server`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.reaper import GRACE_S

ROOT = Path(__file__).resolve().parents[1]

# a process that starts a reaper and a group of two `sleep`s in a session of their own,
# gives the group to the reaper (or gives it and takes it back: `forget`), prints the
# group's id and waits to be killed
_OWNER = """
import subprocess, sys, time
from tests.reaper import Reaper
reaper = Reaper()
group = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], start_new_session=True)
reaper.watch(group.pid)
if sys.argv[1] == "forget":
    reaper.forget(group.pid)
print(group.pid, reaper.pid, flush=True)
time.sleep(300)
"""


def _group_alive(pgid: int) -> bool:
    """True while a process of group `pgid` runs (zombies aside)."""
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _pid_alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(alive, ident: int, within_s: float) -> None:
    """Wait until `alive(ident)` is False; fails after `within_s` s."""
    deadline = time.monotonic() + within_s
    while alive(ident):
        assert time.monotonic() < deadline, f"{ident} still runs after {within_s:g} s"
        time.sleep(0.1)


@pytest.mark.parametrize("mode", ["watch", "forget"])
def test_a_sigkilled_owner_takes_the_groups_it_watches_with_it(mode: str) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, mode], cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert owner.stdout is not None
    pgid, reaper = map(int, owner.stdout.readline().split())
    try:
        assert _group_alive(pgid) and _pid_alive(reaper)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        # the reaper sees its owner die and exits once it has killed what it watched (`sleep`
        # ends at SIGTERM, well within the grace before SIGKILL)
        _wait_gone(_pid_alive, reaper, within_s=GRACE_S + 25)
        assert _group_alive(pgid) is (mode == "forget")
    finally:
        owner.stdout.close()
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


_SESSION_TEST = """
import os
from pathlib import Path

import pytest


@pytest.mark.prefect
def test_holds_the_server(prefect_server):
    Path(os.environ["READY_FILE"]).write_text(str(prefect_server.pid))
    import time

    time.sleep(600)
"""


@pytest.mark.slow  # a real `prefect server start` in a new PREFECT_HOME: 15-60 s
def test_a_sigkilled_pytest_session_leaves_no_prefect_server(tmp_path: Path) -> None:
    (tmp_path / "test_session.py").write_text(_SESSION_TEST)
    ready = tmp_path / "ready"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home"), "READY_FILE": str(ready), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest"]
        + ["-c", os.devnull, "--rootdir", str(tmp_path), "-W", "ignore::pytest.PytestUnknownMarkWarning"]
        + [str(tmp_path / "test_session.py")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 400  # a busy host migrates a new database slowly
        while not ready.exists():
            assert session.poll() is None, session.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, "the session's Prefect server did not start"
            time.sleep(0.2)
        pid = int(ready.read_text())
        state = json.loads((tmp_path / "home" / "pytest-workers" / "main" / "benchmaker-server.json").read_text())
        assert state["pid"] == pid and _group_alive(pid)
        session.send_signal(signal.SIGKILL)
        session.wait(timeout=30)
        _wait_gone(_group_alive, pid, within_s=GRACE_S + 25)
    finally:
        if session.poll() is None:
            session.kill()
        session.communicate()
