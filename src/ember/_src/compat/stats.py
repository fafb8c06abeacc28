"""``jax.scipy.stats`` distributions: log densities/masses, CDFs and quantiles over ``ember.numpy``.

Each distribution is a namespace (``norm.logpdf(x, loc, scale)``, ...) with the methods JAX has
for it, the same argument names and defaults. Values outside the support give ``-inf`` log
densities (zero densities), as SciPy and JAX.
"""

from __future__ import annotations

import math
import types
from typing import Any

import ember.numpy as jnp
from ember._src.compat.incomplete import betainc, gammainc, gammaincc
from ember.scipy import linalg as sla
from ember.scipy import special as sp

_LOG_2PI = math.log(2 * math.pi)
_LOG_PI = math.log(math.pi)


def _f(*xs: Any) -> list[Any]:
    """Arguments as arrays of one inexact dtype (integers and bools become float32, as JAX)."""
    arrs = [jnp.asarray(x) for x in xs]
    dt = jnp.result_type(*arrs)
    if not jnp.issubdtype(dt, jnp.inexact):
        dt = jnp.float32
    return [a.astype(dt) for a in arrs]


def _ns(name: str, doc: str, **fns: Any) -> types.SimpleNamespace:
    for k, fn in fns.items():
        fn.__name__ = fn.__qualname__ = k
    ns = types.SimpleNamespace(**fns)
    ns.__name__ = name
    ns.__doc__ = doc
    return ns


def _exp(logf: Any) -> Any:
    return lambda *a, **k: jnp.exp(logf(*a, **k))


def _log(f: Any) -> Any:
    return lambda *a, **k: jnp.log(f(*a, **k))


# ---------------------------------------------------------------------------- continuous, loc/scale

