"""``ember.scipy.stats.bernoulli``: the Bernoulli distribution.

As the module ``jax.scipy.stats.bernoulli``.
"""

from ember._src.compat.stats import bernoulli as _dist

cdf = _dist.cdf
logpmf = _dist.logpmf
pmf = _dist.pmf
ppf = _dist.ppf

__all__ = ["cdf", "logpmf", "pmf", "ppf"]
