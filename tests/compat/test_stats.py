"""ember.scipy.stats against scipy.stats (and JAX's jax.scipy.stats where installed)."""

import numpy as np
import pytest
from scipy import stats as ss

import ember
from ember.scipy import stats

RNG = np.random.default_rng(4)
X = np.linspace(-3.0, 3.0, 13)
Q = np.linspace(0.02, 0.98, 9)
K = np.arange(-1, 9).astype(np.float64)

CASES = [
    ("norm", ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"], X, (0.5, 1.5)),
    ("norm", ["ppf", "isf"], Q, (0.5, 1.5)),
    ("uniform", ["logpdf", "pdf", "cdf"], X, (-1.0, 2.5)),
    ("uniform", ["ppf"], Q, (-1.0, 2.5)),
    ("expon", ["logpdf", "pdf", "cdf", "sf", "logsf", "logcdf"], X + 3.1, (0.2, 1.3)),
    ("expon", ["ppf"], Q, (0.2, 1.3)),
    ("laplace", ["logpdf", "pdf", "cdf"], X, (0.3, 0.7)),
    ("logistic", ["logpdf", "pdf", "cdf", "sf"], X, (0.3, 0.7)),
    ("logistic", ["ppf", "isf"], Q, (0.3, 0.7)),
    ("cauchy", ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"], X, (0.3, 0.7)),
    ("cauchy", ["ppf", "isf"], Q, (0.3, 0.7)),
    ("t", ["logpdf", "pdf"], X, (3.5, 0.2, 1.3)),
    ("gamma", ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"], X + 3.0, (2.5, 0.1, 0.8)),
    ("chi2", ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"], X + 3.0, (3.0,)),
    ("beta", ["logpdf", "pdf"], np.linspace(-0.1, 1.1, 13)[1:-1], (2.0, 3.5)),
    ("beta", ["cdf", "logcdf", "sf", "logsf"], np.linspace(0.05, 0.95, 9), (2.0, 3.5, 0.0, 1.0)),
    ("poisson", ["logpmf", "pmf", "cdf"], K + 0.5 * (K == 3), (2.5,)),
    ("binom", ["logpmf", "pmf"], K, (6, 0.3)),
    ("geom", ["logpmf", "pmf"], K, (0.35,)),
    ("bernoulli", ["logpmf", "pmf", "cdf"], K[:4] - 0.5 * (K[:4] == 2), (0.3,)),
    ("bernoulli", ["ppf"], Q, (0.3,)),
]


@pytest.mark.parametrize("name,methods,x,args", CASES, ids=[f"{c[0]}-{c[1][0]}" for c in CASES])
def test_against_scipy(name, methods, x, args):
    for m in methods:
        ours = np.asarray(getattr(getattr(stats, name), m)(x, *args), np.float64)
        want = getattr(getattr(ss, name), m)(x, *args)
        np.testing.assert_allclose(ours, want, rtol=2e-5, atol=1e-6, err_msg=f"{name}.{m}")


def test_float32_and_jit_and_grad():
    x32 = X.astype(np.float32)
    out = stats.norm.logpdf(x32, 0.0, 2.0)
    assert out.dtype == np.float32
    np.testing.assert_allclose(ember.jit(stats.norm.logpdf)(x32, 0.0, 2.0), out, rtol=1e-6)
    g = ember.grad(lambda m: stats.norm.logpdf(1.0, m, 2.0))(0.5)
    np.testing.assert_allclose(g, (1.0 - 0.5) / 4.0, rtol=1e-6)  # d/dm log N(x; m, s) = (x - m) / s^2
    gs = ember.vmap(lambda a: stats.gamma.logpdf(2.0, a))(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(gs, ss.gamma.logpdf(2.0, [1.0, 2.0, 3.0]), rtol=1e-5)


def test_multivariate():
    n = 3
    a = RNG.normal(size=(n, n))
    cov = a @ a.T + n * np.eye(n)
    mean = RNG.normal(size=n)
    x = RNG.normal(size=(4, 2, n))
    np.testing.assert_allclose(stats.multivariate_normal.logpdf(x, mean, cov),
                               ss.multivariate_normal.logpdf(x, mean, cov), rtol=1e-10)
    np.testing.assert_allclose(stats.multivariate_normal.pdf(x[0, 0], mean, cov),
                               ss.multivariate_normal.pdf(x[0, 0], mean, cov), rtol=1e-10)
    alpha = np.array([1.5, 2.0, 0.7])
    pts = RNG.dirichlet(alpha, size=5).T  # categories on axis 0, as scipy
    np.testing.assert_allclose(stats.dirichlet.logpdf(pts, alpha), ss.dirichlet.logpdf(pts, alpha), rtol=1e-8)
    assert np.isneginf(stats.dirichlet.logpdf(np.array([0.5, 0.6, 0.1]), alpha))
    counts = np.array([[2.0, 1.0, 3.0], [0.0, 6.0, 0.0]])
    p = np.array([0.2, 0.5, 0.3])
    np.testing.assert_allclose(stats.multinomial.logpmf(counts, 6, p), ss.multinomial.logpmf(counts, 6, p),
                               rtol=1e-10)
    assert np.isneginf(stats.multinomial.logpmf(np.array([1.0, 1.0, 1.0]), 6, p))


def test_matches_jax_stats():
    jstats = pytest.importorskip("jax.scipy.stats", reason="JAX comparison")
    for name, methods, x, args in CASES[:12]:
        for m in methods:
            if not hasattr(getattr(jstats, name), m):
                continue
            want = np.asarray(getattr(getattr(jstats, name), m)(x.astype(np.float32), *args))
            ours = np.asarray(getattr(getattr(stats, name), m)(x.astype(np.float32), *args))
            np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5, err_msg=f"{name}.{m}")


def test_incomplete_functions_and_cdf_gradient():
    import scipy.special as ssp

    from ember._src.compat.incomplete import betainc, gammainc, gammaincc
    a, x = np.meshgrid([0.3, 1.0, 2.5, 10.0, 50.0], [0.01, 0.5, 3.0, 12.0, 40.0])
    np.testing.assert_allclose(gammainc(a, x), ssp.gammainc(a, x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gammaincc(a, x), ssp.gammaincc(a, x), rtol=1e-11, atol=1e-300)
    a, b, x = np.meshgrid([0.5, 1.0, 2.0, 7.0], [0.5, 1.0, 2.0, 7.0], np.linspace(0.01, 0.99, 7))
    np.testing.assert_allclose(betainc(a, b, x), ssp.betainc(a, b, x), rtol=1e-11, atol=1e-14)
    # d cdf / dx = pdf, through the loops
    g = ember.grad(lambda v: stats.gamma.cdf(v, 2.5))(np.float64(1.7))
    np.testing.assert_allclose(g, ss.gamma.pdf(1.7, 2.5), rtol=1e-8)
    g = ember.grad(lambda v: stats.beta.cdf(v, 2.0, 3.5))(np.float64(0.3))
    np.testing.assert_allclose(g, ss.beta.pdf(0.3, 2.0, 3.5), rtol=1e-8)
