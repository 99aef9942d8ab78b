"""Shared by the sandbox and spawner tests: the `spawner` fixture (each Spawner of
benchmaker.agent.sandbox.spawner in turn) and `alive(pid)`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from benchmaker.agent.sandbox.spawner import InlineSpawner, ProcessSpawner, Spawner


@pytest.fixture(params=["inline", "process"])
async def spawner(request: pytest.FixtureRequest) -> AsyncIterator[Spawner]:
    """Both spawners: the inline one and a started helper process (closed after)."""
    sp: Spawner = InlineSpawner() if request.param == "inline" else await ProcessSpawner.start()
    try:
        yield sp
    finally:
        await sp.aclose()


def alive(pid: int) -> bool:
    """Running (not a zombie left for an init that does not reap): /proc state."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def pids_running(token: str) -> list[int]:
    """Host pids of the live processes whose argv holds `token` as one argument (every
    process of a confined sandbox is visible here, whatever its pid inside)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if token.encode() in argv and alive(int(d.name)):
            found.append(int(d.name))
    return found


def parent_pids(pid: int) -> list[int]:
    """The parents of `pid`, nearest first, up to pid 1 (from /proc/PID/stat)."""
    out = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        out.append(pid)
    return out
