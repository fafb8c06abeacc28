"""``ember.scipy.stats``: probability distributions as ``jax.scipy.stats`` (``norm.logpdf``, ...).

Each distribution is a module (``import ember.scipy.stats.norm as norm`` works, as in JAX).
"""

from ember.scipy.stats import (
    bernoulli,
    beta,
    binom,
    cauchy,
    chi2,
    dirichlet,
    expon,
    gamma,
    geom,
    laplace,
    logistic,
    multinomial,
    multivariate_normal,
    norm,
    poisson,
    t,
    uniform,
)

__all__ = ["bernoulli", "beta", "binom", "cauchy", "chi2", "dirichlet", "expon", "gamma", "geom", "laplace",
           "logistic", "multinomial", "multivariate_normal", "norm", "poisson", "t", "uniform"]
