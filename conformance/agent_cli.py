"""What the agent launchers (pi_agent.py, opencode_agent.py) share: where an agent is
installed under the conformance cache and a throw-away HOME per run. They run inside the
command-mode sandbox as scripts, without the repository on their path, so they import
this module as a sibling (`from agent_cli import ...`) there and as
`conformance.agent_cli` from the tests.

    exe = installed_exe("pi", args.pi, "pi")     # None: not installed (the message printed)
    with fresh_home("pi-home-") as home:         # removed at the end
        ...
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cache_prefix", "fresh_home", "installed_exe"]


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
