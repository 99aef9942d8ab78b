"""replay package."""

__all__: list[str] = []
