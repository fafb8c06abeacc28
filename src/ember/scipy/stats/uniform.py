"""``ember.scipy.stats.uniform``: the uniform distribution on [loc, loc + scale].

As the module ``jax.scipy.stats.uniform``.
"""

from ember._src.compat.stats import uniform as _dist

cdf = _dist.cdf
logcdf = _dist.logcdf
logpdf = _dist.logpdf
pdf = _dist.pdf
ppf = _dist.ppf

__all__ = ["cdf", "logcdf", "logpdf", "pdf", "ppf"]
