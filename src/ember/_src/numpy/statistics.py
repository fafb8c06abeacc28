"""ember.numpy: statistics (being written)."""

__all__: list[str] = []
