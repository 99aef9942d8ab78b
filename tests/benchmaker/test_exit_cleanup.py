"""benchmaker.engine.exit_cleanup in real child processes: a cleanup runs once whichever
way the process ends (a normal exit, an uncaught exception, exit_now), the last
registered first, and one that fails keeps none of the others from running."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = """
import atexit, os, sys
from benchmaker.engine.exit_cleanup import exit_now, on_exit, run_cleanups
log = sys.argv[1]
def note(what):
    with open(log, "a") as fh:
        fh.write(what + "\\n")
def boom():
    raise OSError("device busy")
atexit.register(note, "interpreter exit")  # before ours: runs after them
on_exit(note, "first registered")
on_exit(boom)
on_exit(note, "last registered")
"""


def _run(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = tmp_path / "log.txt"
    proc = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(body), str(log)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, log.read_text().splitlines() if log.exists() else []


def test_exit_now_runs_every_cleanup_once_then_exits_at_once(tmp_path: Path) -> None:
    proc, lines = _run(tmp_path, 'print("before", flush=True)\nexit_now(3)\nnote("not reached")')
    assert proc.returncode == 3
    # last registered first; the failing one said in one line; atexit's own handlers skipped
    assert lines == ["last registered", "first registered"]
    assert proc.stdout == "before\n"
    assert proc.stderr == "benchmaker: warning: cleanup boom failed: device busy\n"


@pytest.mark.parametrize(
    ("body", "code"),
    [("pass", 0), ('raise RuntimeError("bad")', 1), ("run_cleanups()\nsys.exit(4)", 4)],
    ids=["normal-exit", "uncaught-exception", "ran-early"],
)
def test_cleanups_run_once_at_interpreter_exit(tmp_path: Path, body: str, code: int) -> None:
    proc, lines = _run(tmp_path, body)
    assert proc.returncode == code, proc.stderr
    assert lines == ["last registered", "first registered", "interpreter exit"]
