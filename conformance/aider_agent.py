"""Run the real aider (`aider-chat` from PyPI, its own venv under the conformance cache) on
one task against an OpenAI-compatible model server, offline: the command that `benchmaker
swebench-replay --mode command` starts per episode, and the one the recording run starts.

    python conformance/aider_agent.py --base-url {base_url} --task-file {workdir}/ISSUE.md \\
        [--model fake-model] [--task-tests | --test-cmd CMD] [--llm-history-file PATH] \\
        [--aider VENV]

Runs in the current directory (the harness starts it in the sandbox workdir) with a HOME
of its own (a temporary folder, removed at the end), where aider's chat and input
histories go (`--chat-history-file`, `--input-history-file`), so nothing of aider's lands
in the task's folder. The command: `aider --model openai/MODEL --openai-api-base BASE_URL
--openai-api-key conformance --edit-format diff --message TASK --yes-always --no-git
--no-check-update --analytics-disable --no-pretty --no-show-model-warnings
--no-show-release-notes --no-detect-urls --map-tokens 0` (chat completions, streamed, no
tools: edits come back as SEARCH/REPLACE blocks, which aider applies to the files they
name, asking nothing under `--yes-always`), plus `--auto-test --test-cmd CMD` with
`--test-cmd` (a failing test run goes back to the model as the next user message;
`--task-tests`: the `test_command` of the task's `task.json` in the current directory, as
command mode splits its command line at spaces), and
`--llm-history-file PATH` (aider's own log of every model call: the messages sent and the
reply, `benchmaker convert` format `aider-llm-history`). Environment:
LITELLM_LOCAL_MODEL_COST_MAP=True (litellm reads its bundled model map: no network),
no OPENAI_*/ANTHROPIC_*/AIDER_* variables of the caller. `--aider` is aider's venv
(default: the conformance cache's, conformance/setup_venvs.sh aider): an absolute path on
the command line, so the confined sandbox of command mode binds it read-only. The exit
code is aider's; 2 when it is not installed (the message names the install step).

Every request aider sends opens with canned exchanges (its edit format's example
conversation, "I switched to a new code base", the files in the chat and aider's "Ok."
replies) before the task: record it with `benchmaker record --canned-replies` (docs/replay-an-agent.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

try:
    from conformance.agent_cli import cache_prefix, fresh_home
except ImportError:  # run as a script inside the sandbox: its own folder is on sys.path
    from agent_cli import cache_prefix, fresh_home  # type: ignore[no-redef]


def aider_venv() -> Path:
    """`<cache>/aider`, the venv conformance/setup_venvs.sh aider installs into (agent_cli)."""
    return cache_prefix("aider")


def aider_argv(exe: Path, base_url: str, model: str, task: str, home: Path) -> list[str]:
    """aider's command line for one task (module docstring), its histories under `home`."""
    return [
        str(exe),
        "--model",
        f"openai/{model}",
        "--openai-api-base",
        base_url,
        "--openai-api-key",
        "conformance",
        "--edit-format",
        "diff",
        "--message",
        task,
        "--yes-always",
        "--no-git",
        "--no-check-update",
        "--analytics-disable",
        "--no-pretty",
        "--no-show-model-warnings",
        "--no-show-release-notes",
        "--no-detect-urls",
        "--map-tokens",
        "0",
        "--chat-history-file",
        str(home / ".aider.chat.history.md"),
        "--input-history-file",
        str(home / ".aider.input.history"),
    ]


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True, help="the API's base URL, e.g. http://127.0.0.1:PORT/v1")
    ap.add_argument("--task-file", type=Path, required=True)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--test-cmd", default=None, help="run after each edit; a failure goes back to the model")
    ap.add_argument("--task-tests", action="store_true", help="--test-cmd: task.json's test_command")
    ap.add_argument("--llm-history-file", type=Path, default=None, help="aider's log of every model call")
    ap.add_argument("--aider", type=Path, default=None, help="aider's venv (default: the cache's)")
    args = ap.parse_args(argv)
    exe = (args.aider or aider_venv()) / "bin" / "aider"
    if not exe.exists():
        print(f"aider: {exe} not found: run conformance/setup_venvs.sh aider (or make conformance)", file=sys.stderr)
        return 2
    task = args.task_file.read_text(encoding="utf-8")
    if args.task_tests:
        args.test_cmd = json.loads(Path("task.json").read_text(encoding="utf-8"))["test_command"]
    with fresh_home("aider-home-") as home:
        cmd = aider_argv(exe, args.base_url, args.model, task, home)
        if args.test_cmd is not None:
            cmd += ["--auto-test", "--test-cmd", args.test_cmd]
        if args.llm_history_file is not None:
            cmd += ["--llm-history-file", str(args.llm_history_file.absolute())]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "AIDER_"))}
        env.update(HOME=str(home), LITELLM_LOCAL_MODEL_COST_MAP="True", NO_COLOR="1")
        return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode


if __name__ == "__main__":
    sys.exit(main())
