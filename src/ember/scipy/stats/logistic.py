"""``ember.scipy.stats.logistic``: the logistic distribution, as the module ``jax.scipy.stats.logistic``."""

from ember._src.compat.stats import logistic as _dist

cdf = _dist.cdf
isf = _dist.isf
logpdf = _dist.logpdf
pdf = _dist.pdf
ppf = _dist.ppf
sf = _dist.sf

__all__ = ["cdf", "isf", "logpdf", "pdf", "ppf", "sf"]
