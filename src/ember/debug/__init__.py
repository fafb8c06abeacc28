"""``ember.debug``: ``print``, ``callback`` and ``breakpoint`` from inside ``jit``, loops, ``vmap``
and ``grad``, as ``jax.debug`` (``ember.set_debug`` is the unrelated logging switch)."""

from ember._src.compat.debugging import debug_breakpoint as breakpoint  # noqa: A004 - jax.debug's name
from ember._src.compat.debugging import debug_callback as callback
from ember._src.compat.debugging import debug_print as print  # noqa: A004 - jax.debug's name

__all__ = ["breakpoint", "callback", "print"]