def _standardized(f: Any) -> Any:
    """``g(x, loc=0, scale=1) = f((x - loc) / scale)``."""
    def g(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
        x, loc, scale = _f(x, loc, scale)
        return f((x - loc) / scale)
    return g


def _quantile(f: Any) -> Any:
    """``g(q, loc=0, scale=1) = loc + scale * f(q)``."""
    def g(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
        q, loc, scale = _f(q, loc, scale)
        return loc + scale * f(q)
    return g



def _norm_logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    z = (x - loc) / scale
    return -0.5 * z * z - jnp.log(scale) - 0.5 * _LOG_2PI


_norm_cdf = _standardized(sp.ndtr)
_norm_sf = _standardized(lambda z: sp.ndtr(-z))
_norm_ppf = _quantile(sp.ndtri)
_norm_isf = _quantile(lambda q: -sp.ndtri(q))

norm = _ns("norm", "The normal distribution.", logpdf=_norm_logpdf, pdf=_exp(_norm_logpdf), cdf=_norm_cdf,
           logcdf=_log(_norm_cdf), sf=_norm_sf, logsf=_log(_norm_sf), ppf=_norm_ppf, isf=_norm_isf)


def _uniform_logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    inside = (x >= loc) & (x <= loc + scale)
    return jnp.where(inside, -jnp.log(scale), -jnp.inf)


def _uniform_cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    return jnp.clip((x - loc) / scale, 0, 1)


def _uniform_ppf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    q, loc, scale = _f(q, loc, scale)
    return jnp.where((q >= 0) & (q <= 1), loc + q * scale, jnp.nan)


uniform = _ns("uniform", "The uniform distribution on [loc, loc + scale].", logpdf=_uniform_logpdf,
              pdf=_exp(_uniform_logpdf), cdf=_uniform_cdf, logcdf=_log(_uniform_cdf), ppf=_uniform_ppf)


def _expon_logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    y = (x - loc) / scale
    return jnp.where(y < 0, -jnp.inf, -y - jnp.log(scale))


def _expon_logsf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    return -jnp.maximum((x - loc) / scale, 0)


def _expon_cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    return -jnp.expm1(_expon_logsf(x, loc, scale))


def _expon_ppf(q: Any, loc: Any = 0, scale: Any = 1) -> Any:
    q, loc, scale = _f(q, loc, scale)
    return jnp.where((q >= 0) & (q <= 1), loc - scale * jnp.log1p(-q), jnp.nan)


expon = _ns("expon", "The exponential distribution.", logpdf=_expon_logpdf, pdf=_exp(_expon_logpdf),
            cdf=_expon_cdf, logcdf=_log(_expon_cdf), sf=_exp(_expon_logsf), logsf=_expon_logsf,
            ppf=_expon_ppf)


def _laplace_logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    return -jnp.abs((x - loc) / scale) - jnp.log(2 * scale)


def _laplace_cdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    y = (x - loc) / scale
    return jnp.where(y < 0, 0.5 * jnp.exp(y), 1 - 0.5 * jnp.exp(-y))


laplace = _ns("laplace", "The Laplace distribution.", logpdf=_laplace_logpdf, pdf=_exp(_laplace_logpdf),
              cdf=_laplace_cdf)


def _logistic_logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    y = (x - loc) / scale
    return -y - 2 * jnp.logaddexp(0, -y) - jnp.log(scale)


_logistic_cdf = _standardized(sp.expit)
_logistic_sf = _standardized(lambda z: sp.expit(-z))
_logistic_ppf = _quantile(sp.logit)
_logistic_isf = _quantile(lambda q: -sp.logit(q))

logistic = _ns("logistic", "The logistic distribution.", logpdf=_logistic_logpdf, pdf=_exp(_logistic_logpdf),
               cdf=_logistic_cdf, sf=_logistic_sf, ppf=_logistic_ppf, isf=_logistic_isf)


def _cauchy_logpdf(x: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, loc, scale = _f(x, loc, scale)
    y = (x - loc) / scale
    return -_LOG_PI - jnp.log(scale) - jnp.log1p(y * y)


_cauchy_cdf = _standardized(lambda z: 0.5 + jnp.arctan(z) / jnp.pi)
_cauchy_sf = _standardized(lambda z: 0.5 - jnp.arctan(z) / jnp.pi)
_cauchy_ppf = _quantile(lambda q: jnp.tan(jnp.pi * (q - 0.5)))
_cauchy_isf = _quantile(lambda q: jnp.tan(jnp.pi * (0.5 - q)))

cauchy = _ns("cauchy", "The Cauchy distribution.", logpdf=_cauchy_logpdf, pdf=_exp(_cauchy_logpdf),
             cdf=_cauchy_cdf, logcdf=_log(_cauchy_cdf), sf=_cauchy_sf, logsf=_log(_cauchy_sf),
             ppf=_cauchy_ppf, isf=_cauchy_isf)


def _t_logpdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, df, loc, scale = _f(x, df, loc, scale)
    z = (x - loc) / scale
    half = 0.5 * (df + 1)
    return (sp.gammaln(half) - sp.gammaln(0.5 * df) - 0.5 * jnp.log(df * jnp.pi) - jnp.log(scale)
            - half * jnp.log1p(z * z / df))


t = _ns("t", "Student's t distribution.", logpdf=_t_logpdf, pdf=_exp(_t_logpdf))


def _gamma_logpdf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, a, loc, scale = _f(x, a, loc, scale)
    y = (x - loc) / scale
    out = sp.xlogy(a - 1, y) - y - sp.gammaln(a) - jnp.log(scale)
    return jnp.where(y < 0, -jnp.inf, out)


def _gamma_cdf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, a, loc, scale = _f(x, a, loc, scale)
    return gammainc(a, (x - loc) / scale)


def _gamma_sf(x: Any, a: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, a, loc, scale = _f(x, a, loc, scale)
    return gammaincc(a, (x - loc) / scale)


gamma = _ns("gamma", "The gamma distribution (shape ``a``).", logpdf=_gamma_logpdf,
            pdf=_exp(_gamma_logpdf), cdf=_gamma_cdf, logcdf=_log(_gamma_cdf), sf=_gamma_sf,
            logsf=_log(_gamma_sf))


def _chi2_logpdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, df, loc, scale = _f(x, df, loc, scale)
    return _gamma_logpdf(x, df / 2, loc, 2 * scale)


def _chi2_cdf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, df, loc, scale = _f(x, df, loc, scale)
    return _gamma_cdf(x, df / 2, loc, 2 * scale)


def _chi2_sf(x: Any, df: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, df, loc, scale = _f(x, df, loc, scale)
    return _gamma_sf(x, df / 2, loc, 2 * scale)


chi2 = _ns("chi2", "The chi-squared distribution.", logpdf=_chi2_logpdf, pdf=_exp(_chi2_logpdf),
           cdf=_chi2_cdf, logcdf=_log(_chi2_cdf), sf=_chi2_sf, logsf=_log(_chi2_sf))


def _beta_logpdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, a, b, loc, scale = _f(x, a, b, loc, scale)
    y = (x - loc) / scale
    out = sp.xlogy(a - 1, y) + sp.xlog1py(b - 1, -y) - sp.betaln(a, b) - jnp.log(scale)
    return jnp.where((y < 0) | (y > 1), -jnp.inf, out)


def _beta_cdf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, a, b, loc, scale = _f(x, a, b, loc, scale)
    return betainc(a, b, (x - loc) / scale)


def _beta_sf(x: Any, a: Any, b: Any, loc: Any = 0, scale: Any = 1) -> Any:
    x, a, b, loc, scale = _f(x, a, b, loc, scale)
    return betainc(b, a, 1 - (x - loc) / scale)


beta = _ns("beta", "The beta distribution.", logpdf=_beta_logpdf, pdf=_exp(_beta_logpdf), cdf=_beta_cdf,
           logcdf=_log(_beta_cdf), sf=_beta_sf, logsf=_log(_beta_sf))


# ---------------------------------------------------------------------------- multivariate

def _dirichlet_logpdf(x: Any, alpha: Any) -> Any:
    x, alpha = _f(x, alpha)
    if alpha.ndim != 1:
        raise ValueError(f"dirichlet.logpdf: alpha must be 1-D, got shape {tuple(alpha.shape)}")
    if x.shape[0] != alpha.shape[0]:
        raise ValueError(f"dirichlet.logpdf: x's first axis ({x.shape[0]}) must match alpha "
                         f"({alpha.shape[0]})")
    a = jnp.reshape(alpha, alpha.shape + (1,) * (x.ndim - 1))
    norm_const = jnp.sum(sp.gammaln(alpha)) - sp.gammaln(jnp.sum(alpha))
    out = jnp.sum(sp.xlogy(a - 1, x), axis=0) - norm_const
    on_simplex = jnp.all(x >= 0, axis=0) & (jnp.abs(jnp.sum(x, axis=0) - 1) < 1e-5)
    return jnp.where(on_simplex, out, -jnp.inf)


dirichlet = _ns("dirichlet", "The Dirichlet distribution (``x`` has the categories on axis 0).",
                logpdf=_dirichlet_logpdf, pdf=_exp(_dirichlet_logpdf))


def _mvn_logpdf(x: Any, mean: Any, cov: Any, allow_singular: Any = None) -> Any:
    x, mean, cov = _f(x, mean, cov)
    n = mean.shape[-1] if mean.ndim else 1
    if cov.ndim < 2:
        d = x - mean
        return -0.5 * d * d / cov - 0.5 * (_LOG_2PI + jnp.log(cov))
    if cov.shape != (n, n):
        raise ValueError(f"multivariate_normal.logpdf: cov must have shape ({n}, {n}), got "
                         f"{tuple(cov.shape)}")
    chol = sla.cholesky(cov, lower=True)
    diff = jnp.broadcast_to(x - mean, jnp.broadcast_shapes(x.shape, mean.shape))
    batch = diff.shape[:-1]
    y = sla.solve_triangular(chol, jnp.reshape(diff, (-1, n)).T, lower=True)
    maha = jnp.reshape(jnp.sum(y * y, axis=0), batch)
    return -0.5 * maha - jnp.sum(jnp.log(jnp.diagonal(chol))) - 0.5 * n * _LOG_2PI


multivariate_normal = _ns("multivariate_normal", "The multivariate normal distribution.",
                          logpdf=_mvn_logpdf, pdf=_exp(_mvn_logpdf))


def _multinomial_logpmf(x: Any, n: Any, p: Any) -> Any:
    x, n, p = _f(x, n, p)
    out = sp.gammaln(n + 1) + jnp.sum(sp.xlogy(x, p) - sp.gammaln(x + 1), axis=-1)
    return jnp.where(jnp.sum(x, axis=-1) == n, out, -jnp.inf)


multinomial = _ns("multinomial", "The multinomial distribution (categories on the last axis).",
                  logpmf=_multinomial_logpmf, pmf=_exp(_multinomial_logpmf))


# ---------------------------------------------------------------------------- discrete

def _is_int(x: Any) -> Any:
    return x == jnp.floor(x)


def _poisson_logpmf(k: Any, mu: Any, loc: Any = 0) -> Any:
    k, mu, loc = _f(k, mu, loc)
    x = k - loc
    out = sp.xlogy(x, mu) - sp.gammaln(x + 1) - mu
    return jnp.where((x < 0) | ~_is_int(x), -jnp.inf, out)


def _poisson_cdf(k: Any, mu: Any, loc: Any = 0) -> Any:
    k, mu, loc = _f(k, mu, loc)
    x = jnp.floor(k - loc)
    return jnp.where(x < 0, 0.0, gammaincc(jnp.maximum(x, 0) + 1, mu)).astype(k.dtype)


poisson = _ns("poisson", "The Poisson distribution.", logpmf=_poisson_logpmf, pmf=_exp(_poisson_logpmf),
              cdf=_poisson_cdf)


def _bernoulli_logpmf(k: Any, p: Any, loc: Any = 0) -> Any:
    k, p, loc = _f(k, p, loc)
    x = k - loc
    return jnp.where(x == 1, jnp.log(p), jnp.where(x == 0, jnp.log1p(-p), -jnp.inf))


def _bernoulli_cdf(k: Any, p: Any) -> Any:
    k, p = _f(k, p)
    return jnp.where(k < 0, 0.0, jnp.where(k < 1, 1 - p, 1.0)).astype(k.dtype)


def _bernoulli_ppf(q: Any, p: Any) -> Any:
    q, p = _f(q, p)
    return jnp.where((q < 0) | (q > 1), jnp.nan, jnp.where(q <= 1 - p, 0.0, 1.0)).astype(q.dtype)


bernoulli = _ns("bernoulli", "The Bernoulli distribution.", logpmf=_bernoulli_logpmf,
                pmf=_exp(_bernoulli_logpmf),
                cdf=_bernoulli_cdf, ppf=_bernoulli_ppf)


def _binom_logpmf(k: Any, n: Any, p: Any, loc: Any = 0) -> Any:
    k, n, p, loc = _f(k, n, p, loc)
    y = k - loc
    comb = sp.gammaln(n + 1) - sp.gammaln(y + 1) - sp.gammaln(n - y + 1)
    out = comb + sp.xlogy(y, p) + sp.xlog1py(n - y, -p)
    return jnp.where((y < 0) | (y > n) | ~_is_int(y), -jnp.inf, out)


binom = _ns("binom", "The binomial distribution.", logpmf=_binom_logpmf, pmf=_exp(_binom_logpmf))


def _geom_logpmf(k: Any, p: Any, loc: Any = 0) -> Any:
    k, p, loc = _f(k, p, loc)
    x = k - loc
    out = sp.xlog1py(x - 1, -p) + jnp.log(p)
    return jnp.where((x < 1) | ~_is_int(x), -jnp.inf, out)


geom = _ns("geom", "The geometric distribution (support 1, 2, ...).", logpmf=_geom_logpmf,
           pmf=_exp(_geom_logpmf))

DISTRIBUTIONS = ("bernoulli", "beta", "binom", "cauchy", "chi2", "dirichlet", "expon", "gamma", "geom",
                 "laplace", "logistic", "multinomial", "multivariate_normal", "norm", "poisson", "t",
"uniform")
__all__ = list(DISTRIBUTIONS)

