"""``ember.scipy.stats``: probability distributions as ``jax.scipy.stats`` (``norm.logpdf``, ...)."""

from ember._src.compat.stats import (
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
