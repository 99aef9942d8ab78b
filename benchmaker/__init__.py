"""benchmaker: load engine and Python API for benchmarking LLM and HTTP endpoints."""

__all__: list[str] = []
