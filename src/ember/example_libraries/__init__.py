"""``ember.example_libraries``: ``stax`` and ``optimizers``, the small libraries of JAX's examples."""

from ember.example_libraries import optimizers, stax

__all__ = ["optimizers", "stax"]
