"""What the agent launchers (pi_agent.py, opencode_agent.py, codex_agent.py,
claude_agent.py) share: where an agent is installed under the conformance cache, a
throw-away HOME per run, and the command line of a launcher that takes its model server
from command mode's environment (`launcher_parser`, `parse_launcher_args`,
`copy_logs`). They run inside the
command-mode sandbox as scripts, without the repository on their path, so they import
this module as a sibling (`from agent_cli import ...`) there and as
`conformance.agent_cli` from the tests.

    exe = installed_exe("pi", args.pi, "pi")     # None: not installed (the message printed)
    with fresh_home("pi-home-") as home:         # removed at the end
        ...
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cache_prefix", "copy_logs", "fresh_home", "installed_exe", "launcher_parser", "parse_launcher_args"]


def cache_prefix(name: str) -> Path:
    """`<cache>/<name>`, the npm prefix or venv conformance/setup_venvs.sh NAME installs
    into: the cache is $BENCHMAKER_CONFORMANCE_CACHE, else ~/.cache/benchmaker-conformance
    (as conformance.venvs.cache_dir)."""
    env = os.environ.get("BENCHMAKER_CONFORMANCE_CACHE")
    return (Path(env) if env else Path.home() / ".cache" / "benchmaker-conformance") / name


def installed_exe(name: str, prefix: Path | None, exe: str) -> Path | None:
    """`<prefix>/node_modules/.bin/<exe>` of the npm agent `name` (`prefix` None: the
    cache's), or None after printing to stderr that it is missing and how to install it."""
    path = (prefix or cache_prefix(name)) / "node_modules" / ".bin" / exe
    if path.exists():
        return path
    print(f"{name}: {path} not found: run conformance/setup_venvs.sh {name} (or make conformance)", file=sys.stderr)
    return None


@contextmanager
def fresh_home(prefix: str) -> Iterator[Path]:
    """A new empty folder for the agent's HOME, removed with everything in it at the end."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def launcher_parser(description: str, agent: str, log: str) -> argparse.ArgumentParser:
    """The options every such launcher has: `--base-url` (default $OPENAI_BASE_URL, which
    command mode sets to its proxy), `--task-file` (required), `--session-dir` (where to
    copy the agent's `log`) and `--<agent>` (the agent's npm prefix, a Path)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="default: $OPENAI_BASE_URL")
    ap.add_argument("--task-file", type=Path, required=True)
    ap.add_argument("--session-dir", type=Path, default=None, help=f"where to copy {log}")
    ap.add_argument(f"--{agent}", type=Path, default=None, help="its npm prefix (default: the conformance cache's)")
    return ap


def parse_launcher_args(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`ap.parse_args(argv)`; exits 2 (argparse's usage error) when there is no base URL."""
    args = ap.parse_args(argv)
    if not args.base_url:
        ap.error("--base-url: not given and OPENAI_BASE_URL is not set")
    return args


def copy_logs(files: Iterable[Path], dest: Path | None) -> None:
    """Copy each of `files` into the folder `dest` (made if missing) under its own name;
    nothing when `dest` is None."""
    if dest is None:
        return
    dest.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy2(path, dest / path.name)
