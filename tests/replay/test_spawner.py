"""benchmaker.agent.sandbox.spawner: the helper process and the inline spawner run commands the
same way (exit codes, output, limits, timeout and cancellation kill the group); a dead
helper is a clear SandboxError; commands never fork from the measuring process."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from benchmaker.agent.sandbox import TRUNCATION_MARKER, LocalSandboxFactory, SandboxError
from benchmaker.agent.sandbox.spawner import InlineSpawner, ProcessSpawner, Spawner
from tests.replay._spawners import alive, parent_pids, pids_running, spawner  # noqa: F401 - the fixture

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}


async def _gone(pid: int, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def _pid_from(path: Path, within_s: float = 20.0) -> int:
    deadline = time.monotonic() + within_s
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} never written"
        await asyncio.sleep(0.02)
    return int(path.read_text())


async def _pid_running(token: str, within_s: float) -> int:
    deadline = time.monotonic() + within_s
    while not (pids := pids_running(token)):
        assert time.monotonic() < deadline, f"no process with argument {token} after {within_s:g} s"
        await asyncio.sleep(0.02)
    return pids[0]


async def test_exit_code_and_interleaved_output(spawner: Spawner, tmp_path: Path):
    res = await spawner.run(["bash", "-c", "echo out; echo err >&2; exit 3"], cwd=tmp_path, env=ENV)
    assert (res.exit_code, res.stdout, res.stderr, res.timed_out, res.truncated, res.total_bytes) == (
        3,
        b"out\nerr\n",
        b"",
        False,
        False,
        8,
    )  # "out\n" + "err\n"


async def test_stderr_apart_cwd_and_exact_env(spawner: Spawner, tmp_path: Path):
    res = await spawner.run(
        ["bash", "-c", "pwd; echo ${HOME:-nohome} $X; echo e >&2"],
        cwd=tmp_path,
        env={**ENV, "X": "1"},
        merge_stderr=False,
    )
    assert (res.exit_code, res.stdout, res.stderr) == (0, f"{tmp_path}\nnohome 1\n".encode(), b"e\n")


async def test_signal_death_is_a_negative_exit_code(spawner: Spawner, tmp_path: Path):
    res = await spawner.run(["bash", "-c", "kill -TERM $$"], cwd=tmp_path, env=ENV)
    assert (res.exit_code, res.timed_out) == (-signal.SIGTERM, False)


async def test_output_over_the_limit_keeps_head_and_tail(spawner: Spawner, tmp_path: Path):
    res = await spawner.run(
        ["bash", "-c", "printf 'a%.0s' $(seq 500); printf 'b%.0s' $(seq 500)"],
        cwd=tmp_path,
        env=ENV,
        max_output_bytes=100,
    )
    # 1,000 bytes written, 100 kept: the first 50 'a', the marker for 900, the last 50 'b'
    assert res.stdout == b"a" * 50 + TRUNCATION_MARKER.format(n=900).encode() + b"b" * 50
    assert (res.truncated, res.total_bytes, res.exit_code) == (True, 1000, 0)


async def test_timeout_kills_the_whole_group(spawner: Spawner, tmp_path: Path):
    pidfile = tmp_path / "child.pid"
    t0 = time.monotonic()
    res = await spawner.run(
        ["bash", "-c", f"(sleep 30 & echo $! > {pidfile}; wait); echo never"], cwd=tmp_path, env=ENV, timeout_s=0.5
    )
    assert (res.timed_out, res.exit_code, res.stdout) == (True, None, b"")
    assert time.monotonic() - t0 < 15.0  # the 0.5 s deadline, not sleep's 30 s (wide margin: busy host)
    assert await _gone(int(pidfile.read_text()))  # the background grandchild too


async def test_stray_background_child_is_killed_after_exit(spawner: Spawner, tmp_path: Path):
    pidfile = tmp_path / "child.pid"
    res = await spawner.run(
        ["bash", "-c", f"sleep 30 >/dev/null 2>&1 & echo $! > {pidfile}; exit 0"], cwd=tmp_path, env=ENV
    )
    assert res.exit_code == 0
    assert await _gone(int(pidfile.read_text()))


async def test_failed_spawn_raises_the_same_oserror(spawner: Spawner, tmp_path: Path):
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError) as info:
        await spawner.run(["bash", "-c", "true"], cwd=missing, env=ENV)
    assert os.fspath(info.value.filename) == str(missing)


async def test_cancellation_kills_the_group_before_it_propagates(spawner: Spawner, tmp_path: Path):
    pidfile = tmp_path / "child.pid"
    task = asyncio.ensure_future(
        spawner.run(["bash", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], cwd=tmp_path, env=ENV, timeout_s=60.0)
    )
    child = await _pid_from(pidfile)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _gone(child)


async def test_copytree_ignores_patterns_and_rmtree_removes(spawner: Spawner, tmp_path: Path):
    src = tmp_path / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    (src / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    (src / "link").symlink_to("pkg/a.py")
    await spawner.copytree(src, tmp_path / "dst", ignore=("__pycache__",))
    dst = tmp_path / "dst"
    assert sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*")) == ["link", "pkg", "pkg/a.py"]
    assert os.readlink(dst / "link") == "pkg/a.py"  # symlinks kept as links
    with pytest.raises(FileExistsError):
        await spawner.copytree(src, dst)
    await spawner.rmtree(dst)
    assert not dst.exists()


async def test_commands_are_children_of_the_helper_not_of_this_process(tmp_path: Path):
    sp = await ProcessSpawner.start()
    try:
        res = await sp.run(["bash", "-c", "echo $PPID"], cwd=tmp_path, env=ENV, new_session=False)
    finally:
        await sp.aclose()
    assert int(res.stdout) == sp.pid != os.getpid()


async def test_the_loop_keeps_ticking_while_commands_run(tmp_path: Path):
    """Gross blocking only (a busy host delays any tick): 4 commands of 1 s each run at
    once; a 10 ms ticker on the calling loop gets at least 10 of its ~100 ticks."""
    sp = await ProcessSpawner.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.ensure_future(ticker())
    try:
        results = await asyncio.gather(*(sp.run(["sleep", "1"], cwd=tmp_path, env=ENV) for _ in range(4)))
    finally:
        t.cancel()
        await sp.aclose()
    assert [r.exit_code for r in results] == [0, 0, 0, 0]
    assert ticks >= 10


async def test_a_killed_helper_fails_pending_and_later_calls_clearly(tmp_path: Path):
    sp = await ProcessSpawner.start()
    try:
        pending = asyncio.ensure_future(sp.run(["sleep", "30"], cwd=tmp_path, env=ENV))
        await asyncio.sleep(0.2)
        os.kill(sp.pid, signal.SIGKILL)
        with pytest.raises(SandboxError) as info:
            await pending
        assert str(info.value) == f"sandbox spawner (pid {sp.pid}) exited with code -9"
        with pytest.raises(SandboxError, match=r"exited with code -9"):
            await sp.run(["true"], cwd=tmp_path, env=ENV)
        assert sp.alive is False
    finally:
        await sp.aclose()


async def test_closing_the_helper_kills_what_runs_in_it(tmp_path: Path):
    pidfile = tmp_path / "child.pid"
    sp = await ProcessSpawner.start()
    pending = asyncio.ensure_future(
        sp.run(["bash", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], cwd=tmp_path, env=ENV)
    )
    child = await _pid_from(pidfile)
    await sp.aclose()
    with pytest.raises(SandboxError, match=rf"^sandbox spawner \(pid {sp.pid}\) was closed"):
        await pending
    assert await _gone(child)
    assert not alive(sp.pid)


async def test_factory_sandboxes_use_its_helper_once_started(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    factory = LocalSandboxFactory()
    unstarted = await factory(None)
    assert isinstance(unstarted.spawner, InlineSpawner)
    await unstarted.close()
    await factory.start()
    helper = factory.spawner
    assert helper is not None
    try:
        sb = await factory(type("Task", (), {"repo": repo})())
        try:
            assert sb.spawner is helper
            token = f"{os.getpid()}{time.monotonic_ns() % 100000}"
            run = asyncio.ensure_future(sb.exec(f"cat a.txt; sleep 0.{token}"))
            parents: list[int] = []
            while not parents and not run.done():
                found = pids_running(f"0.{token}")
                parents = parent_pids(found[0]) if found else []
                await asyncio.sleep(0.01)
            res = await run
            assert res.output == "a\n"
            assert helper.pid in parents  # the confined command descends from the helper
        finally:
            await sb.close()
        assert not Path(sb.workdir).exists()
    finally:
        await factory.aclose()
    assert factory.spawner is None and not alive(helper.pid)


async def test_an_episode_whose_helper_died_ends_with_a_sandbox_error(tmp_path: Path):
    from benchmaker.agent.harness import run_episode
    from benchmaker.agent.verifier import load_task
    from benchmaker.replay_server.process import start_replay_server
    from benchmaker.trajectories.convert import iter_trajectories

    root = Path(__file__).resolve().parents[2]
    (traj,) = list(iter_trajectories(root / "examples" / "recordings" / "tiny-task.pi.jsonl"))
    (tmp_path / "t.jsonl").write_text(traj.model_dump_json() + "\n")
    factory = LocalSandboxFactory()
    await factory.start()
    assert factory.spawner is not None
    pid = factory.spawner.pid
    os.kill(pid, signal.SIGKILL)
    try:
        with start_replay_server(tmp_path / "t.jsonl") as srv:
            res = await run_episode(
                traj, srv.url, mode="execute", sandbox=factory, task=load_task(root / "examples" / "tiny-task")
            )
    finally:
        await factory.aclose()
    assert (res.episode.outcome, res.episode.error) == (
        "error",
        f"sandbox: sandbox spawner (pid {pid}) exited with code -9",
    )


@pytest.mark.slow  # ~7 s: an execute-mode point on the engine, the example task's pytest runs
async def test_cancelling_an_execute_point_kills_its_commands_and_stops_the_helper(tmp_path: Path):
    """Ctrl-C / SIGTERM cancel the point's task: the verifier's command (here a 30 s
    sleep) is killed, the helper exits, and the model calls already made stay written."""
    import shutil

    from benchmaker.agent.verifier import load_task
    from benchmaker.replay_server.process import start_replay_server
    from benchmaker.sweep.point import ReplayPoint
    from benchmaker.sweep.point_run import run_point
    from benchmaker.trajectories.convert import iter_trajectories

    root = Path(__file__).resolve().parents[2]
    task_dir = tmp_path / "task"
    shutil.copytree(root / "examples" / "tiny-task", task_dir)
    token = f"30.{os.getpid()}{time.monotonic_ns() % 100000}"  # the verifier's sleep, found on the host by it
    (task_dir / "task.json").write_text(
        f'{{"task_id": "tiny-task", "test_command": "sleep {token} & wait", "timeout_s": 120}}'
    )
    task = load_task(task_dir)
    (traj,) = list(iter_trajectories(root / "examples" / "recordings" / "tiny-task.pi.jsonl"))
    (tmp_path / "t.jsonl").write_text(traj.model_dump_json() + "\n")
    factory = LocalSandboxFactory()
    with start_replay_server(tmp_path / "t.jsonl") as srv:
        point = asyncio.ensure_future(
            run_point(
                [traj],
                srv.url,
                tmp_path / "run",
                ReplayPoint(load="closed:1", mode="execute"),
                run_id="r",
                sandbox_factory=factory,
                tasks={task.task_id: task},
            )
        )
        child = await _pid_running(token, within_s=60.0)  # the 4 turns were played; the verifier runs
        helper = factory.spawner
        assert helper is not None
        point.cancel()
        with pytest.raises(asyncio.CancelledError):
            await point
    assert await _gone(child)
    assert factory.spawner is None and await _gone(helper.pid)
    samples = (tmp_path / "run" / "points" / "c1" / "samples.jsonl").read_bytes().splitlines()
    assert len(samples) == 4  # the episode's 4 model calls, written as they finished


def test_the_helper_imports_only_what_it_runs():
    """The helper process starts once per sweep point: its import of
    benchmaker.agent.sandbox.spawner loads neither httpx (FlashSandbox) nor the local sandbox,
    the engine or pydantic."""
    import subprocess
    import sys

    code = (
        "import sys, benchmaker.agent.sandbox.spawner; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'httpx', 'pydantic', 'aiohttp', 'benchmaker'}), "
        "sorted(m for m in sys.modules if m.startswith('benchmaker.agent.sandbox.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    assert out == "['benchmaker'] ['benchmaker.agent.sandbox.spawner']\n"
