"""Run the real Claude Code (`@anthropic-ai/claude-code` from npm, its own prefix under
the conformance cache) on one task against an Anthropic Messages server, offline: the
command that `benchmaker swebench-replay --mode command` starts per episode, and the one
the recording run starts.

    python conformance/claude_agent.py --task-file {workdir}/ISSUE.md \\
        [--base-url {base_url}] [--model M] [--session-dir DIR] [--claude PREFIX]

Runs in the current directory (the harness starts it in the sandbox workdir) with a HOME
of its own (a temporary folder, removed at the end: Claude Code keeps its settings and
session files under it). `--base-url` (else $OPENAI_BASE_URL, which command mode sets
to its proxy) is an OpenAI-style base ending in `/v1`; Claude Code appends
`/v1/messages` itself, so ANTHROPIC_BASE_URL gets it without the `/v1`. The key is
$OPENAI_API_KEY (else "conformance") as ANTHROPIC_API_KEY. Non-essential traffic
(telemetry, update checks, the `HEAD` reachability probe) is off
(CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, DISABLE_AUTOUPDATER), and IS_SANDBOX=1 lets
`--dangerously-skip-permissions` run as root too (a throw-away HOME in a sandbox). Then
`claude -p TASK --dangerously-skip-permissions --output-format json [--model M]`
(non-interactive: tool calls until the model answers without one) with stdin closed;
Claude Code streams its requests (`POST /v1/messages?beta=true`).

Its session log (`$HOME/.claude/projects/<cwd>/<session uuid>.jsonl`) is copied into
`--session-dir` when given. `--claude` is Claude Code's npm prefix (default: the
conformance cache's, conformance/setup_venvs.sh claude): an absolute path on the command
line, so the confined sandbox of command mode binds it read-only. The exit code is
Claude Code's, 1 when it exits 0 with a result that says `is_error`; 2 when it is not
installed (the message names the install step).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

try:
    from conformance import agent_cli
except ImportError:  # run as a script inside the sandbox: its own folder is on sys.path
    import agent_cli  # type: ignore[no-redef]


def anthropic_base_url(base_url: str) -> str:
    """The ANTHROPIC_BASE_URL for an OpenAI-style `base_url`: without its trailing `/v1`
    (Claude Code appends `/v1/messages`)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def result_is_error(stdout: str) -> bool:
    """Whether the JSON result `claude --output-format json` printed says `is_error`
    (False when there is no such JSON object)."""
    for line in reversed(stdout.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("type") == "result":
            return doc.get("is_error") is True
    return False


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = agent_cli.launcher_parser(__doc__.split("\n")[0], "claude", "Claude Code's session file")
    ap.add_argument("--model", default=None, help="default: Claude Code's own")
    args = agent_cli.parse_launcher_args(ap, argv)
    exe = agent_cli.installed_exe("claude", args.claude, "claude")
    if exe is None:
        return 2
    task = args.task_file.read_text(encoding="utf-8")
    with agent_cli.fresh_home("claude-home-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "CLAUDE_", "XDG_"))}
        env.update(
            HOME=str(home),
            ANTHROPIC_BASE_URL=anthropic_base_url(args.base_url),
            ANTHROPIC_API_KEY=os.environ.get("OPENAI_API_KEY") or "conformance",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_AUTOUPDATER="1",
            IS_SANDBOX="1",
            NO_COLOR="1",
        )
        cmd = [str(exe), "-p", task, "--dangerously-skip-permissions", "--output-format", "json"]
        if args.model:
            cmd += ["--model", args.model]
        run = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        sys.stdout.write(run.stdout)
        sys.stderr.write(run.stderr)
        agent_cli.copy_logs(sorted((home / ".claude" / "projects").glob("*/*.jsonl")), args.session_dir)
        if run.returncode == 0 and result_is_error(run.stdout):
            return 1
        return run.returncode


if __name__ == "__main__":
    sys.exit(main())
