"""``ember.debug``: ``print`` and ``callback`` from inside ``jit``, loops, ``vmap`` and ``grad``,
as ``jax.debug`` (``ember.set_debug`` is the unrelated logging switch)."""

from ember._src.compat.debugging import debug_callback as callback
from ember._src.compat.debugging import debug_print as print

__all__ = ["callback", "print"]
