"""``ember.scipy.stats.chi2``: the chi-squared distribution, as the module ``jax.scipy.stats.chi2``."""

from ember._src.compat.stats import chi2 as _dist

cdf = _dist.cdf
logcdf = _dist.logcdf
logpdf = _dist.logpdf
logsf = _dist.logsf
pdf = _dist.pdf
sf = _dist.sf

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]
