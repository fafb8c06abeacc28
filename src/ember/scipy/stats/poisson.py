"""``ember.scipy.stats.poisson``: the Poisson distribution, as the module ``jax.scipy.stats.poisson``."""

from ember._src.compat.stats import poisson as _dist

cdf = _dist.cdf
logpmf = _dist.logpmf
pmf = _dist.pmf

__all__ = ["cdf", "logpmf", "pmf"]
