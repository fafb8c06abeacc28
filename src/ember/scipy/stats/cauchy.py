"""``ember.scipy.stats.cauchy``: the Cauchy distribution, as the module ``jax.scipy.stats.cauchy``."""

from ember._src.compat.stats import cauchy as _dist

cdf = _dist.cdf
isf = _dist.isf
logcdf = _dist.logcdf
logpdf = _dist.logpdf
logsf = _dist.logsf
pdf = _dist.pdf
ppf = _dist.ppf
sf = _dist.sf

__all__ = ["cdf", "isf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]
