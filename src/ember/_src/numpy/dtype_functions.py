"""ember.numpy: dtype_functions (being written)."""

__all__: list[str] = []
