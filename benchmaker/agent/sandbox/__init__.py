"""Sandboxes: where an episode's tool calls run (docs/replay-an-agent.md).

    Sandbox       the protocol the harness and verifier use (below)
    ExecResult    one command's result
    LocalSandbox  per-episode temp workspace + subprocess (benchmaker.agent.sandbox.local), the default;
                  its commands confined by bubblewrap unless told not to
    ConfinementError  bwrap absent or unusable (benchmaker.agent.sandbox.confine)
    LocalSandboxFactory  a LocalSandbox per episode, processes spawned off the measuring
                  loop once started (benchmaker.agent.sandbox.local, benchmaker.agent.sandbox.spawner)
    FlashSandbox  Flash Sandbox coordinator over HTTP (benchmaker.agent.sandbox.flash)

Every sandbox has a `workdir` (the task repository, a git work tree whose baseline
commit is the untouched task) in which commands run and relative paths resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from benchmaker.lazy_exports import lazy_getattr

PRIVATE_ENV = frozenset({"PREFECT_API_AUTH_STRING", "PREFECT_API_KEY", "BENCHMAKER_REPLAY_TOKEN"})
"""Environment variables of this process never passed to a command-mode agent: the
local Prefect server's secret (benchmaker.recipes.prefect_server), a Prefect Cloud key
and a replay server token. With them an agent could read and change the user's flow
runs."""

TRUNCATION_MARKER = "\n[... {n} bytes of output truncated ...]\n"


@dataclass(slots=True)
class ExecResult:
    """One command's result. `output` is stdout and stderr interleaved as the command
    wrote them (local) or stdout then stderr (remote sandboxes that return them
    apart), decoded as UTF-8 with replacement. `exit_code` is None when the command
    was killed (timeout). `truncated` tells that `output` lost bytes in the middle
    (see TRUNCATION_MARKER). `duration_ns` is the wall time of the exec call as its
    caller sees it (call to result, perf_counter_ns), in ns."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    duration_ns: int = 0


@runtime_checkable
class Sandbox(Protocol):
    """A workspace where commands run.

    `exec(command, timeout_s)` runs `command` with bash in `workdir` and never raises
    for a failing command (a non-zero `exit_code`) or a timeout (`timed_out`); it
    raises `SandboxError` when the sandbox itself fails. `read_file`/`write_file`
    take paths relative to `workdir` (or absolute inside it) and raise
    `FileNotFoundError` / `SandboxError`. `diff()` is `git diff` of the work tree
    against its baseline commit, new files included, as text. `close()` releases it.
    """

    workdir: str

    async def exec(self, command: str, *, timeout_s: float | None = None) -> ExecResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes) -> None: ...

    async def diff(self) -> str: ...

    async def close(self) -> None: ...


class SandboxError(Exception):
    """The sandbox itself failed (could not be created, an exec call failed at the
    transport or HTTP level after retries, a path escapes the workspace)."""


def truncate_middle(data: bytes, limit: int) -> tuple[bytes, bool]:
    """Keep the first and last `limit // 2` bytes of `data` with TRUNCATION_MARKER
    between them when `len(data) > limit`; returns (bytes, truncated)."""
    if len(data) <= limit:
        return data, False
    half = limit // 2
    cut = len(data) - 2 * half
    return data[:half] + TRUNCATION_MARKER.format(n=cut).encode() + data[len(data) - half :], True


# The sandboxes load on first use (PEP 562): the ProcessSpawner's helper process
# imports benchmaker.agent.sandbox.spawner once per sweep point and needs neither httpx (FlashSandbox)
# nor the local sandbox (~0.3 CPU s per point).
__getattr__ = lazy_getattr(
    __name__,
    {
        "ConfinementError": "benchmaker.agent.sandbox.confine",
        "FlashSandbox": "benchmaker.agent.sandbox.flash",
        "LocalSandbox": "benchmaker.agent.sandbox.local",
        "LocalSandboxFactory": "benchmaker.agent.sandbox.local",
    },
)

__all__ = [
    "ConfinementError",
    "ExecResult",
    "FlashSandbox",
    "LocalSandbox",
    "LocalSandboxFactory",
    "PRIVATE_ENV",
    "Sandbox",
    "SandboxError",
    "TRUNCATION_MARKER",
    "truncate_middle",
]
