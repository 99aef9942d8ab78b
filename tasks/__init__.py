"""tasks package."""

__all__: list[str] = []
