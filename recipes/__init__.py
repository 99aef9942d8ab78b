"""recipes package."""

__all__: list[str] = []
