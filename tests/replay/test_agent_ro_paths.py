"""benchmaker.agent.sandbox.local.agent_ro_paths: the folders a confined command-mode agent
gets bound read-only. A venv's interpreter or console script brings the whole venv (its
site-packages), so an agent installed in a venv of its own (mini-swe-agent, aider) runs
confined."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmaker.agent.sandbox.local import agent_ro_paths


def _venv(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    (root / "bin" / "python").symlink_to(sys.executable)
    (root / "bin" / "mini").write_text("#!/bin/sh\n")
    return root


def test_a_venv_interpreter_binds_the_venv(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "cache" / "mswea")
    ws = tmp_path / "ws"
    ws.mkdir()
    agent = tmp_path / "conformance" / "mswea_agent.py"
    agent.parent.mkdir()
    agent.write_text("")
    argv = [
        str(venv / "bin" / "python"),
        str(agent),
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--task-file",
        str(ws / "I.md"),
    ]
    assert agent_ro_paths(argv, ws) == [str(venv), str(agent.parent)]
    assert agent_ro_paths([str(venv / "bin" / "mini"), str(venv / "bin" / "python")], ws) == [str(venv)]


def test_a_plain_bin_folder_is_bound_as_it_is(tmp_path: Path) -> None:
    plain = tmp_path / "prefix" / "bin"
    plain.mkdir(parents=True)
    (plain / "tool").write_text("")
    ws = tmp_path / "ws"
    ws.mkdir()
    npm_prefix = tmp_path / "npm"
    npm_prefix.mkdir()
    argv = [str(plain / "tool"), "--pi", str(npm_prefix), "relative/path", str(tmp_path / "missing"), str(tmp_path)]
    # a folder argument as it is; nothing relative, missing, or a parent of the workspace
    assert agent_ro_paths(argv, ws) == [str(plain), str(npm_prefix)]
