"""``ember.scipy.integrate``: ``trapezoid``, as ``jax.scipy.integrate``."""

from ember._src.compat.integrate import trapezoid

__all__ = ["trapezoid"]
