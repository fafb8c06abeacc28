"""``ember.scipy.stats.t``: Student's t distribution, as the module ``jax.scipy.stats.t``."""

from ember._src.compat.stats import t as _dist

logpdf = _dist.logpdf
pdf = _dist.pdf

__all__ = ["logpdf", "pdf"]
