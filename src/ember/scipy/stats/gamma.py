"""``ember.scipy.stats.gamma``: the gamma distribution (shape ``a``).

As the module ``jax.scipy.stats.gamma``.
"""

from ember._src.compat.stats import gamma as _dist

cdf = _dist.cdf
logcdf = _dist.logcdf
logpdf = _dist.logpdf
logsf = _dist.logsf
pdf = _dist.pdf
sf = _dist.sf

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]
