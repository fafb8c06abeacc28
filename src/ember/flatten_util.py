"""``ember.flatten_util``: ``ravel_pytree`` as in ``jax.flatten_util``."""

from ember._src.compat.flatten_util import ravel_pytree

__all__ = ["ravel_pytree"]
