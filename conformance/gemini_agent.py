"""Run the real Gemini CLI (`@google/gemini-cli` from npm, its own prefix under the
conformance cache) on one task against a Gemini API server, offline: the command that
`benchmaker swebench-replay --mode command` starts per episode, and the one the recording
run starts.

    python conformance/gemini_agent.py --base-url {base_url} --task-file {workdir}/ISSUE.md \\
        [--model MODEL] [--chats-dir DIR] [--gemini PREFIX]

Runs in the current directory (the harness starts it in the sandbox workdir) with a HOME
of its own (a temporary folder, removed at the end: Gemini CLI keeps its settings, chat
recordings and caches under `~/.gemini`). `--base-url` is the OpenAI-style base
(`http://host:port/v1`, as command mode's {base_url}); the CLI gets its root as
GOOGLE_GEMINI_BASE_URL (its SDK adds `/v1beta/models/...` itself), GEMINI_API_KEY
"conformance" and GEMINI_CLI_TRUST_WORKSPACE=true; `~/.gemini/settings.json` selects the
API-key auth and turns off auto-update, usage statistics and telemetry. Then `gemini -p
TASK --yolo --output-format stream-json` (non-interactive, every tool call allowed), with
`--model MODEL` when given (else the CLI's default, whose router sends its JSON
classification calls). With `--chats-dir` the CLI's chat recordings
(`~/.gemini/tmp/<project>/chats/session-*.json*`) are copied there afterwards.
`--gemini` is the CLI's npm prefix (default: the conformance cache's,
conformance/setup_venvs.sh gemini): an absolute path on the command line, so the confined
sandbox of command mode binds it read-only. The exit code is the CLI's; 2 when it is not
installed (the message names the install step).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

try:
    from conformance.agent_cli import cache_prefix, fresh_home, installed_exe
except ImportError:  # run as a script inside the sandbox: its own folder is on sys.path
    from agent_cli import cache_prefix, fresh_home, installed_exe  # type: ignore[no-redef]

SETTINGS = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}
"""`~/.gemini/settings.json` of every run (module docstring)."""


def gemini_prefix() -> Path:
    """`<cache>/gemini`, the npm prefix conformance/setup_venvs.sh gemini installs into
    (agent_cli)."""
    return cache_prefix("gemini")


def api_root(base_url: str) -> str:
    """GOOGLE_GEMINI_BASE_URL for the OpenAI-style `base_url`: without a trailing `/v1`."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True, help="the API's base URL, e.g. http://127.0.0.1:PORT/v1")
    ap.add_argument("--task-file", type=Path, required=True)
    ap.add_argument("--model", default=None, help="the model name (default: the CLI's own)")
    ap.add_argument("--chats-dir", type=Path, default=None)
    ap.add_argument("--gemini", type=Path, default=None, help="the CLI's npm prefix (default: the conformance cache's)")
    args = ap.parse_args(argv)
    exe = installed_exe("gemini", args.gemini, "gemini")
    if exe is None:
        return 2
    task = args.task_file.read_text(encoding="utf-8")
    with fresh_home("gemini-home-") as home:
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_"))}
        env.update(
            HOME=str(home),
            GOOGLE_GEMINI_BASE_URL=api_root(args.base_url),
            GEMINI_API_KEY="conformance",
            GEMINI_CLI_TRUST_WORKSPACE="true",
            NO_COLOR="1",
        )
        cmd = [str(exe), "-p", task, "--yolo", "--output-format", "stream-json"]
        if args.model:
            cmd += ["--model", args.model]
        code = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode
        if args.chats_dir is not None:
            args.chats_dir.mkdir(parents=True, exist_ok=True)
            for chat in (home / ".gemini" / "tmp").glob("*/chats/session-*"):
                shutil.copy2(chat, args.chats_dir / chat.name)
        return code


if __name__ == "__main__":
    sys.exit(main())
