"""``ember.ops``: ``segment_sum/prod/max/min`` as ``jax.ops``."""

from ember._src.compat.segments import segment_max, segment_min, segment_prod, segment_sum

__all__ = ["segment_max", "segment_min", "segment_prod", "segment_sum"]
