"""Run the real Codex CLI (`@openai/codex` from npm, its own prefix under the conformance
cache) on one task against an OpenAI Responses server, offline: the command that
`benchmaker swebench-replay --mode command` starts per episode, and the one the
recording run starts.

    python conformance/codex_agent.py --task-file {workdir}/ISSUE.md \\
        [--base-url {base_url}] [--model gpt-5.5] [--session-dir DIR] [--codex PREFIX]

Runs in the current directory (the harness starts it in the sandbox workdir) with a HOME
of its own that is also CODEX_HOME (a temporary folder, removed at the end). Its
`config.toml` there names one model provider `bench`: `base_url` the given URL (else
$OPENAI_BASE_URL, which command mode sets to its proxy; an OpenAI-style base ending in
`/v1`), `wire_api = "responses"` (the only API Codex speaks), the key read from
BENCH_API_KEY (set from $OPENAI_API_KEY, else "conformance"); model MODEL (the model
name picks Codex's tool set: with `gpt-5.5` its shell tool is `exec_command`). Then
`codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox --json
TASK` (non-interactive: tool calls until the model answers without one; its own
sandbox off, as command mode confines it) with stdin closed. Codex always streams.

Its session log, the rollout (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`), is
copied into `--session-dir` when given (else removed with the HOME). `--codex` is
Codex's npm prefix (default: the conformance cache's, conformance/setup_venvs.sh codex):
an absolute path on the command line, so the confined sandbox of command mode binds it
read-only. The exit code is Codex's (0 once a turn completed); 2 when it is not
installed (the message names the install step).
"""

from __future__ import annotations

import os
import subprocess
import sys

try:
    from conformance import agent_cli
except ImportError:  # run as a script inside the sandbox: its own folder is on sys.path
    import agent_cli  # type: ignore[no-redef]


def config_toml(base_url: str, model: str) -> str:
    """Codex's `config.toml` with the one provider `bench` (module docstring). Raises
    ValueError for a base URL that TOML's basic string cannot hold as it is."""
    if any(c in base_url for c in '"\\\n'):
        raise ValueError(f"--base-url: not a plain URL: {base_url!r}")
    return (
        f'model = "{model}"\nmodel_provider = "bench"\n\n'
        '[model_providers.bench]\nname = "bench"\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "BENCH_API_KEY"\n'
    )


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = agent_cli.launcher_parser(__doc__.split("\n")[0], "codex", "Codex's rollout")
    ap.add_argument("--model", default="gpt-5.5")
    args = agent_cli.parse_launcher_args(ap, argv)
    exe = agent_cli.installed_exe("codex", args.codex, "codex")
    if exe is None:
        return 2
    task = args.task_file.read_text(encoding="utf-8")
    with agent_cli.fresh_home("codex-home-") as home:
        (home / "config.toml").write_text(config_toml(args.base_url, args.model), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_", "XDG_"))}
        env.update(
            HOME=str(home),
            CODEX_HOME=str(home),
            BENCH_API_KEY=os.environ.get("OPENAI_API_KEY") or "conformance",
            NO_COLOR="1",
        )
        cmd = [str(exe), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--json", task]
        code = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode
        agent_cli.copy_logs(sorted((home / "sessions").rglob("rollout-*.jsonl")), args.session_dir)
        return code


if __name__ == "__main__":
    sys.exit(main())
