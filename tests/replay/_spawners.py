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
