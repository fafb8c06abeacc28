"""``ember.scipy.stats.laplace``: the Laplace distribution, as the module ``jax.scipy.stats.laplace``."""

from ember._src.compat.stats import laplace as _dist

cdf = _dist.cdf
logpdf = _dist.logpdf
pdf = _dist.pdf

__all__ = ["cdf", "logpdf", "pdf"]
