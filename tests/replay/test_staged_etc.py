"""confine.staged_etc: the staged /etc copy of a process that was killed (no exit
handler ran) is removed by the next one; a live process's copy is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmaker.agent.sandbox.confine import STAGED_ETC_PREFIX, remove_stale_staged_etc, staged_etc


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_process_copy_is_removed_and_a_live_one_kept(tmp_path: Path) -> None:
    dead = tmp_path / f"{STAGED_ETC_PREFIX}{_dead_pid()}-abc123"
    (dead / "ssl").mkdir(parents=True)
    live = tmp_path / f"{STAGED_ETC_PREFIX}{os.getppid()}-def456"  # the pytest runner's parent: alive
    live.mkdir()
    other = tmp_path / f"{STAGED_ETC_PREFIX}xyz"  # an older name without a pid: not ours to judge
    other.mkdir()
    assert remove_stale_staged_etc(str(tmp_path)) == [str(dead)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_a_new_copy_is_named_by_its_pid_and_sweeps_first(tmp_path: Path) -> None:
    dead = tmp_path / f"{STAGED_ETC_PREFIX}{_dead_pid()}-abc123"
    dead.mkdir()
    root = Path(staged_etc(str(tmp_path)))
    assert root.name.startswith(f"{STAGED_ETC_PREFIX}{os.getpid()}-")
    assert [p.name for p in tmp_path.iterdir()] == [root.name]
    assert (root / "passwd").exists() == Path("/etc/passwd").exists()
