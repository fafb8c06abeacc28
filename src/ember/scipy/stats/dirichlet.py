"""``ember.scipy.stats.dirichlet``: the Dirichlet distribution (``x`` has the categories on axis 0).

As the module ``jax.scipy.stats.dirichlet``.
"""

from ember._src.compat.stats import dirichlet as _dist

logpdf = _dist.logpdf
pdf = _dist.pdf

__all__ = ["logpdf", "pdf"]
