"""ember.numpy: searching (being written)."""

__all__: list[str] = []
