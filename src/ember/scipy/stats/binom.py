"""``ember.scipy.stats.binom``: the binomial distribution, as the module ``jax.scipy.stats.binom``."""

from ember._src.compat.stats import binom as _dist

logpmf = _dist.logpmf
pmf = _dist.pmf

__all__ = ["logpmf", "pmf"]
