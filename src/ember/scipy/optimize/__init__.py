"""``ember.scipy.optimize``: ``minimize`` (BFGS, L-BFGS), as ``jax.scipy.optimize``."""

from ember._src.compat.optimize import OptimizeResults, minimize

__all__ = ["OptimizeResults", "minimize"]
