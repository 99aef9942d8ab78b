"""Run the real pi coding agent (`@mariozechner/pi-coding-agent`, npm) on one task against
a model server, offline: the command that `benchmaker swebench-replay --mode command`
starts per episode, and the one the recording run starts.

    python conformance/pi_agent.py --base-url {base_url} --task-file {workdir}/ISSUE.md \\
        [--api openai-completions] [--model fake-model] [--session-dir DIR] [--pi PREFIX]

Runs in the current directory (the harness starts it in the sandbox workdir). pi reads
its providers from `~/.pi/agent/models.json`, so each run gets a HOME of its own (a
temporary folder, removed at the end) holding one custom provider `bench`: `baseUrl`
the given URL, `api` one of pi's wire APIs (`openai-completions` is chat completions;
pi's others are `openai-responses`, `anthropic-messages` and `google-generative-ai`),
`apiKey` "conformance", one model. `--base-url` is the OpenAI-style base (ending in
`/v1`, as command mode's {base_url}); each API's SDK gets the base it expects
(`provider_base_url`): the Anthropic SDK appends `/v1/messages` itself (so the `/v1` is
dropped) and pi's Google provider takes a base that already names the API version
(`<root>/v1beta`). Then `pi --provider bench --model MODEL -p TASK`
(non-interactive: one prompt, tool calls until the model answers without one) with
PI_OFFLINE=1 (no update checks or downloads). pi always streams. Its session log (JSONL)
goes to `--session-dir` (default: inside the temporary HOME, so it is removed with it).
`--pi` is pi's npm prefix (default: the conformance cache's, conformance/setup_venvs.sh
pi): given as an absolute path on the command line, the confined sandbox of command mode
binds it read-only, so the agent reaches it under a caller's home the sandbox's user
cannot read. The exit code is pi's; 2 when pi is not installed (the message names the
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

PI_APIS = ("openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai")


def pi_prefix() -> Path:
    """`<cache>/pi`, the npm prefix conformance/setup_venvs.sh pi installs into (agent_cli)."""
    return cache_prefix("pi")


def provider_base_url(base_url: str, api: str) -> str:
    """The `baseUrl` pi's provider of `api` needs for the OpenAI-style `base_url`
    (http://host:port/v1): the same for the two OpenAI APIs, without `/v1` for
    anthropic-messages, `<root>/v1beta` for google-generative-ai."""
    root = base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    if api == "anthropic-messages":
        return root
    if api == "google-generative-ai":
        return root + "/v1beta"
    return root + "/v1"


def models_json(base_url: str, api: str, model: str) -> dict:
    """pi's `~/.pi/agent/models.json` with the one provider `bench` (module docstring)."""
    return {
        "providers": {
            "bench": {
                "baseUrl": provider_base_url(base_url, api),
                "api": api,
                "apiKey": "conformance",
                "models": [{"id": model, "contextWindow": 128000, "maxTokens": 4096}],
            }
        }
    }


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True, help="the API's base URL, e.g. http://127.0.0.1:PORT/v1")
    ap.add_argument("--task-file", type=Path, required=True)
    ap.add_argument("--api", choices=PI_APIS, default="openai-completions")
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--session-dir", type=Path, default=None)
    ap.add_argument("--pi", type=Path, default=None, help="pi's npm prefix (default: the conformance cache's)")
    args = ap.parse_args(argv)
    pi = installed_exe("pi", args.pi, "pi")
    if pi is None:
        return 2
    task = args.task_file.read_text(encoding="utf-8")
    with fresh_home("pi-home-") as home:
        agent_dir = home / ".pi" / "agent"
        agent_dir.mkdir(parents=True)
        (agent_dir / "models.json").write_text(json.dumps(models_json(args.base_url, args.api, args.model)))
        session_dir = args.session_dir or home / "sessions"
        session_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_"))}
        env.update(HOME=str(home), PI_OFFLINE="1", NO_COLOR="1")
        cmd = [str(pi), "--provider", "bench", "--model", args.model, "--session-dir", str(session_dir), "-p", task]
        return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode


if __name__ == "__main__":
    sys.exit(main())
