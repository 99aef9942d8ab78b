"""replay/converters package."""

__all__: list[str] = []
