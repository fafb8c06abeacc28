"""ember.numpy: more_ufuncs (being written)."""

__all__: list[str] = []
