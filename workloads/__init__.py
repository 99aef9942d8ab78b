"""workloads package."""

__all__: list[str] = []
