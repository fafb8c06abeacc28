"""ember.scipy.optimize.minimize against SciPy's minimizers and closed forms."""

import numpy as np
import pytest
from scipy import optimize as so

import ember
import ember.numpy as jnp
from ember.scipy.optimize import minimize


def rosen(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.mark.parametrize("method", ["BFGS", "L-BFGS", "l-bfgs-experimental-do-not-rely-on-this"])
@pytest.mark.parametrize("x0", [[-1.2, 1.0], [1.3, 0.7, 0.8, 1.9, 1.2]])
def test_rosenbrock_matches_scipy(method, x0):
    x0 = np.array(x0)
    res = minimize(rosen, x0, method=method)
    ref = so.minimize(so.rosen, x0, jac=so.rosen_der, method="BFGS" if method == "BFGS" else "L-BFGS-B",
                      options={"gtol": 1e-8})
    assert bool(res.success) and int(res.status) == 0
    np.testing.assert_allclose(ref.x, np.ones_like(x0), atol=1e-4)
    np.testing.assert_allclose(res.x, ref.x, atol=1e-4)
    assert float(res.fun) <= ref.fun + 1e-8
    assert np.max(np.abs(np.asarray(res.jac))) < 1e-5


def test_quadratic_closed_form_args_and_jit():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 5))
    q = a @ a.T + 5 * np.eye(5)
    b = rng.normal(size=5)

    def f(x, q, b):
        return 0.5 * x @ q @ x - b @ x

    want = np.linalg.solve(q, b)
    for method in ("BFGS", "L-BFGS"):
        res = ember.jit(lambda x0, m=method: minimize(f, x0, (q, b), method=m).x)(np.zeros(5))
        np.testing.assert_allclose(res, want, rtol=1e-6, atol=1e-7)
    h = minimize(f, np.zeros(5), (q, b), method="BFGS").hess_inv
    np.testing.assert_allclose(h, np.linalg.inv(q), rtol=0.2, atol=0.02)  # BFGS's estimate of Q^-1


def test_maxiter_status_and_errors():
    res = minimize(rosen, np.array([-1.2, 1.0]), method="BFGS", options={"maxiter": 2})
    assert int(res.status) == 1 and not bool(res.success) and int(res.nit) == 2
    with pytest.raises(ValueError, match="1-D"):
        minimize(rosen, np.zeros((2, 2)), method="BFGS")
    with pytest.raises(ValueError, match="Nelder"):
        minimize(rosen, np.zeros(2), method="Nelder-Mead")


def test_matches_jax_bfgs():
    jax = pytest.importorskip("jax", reason="JAX comparison")
    from jax.scipy.optimize import minimize as jminimize
    c, w = np.array([1.0, -2.0, 0.5], np.float32), np.array([1.0, 3.0, 0.5], np.float32)

    def make(np_):
        return lambda x: np_.sum(w * (x - c) ** 2) + 0.1 * np_.sum(x ** 4)

    x0 = np.zeros(3, np.float32)
    ours = minimize(make(jnp), x0, method="BFGS")
    theirs = jminimize(make(jax.numpy), x0, method="BFGS")
    assert bool(ours.success)  # JAX's float32 BFGS may report a line-search failure at the minimum
    np.testing.assert_allclose(ours.x, np.asarray(theirs.x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours.fun, np.asarray(theirs.fun), rtol=1e-5)
