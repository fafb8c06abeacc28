"""``ember.scipy.stats.multinomial``: the multinomial distribution (categories on the last axis).

As the module ``jax.scipy.stats.multinomial``.
"""

from ember._src.compat.stats import multinomial as _dist

logpmf = _dist.logpmf
pmf = _dist.pmf

__all__ = ["logpmf", "pmf"]
