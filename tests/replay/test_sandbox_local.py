"""benchmaker.agent.sandbox.local: workspace copy, timeout + process-group kill, truncation, diff."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from benchmaker.agent.sandbox import LocalSandbox, Sandbox, SandboxError
from benchmaker.agent.sandbox.spawner import Spawner
from tests.replay._spawners import alive, pids_running, spawner  # noqa: F401 - the fixture


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "pkg").mkdir(parents=True)
    (r / "pkg" / "a.py").write_text("x = 1\n")
    (r / ".git").mkdir()  # a source .git is never copied
    (r / ".git" / "junk").write_text("junk")
    return r


async def test_workspace_is_a_copy_and_diff_shows_edits_and_new_files(repo: Path, spawner: Spawner):
    sb = await LocalSandbox.create(repo, spawner=spawner)
    try:
        assert isinstance(sb, Sandbox)
        assert (await sb.read_file("pkg/a.py")) == b"x = 1\n"
        await sb.write_file("pkg/a.py", b"x = 2\n")
        await sb.write_file("new/b.txt", b"hi\n")
        await sb.exec("python3 -c 'import pkg' ; mkdir -p pkg/__pycache__ && touch pkg/__pycache__/a.pyc")
        diff = await sb.diff()
    finally:
        await sb.close()
    assert (repo / "pkg" / "a.py").read_text() == "x = 1\n"  # source untouched
    assert "-x = 1\n+x = 2\n" in diff
    assert "+++ b/new/b.txt" in diff
    assert "__pycache__" not in diff and "junk" not in diff
    assert not Path(sb.workdir).exists()  # close removed the temp dir


async def test_exec_combines_output_and_exit_code(repo: Path, spawner: Spawner):
    sb = await LocalSandbox.create(repo, spawner=spawner)
    try:
        res = await sb.exec("echo out; echo err >&2; exit 3")
    finally:
        await sb.close()
    assert (res.exit_code, res.output, res.timed_out, res.truncated) == (3, "out\nerr\n", False, False)


async def test_timeout_kills_the_whole_process_group(repo: Path, spawner: Spawner, tmp_path: Path):
    pidfile = tmp_path / "child.pid"
    sb = await LocalSandbox.create(repo, spawner=spawner, confined=False)
    try:
        t0 = time.monotonic()
        # a background grandchild that would outlive a plain kill of bash
        res = await sb.exec(f"(sleep 30 & echo $! > {pidfile}; wait) ; echo never", timeout_s=0.5)
        elapsed = time.monotonic() - t0
    finally:
        await sb.close()
    assert res.timed_out is True and res.exit_code is None
    assert elapsed < 5.0  # 0.5 s deadline, not 30 s
    child = int(pidfile.read_text())
    time.sleep(0.1)
    assert not alive(child)  # the sleeping grandchild is gone too


async def test_timeout_kills_everything_a_confined_command_started(repo: Path, spawner: Spawner):
    """Confined, the grandchild lives in the sandbox's PID namespace; it is found on the
    host by a unique argument while the command runs, and gone after the timeout."""
    token = f"30.{os.getpid()}{int(time.monotonic() * 1000) % 100000}"
    sb = await LocalSandbox.create(repo, spawner=spawner)
    try:
        t0 = time.monotonic()
        run = asyncio.ensure_future(sb.exec(f"(sleep {token} & wait) ; echo never", timeout_s=3.0))
        seen: list[int] = []
        while not seen and not run.done():
            seen = pids_running(token)
            await asyncio.sleep(0.02)
        res = await run
        elapsed = time.monotonic() - t0
    finally:
        await sb.close()
    assert seen, "the confined sleep was never seen running"
    assert res.timed_out is True and res.exit_code is None
    assert elapsed < 15.0  # 3 s deadline, not 30 s
    deadline = time.monotonic() + 5.0
    while pids_running(token) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert pids_running(token) == []


async def test_output_truncated_in_the_middle_with_marker(repo: Path, spawner: Spawner):
    sb = await LocalSandbox.create(repo, spawner=spawner, max_output_bytes=100)
    try:
        res = await sb.exec("python3 -c \"print('a' * 500, end=''); print('b' * 500, end='')\"")
    finally:
        await sb.close()
    # 1000 bytes written, cap 100: first 50 'a', marker naming 900 dropped bytes, last 50 'b'
    assert res.truncated is True
    assert res.output == "a" * 50 + "\n[... 900 bytes of output truncated ...]\n" + "b" * 50


async def test_paths_outside_workspace_are_refused(repo: Path, spawner: Spawner):
    sb = await LocalSandbox.create(repo, spawner=spawner)
    try:
        with pytest.raises(SandboxError, match="outside the workspace"):
            await sb.read_file("../../etc/passwd")
        with pytest.raises(FileNotFoundError):
            await sb.read_file("missing.txt")
    finally:
        await sb.close()


async def test_environment_does_not_leak_caller_secrets(repo: Path, spawner: Spawner, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    sb = await LocalSandbox.create(repo, spawner=spawner, env={"EXTRA": "1"})
    try:
        res = await sb.exec("echo ${OPENAI_API_KEY:-none} $EXTRA")
    finally:
        await sb.close()
    assert res.output == "none 1\n"


async def test_files_the_tools_write_stay_writable_by_confined_commands(repo: Path, spawner: Spawner):
    """write_file runs in this process (root here): what it creates is handed to the
    sandbox's user, so a later command can edit it and remove its directory."""
    sb = await LocalSandbox.create(repo, spawner=spawner)
    try:
        await sb.write_file("made/by/tool.txt", b"one\n")
        res = await sb.exec("echo two >> made/by/tool.txt && cat made/by/tool.txt && rm -r made && echo gone")
    finally:
        await sb.close()
    assert (res.exit_code, res.output) == (0, "one\ntwo\ngone\n")
