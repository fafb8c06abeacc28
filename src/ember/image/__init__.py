"""``ember.image``: ``resize`` and ``scale_and_translate``, as ``jax.image``."""

from ember._src.compat.image import resize, scale_and_translate

__all__ = ["resize", "scale_and_translate"]
