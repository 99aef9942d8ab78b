"""warehouse package."""

__all__: list[str] = []
