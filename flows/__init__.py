"""flows package."""

__all__: list[str] = []
