"""``ember.scipy.stats.expon``: the exponential distribution, as the module ``jax.scipy.stats.expon``."""

from ember._src.compat.stats import expon as _dist

cdf = _dist.cdf
logcdf = _dist.logcdf
logpdf = _dist.logpdf
logsf = _dist.logsf
pdf = _dist.pdf
ppf = _dist.ppf
sf = _dist.sf

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]
