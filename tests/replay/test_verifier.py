"""benchmaker.agent.verifier: task specs, verify in a sandbox, carried outcomes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.agent.sandbox import LocalSandbox
from benchmaker.agent.sandbox.local import LocalSandboxFactory
from benchmaker.agent.verifier import TaskSpec, carried, load_task, task_id_of, verify
from benchmaker.trajectories.errors import InputError
from benchmaker.trajectories.trajectory import RecordedOutcome, Source, Trajectory, match_key_for

TASK_DIR = Path(__file__).resolve().parents[2] / "examples" / "tiny-task"


def test_load_task_reads_task_json():
    t = load_task(TASK_DIR)
    assert (t.task_id, t.test_command, t.timeout_s, t.repo, t.env) == (
        "tiny-task",
        "python3 -m pytest -q -p no:cacheprovider",
        120.0,
        TASK_DIR,
        {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ([1], r"task.json: env: expected an object of strings \(got \[1\]\)"),
        ({"A": 1}, r"task.json: env.A: expected a string value under a name without '=' \(got 1\)"),
        ({"A=B": "x"}, r"task.json: env.A=B: expected a string value"),
    ],
)
def test_bad_task_env_names_field(tmp_path: Path, env, message):
    (tmp_path / "task.json").write_text(json.dumps({"task_id": "x", "env": env}))
    with pytest.raises(InputError, match=message):
        load_task(tmp_path)


async def test_task_env_reaches_tool_commands_and_the_verifier(tmp_path: Path, monkeypatch):
    """The task's env is set for every process of its sandbox (the factory's own env
    under it), and the caller's environment does not leak in."""
    monkeypatch.setenv("BM_CALLER_SECRET", "s3cret")
    (tmp_path / "task.json").write_text(
        json.dumps(
            {
                "task_id": "x",
                "test_command": 'test "$TASK_FLAG" = on && test -z "$BM_CALLER_SECRET"',
                "env": {"TASK_FLAG": "on", "BOTH": "task"},
            }
        )
    )
    task = load_task(tmp_path)
    factory = LocalSandboxFactory(env={"BOTH": "factory", "FACTORY_ONLY": "f"})
    sb = await factory(task)
    try:
        tool = await sb.exec('echo "$TASK_FLAG $BOTH $FACTORY_ONLY [$BM_CALLER_SECRET]"')
        verdict = await verify(sb, task)
    finally:
        await sb.close()
    assert tool.output == "on task f []\n"
    assert (verdict.resolved, verdict.exit_code) == (True, 0)
    plain = await LocalSandboxFactory()(TaskSpec("t", repo=tmp_path))
    try:
        assert (await plain.exec('echo "[$TASK_FLAG]"')).output == "[]\n"
    finally:
        await plain.close()


def test_bad_task_file_names_field(tmp_path: Path):
    (tmp_path / "task.json").write_text(json.dumps({"task_id": "x", "timeout_s": -1}))
    with pytest.raises(InputError, match=r"task.json: timeout_s: expected a number > 0 \(got -1\)"):
        load_task(tmp_path)
    with pytest.raises(InputError, match="task file not found"):
        load_task(tmp_path / "nope")


async def test_verify_unresolved_then_resolved_after_fix():
    sb = await LocalSandbox.create(TASK_DIR)
    try:
        task = load_task(TASK_DIR)
        before = await verify(sb, task)
        src = (await sb.read_file("tinycalc/ranges.py")).replace(b"stop))", b"stop + 1))")
        await sb.write_file("tinycalc/ranges.py", src)
        after = await verify(sb, task)
        timed = await verify(sb, TaskSpec("t", test_command="sleep 5", timeout_s=0.2))
        none = await verify(sb, TaskSpec("t"))
    finally:
        await sb.close()
    assert (before.resolved, before.reverified, before.exit_code) == (False, True, 1)
    assert "2 failed" in before.output_tail
    assert (after.resolved, after.reverified, after.exit_code) == (True, True, 0)
    assert (timed.resolved, timed.error) == (False, "timeout")
    assert (none.resolved, none.reverified, none.error) == (None, False, "task has no test_command")


def _traj(first_user: str, task_id: str | None = None, resolved: bool | None = None) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        source=Source(format="x", path="p", sha256="0"),
        task_id=task_id,
        match_key=match_key_for(first_user),
        first_user=first_user,
        turns=[],
        outcome=RecordedOutcome(resolved=resolved),
    )


def test_task_id_and_carried_outcome():
    assert task_id_of(_traj("task_id: abc\nfix it")) == "abc"
    assert task_id_of(_traj("hi", task_id="django-1")) == "django-1"
    assert task_id_of(_traj("hi")) is None
    v = carried(_traj("hi", resolved=True))
    assert (v.resolved, v.reverified) == (True, False)
