"""``ember.scipy.stats.geom``: the geometric distribution (support 1, 2, ...).

As the module ``jax.scipy.stats.geom``.
"""

from ember._src.compat.stats import geom as _dist

logpmf = _dist.logpmf
pmf = _dist.pmf

__all__ = ["logpmf", "pmf"]
