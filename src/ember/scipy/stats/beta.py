"""``ember.scipy.stats.beta``: the beta distribution, as the module ``jax.scipy.stats.beta``."""

from ember._src.compat.stats import beta as _dist

cdf = _dist.cdf
logcdf = _dist.logcdf
logpdf = _dist.logpdf
logsf = _dist.logsf
pdf = _dist.pdf
sf = _dist.sf

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]
