"""ember.numpy: polynomial (being written)."""

__all__: list[str] = []
