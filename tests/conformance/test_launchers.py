"""The Codex CLI and Claude Code launchers (conformance/codex_agent.py, claude_agent.py)
and the script-as-trajectory helper, without the real agents: a stand-in executable at
the npm prefix's `node_modules/.bin/<exe>` writes down what it was given (argv, cwd, the
environment, its config file) and writes a session log where the real agent does. Runs
in seconds, always (not gated like the real agents)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.codex_agent import config_toml
from conformance.script_trajectory import script_trajectory
from conformance.scripted_model import load_script
from conformance.venvs import REPO

SCRIPT = REPO / "conformance" / "pi_script.json"

# the stand-in agent: what it saw goes to ./seen.json; a session log is written where
# the real agent writes it; the exit code is $FAKE_EXIT
FAKE = """#!{python}
import json, os, sys
from pathlib import Path
home = Path(os.environ["HOME"])
seen = {{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ), "home_files": sorted(
    str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())}}
if "{exe}" == "codex":
    seen["config"] = (Path(os.environ["CODEX_HOME"]) / "config.toml").read_text()
    log = Path(os.environ["CODEX_HOME"]) / "sessions" / "2026" / "12" / "04" / "rollout-x.jsonl"
else:
    log = home / ".claude" / "projects" / "-work" / "sess-1.jsonl"
    print(json.dumps({{"type": "result", "is_error": os.environ.get("FAKE_IS_ERROR") == "1"}}))
log.parent.mkdir(parents=True)
log.write_text("{{}}\\n")
Path("seen.json").write_text(json.dumps(seen))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


def fake_prefix(root: Path, exe: str) -> Path:
    """An npm prefix whose node_modules/.bin/`exe` is the stand-in agent."""
    bin_dir = root / exe / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    path = bin_dir / exe
    path.write_text(FAKE.format(python=sys.executable, exe=exe))
    path.chmod(0o755)
    return root / exe


def launch(agent: str, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run conformance/<agent>_agent.py as command mode does (a script, cwd the task)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    return subprocess.run(
        [sys.executable, str(REPO / "conformance" / f"{agent}_agent.py"), *args],
        cwd=cwd,
        env={**base, "TMPDIR": str(cwd.parent), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def task(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "ISSUE.md").write_text("task_id: t1\nFix it.\n")
    return work


def test_codex_launcher_gives_codex_its_own_home_and_the_harness_url_and_key(tmp_path, task):
    prefix = fake_prefix(tmp_path, "codex")
    sessions = tmp_path / "sessions"
    done = launch(
        "codex",
        ["--task-file", "ISSUE.md", "--codex", str(prefix), "--session-dir", str(sessions)],
        task,
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        OPENAI_API_KEY="k-1",
        FAKE_EXIT="3",
    )
    assert done.returncode == 3, done.stderr
    seen = json.loads((task / "seen.json").read_text())
    assert seen["argv"] == [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--json",
        "task_id: t1\nFix it.\n",
    ]
    assert seen["cwd"] == str(task)
    env = seen["env"]
    assert env["HOME"] == env["CODEX_HOME"] and Path(env["HOME"]).parent == tmp_path
    assert (env["BENCH_API_KEY"], [k for k in env if k.startswith("OPENAI_")]) == ("k-1", [])
    assert seen["home_files"] == ["config.toml"]
    assert seen["config"] == config_toml("http://127.0.0.1:9/v1", "gpt-5.5")
    assert 'base_url = "http://127.0.0.1:9/v1"\nwire_api = "responses"\nenv_key = "BENCH_API_KEY"\n' in seen["config"]
    assert not Path(env["HOME"]).exists()  # removed at the end
    assert [p.name for p in sessions.iterdir()] == ["rollout-x.jsonl"]


def test_claude_launcher_points_claude_code_at_the_harness_without_v1(tmp_path, task):
    prefix = fake_prefix(tmp_path, "claude")
    sessions = tmp_path / "sessions"
    args = ["--task-file", "ISSUE.md", "--claude", str(prefix), "--session-dir", str(sessions), "--model", "m-1"]
    done = launch("claude", args, task, OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="k-2")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"type": "result", "is_error": False}
    seen = json.loads((task / "seen.json").read_text())
    assert seen["argv"] == [
        "-p",
        "task_id: t1\nFix it.\n",
        "--dangerously-skip-permissions",
        "--output-format",
        "json",
        "--model",
        "m-1",
    ]
    env = seen["env"]
    assert (env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"]) == ("http://127.0.0.1:9", "k-2")
    assert (env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"], env["DISABLE_AUTOUPDATER"], env["IS_SANDBOX"]) == (
        "1",
        "1",
        "1",
    )
    assert Path(env["HOME"]).parent == tmp_path and not Path(env["HOME"]).exists()
    assert [k for k in env if k.startswith("OPENAI_")] == []
    assert [p.name for p in sessions.iterdir()] == ["sess-1.jsonl"]


def test_claude_launcher_fails_when_the_result_is_an_error(tmp_path, task):
    prefix = fake_prefix(tmp_path, "claude")
    args = ["--base-url", "http://127.0.0.1:9/v1", "--task-file", "ISSUE.md", "--claude", str(prefix)]
    assert launch("claude", args, task, FAKE_IS_ERROR="1").returncode == 1
    assert launch("claude", args, task, FAKE_EXIT="4").returncode == 4


@pytest.mark.parametrize("agent", ["codex", "claude"])
def test_launcher_without_the_agent_exits_2_naming_the_install_step(tmp_path, task, agent):
    args = ["--base-url", "http://127.0.0.1:9/v1", "--task-file", "ISSUE.md", f"--{agent}", str(tmp_path / "none")]
    done = launch(agent, args, task)
    assert done.returncode == 2
    assert f"run conformance/setup_venvs.sh {agent}" in done.stderr


@pytest.mark.parametrize("agent", ["codex", "claude"])
def test_launcher_without_a_base_url_says_so(tmp_path, task, agent):
    done = launch(agent, ["--task-file", "ISSUE.md"], task)
    assert done.returncode == 2
    assert "--base-url: not given and OPENAI_BASE_URL is not set" in done.stderr


def test_codex_config_refuses_a_url_toml_cannot_hold():
    with pytest.raises(ValueError, match="--base-url: not a plain URL"):
        config_toml('http://127.0.0.1:9/v1"\nmodel = "x', "gpt-5.5")


def test_script_trajectory_plays_the_script_as_the_agents_own_tool():
    t = script_trajectory(
        load_script(SCRIPT), task_id="mswea-task", model="gpt-5.5", tool="exec_command", arguments=lambda c: {"cmd": c}
    )
    assert (t.match_key, t.first_user, t.model, len(t.turns)) == (
        "task:mswea-task",
        "task_id: mswea-task",
        "gpt-5.5",
        5,
    )
    assert [(c.id, c.name, c.arguments_raw) for c in t.turns[0].response.tool_calls] == [
        ("call_0", "exec_command", '{"cmd": "cat wordstats/counts.py"}')
    ]
    assert [x.response.finish_reason for x in t.turns] == ["tool_calls"] * 4 + ["stop"]
    assert t.turns[4].response.content == "The tests pass: word_count now counts whitespace-separated words."
    assert [x.usage.prompt_tokens for x in t.turns if x.usage] == [1000, 1100, 1200, 1300, 1400]
