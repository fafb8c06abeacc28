"""``ember.scipy.ndimage``: ``map_coordinates``, as ``jax.scipy.ndimage``."""

from ember._src.compat.ndimage import map_coordinates

__all__ = ["map_coordinates"]
