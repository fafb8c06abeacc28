"""``ember.scipy.stats.multivariate_normal``: the multivariate normal distribution.

As the module ``jax.scipy.stats.multivariate_normal``.
"""

from ember._src.compat.stats import multivariate_normal as _dist

logpdf = _dist.logpdf
pdf = _dist.pdf

__all__ = ["logpdf", "pdf"]
