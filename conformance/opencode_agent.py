"""Run the real opencode (`opencode-ai` from npm, its own prefix under the conformance
cache) on one task against an OpenAI-compatible model server, offline: the command that
`benchmaker swebench-replay --mode command` starts per episode, and the one the
recording run starts.

    python conformance/opencode_agent.py --base-url {base_url} --task-file {workdir}/ISSUE.md \\
        [--model fake-model] [--export-dir DIR] [--opencode PREFIX]

Runs in the current directory (the harness starts it in the sandbox workdir; $PWD is set to
it, where opencode takes its project folder from) with a HOME
of its own (a temporary folder, removed at the end: opencode keeps its database and
caches under it). Its config goes to `$HOME/opencode.json` (named by OPENCODE_CONFIG,
so nothing is written into the task's folder): one provider `bench` on
`@ai-sdk/openai-compatible` (chat completions, streamed) at the given base URL, model
and `small_model` MODEL, every permission allowed, no sharing, no autoupdate. Then
`opencode run --format json TASK` with OPENCODE_DISABLE_AUTOUPDATE,
OPENCODE_DISABLE_MODELS_FETCH and OPENCODE_DISABLE_LSP_DOWNLOAD set. With `--export-dir`
the session is exported there afterwards (`opencode export <session id>` into
`<session id>.json`, the id read from the run's JSON events). `--opencode` is opencode's
npm prefix (default: the conformance cache's, conformance/setup_venvs.sh opencode): an
absolute path on the command line, so the confined sandbox of command mode binds it
read-only. The exit code is opencode's; 2 when it is not installed (the message names the
install step).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

try:
    from conformance.agent_cli import cache_prefix, fresh_home, installed_exe
except ImportError:  # run as a script inside the sandbox: its own folder is on sys.path
    from agent_cli import cache_prefix, fresh_home, installed_exe  # type: ignore[no-redef]


def opencode_prefix() -> Path:
    """`<cache>/opencode`, the npm prefix conformance/setup_venvs.sh opencode installs into
    (agent_cli)."""
    return cache_prefix("opencode")


def config(base_url: str, model: str) -> dict:
    """opencode's config with the one provider `bench` (module docstring)."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": f"bench/{model}",
        "small_model": f"bench/{model}",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"bash": "allow", "edit": "allow", "webfetch": "allow"},
        "provider": {
            "bench": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "bench",
                "options": {"baseURL": base_url, "apiKey": "conformance"},
                "models": {model: {"name": model, "tool_call": True, "limit": {"context": 128000, "output": 4096}}},
            }
        },
    }


def session_id(events: str) -> str | None:
    """The `sessionID` of the first JSON event line of `opencode run --format json`."""
    for line in events.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("sessionID"), str):
            return event["sessionID"]
    return None


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True, help="the API's base URL, e.g. http://127.0.0.1:PORT/v1")
    ap.add_argument("--task-file", type=Path, required=True)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--export-dir", type=Path, default=None)
    ap.add_argument("--opencode", type=Path, default=None, help="opencode's npm prefix (default: the cache's)")
    args = ap.parse_args(argv)
    exe = installed_exe("opencode", args.opencode, "opencode")
    if exe is None:
        return 2
    task = args.task_file.read_text(encoding="utf-8")
    with fresh_home("opencode-home-") as home:
        (home / "opencode.json").write_text(json.dumps(config(args.base_url, args.model)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "GEMINI_", "XDG_"))}
        env.update(
            PWD=os.getcwd(),  # opencode takes its project folder from $PWD, not from its cwd
            HOME=str(home),
            OPENCODE_CONFIG=str(home / "opencode.json"),
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_LSP_DOWNLOAD="1",
            NO_COLOR="1",
        )
        run = subprocess.run(
            [str(exe), "run", "--format", "json", task],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        sys.stdout.write(run.stdout)
        sys.stderr.write(run.stderr)
        sid = session_id(run.stdout)
        if args.export_dir is not None and sid is not None:
            args.export_dir.mkdir(parents=True, exist_ok=True)
            with open(args.export_dir / f"{sid}.json", "w", encoding="utf-8") as out:
                subprocess.run([str(exe), "export", sid], env=env, stdin=subprocess.DEVNULL, stdout=out, check=True)
        return run.returncode


if __name__ == "__main__":
    sys.exit(main())
