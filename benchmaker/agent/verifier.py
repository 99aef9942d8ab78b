"""Task specs and the verifier: a per-task test command run in the sandbox decides
`resolved` (docs/replay-an-agent.md). Where no environment exists the recorded outcome is carried
and marked not re-verified.

A task directory holds the repository and a `task.json`:

    {"task_id": "tiny-task", "test_command": "python -m pytest -q", "timeout_s": 120,
     "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}

`env` (optional) is set for every process of the task's sandbox, the agent's tool
commands and the test command alike, as a SWE-bench harness fixes the environment per
task: the bundled example turns off the host's pytest plugins, so its verdict and its
tool time do not depend on what else the host's Python has installed.

    task = load_task(Path("examples/tiny-task"))      # TaskSpec(repo=that dir, ...)
    v = await verify(sandbox, task)                    # Verdict(resolved=True, ...)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from benchmaker.agent.sandbox import Sandbox
from benchmaker.trajectories.errors import InputError
from benchmaker.trajectories.trajectory import Trajectory

TASK_FILE = "task.json"


@dataclass(slots=True)
class TaskSpec:
    """One task: `repo` is the directory copied into a local sandbox (None when the
    sandbox image already holds it), `test_command` the command whose exit code 0
    means resolved (None: no environment to verify in), `timeout_s` its deadline (s),
    `env` the variables set for every process of the task's sandbox (module docstring)."""

    task_id: str
    repo: Path | None = None
    test_command: str | None = None
    timeout_s: float = 600.0
    env: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Verdict:
    """The verifier's answer: `resolved` (None when it could not tell), `reverified`
    (True when a test command ran; False when the recorded outcome was carried),
    `exit_code` of the test command, `output_tail` (last 2,000 chars), `error`."""

    resolved: bool | None
    reverified: bool
    exit_code: int | None = None
    output_tail: str | None = None
    error: str | None = None


def load_task(task_dir: Path) -> TaskSpec:
    """Read `<task_dir>/task.json` (module docstring); `repo` is `task_dir`.
    Raises InputError `path: field: problem (got VALUE)` on a missing or bad file."""
    path = Path(task_dir) / TASK_FILE
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(path, None, None, "task file not found") from exc
    except ValueError as exc:
        raise InputError(path, None, None, f"not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise InputError(path, None, None, "expected an object", obj)
    task_id = obj.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise InputError(path, None, "task_id", "expected a non-empty string", task_id)
    cmd = obj.get("test_command")
    if cmd is not None and not isinstance(cmd, str):
        raise InputError(path, None, "test_command", "expected a string", cmd)
    timeout = obj.get("timeout_s", 600.0)
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise InputError(path, None, "timeout_s", "expected a number > 0", timeout)
    env = obj.get("env", {})
    if not isinstance(env, dict):
        raise InputError(path, None, "env", "expected an object of strings", env)
    for name, value in env.items():
        if not name or "=" in name or not isinstance(value, str):
            raise InputError(path, None, f"env.{name}", "expected a string value under a name without '='", value)
    return TaskSpec(task_id=task_id, repo=Path(task_dir), test_command=cmd, timeout_s=float(timeout), env=dict(env))


def task_id_of(trajectory: Trajectory) -> str | None:
    """The task id of a trajectory: its `task_id`, else the id in a `task:<id>` match
    key (an explicit `task_id:` line in the first user message), else None."""
    if trajectory.task_id:
        return trajectory.task_id
    if trajectory.match_key.startswith("task:"):
        return trajectory.match_key[len("task:") :]
    return None


def carried(trajectory: Trajectory) -> Verdict:
    """The recorded outcome, not re-verified (`resolved` None when unknown)."""
    return Verdict(resolved=trajectory.outcome.resolved, reverified=False)


async def verify(sandbox: Sandbox, task: TaskSpec) -> Verdict:
    """Run the task's test command in `sandbox`: exit code 0 → resolved, other →
    unresolved, timeout → unresolved with error "timeout". A task without a test
    command cannot be verified: Verdict(None, reverified=False, error=...)."""
    if not task.test_command:
        return Verdict(resolved=None, reverified=False, error="task has no test_command")
    res = await sandbox.exec(task.test_command, timeout_s=task.timeout_s)
    tail = res.output[-2000:]
    if res.timed_out:
        return Verdict(resolved=False, reverified=True, exit_code=None, output_tail=tail, error="timeout")
    return Verdict(resolved=res.exit_code == 0, reverified=True, exit_code=res.exit_code, output_tail=tail)
