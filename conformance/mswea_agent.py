"""Run the real mini-swe-agent (`mini`, 2.x) on one task against an OpenAI-compatible base
URL, offline: the command that `benchmaker swebench-replay --mode command` starts per
task, and the one the recording run starts.

    $CACHE/mswea/bin/python conformance/mswea_agent.py --base-url {base_url} \\
        --task-file {workdir}/ISSUE.md [--output traj.json] [--model tiny]

Runs in the current directory (the harness starts it in the sandbox workdir). It runs
`mini` from the interpreter's own venv (a child process, waited for) with: `-m openai/<model>` (LiteLLM's OpenAI
provider: requests go to `<base_url>/chat/completions`, non-streaming, with a `bash`
tool), `-c mini.yaml -c model.model_kwargs.api_base=<base_url>`, the task text read from
`--task-file`, `-y --exit-immediately` (no prompts), `--cost-limit 0`, and the
trajectory written to `--output` (default `<cwd>/.mswea/traj.json`). Environment:
MSWEA_CONFIGURED=true, MSWEA_COST_TRACKING=ignore_errors, LITELLM_LOCAL_MODEL_COST_MAP=True
(no network), MSWEA_SILENT_STARTUP=1, MSWEA_GLOBAL_CONFIG_DIR a temporary folder (no
writes to ~/.config), removed when `mini` exits (in command mode the harness also gives
the agent a TMPDIR of its own, removed with the episode, for when it is killed). The
agent stops when a command's output starts with COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT;
the exit code is `mini`'s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def mini_argv(base_url: str, task: str, output: Path, model: str) -> list[str]:
    """The `mini` command line (module docstring); `mini` is taken beside sys.executable."""
    mini = str(Path(sys.executable).with_name("mini"))
    return [
        mini,
        "-y",
        "--exit-immediately",
        "-m",
        f"openai/{model}",
        "-t",
        task,
        "--cost-limit",
        "0",
        "-c",
        "mini.yaml",
        "-c",
        f"model.model_kwargs.api_base={base_url}",
        "-c",
        "model.model_kwargs.api_key=conformance",
        "-o",
        str(output),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True, help="OpenAI base URL, e.g. http://127.0.0.1:PORT/v1")
    ap.add_argument("--task-file", type=Path, required=True)
    ap.add_argument("--output", type=Path, default=None)
    ap.add_argument("--model", default="tiny")
    args = ap.parse_args(argv)
    task = args.task_file.read_text(encoding="utf-8")
    output = args.output or Path.cwd() / ".mswea" / "traj.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mswea-config-") as config_dir:
        env = {
            **os.environ,
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": config_dir,
        }
        return subprocess.run(mini_argv(args.base_url, task, output, args.model), env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
